"""Whether a rank had its CPU to itself while it was timed.

On a shared machine a world runs many times slower whenever another process takes a core, and
the timings alone cannot say so. The kernel can: the scheduler counts, per thread, the
nanoseconds it was runnable but waiting for a CPU (``/proc/thread-self/schedstat``, second
field) and the times it was switched out involuntarily. Read around a timed region, their
growth over the region's wall time is the rank's ``contention``: 0-1% in a quiet world here,
7-68% with one core taken by another process. ``/proc/pressure/cpu`` (PSI, where the kernel has
it) adds the machine's own view: the share of the region in which some task waited for a CPU.

Reading costs two small file reads per region, outside the timed loop. Where the files are
absent (not Linux, old kernels) every figure is None and nothing is judged on it.
"""
from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass

SCHEDSTAT = "/proc/thread-self/schedstat"
TASKS = "/proc/self/task"
PRESSURE = "/proc/pressure/cpu"
_RUSAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def thread_wait_ns() -> int | None:
    """Nanoseconds this thread has waited on a run queue since it started."""
    text = _read(SCHEDSTAT)
    return int(text.split()[1]) if text else None


def process_times_ns() -> tuple[int, int] | None:
    """(running, waiting) nanoseconds summed over every thread of this process: for kernels
    whose work runs in a library's thread pool (TensorFlow), not in the calling thread."""
    try:
        tids = os.listdir(TASKS)
    except OSError:
        return None
    run = wait = 0
    for tid in tids:
        text = _read(f"{TASKS}/{tid}/schedstat")
        if text:
            fields = text.split()
            run += int(fields[0])
            wait += int(fields[1])
    return run, wait


def pressure_us() -> int | None:
    """Microseconds in which some task waited for a CPU ('some total=' of PSI)."""
    text = _read(PRESSURE)
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("some"):
            for field in line.split():
                if field.startswith("total="):
                    return int(field[6:])
    return None


@dataclass
class Probe:
    """Start before a timed region, ``stop()`` after it; ``pause()`` and ``start()`` leave out
    what runs between (the canary between blocks of a loop), so the figures cover the timed
    regions only. ``scope='thread'``: the calling thread (a host allreduce loop);
    ``'process'``: every thread, waiting time over runnable time (a training step whose work
    runs in a thread pool)."""

    scope: str = "thread"

    def __post_init__(self):
        self._wall = 0.0
        self._ran = self._waited = 0  # ns (ran: process scope only)
        self._psi: int | None = 0
        self._nivcsw = 0
        self._counted = True  # every region read its scheduler figures
        self._running = False
        self.start()

    def _marks(self):
        return (time.perf_counter(),
                thread_wait_ns() if self.scope == "thread" else process_times_ns(),
                pressure_us(), resource.getrusage(_RUSAGE).ru_nivcsw)

    def start(self) -> None:
        self._at = self._marks()
        self._running = True

    def pause(self) -> None:
        if not self._running:
            return
        t, wait, psi, nivcsw = self._marks()
        t0, wait0, psi0, nivcsw0 = self._at
        self._wall += t - t0
        self._nivcsw += nivcsw - nivcsw0
        if wait is None or wait0 is None:
            self._counted = False
        elif self.scope == "thread":
            self._waited += wait - wait0
        else:
            self._ran += wait[0] - wait0[0]
            self._waited += wait[1] - wait0[1]
        self._psi = None if psi is None or psi0 is None or self._psi is None else self._psi + psi - psi0
        self._running = False

    @property
    def timed_s(self) -> float:
        """Seconds of the regions measured so far (paused time left out)."""
        return self._wall

    def stop(self) -> dict[str, float | None]:
        """{'contention': fraction, 'cpu_pressure': fraction, 'involuntary_switches': count}
        over the regions measured since the probe was made."""
        self.pause()
        wall = self._wall
        contention = None
        if self._counted and self.scope == "thread" and wall > 0:
            contention = self._waited / 1e9 / wall
        elif self._counted and self.scope == "process":
            total = self._ran + self._waited
            contention = self._waited / total if total > 0 else 0.0
        pressure = self._psi / 1e6 / wall if self._psi is not None and wall > 0 else None
        return {"contention": contention, "cpu_pressure": pressure,
                "involuntary_switches": self._nivcsw, "contention_scope": self.scope}


def world_view(per_rank: Sequence[dict]) -> dict[str, float | None]:
    """The world's figures from every rank's ``Probe.stop()``: the most contended rank (one
    waiting rank holds up every collective), the highest pressure, the switches summed."""
    def most(key):
        vals = [r[key] for r in per_rank if r.get(key) is not None]
        return float(max(vals)) if vals else None

    out = {"contention": most("contention"), "cpu_pressure": most("cpu_pressure"),
           "contention_scope": per_rank[0].get("contention_scope", "thread") if per_rank else "thread",
           "involuntary_switches": int(sum(r.get("involuntary_switches") or 0 for r in per_rank))}
    if any("canary_us" in r for r in per_rank):
        out["canary_us"] = most("canary_us")
    return out
