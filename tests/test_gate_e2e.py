"""The regression gate end to end on real worlds (2 ranks, sizes 4 B and 1 MiB):

record a baseline, inject a slowdown (the kernel spins inside the timed region), and the gate
must fail naming the cases; a clean rerun must pass. Once through the CLI, once through pytest.

The machine these run on is shared, and a world can run at half speed when a neighbour takes a
core, so the tests use what docs/baselines.md recommends there: several rounds per world (a median of
rounds ignores one contended round; 5 against 5 is the fewest that bound a 99% interval of the
change, fewer can only say UNKNOWN) and a slowdown (x61) far beyond a wide tolerance, so that
they prove the plumbing without depending on how quiet the machine is. The tolerance is wide
because a neighbour can hold a core for all three rounds of a world: clean reruns here read
4 B latency up to +111% and 1 MiB latency up to +266% against their own baseline. For the
same reason a clean rerun that is flagged
runs again, up to three times: a gate that flags clean reruns flags all three, a slow spell
passes. How small a slowdown the gate catches here is what ``perfsuite detection-power``
measures.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.world

REPO = Path(__file__).resolve().parents[1]
# The timed call lasts 61x as long. busbw may fall 90% and latency rise 900% (10x) before a
# clean rerun counts as a regression: this machine's speed swings between spells of minutes,
# and timed by the native loop a 4 B call takes 0.26 us in a fast spell and 1.06 us in a slow
# one (4x; the mpi4py loop's own ~0.6 us hid most of that). The slowdown stays beyond the
# tolerance even against a baseline 4x slower than the candidate's spell: 61 / 4 = 15x.
SLOWDOWN = "60.0"
TOLERANCE = "-0.9:9.0"
# Few calls per size keep a 61x slowed 1 MiB round under a second; the gate judges rounds,
# not calls, so this changes nothing it checks.
ITERS = ["--iters", "20"]
CLEAN_TRIES = 3
# The gate's mechanics, not its contention and machine-mode rules (tests/test_regress.py has
# those): a busy CI machine must not turn every round into a dropped one, nor a change of mode
# between the baseline and the candidate turn every verdict into UNKNOWN.
CALM = ["--max-contention", "off", "--max-canary-shift", "off"]
GATE = [f"--tolerance={TOLERANCE}", "--rounds", "3", "--system", "e2e-box", *CALM]
WORLD = ["--transports", "mpi", "--sizes", "4,1MiB", "--world-sizes", "2", "--timeout", "120", *ITERS]


def until_clean(run) -> subprocess.CompletedProcess:
    """A clean rerun, repeated while the gate flags it (see the module docstring)."""
    for _ in range(CLEAN_TRIES):
        r = run()
        if r.returncode == 0:
            break
    return r


def cli(*args: str, slowdown: str | None = None, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PERFSUITE_INJECT_SLOWDOWN"}
    if slowdown:
        env["PERFSUITE_INJECT_SLOWDOWN"] = slowdown
    return subprocess.run([sys.executable, "-m", "perfsuite.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_cli_gate_fails_a_slowdown_and_passes_a_clean_rerun(tmp_path):
    base = tmp_path / "baselines"
    # 10 baseline rounds (what --baseline-update records): against 3 the gate's 12 looks at
    # alpha 0.01 could never bound a change, and every verdict would stay UNKNOWN.
    r = cli("run", *WORLD, "--rounds", "10", "--json", "a.json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    saved = json.loads((tmp_path / "a.json").read_text())
    assert 10 <= saved["results"][0]["extra"]["rounds"] <= 13  # contended rounds re-run, up to 3 more

    r = cli("baseline", "update", "--from", "a.json", "--system", "e2e-box",
            "--baseline-dir", str(base), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "4 change(s)" in r.stdout and "new" in r.stdout
    stored = json.loads((base / "e2e-box" / "allreduce.json").read_text())
    assert stored["format"] == "perfsuite-baseline" and len(stored["cases"]) == 2
    assert "allreduce[mpi-n2-1MiB]" in cli("baseline", "show", "--baseline-dir", str(base),
                                           cwd=tmp_path).stdout

    slow = cli("run", *WORLD, *GATE, "--compare", "--baseline-dir", str(base), "--json", "slow.json",
               slowdown=SLOWDOWN, cwd=tmp_path)
    assert slow.returncode == 1, slow.stdout + slow.stderr
    for case in ("allreduce[mpi-n2-4B]", "allreduce[mpi-n2-1MiB]"):
        assert f"REGRESSION: {case} " in slow.stdout, slow.stdout
    assert "on e2e-box: " in slow.stdout and "tolerance -90%/+900%" in slow.stdout

    clean = until_clean(lambda: cli("run", *WORLD, *GATE, "--compare", "--baseline-dir", str(base),
                                    cwd=tmp_path))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "REGRESSION" not in clean.stdout and "4 same" in clean.stdout

    # Two results files, same verdict logic: the slowed run against the baseline run.
    r = cli("compare", "a.json", "slow.json", f"--tolerance={TOLERANCE}", "--max-canary-shift", "off",
            cwd=tmp_path)
    assert r.returncode == 1 and "REGRESSION: allreduce[mpi-n2-1MiB] busbw" in r.stdout, r.stdout


def test_pytest_gate_fails_a_regressed_case_and_passes_a_clean_one(tmp_path):
    base = tmp_path / "baselines"
    args = [sys.executable, "-m", "pytest", str(REPO / "benchmarks" / "test_allreduce.py"),
            "--benchmark-disable", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
            "--perf-transports", "mpi", "--perf-sizes", "4,1MiB", "--perf-world-sizes", "2",
            "--perf-rounds", "5", "--perf-iters", "20", f"--perf-tolerance={TOLERANCE}", "--perf-system", "e2e-box",
            "--perf-max-contention", "off", "--perf-max-canary-shift", "off",
            "--perf-baseline-dir", str(base)]

    def pytest_run(*extra: str, slowdown: str | None = None) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "PERFSUITE_INJECT_SLOWDOWN"}
        if slowdown:
            env["PERFSUITE_INJECT_SLOWDOWN"] = slowdown
        return subprocess.run([*args, *extra], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)

    r = pytest_run("--perf-baseline-update")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "perfsuite verdicts on e2e-box" in r.stdout and "4 new" in r.stdout
    assert (base / "e2e-box" / "allreduce.json").is_file()

    r = pytest_run(slowdown=SLOWDOWN)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "2 failed" in r.stdout
    # One line per failed case, saying what got worse and by how much.
    assert "Failed: allreduce[mpi-n2-1MiB] " in r.stdout and "vs baseline" in r.stdout
    assert "REGRESSION" in r.stdout  # the summary table

    r = until_clean(pytest_run)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "2 passed" in r.stdout and "4 same" in r.stdout

    # One round against ten can never bound a change at 99%: UNKNOWN, which --perf-strict fails.
    r = pytest_run("--perf-rounds", "1", "--perf-max-rounds", "1", "--perf-strict")
    assert r.returncode == 1 and "2 failed" in r.stdout, r.stdout[-3000:]
    assert "4 unknown" in r.stdout and "the interval is unbounded: too few rounds to judge" in r.stdout
