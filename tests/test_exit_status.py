"""Every row of docs/running.md's exit-status table, made to happen by a real command on real
2-rank worlds (the mpich wheel), so each status means one thing for every command.

Robust by design on a noisy 2-core machine: no row rests on a timing that could land either way.
The regression (1) is a x21 slowdown injected into the timed loop (``PERFSUITE_INJECT_SLOWDOWN``),
far beyond the x4 a one-session reference allows for this machine's states, with 8 rounds a
side (conftest's ``slowed_runs``, which tests/test_report.py reads too); MPICH's own ring
algorithm (x2-x8 here, by machine state) decides only through ``ab``, where
tests/test_gate_e2e.py holds it to exit 1. UNKNOWN (3) is a run
compared with itself: a one-session reference cannot decide anything within x4, whatever the
machine did. A failed world (4) is the test-only fault switch: a rank SIGKILLed, a wrong sum.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SLOWED_WORLD, SWITCHES, default_sigint, perfsuite, rank_pids, said, signalled, small_world
from perfsuite.faces import cli
from perfsuite.faces.cli import common

pytestmark = pytest.mark.world

REPO = Path(__file__).resolve().parents[1]
WORLD = small_world()
#: The judged worlds of ``runs`` (conftest's ``slowed_runs``): 1 and 2 ranks, 8 rounds each.
JUDGED = SLOWED_WORLD


@pytest.fixture
def runs(slowed_runs) -> Path:
    """A clean run and one 21x slower, 8 rounds of each world, as results files fast.json and
    slow.json (exit 0 both: a run without --compare judges nothing, and the slow one ran and
    validated), made once per session and shared with tests/test_report.py."""
    return slowed_runs


def table_statuses() -> list[str]:
    text = (REPO / "docs" / "running.md").read_text()
    table = text[text.index("## Exit statuses"):].split("\n\n")[2]
    return [line.split("|")[1].strip() for line in table.splitlines()[2:]]


def test_the_table_is_the_constants():
    """docs/running.md has one table, and its rows are the statuses faces/cli/common.py names."""
    assert table_statuses() == ["0", "1", "2", "3", "4", "128+N"]
    assert (common.EXIT_OK, common.EXIT_REGRESSION, common.EXIT_USAGE, common.EXIT_UNKNOWN,
            common.EXIT_WORLD, common.EXIT_INTERRUPTED) == (0, 1, 2, 3, 4, 128)
    assert not hasattr(common, "EXIT_FAIL")  # one name per meaning


def test_precedence_is_world_then_regression_then_unknown():
    s = common.exit_status
    assert s() == s(0, 0) == 0
    assert s(1, 4) == s(4, 3, 1) == s(3, 4) == 4
    assert s(3, 1) == s(1, 0) == 1 and s(3, 0) == 3
    assert s(4, 143) == s(143, 1) == 143


# --- one real command per row --------------------------------------------------------------------

def test_0_nothing_wrong(runs):
    r = perfsuite("compare", "fast.json", "fast.json", cwd=runs)
    assert r.returncode == 0, said(r)  # UNKNOWN, listed, is no failure without --strict
    assert "UNKNOWN: allreduce[mpi-n2-4B]" in r.stdout and "REGRESSION" not in r.stdout


def test_1_a_regression(runs):
    r = perfsuite("compare", "fast.json", "slow.json", "--max-canary-shift", "off", cwd=runs)
    assert r.returncode == 1, said(r)
    # The 1-rank world has no rank to wait for: x21 is far beyond its reference's spread. The
    # 2-rank world's reference may catch this VM in both of its states (x3 apart), which can
    # widen what it allows: it is a regression, or UNKNOWN saying why, never anything else.
    assert re.search(r"^REGRESSION: allreduce\[mpi-n1-4B\] latency .*beyond x4", r.stdout, re.M), said(r)
    assert re.search(r"^(REGRESSION|unknown) +allreduce\[mpi-n2-4B\] ", r.stdout, re.M), said(r)


def test_2_bad_input_before_any_world(tmp_path):
    r = perfsuite("run", *WORLD[:2], "--world-sizes", "0", cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, said(r)
    assert "world size '0'" in r.stderr and not r.stdout
    r = perfsuite("compare", "missing.json", "missing.json", cwd=tmp_path)
    assert r.returncode == 2 and "missing.json" in r.stderr, said(r)


def test_3_unknown_under_strict(runs):
    """A run against itself: a one-session reference decides only changes beyond x4."""
    r = perfsuite("compare", "fast.json", "fast.json", "--strict", cwd=runs)
    assert r.returncode == 3, said(r)
    assert "REGRESSION" not in r.stdout
    assert re.search(r"^UNKNOWN: .*beyond x4", r.stdout, re.M), said(r)


@pytest.mark.parametrize("fault, says", [("kill@1", "rank 1 on .* died"),
                                         ("corrupt@1", r"^INVALID: allreduce\[mpi-n2-4B\] returned wrong results on rank 1 ")])
def test_4_a_world_failed_or_a_case_was_invalid(tmp_path, fault, says, no_leftover_ranks):
    r = perfsuite("run", *WORLD, cwd=tmp_path, PERFSUITE_TEST_FAULT=fault)
    assert r.returncode == 4, said(r)
    assert re.search(says, r.stdout + r.stderr, re.M), said(r)


def test_4_through_the_failure_a_command_raises(tmp_path, no_leftover_ranks):
    """overhead's world fails with a RankFailure that reaches main(): a failed world, not 1."""
    r = perfsuite("overhead", "--sizes", "4", "--iters", "20", "--warmup", "2", "--rounds", "1", cwd=tmp_path,
                  PERFSUITE_TEST_FAULT="kill@1")
    assert r.returncode == 4, said(r)
    assert r.stderr.startswith("perfsuite overhead: allreduce[mpi-n2]: rank 1 on "), said(r)


