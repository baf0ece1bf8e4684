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

from ..records.errors import ConfigError
from ..records.model import Case

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
# Up to 101x: a gate test on a machine whose speed swings 3x either way needs a slowdown far
# beyond both the swing and the tolerance that lets clean reruns pass.
MAX_SLOWDOWN = 100.0


def slowdown_fraction(text: str | None = None) -> float:
    """Fraction by which every timed operation is made longer (0 = off). For validating the gate."""
    raw = os.environ.get(SLOWDOWN_ENV, "") if text is None else text
    if not raw:
        return 0.0
    try:
        f = float(raw)
    except ValueError:
        f = -1.0
    if not 0.0 <= f <= MAX_SLOWDOWN:
        raise ConfigError(f"{SLOWDOWN_ENV}={raw!r} must be a fraction between 0 and "
                          f"{MAX_SLOWDOWN:g}, e.g. 0.05")
    return f


class Spin:
    """Makes each timed call take ``fraction`` longer with a calibrated busy loop, and no clock
    read inside the loop (a read per turn would set the granularity, and the loop's own cost
    would add to small messages).

    Two ways to use it. ``turns(dt)`` is how many turns add ``fraction`` x ``dt``; a kernel
    that loops over ``range(turns)`` inside its own timed region adds exactly that,
    as the time its clock reads: used with ``dt`` the call's median, measured before the timed
    loop. ``add(dt)`` spins after a call timed elsewhere (CUDA events, a training step) and
    returns the seconds it really took, measured around the loop. Either way the number
    recorded is the time the rank spent, never an edited one.
    """

    def __init__(self, fraction: float, clock=time.perf_counter):
        self.fraction = fraction
        self.clock = clock
        self.per_turn, self.fixed, self.call = self._calibrate()

    def _calibrate(self) -> tuple[float, float, float]:
        """(seconds per turn, seconds of an empty spin timed on its own, seconds the call of an
        empty spin adds inside a region timed already): medians over the paths used."""
        clock = self.clock

        def median(f, repeats: int) -> float:
            got = sorted(f() for _ in range(repeats))
            return got[len(got) // 2]

        def bare() -> float:
            t0 = clock()
            return clock() - t0

        empty = range(0)

        def inline() -> float:  # the loop as a kernel writes it inside its timed region
            t0 = clock()
            for _ in empty:
                pass
            return clock() - t0

        median(lambda: self._timed(0), 200)  # warm the paths
        fixed = median(lambda: self._timed(0), 2001)
        many = 20_000
        per_turn = max((median(lambda: self._timed(many), 51) - fixed) / many, 1e-10)
        median(inline, 200)
        return per_turn, fixed, max(median(inline, 2001) - median(bare, 2001), 0.0)

    def _timed(self, turns: int) -> float:
        clock = self.clock
        t0 = clock()
        spin_turns(turns)
        return clock() - t0

    def turns(self, dt: float, fixed: float | None = None) -> int:
        """Turns that add ``fraction`` x ``dt``, less ``fixed`` seconds the path adds anyway
        (default: an inline ``for _ in range(turns)`` in a region the caller times already)."""
        fixed = self.call if fixed is None else fixed
        n = int((dt * self.fraction - fixed) / self.per_turn + 0.5)
        return n if n > 0 else 0

    def add(self, dt: float) -> float:
        return self._timed(self.turns(dt, self.fixed))


class NativeSpin(Spin):
    """The injected spin of the native loop: turns of its C loop, calibrated in C."""

    def __init__(self, fraction: float, native):
        self.native = native
        super().__init__(fraction)

    def _calibrate(self) -> tuple[float, float, float]:
        def median(turns: int, repeats: int) -> float:
            got = sorted(self.native.spin_seconds(turns) for _ in range(repeats))
            return got[len(got) // 2]

        median(0, 200)
        fixed, many = median(0, 2001), 1_000_000
        # Inside the C loop's timed region a turn costs only itself: nothing fixed to subtract.
        return max((median(many, 51) - fixed) / many, 1e-12), fixed, 0.0

    def _timed(self, turns: int) -> float:
        return self.native.spin_seconds(turns)


def spin_turns(turns: int) -> None:
    for _ in range(turns):
        pass


def spin(fraction: float | None = None, native=None) -> Spin | None:
    """The calibrated spin ``PERFSUITE_INJECT_SLOWDOWN`` asks for, or None when it is off;
    with ``native`` (a transport's NativeLoop), the spin of its C loop."""
    f = slowdown_fraction() if fraction is None else fraction
    if f <= 0:
        return None
    return NativeSpin(f, native) if native is not None else Spin(f)
