"""Test-only fault switch, so the suite's own tests can prove a bad rank is caught.

``PERFSUITE_TEST_FAULT=KIND@RANK[@MIN_SIZE]`` makes rank RANK misbehave at the first case whose
size is at least MIN_SIZE bytes (default: the first case). KIND is one of:
raise (the rank raises), kill (SIGKILLs itself), hang (sleeps forever), corrupt (its result is
off by one). Off unless set; never used by a measurement anyone should trust.
"""
from __future__ import annotations

import os
import signal
import time

from ..errors import ConfigError
from ..model import Case

ENV = "PERFSUITE_TEST_FAULT"
KINDS = ("raise", "kill", "hang", "corrupt")


class InjectedFault(RuntimeError):
    """Raised by the 'raise' fault."""


def parse(text: str | None) -> tuple[str, int, int] | None:
    if not text:
        return None
    bits = text.split("@")
    if len(bits) not in (2, 3) or bits[0] not in KINDS or not all(b.isdigit() for b in bits[1:]):
        raise ConfigError(f"{ENV}={text!r} must be KIND@RANK[@MIN_SIZE] with KIND in {', '.join(KINDS)}")
    return bits[0], int(bits[1]), int(bits[2]) if len(bits) == 3 else 0


class FaultSwitch:
    def __init__(self, rank: int, text: str | None = None):
        spec = parse(os.environ.get(ENV) if text is None else text)
        self.kind, self.rank, self.min_size = spec if spec else (None, -1, 0)
        self.active = spec is not None and rank == self.rank

    def hits(self, case: Case | None) -> bool:
        size = (case.size_bytes or 0) if case else 0
        return self.active and size >= self.min_size

    def __call__(self, point: str, case: Case | None) -> None:
        """Called at 'timed' (inside the measured loop) by every kernel."""
        if point != "timed" or not self.hits(case) or self.kind == "corrupt":
            return
        if self.kind == "raise":
            raise InjectedFault(f"injected fault on rank {self.rank}")
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind == "hang":
            while True:
                time.sleep(3600)

    def corrupts(self, case: Case | None) -> bool:
        return self.kind == "corrupt" and self.hits(case)


SLOWDOWN_ENV = "PERFSUITE_INJECT_SLOWDOWN"


def slowdown_fraction(text: str | None = None) -> float:
    """Fraction by which every timed operation is made longer (0 = off). For validating the gate."""
    raw = os.environ.get(SLOWDOWN_ENV, "") if text is None else text
    if not raw:
        return 0.0
    try:
        f = float(raw)
    except ValueError:
        f = -1.0
    if not 0.0 <= f <= 10.0:
        raise ConfigError(f"{SLOWDOWN_ENV}={raw!r} must be a fraction between 0 and 10, e.g. 0.05")
    return f


def stretch(t0: float, t1: float, fraction: float, clock=time.perf_counter) -> float:
    """Spin inside the timed region until it lasted (1 + fraction) times what the call took.

    The operation really takes longer (the clock is read after spinning); no number is edited.
    """
    if fraction <= 0.0:
        return t1
    until = t0 + (t1 - t0) * (1.0 + fraction)
    now = clock()
    while now < until:
        now = clock()
    return now
