"""scripts/gpu-smoke.sh, the check for a bare GPU machine: it parses, it ends cleanly where there
is no GPU, and its worlds-and-table part runs (on host transports here) and fails on a failure."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.transports.gpu import need_gpu

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu-smoke.sh"


def smoke(tmp_path, **env) -> subprocess.CompletedProcess:
    # The venv's bin first: mpiexec and this Python, as on a GPU box with its own MPI on PATH.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PATH": path, "PYTHON": sys.executable,
                               "OUT": str(tmp_path / "out"), **env})


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    assert os.access(SCRIPT, os.X_OK)


def test_without_a_gpu_it_says_so_and_starts_nothing(tmp_path):
    reason = need_gpu()
    if reason is None:
        pytest.skip("this machine has a GPU: the script runs its worlds instead")
    done = smoke(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"gpu-smoke: no GPU here: {reason}"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.world
def test_its_worlds_and_table_run_on_host_transports(tmp_path, no_leftover_ranks):
    done = smoke(tmp_path, SMOKE_TRANSPORTS="mpi", SMOKE_SIZES="4,4KiB")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("mpi ")]
    assert [(r[1], r[2], r[5]) for r in rows] == [("1", "4B", "OK"), ("1", "4KiB", "OK"),
                                                  ("2", "4B", "OK"), ("2", "4KiB", "OK")]
    assert done.stdout.rstrip().endswith("gpu-smoke: passed")


@pytest.mark.world
def test_a_failed_world_fails_the_smoke(tmp_path, no_leftover_ranks):
    if shutil.which("mpiexec", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("no mpiexec beside this Python")
    done = smoke(tmp_path, SMOKE_TRANSPORTS="mpi", SMOKE_SIZES="4,4KiB",
                 PERFSUITE_TEST_FAULT="kill@1@4096")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: " in done.stdout and done.stdout.rstrip().endswith("gpu-smoke: FAILED")
