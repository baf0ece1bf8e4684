"""The clock through which the pytest face hands measured per-iteration times to
pytest-benchmark, so its statistics are the ranks' times, never the time to start a world."""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


class ReplayClock:
    """A clock for pytest-benchmark that, while replaying, advances by measured durations.

    pytest-benchmark reads the clock before and after each round; during ``replay(times)`` the
    k-th round therefore lasts exactly ``times[k]``. Outside a replay it is ``perf_counter``,
    so ordinary benchmarks that happen to share the marker are timed normally.
    """

    def __init__(self) -> None:
        self._times: list[float] | None = None
        self._now = 0.0
        self._reads = 0

    @contextmanager
    def replay(self, times: Sequence[float]) -> Iterator[None]:
        self._times, self._now, self._reads = list(times), 0.0, 0
        try:
            yield
        finally:
            self._times = None

    def __call__(self) -> float:
        if self._times is None:
            return time.perf_counter()
        if self._reads % 2 == 1:  # the read that ends a round
            self._now += self._times[self._reads // 2]
        self._reads += 1
        return self._now

    __name__ = "perfsuite_replay_clock"  # pytest-benchmark prints the timer's name


REPLAY_CLOCK = ReplayClock()
