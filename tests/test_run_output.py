"""What a run prints and where: the results (tables, the skips grouped by reason, failures) on
stdout, progress on stderr; -v adds a line per skipped world, -q drops progress; the designs that
exist only in TensorFlow 1 are listed but not selected unless named; pytest's summary section
groups skips with the same function. The TF 1 designs skip on every machine, so the skips here
do not depend on what this machine has."""
from __future__ import annotations

import io
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from conftest import ALLREDUCE_BENCH, perfsuite, said
from perfsuite import bench, suite, transports
from perfsuite.faces import cli, options
from perfsuite.reading import report
from perfsuite.records.errors import RankFailure
from perfsuite.store.formats import SuiteRun, WorldOutcome
from perfsuite.records.model import Case, Result, Sample, WorldSpec
from perfsuite.reading.progress import SweepProgress

TF1 = ("grpc+verbs", "grpc+mpi", "grpc+gdr")


def world(transport: str, sizes=(4, 1024), benchmark: str = "allreduce") -> WorldSpec:
    return WorldSpec(benchmark, transport, 2, tuple(Case(benchmark, transport, 2, size_bytes=s) for s in sizes))


# --- one line per reason --------------------------------------------------------------------

def test_skips_are_one_line_per_reason_naming_each_world_once():
    gpu = "no NVIDIA driver here (NVML: x)"
    skipped = [WorldOutcome(world("nccl"), skipped=gpu), WorldOutcome(world("grpc+gdr"), skipped=transports.TF1_ONLY),
               WorldOutcome(world("gpu-ring"), skipped=gpu),
               WorldOutcome(world("nccl", (4,), benchmark="all_gather"), skipped=gpu)]
    assert report.skipped_lines(skipped) == [
        f"# skipped 3 worlds (5 cases) allreduce[nccl-n2, gpu-ring-n2], all_gather[nccl-n2]: {gpu}",
        f"# skipped 1 world (2 cases) allreduce[grpc+gdr-n2]: {transports.TF1_ONLY}"]
    assert report.skipped_lines(skipped[1:2], prefix="")[0].startswith("skipped 1 world (2 cases) allreduce[")
    assert report.skipped_lines([]) == []


def test_the_summary_groups_skips_and_keeps_every_failure_whole():
    bad, stopped = world("ring"), world("mpi")
    failure = RankFailure("allreduce[ring-n2]: rank 1 raised ValueError", case=bad.label, stderr_tail="Traceback\nValueError")
    interrupted = RankFailure("allreduce[mpi-n2]: interrupted by SIGINT", case=stopped.label, kind="interrupted")
    run = SuiteRun(outcomes=[WorldOutcome(bad, failure=failure), WorldOutcome(stopped, failure=interrupted)]
                   + [WorldOutcome(world(t), skipped=transports.TF1_ONLY) for t in TF1])
    text = report.run_summary(run)
    assert text.count("exists only in TensorFlow 1") == 1
    assert "# skipped 3 worlds (6 cases) allreduce[grpc+verbs-n2, grpc+mpi-n2, grpc+gdr-n2]: exists only" in text
    assert "# FAILED allreduce[ring-n2]: rank 1 raised ValueError\n#   | Traceback\n#   | ValueError" in text
    assert "# INTERRUPTED allreduce[mpi-n2]: interrupted by SIGINT" in text


# --- progress: skips before a world starts are quiet unless -v ---------------------------------

def test_a_world_skipped_before_it_starts_is_silent_and_not_counted_unless_verbose():
    ran, skipped = world("mpi"), world("grpc+gdr")
    result = Result("allreduce", "mpi", 2, tuple(Sample(c, {}) for c in ran.cases), wall_s=1.5)
    for verbose in (False, True):
        buf = io.StringIO()
        p = SweepProgress([ran, skipped], console=Console(file=buf, width=200), env={}, verbose=verbose)
        with p:
            p("done", skipped, WorldOutcome(skipped, skipped="exists only in TensorFlow 1"))  # never started
            p("start", ran, None)
            p("done", ran, WorldOutcome(ran, result=result))
        lines = buf.getvalue().splitlines()
        assert lines[-2:] == ["# [1/1] running allreduce[mpi-n2]: 2 cases", "# [1/1] allreduce[mpi-n2]: 2 cases in 1.5 s"]
        assert lines[:-2] == (["# allreduce[grpc+gdr-n2]: skipped: exists only in TensorFlow 1"] if verbose else [])