def test_4_before_1_when_a_run_has_both(runs, no_leftover_ranks):
    """The slowed run again, its 2-rank world now failing (rank 1 killed): the 1-rank world is a
    regression (8 rounds, beyond x4), and the failed world wins: the status is 4."""
    r = perfsuite("run", *JUDGED, "--json", "both.json", cwd=runs, PERFSUITE_INJECT_SLOWDOWN="20.0",
                  PERFSUITE_TEST_FAULT="kill@1")
    assert r.returncode == 4, said(r)
    r = perfsuite("compare", "fast.json", "both.json", "--max-canary-shift", "off", cwd=runs)
    assert r.returncode == 4, said(r)
    assert "REGRESSION: allreduce[mpi-n1-4B]" in r.stdout and "FAILED: allreduce[mpi-n2]" in r.stdout, said(r)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_128_plus_n_interrupted(tmp_path, sig, monkeypatch, no_leftover_ranks):
    """Rank 1 hangs in its first timed call; the signal arrives once both ranks are up."""
    token = os.environ["PERFSUITE_TEST_TOKEN"]  # set by no_leftover_ranks: finds this world's ranks
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    proc = subprocess.Popen([sys.executable, "-m", "perfsuite.faces.cli", "run", *WORLD, "--json", "t.json"],
                            cwd=tmp_path, env={**env, "PERFSUITE_TEST_FAULT": "hang@1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 120
        while len(rank_pids(token)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert len(rank_pids(token)) == 2, "the world never started"
        out = signalled(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig.value, out
    assert f"interrupted by {sig.name}" in out and "Traceback" not in out


# --- the pytest face: pytest's own codes, and one line naming the row ------------------------------

def test_the_pytest_summary_names_the_row(tmp_path):
    """Each finding of a run, as the one line pytest's summary ends with (``gate.finding``, from
    the status the gate gives both faces; tests/test_plugin.py sees it at the end of real sessions).
    "nothing wrong" only where every judged case was decided: an UNKNOWN is counted, with the
    command that decides it."""
    from perfsuite import gate
    from perfsuite.faces import options
    from perfsuite.records.errors import RankFailure
    from perfsuite.store.formats import SuiteRun, WorldOutcome
    from perfsuite.records.model import Verdict, WorldSpec

    spec = WorldSpec("allreduce", "mpi", 2, ())
    ok = SuiteRun([WorldOutcome(spec)])
    failed = SuiteRun([WorldOutcome(spec, failure=RankFailure("allreduce[mpi-n2]: rank 1 died"))])
    regression = Verdict("allreduce[mpi-n2-4B]", "latency_us", "regression")
    unknown = Verdict("allreduce[mpi-n2-4B]", "latency_us", "unknown")

    judging = gate.Gate(options.gate_plan({}, compare=True, root=tmp_path / "none"))

    def line(run=ok, verdicts=(), strict=False, nothing=False, kept=True, stop=None):
        status = gate.run_status(run, list(verdicts), kept=kept, nothing=nothing, strict=strict, stop=stop)
        return gate.finding(status, run, kept, nothing, strict, judging.undecided_line(list(verdicts)))

    # the statuses themselves, as both faces get them from Gate.finish
    assert gate.run_status(failed, [regression], kept=True, nothing=False, strict=False) == cli.EXIT_WORLD
    assert gate.run_status(ok, [regression], kept=False, nothing=False, strict=False) == cli.EXIT_WORLD
    assert gate.run_status(ok, [regression, unknown], kept=True, nothing=False, strict=True) == cli.EXIT_REGRESSION
    assert gate.run_status(ok, [unknown], kept=True, nothing=False, strict=True) == cli.EXIT_UNKNOWN
    assert gate.run_status(ok, [], kept=True, nothing=True, strict=True) == cli.EXIT_UNKNOWN
    assert gate.run_status(ok, [unknown], kept=True, nothing=True, strict=False) == cli.EXIT_OK
    assert gate.run_status(failed, [], kept=False, nothing=False, strict=False, stop="SIGTERM") == 143

    assert line() == "perfsuite: nothing wrong"
    assert line(verdicts=[unknown]) == ("perfsuite: no regression shown; 1 case(s) UNKNOWN: decide with: "
                                        "perfsuite ab --benchmarks allreduce --a-ref REV (REV: the commit the "
                                        "baseline was measured at; this baseline predates recording it)")
    assert line(verdicts=[unknown], strict=True).startswith("perfsuite: UNKNOWN under --perf-strict: no regression")
    assert line(verdicts=[regression, unknown], strict=True) == "perfsuite: regression"
    assert line(failed, [regression]).startswith("perfsuite: a world failed")
    assert line(kept=False).startswith("perfsuite: what was measured could not all be written")
    assert line(stop="SIGTERM").startswith("perfsuite: interrupted")
    assert line(nothing=True) == "perfsuite: nothing wrong (nothing compared: no baseline)"
    assert line(nothing=True, strict=True) == "perfsuite: UNKNOWN under --perf-strict (nothing compared: no baseline)"


# --- a gate with nothing to compare ------------------------------------------------------------------

def nothing_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "NOTHING COMPARED" in line]


def test_a_gate_with_no_baseline_says_so_and_strict_makes_it_unknown(tmp_path, no_leftover_ranks):
    """Every verdict new is no pass: one loud line names the missing baseline and the command that
    records it (exit 0, or 3 under --strict), and that command does record it."""
    from perfsuite.store import baselines

    system = baselines.system_for(None)
    r = perfsuite("run", *WORLD, "--compare", "--baseline-dir", "nob", cwd=tmp_path)
    assert r.returncode == 0, said(r)
    (line,) = nothing_lines(r.stdout)
    assert line.startswith(f"NOTHING COMPARED: no baseline for system {system} in nob/{system}/"), line
    r = perfsuite("run", *WORLD, "--compare", "--baseline-dir", "nob", "--strict", "--rounds", "1", cwd=tmp_path)
    assert r.returncode == 3, said(r)
    (line,) = nothing_lines(r.stdout)
    command = line.split("record one with: ", 1)[1]
    assert command == ("perfsuite run --transports mpi --world-sizes 2 --iters 20 --warmup 5 --sizes 4 "
                       f"--system {system} --baseline-dir nob --baseline-update"), line
    argv = shlex.split(command)
    assert argv[0] == "perfsuite"
    r = perfsuite(*argv[1:], cwd=tmp_path)  # the line's own command records the baseline
    assert r.returncode == 0 and (tmp_path / "nob" / system / "allreduce.json").is_file(), said(r)
    r = perfsuite("run", *WORLD, "--compare", "--baseline-dir", "nob", "--max-rounds", "2", cwd=tmp_path)
    assert not nothing_lines(r.stdout) and r.returncode in (0, 1), said(r)  # compared now


def test_the_pytest_gate_with_no_baseline_fails_its_cases_under_strict(tmp_path, no_leftover_ranks):
    args = [sys.executable, "-m", "pytest", str(REPO / "benchmarks" / "test_allreduce.py"), "--benchmark-disable",
            "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "--perf-transports", "mpi", "--perf-sizes", "4",
            "--perf-world-sizes", "2", "--perf-iters", "20", "--perf-warmup", "5", "--perf-baseline-dir", "nob"]
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    r = subprocess.run([*args, "--perf-strict"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, said(r)  # pytest's own code: a test failed
    assert re.search(r"^FAILED .*test_allreduce\[mpi-n2-4B\] - Failed: NOTHING COMPARED", r.stdout, re.M), said(r)
    assert "perfsuite: UNKNOWN under --perf-strict (nothing compared: no baseline)" in r.stdout, said(r)
    assert "--perf-baseline-update" in nothing_lines(r.stdout)[0] and "--perf-strict" not in nothing_lines(r.stdout)[0]
