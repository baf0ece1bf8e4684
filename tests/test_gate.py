"""One gate below both faces (perfsuite/gate.py): the same results judged through ``perfsuite run``
and through the pytest plugin give the same verdicts, the same answer to "nothing compared", the
same lines for wrong results and failed writes, and the exit statuses of docs/running.md's table
(pytest keeps its own numbers: 1 for anything the CLI exits non-zero for).

The results are real: two runs of a 2-rank mpi world measured once (``measured``), then handed
to each face in place of its worlds (``suite.run`` for the CLI, ``suite.run_one`` for pytest), so
both judge exactly the same numbers; what differs between the faces is all that is tested.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
# Loaded before any pytester fixture: pytester drops the modules imported after it was made
# when its test ends, and numpy's C extensions (scipy's, which the gate imports at first use)
# cannot load a second time in one process, so a later test's import of them would fail.
import scipy.special  # noqa: F401
import scipy.stats  # noqa: F401

from conftest import ALLREDUCE_BENCH, SWITCHES, perfsuite, small_world
from perfsuite.store import baselines, formats
from perfsuite.faces import cli
from perfsuite import suite

pytestmark = pytest.mark.world

WORLD = small_world("--max-contention", "off", sizes="4,64")
PYTEST_WORLD = small_world("--perf-max-contention", "off", sizes="4,64", pytest=True)


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, formats.SuiteRun]:
    """A reference of 5 rounds and a candidate of 3, each a real run of its own."""
    where = tmp_path_factory.mktemp("gate")
    runs = {}
    for name, rounds in (("base", "5"), ("cand", "3")):
        r = perfsuite("run", *WORLD, "--rounds", rounds, "--json", f"{name}.json", cwd=where)
        assert r.returncode == 0, r.stdout + r.stderr
        runs[name] = formats.load_run(where / f"{name}.json")
    return runs


def cli_replay(monkeypatch, run: formats.SuiteRun, *args: str) -> tuple[int, str]:
    """``perfsuite run ARGS`` judging ``run`` in place of measuring."""
    monkeypatch.setattr(suite, "run", lambda cases, cfg, on_world=None: run)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(["run", *WORLD, *args])
    return status, out.getvalue()


def pytest_replay(pytester, monkeypatch, run: formats.SuiteRun, *args: str):
    """A pytest session over the same cases judging ``run``'s worlds in place of measuring."""
    by_label = {o.spec.label: o for o in run.outcomes}
    monkeypatch.setattr(suite, "run_one", lambda spec, cfg: by_label[spec.label])
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    return pytester.runpytest_inprocess("--benchmark-disable", "-p", "no:cacheprovider", *PYTEST_WORLD, *args)


def verdict_block(text: str) -> list[str]:
    """The verdict table (header to its count line) and the lines naming undecided cases."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("status ") and "interval" in line)
    end = next(i for i in range(start, len(lines)) if re.match(r"^\d+ \w+", lines[i]))
    return lines[start:end + 1] + [line for line in lines if line.startswith(("UNKNOWN: ", "REGRESSION: "))]


def record(runs: list[formats.SuiteRun], root: Path, system: str) -> None:
    """Each run one session of the baseline, as ``run --baseline-update`` then ``--baseline-add``."""
    for i, run in enumerate(runs):
        samples = [s for r in run.results for s in r.samples]
        baselines.update(root, system, samples, run.machine, session=run.created, add=i > 0, measured_now=True)


def test_both_faces_judge_the_same_results_alike(measured, tmp_path, pytester, monkeypatch):
    root = tmp_path / "base"
    record([measured["base"]], root, "box")
    # A stated drift and one stratum bound every interval by design, whatever state this VM's
    # spells left the two runs in (measured drift and machine modes may leave an interval
    # unbounded, which any look or family would show alike): so the intervals depend on every
    # judging setting the faces could disagree on (looks, family, alpha, drift, modes).
    judge = ["--baseline-dir", str(root), "--system", "box", "--session-drift", "0.05", "--max-canary-shift", "off"]
    status, out = cli_replay(monkeypatch, measured["cand"], *judge, "--compare")
    r = pytest_replay(pytester, monkeypatch, measured["cand"], *[f"--perf-{a[2:]}" if a.startswith("--") else a
                                                                for a in judge])
    text = r.stdout.str()
    assert verdict_block(out) == verdict_block(text), out + "\n----\n" + text
    assert "unbounded" not in out, out  # intervals that a different look or family would move
    assert "NOTHING COMPARED" not in out + text
    assert status in (0, 1, 3) and (r.ret == 0) == (status in (0, 3)), (status, r.ret)  # 3 needs --strict
    # --strict under the same judging settings on both faces: without the stated drift a verdict
    # may be UNKNOWN on one face and decided on the other (the VM's spells between the two runs
    # decide which), which says nothing of the faces.
    strict, out = cli_replay(monkeypatch, measured["cand"], *judge, "--compare", "--strict")
    r = pytest_replay(pytester, monkeypatch, measured["cand"], *[f"--perf-{a[2:]}" if a.startswith("--") else a
                                                                for a in judge], "--perf-strict")
    assert (strict == 0) == (r.ret == 0), (strict, r.ret)


def test_nothing_compared_is_one_answer_on_both_faces(measured, tmp_path, pytester, monkeypatch):
    root = tmp_path / "none"
    status, out = cli_replay(monkeypatch, measured["cand"], "--baseline-dir", str(root), "--system", "box",
                             "--compare")
    r = pytest_replay(pytester, monkeypatch, measured["cand"], "--perf-baseline-dir", str(root),
                      "--perf-system", "box")
    why = f"NOTHING COMPARED: no baseline for system box in {root}/box/, so every case is new"
    (cli_line,) = [line for line in out.splitlines() if "NOTHING COMPARED" in line]
    (py_line,) = [line for line in r.stdout.lines if line.startswith("NOTHING COMPARED")]
    assert cli_line.startswith(why) and py_line.startswith(why), (cli_line, py_line)
    assert "record one with: perfsuite run " in cli_line and "--perf-baseline-update" in py_line
    assert status == 0 and r.ret == 0
    status, _ = cli_replay(monkeypatch, measured["cand"], "--baseline-dir", str(root), "--system", "box",
                           "--compare", "--strict")
    r = pytest_replay(pytester, monkeypatch, measured["cand"], "--perf-baseline-dir", str(root),
                      "--perf-system", "box", "--perf-strict")
    assert status == cli.EXIT_UNKNOWN and r.ret == 1
    r.stdout.fnmatch_lines(["*perfsuite: UNKNOWN under --perf-strict (nothing compared: no baseline)*"])


def test_a_wrong_result_is_exit_4_and_one_line_on_both_faces(measured, tmp_path, pytester, monkeypatch):
    cand = measured["cand"]
    o = cand.outcomes[0]
    bad = replace(o.result.samples[0], valid=False, info={**o.result.samples[0].info, "invalid_ranks": [1]})
    broken = replace(cand, outcomes=[replace(o, result=replace(o.result, samples=(bad, *o.result.samples[1:])))])
    status, out = cli_replay(monkeypatch, broken, "--baseline-dir", str(tmp_path / "b"), "--compare")
    line = f"INVALID: {bad.case.name} returned wrong results on rank 1"
    assert status == cli.EXIT_WORLD and sum(line in x for x in out.splitlines()) == 1, out
    r = pytest_replay(pytester, monkeypatch, broken, "--perf-baseline-dir", str(tmp_path / "b"))
    assert r.ret == 1
    text = r.stdout.str()
    assert line in text and "perfsuite: a world failed or a case was invalid" in text, text


def test_pytest_records_baselines_without_its_terminal(measured, tmp_path, pytester, monkeypatch):
    """The gate's end runs in pytest_sessionfinish, so -p no:terminal still records."""
    root = tmp_path / "rec"
    r = pytest_replay(pytester, monkeypatch, measured["base"], "-p", "no:terminal", "--perf-baseline-update",
                      "--perf-baseline-dir", str(root), "--perf-system", "box")
    assert r.ret == 0
    stored = json.loads((root / "box" / "allreduce.json").read_text())
    assert set(stored["cases"]) == {"allreduce[mpi-n2-4B]", "allreduce[mpi-n2-64B]"}


