"""Progress over a sweep: a live bar for a person at a terminal, plain lines under CI or a pipe.
Driven with fake worlds and outcomes and a fake clock: no MPI, no sleeping."""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys

import pytest
from rich.console import Console

from perfsuite.records.errors import RankFailure
from perfsuite.records.model import Case, Result, Sample, WorldSpec
from perfsuite.reading.progress import SweepProgress, in_ci, wants_bar
from perfsuite.store.formats import WorldOutcome

ANSI = re.compile(r"\x1b\[")
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def worlds() -> list[WorldSpec]:
    def spec(t: str) -> WorldSpec:
        return WorldSpec("allreduce", t, 2, tuple(Case("allreduce", t, 2, size_bytes=s) for s in (4, 1024, 1 << 20)))
    return [spec("mpi"), spec("ring"), spec("nccl")]


def drive(progress: SweepProgress) -> None:
    """Three worlds: one measured, one failed, one skipped; each 'took' 2 fake seconds."""
    ok, failed, skipped = worlds()
    result = Result("allreduce", "mpi", 2, tuple(Sample(c, {}) for c in ok.cases), wall_s=1.5)
    outcomes = [(ok, WorldOutcome(ok, result=result)),
                (failed, WorldOutcome(failed, failure=RankFailure("allreduce[ring-n2]: rank 1 raised ValueError"))),
                (skipped, WorldOutcome(skipped, skipped="no GPU"))]
    with progress:
        for spec, outcome in outcomes:
            progress("start", spec, None)
            progress("done", spec, outcome)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


PLAIN = [
    "# [1/3] running allreduce[mpi-n2]: 3 cases",
    "# [1/3] allreduce[mpi-n2]: 3 cases in 1.5 s",
    "# [2/3] running allreduce[ring-n2]: 3 cases",
    "# [2/3] allreduce[ring-n2]: FAILED after 1.0 s: allreduce[ring-n2]: rank 1 raised ValueError",
    "# [3/3] running allreduce[nccl-n2]: 3 cases",
    "# [3/3] allreduce[nccl-n2]: skipped: no GPU",
]


def test_bar_renders_in_a_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100, color_system="standard")
    p = SweepProgress(worlds(), console=console, env={}, clock=FakeClock())
    assert p.bar and p.total_cases == 9
    drive(p)
    out = buf.getvalue()
    assert ANSI.search(out), "a terminal gets escape codes (cursor moves, colour)"
    assert "━" in out and "allreduce[mpi-n2]" in out  # the bar and the world it is on
    plain = ESCAPES.sub("", out)
    assert "9/9 cases" in plain  # counts cases of the whole sweep, not worlds
    frames = re.split(r"[\r\n]", plain)
    assert any("━" in f and "[2/3] allreduce[ring-n2]" in f for f in frames)  # the world it is on
    for line in ("allreduce[ring-n2]: FAILED", "allreduce[nccl-n2]: skipped: no GPU"):
        assert line in out  # what became of each world stays above the (transient) bar


@pytest.mark.parametrize("env,terminal", [({"CI": "true"}, True), ({"CI": "1"}, True), ({}, False)])
def test_plain_lines_under_ci_or_a_pipe(env, terminal):
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=terminal, width=100)
    p = SweepProgress(worlds(), console=console, env=env, clock=FakeClock())
    assert not p.bar
    drive(p)
    out = buf.getvalue()
    assert not ANSI.search(out) and "━" not in out
    assert out.splitlines() == PLAIN


def test_ci_detection():
    assert in_ci({"CI": "true"}) and in_ci({"CI": "TRUE"}) and not in_ci({}) and not in_ci({"CI": "false"})
    assert not wants_bar(Console(file=io.StringIO(), force_terminal=True), {"CI": "true"})
    assert not wants_bar(Console(file=io.StringIO(), force_terminal=False), {})


@pytest.mark.world
@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux 'script' (a pseudo-terminal) is not installed")
@pytest.mark.parametrize("ci", ["", "true"])
def test_perfsuite_run_under_a_real_terminal(ci, no_leftover_ranks):
    """``perfsuite run`` in a pseudo-terminal: a bar for a person, none under CI=true."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TERM")}
    env.update(TERM="xterm-256color", COLUMNS="120", **({"CI": ci} if ci else {}))
    cmd = (f"{sys.executable} -m perfsuite.faces.cli run --transports mpi,ring --sizes 4 --iters 20 --warmup 2")
    proc = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, text=True,
                          timeout=180, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "allreduce[mpi-n2]: 1 cases in" in out and "allreduce[ring-n2]: 1 cases in" in out
    if ci:
        assert "━" not in out and "# [1/2] running allreduce[mpi-n2]: 1 cases" in out
    else:
        assert "━" in out and "# [1/2] running" not in out


def test_a_world_keeps_its_number_when_worlds_end_out_of_order():
    """Rounds interleave, and a contended round is re-run after the others: ring starts second
    and ends last, and both its lines say [2/3] (the k-th world to start), not the count done."""
    buf = io.StringIO()
    p = SweepProgress(worlds(), console=Console(file=buf, force_terminal=False), env={"CI": "true"},
                      clock=FakeClock())
    mpi, ring, nccl = worlds()
    done = {s.label: WorldOutcome(s, result=Result("allreduce", s.transport, 2, tuple(Sample(c, {}) for c in s.cases),
                                                   wall_s=1.5)) for s in (mpi, ring, nccl)}
    with p:
        p("start", mpi, None)
        p("done", mpi, done[mpi.label])
        p("start", ring, None)
        p("start", nccl, None)
        p("done", nccl, done[nccl.label])
        p("done", ring, done[ring.label])
    assert [line.split(" allreduce")[0] for line in buf.getvalue().splitlines()] == \
        ["# [1/3] running", "# [1/3]", "# [2/3] running", "# [3/3] running", "# [3/3]", "# [2/3]"]
