"""--confirm (perfsuite/experiments/confirm.py): what a stored baseline leaves UNKNOWN, or decides
from too few sittings, is decided by an interleaved A/B against the commit that measured the
baseline, in a user's own repository (tests/userproj.py): every world real, the baseline's commit
built as ``ab --a-ref`` builds it.

A one-session baseline decides only beyond the prior span (x4). tinyproj's x3 slowing commit is
UNKNOWN against it, or, when this VM's spells put the baseline in a fast state and the candidate
in a slow one (x3 more), a REGRESSION from one sitting that says so. Either way --confirm hands it
to the A/B, which makes it a REGRESSION, saying it was confirmed and how, exit 1. Left UNKNOWN,
the run's last line counts it and names the command that decides it; a baseline that does not
say which commit measured it is one line, its verdicts left as they were.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import SWITCHES, said
from userproj import BENCH, CASE, slow_down, tinyproj_repo, user_env

pytestmark = pytest.mark.world

#: A generous bound for a loaded 2-core machine: the build of tinyproj's commit (~3 s here), the
#: judging run's rounds and the first look's pairs of an x3 change (docs/measurements.md).
SECONDS = 300


def cli(python: str, *args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    clean = {k: v for k, v in os.environ.items() if k not in SWITCHES and not k.startswith("MPIR_CVAR_")}
    started = time.monotonic()
    got = subprocess.run([python, "-P", "-m", "perfsuite.faces.cli", *args], cwd=cwd, capture_output=True, text=True,
                         timeout=900, env={**clean, "PERFSUITE_ENV_DIR": str(cwd.parent / "envs")})
    return got, time.monotonic() - started


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(repo, the user's Python, the baseline's commit): tinyproj with a one-session baseline of
    its benchmark recorded at "base", then the x3 slowing commit checked out."""
    root = tmp_path_factory.mktemp("confirm")
    repo = tinyproj_repo(root / "tinyproj")
    python = user_env(root / "venv", repo)
    got, _ = cli(python, "run", "--benchmarks", BENCH, "--baseline-update", "--rounds", "5", cwd=repo)
    assert got.returncode == 0, said(got)
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    slow_down(repo)
    return repo, python, base


def test_an_unknown_is_decided_by_an_ab_against_the_baselines_commit(recorded, no_leftover_ranks):
    repo, python, base = recorded
    shown, _ = cli(python, "baseline", "show", cwd=repo)
    assert f"commit={base[:10]}" in shown.stdout, said(shown)
    plain, _ = cli(python, "run", "--benchmarks", BENCH, "--compare", cwd=repo)
    lines = plain.stdout.splitlines()
    if plain.returncode == 0:  # within the prior span: UNKNOWN
        assert any(x.startswith(f"UNKNOWN: {CASE} ") for x in lines), said(plain)
        # never "nothing wrong" beside a case it could not judge: counted, with the real command
        assert lines[-1].startswith("no regression shown; ") and "UNKNOWN (largest +" in lines[-1], said(plain)
        assert lines[-1].endswith(f"decide with: perfsuite ab --benchmarks {BENCH} --transports mpi --world-sizes 2 "
                                  f"--a-ref {base[:10]}"), lines[-1]
        was = "against the stored baseline it was UNKNOWN"
    else:  # beyond it, the machine's state added to the commit's x3: decided from one sitting, and said so
        assert plain.returncode == 1, said(plain)
        (line,) = [x for x in lines if x.startswith(f"REGRESSION: {CASE} ")]
        assert "(from 1 sitting(s): a machine that keeps one state for longer than a sitting can read so; " \
               "--confirm decides it by an A/B against the baseline's commit)" in line, line
        was = "against the stored baseline it was REGRESSION"
    got, seconds = cli(python, "run", "--benchmarks", BENCH, "--compare", "--confirm", cwd=repo)
    assert got.returncode == 1, said(got)
    (line,) = [x for x in got.stdout.splitlines() if x.startswith("REGRESSION: ")]
    assert CASE in line and ("confirmed by an interleaved A/B against the commit that measured the baseline "
                             f"(perfsuite ab --a-ref {base[:10]})") in line, line
    assert was in line, line
    assert any(x.startswith(f"# --confirm: {BENCH} on mpi: arm A = commit {base[:10]} (the baseline's), arm B = "
                            "this checkout; ") for x in got.stdout.splitlines()), said(got)
    assert seconds < SECONDS, seconds


def test_a_baseline_that_names_no_commit_is_one_line(recorded, tmp_path, no_leftover_ranks):
    repo, python, _ = recorded
    for f in (repo / "baselines").rglob("*.json"):
        d = json.loads(f.read_text())
        d["recorded_at"] = {}
        f.write_text(json.dumps(d))
    got, _ = cli(python, "run", "--benchmarks", BENCH, "--compare", "--confirm", cwd=repo)
    # the stored verdict stands: UNKNOWN (0) or, beyond the span, a REGRESSION from one sitting (1)
    assert got.returncode in (0, 1), said(got)
    (line,) = [x for x in got.stdout.splitlines() if x.startswith("# --confirm:")]
    assert line.startswith("# --confirm: 1 case(s) to confirm left as they are: the baseline does not say which "
                           "commit measured it"), line
    if got.returncode == 0:
        assert got.stdout.splitlines()[-1].endswith("--a-ref REV (REV: the commit the baseline was measured at; "
                                                    "this baseline predates recording it)")