def test_a_baseline_folder_that_refuses_the_write_is_exit_4_with_the_results_kept(
        measured, tmp_path, pytester, monkeypatch, read_only):
    """On nodes other than this host (here --hosts localhost stands for them) the system comes
    from the measuring world, so its folder is known only at the write: a read-only one is then
    one line and exit 4, the results file written first. Where this host measures, the same
    folder is refused before any world starts (exit 2)."""
    root = tmp_path / "base"
    system = baselines.system_for(measured["base"].machine)
    read_only(root / system)
    status, out = cli_replay(monkeypatch, measured["base"], "--baseline-dir", str(root), "--baseline-update",
                             "--hosts", "localhost", "--json", str(tmp_path / "r.json"))
    lines = [x for x in out.splitlines() if "not written" in x]
    assert status == cli.EXIT_WORLD and len(lines) == 1, out
    assert lines[0] == f"# baselines not written to {root / system / 'allreduce.json'}: Read-only file system", lines
    kept = formats.load_run(tmp_path / "r.json")
    assert [s.to_dict() for s in kept.samples()] == [s.to_dict() for s in measured["base"].samples()]

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["run", *WORLD, "--baseline-dir", str(root), "--baseline-update"]) == cli.EXIT_USAGE
    assert "Read-only file system" in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1

    r = pytest_replay(pytester, monkeypatch, measured["base"], "--perf-baseline-dir", str(root),
                      "--perf-baseline-update", "--perf-hosts", "localhost", "--perf-report", str(tmp_path / "rep"))
    assert r.ret == 1
    assert re.search(rf"baselines not written to {re.escape(str(root / system / 'allreduce.json'))}: Read-only file system",
                     r.stdout.str()), r.stdout.str()
    kept = formats.load_run(tmp_path / "rep" / "results.json")
    assert len(kept.samples()) == len(measured["base"].samples())


def test_a_real_corrupt_world_fails_run_compare_and_pytest(tmp_path):
    """Not replayed: the test fault makes rank 1's sums wrong in a real world."""
    r = perfsuite("run", *WORLD[:6], "--iters", "20", "--warmup", "5", "--compare", "--baseline-dir", "nob",
                  cwd=tmp_path, PERFSUITE_TEST_FAULT="corrupt@1")
    assert r.returncode == cli.EXIT_WORLD, r.stdout + r.stderr
    assert re.search(r"^INVALID: allreduce\[mpi-n2-4B\] returned wrong results on rank 1 ", r.stdout, re.M), r.stdout
    (tmp_path / "test_bench.py").write_text(ALLREDUCE_BENCH)
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    p = subprocess.run([sys.executable, "-m", "pytest", "test_bench.py", "--benchmark-disable", "-p",
                        "no:cacheprovider", *PYTEST_WORLD[:6], "--perf-baseline-dir", "nob"],
                       cwd=tmp_path, env={**env, "PERFSUITE_TEST_FAULT": "corrupt@1"}, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 1, p.stdout[-3000:]
    assert "INVALID: allreduce[mpi-n2-4B] returned wrong results on rank 1" in p.stdout, p.stdout[-3000:]