def test_progress_goes_to_stderr_by_default(capsys):
    with SweepProgress([world("mpi")], env={"CI": "true"}) as p:
        p("start", world("mpi"), None)
    got = capsys.readouterr()
    assert got.out == "" and "running allreduce[mpi-n2]" in got.err


def test_the_suite_settles_worlds_that_cannot_run_before_any_world_starts():
    events = []
    cases = suite.select_cases(options.selection({"transports": "grpc+gdr,grpc+mpi", "sizes": "4"}, "allreduce"))
    run = suite.run(cases, suite.SuiteConfig(), on_world=lambda e, spec, o: events.append((e, spec.transport)))
    assert events == [("done", "grpc+gdr"), ("done", "grpc+mpi")]  # no 'start': nothing started
    assert [o.skipped for o in run.outcomes] == [transports.TF1_ONLY] * 2


# --- TensorFlow 1 designs: listed, not selected unless named ----------------------------------

@pytest.mark.parametrize("name", ["allreduce", "tf-epoch"])
def test_tf1_designs_are_left_out_of_the_default_and_of_all_but_run_when_named(name):
    for given in ({}, {"transports": "all"}):
        picked = options.selection(given, name).transports
        assert picked and not set(picked) & set(TF1), picked
    assert set(transports.default_names(name)) == set(transports.names(name)) - set(TF1)
    assert options.selection({"transports": "grpc+mpi"}, name).transports == ("grpc+mpi",)
    if bench.get(name).cases is not None:
        default = suite.select_cases(replace(options.selection({}, name), transports=None))
        assert default and not {c.transport for c in default} & set(TF1)


def test_perfsuite_transports_still_lists_them_with_their_reason(capsys):
    assert cli.main(["transports"]) == 0
    out = capsys.readouterr().out
    for name in TF1:
        assert f"\n{name} " in out
    assert out.count(f"skipped: {transports.TF1_ONLY}") >= 3


def test_named_tf1_designs_are_one_grouped_line_on_stdout_and_nothing_on_stderr(capsys):
    assert cli.main(["run", "--transports", ",".join(TF1), "--sizes", "4,1KiB"]) == 0
    got = capsys.readouterr()
    assert got.err == ""
    (line,) = [x for x in got.out.splitlines() if "TensorFlow 1" in x]
    assert line.startswith("# skipped 3 worlds (6 cases) allreduce[grpc+verbs-n2, grpc+mpi-n2, grpc+gdr-n2]: ")
    assert cli.main(["run", "--transports", ",".join(TF1), "--sizes", "4,1KiB", "-v"]) == 0
    verbose = capsys.readouterr()
    assert verbose.out == got.out  # -v changes stderr only
    assert verbose.err.splitlines() == [f"# allreduce[{t}-n2]: skipped: {transports.TF1_ONLY}" for t in TF1]


def test_quiet_and_verbose_together_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "-q", "-v"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.world
@pytest.mark.parametrize("quiet", [False, True])
def test_a_run_puts_results_on_stdout_and_progress_on_stderr(tmp_path, quiet, no_leftover_ranks):
    r = perfsuite("run", "--transports", "mpi,grpc+gdr,grpc+mpi", "--world-sizes", "1", "--sizes", "4",
                  "--iters", "20", "--warmup", "2", *(["-q"] if quiet else []), cwd=tmp_path)
    assert r.returncode == 0, said(r)
    assert "# allreduce  transport=mpi  world_size=1" in r.stdout  # the table
    assert [x for x in r.stdout.splitlines() if "grpc" in x] == [
        f"# skipped 2 worlds (2 cases) allreduce[grpc+gdr-n1, grpc+mpi-n1]: {transports.TF1_ONLY}"]
    assert "running" not in r.stdout and "cases in" not in r.stdout
    if quiet:
        assert r.stderr == ""
    else:  # one world runs: it alone is counted and said; the skipped ones are not
        assert r.stderr.splitlines() == ["# [1/1] running allreduce[mpi-n1]: 1 cases",
                                         r.stderr.splitlines()[1]]
        assert r.stderr.splitlines()[1].startswith("# [1/1] allreduce[mpi-n1]: 1 cases in ")


