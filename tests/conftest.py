"""Fixtures for the suite's own tests."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def worker_pids() -> list[int]:
    """PIDs of any perfsuite rank or MPI launcher still alive (a leak if a test left one)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((line for line in (p / "status").read_text().splitlines()
                          if line.startswith("State:")), "")
        except OSError:
            continue
        if "zombie" in state:
            continue
        if "perfsuite.worker" in cmd or "hydra_pmi_proxy" in cmd:
            pids.append(int(p.name))
    return pids


@pytest.fixture
def no_leftover_ranks():
    """Asserts, after the test, that it left no rank or launcher process behind."""
    before = set(worker_pids())
    yield
    left = set(worker_pids()) - before
    assert not left, f"processes left behind: {sorted(left)}"