# --- pytest: the same lines in perfsuite's summary section --------------------------------------


@pytest.mark.parametrize("verbose", [False, True])
def test_pytest_summary_groups_skips_by_reason_and_rs_stays_pytests(pytester, verbose):
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    r = pytester.runpytest_subprocess("--benchmark-only", "--perf-transports", "grpc+verbs,grpc+gdr",
                                      "--perf-sizes", "4,1KiB", "-rs", "-p", "no:cacheprovider",
                                      *(["-v"] if verbose else []))
    r.assert_outcomes(skipped=4)
    out = r.stdout.str()
    section = out[out.index("perfsuite worlds"):]
    grouped = f"skipped 2 worlds (4 cases) allreduce[grpc+verbs-n2, grpc+gdr-n2]: {transports.TF1_ONLY}"
    assert grouped in section.splitlines()
    per_world = [f"allreduce[{t}-n2]: skipped: {transports.TF1_ONLY}" for t in ("grpc+verbs", "grpc+gdr")]
    assert all((line in section.splitlines()) == verbose for line in per_world)
    assert "SKIPPED [2] test_bench.py" in out and "grpc+gdr: exists only in TensorFlow 1" in out  # pytest's -rs


def test_pytest_collects_no_tf1_design_by_default_and_says_no_skip_under_collect_only(pytester):
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    r = pytester.runpytest_subprocess("--collect-only", "-q", "--perf-sizes", "4", "-p", "no:cacheprovider")
    out = r.stdout.str()
    assert "test_allreduce[mpi-n2-4B]" in out and not any(t in out for t in TF1)
    assert "perfsuite worlds" not in out  # nothing ran, nothing was skipped


# --- README's "What it prints" is what its command prints ----------------------------------------

README = Path(__file__).resolve().parents[1] / "README.md"
NUMBER = re.compile(r"\d+(\.\d+)?")


def _shape(line: str) -> str:
    """A line with its measured numbers as N and its spacing as one space: what must not drift."""
    return " ".join(NUMBER.sub("N", line).split())


def readme_output() -> tuple[list[str], list[list[str]]]:
    """README's "What it prints": the command (argv after ``perfsuite``) and its output block,
    in chunks cut where the README elides with ``...``."""
    text = README.read_text()
    section = text[text.index("## What it prints"):]
    argv = shlex.split(re.search(r"`perfsuite (run [^`]+)`", section).group(1))
    block = section.split("```\n", 2)[1]
    chunks: list[list[str]] = [[]]
    for line in block.splitlines():
        if line.strip() == "...":
            chunks.append([])
        elif line.strip():
            chunks[-1].append(_shape(line))
    return argv, chunks


@pytest.mark.world
def test_readmes_what_it_prints_is_what_its_command_prints(tmp_path):
    """Every line README shows, in order, is a line its command prints now (numbers aside), the
    first its first and the last its last: a column added, a line dropped or a skip the command
    cannot print (the block once listed GPU transports it did not name) fails here."""
    argv, chunks = readme_output()
    shown_skipped = re.findall(r"([\w+-]+)-nN", " ".join(line for c in chunks for line in c if "skipped" in line))
    runs_here = [t for t in shown_skipped if transports.unavailable_reason(t) is None]
    if runs_here:
        pytest.skip(f"README's block is a machine's where {', '.join(runs_here)} skips; here it runs")
    r = perfsuite(*argv, cwd=tmp_path)
    assert r.returncode == 0, said(r)
    printed = [_shape(line) for line in r.stdout.splitlines() if line.strip()]
    at = 0
    for n, chunk in enumerate(chunks):
        starts = [i for i in range(at, len(printed) - len(chunk) + 1) if printed[i:i + len(chunk)] == chunk]
        assert starts and (n or starts[0] == 0), \
            f"README's lines {chunk} are not printed {'first' if not n else 'after the last'}:\n{r.stdout}"
        at = starts[0] + len(chunk)
    assert at == len(printed), f"the command prints more after README's last line:\n{r.stdout}"
