"""The small interface every allreduce transport implements (nccl-tests' per-collective part).

The kernel owns warm-up, timing, gathering and validation; a transport supplies only buffers,
the call itself and a way to wait for it. Host transports use numpy; GPU transports use CuPy
and override ``time_one`` with CUDA events.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np


class AllreduceTransport:
    """Base: numpy buffers, host clock. Subclasses implement ``allreduce``."""

    name = "base"
    xp: Any = np  # the array module of this transport's buffers

    _clock = staticmethod(time.perf_counter)

    def __init__(self, comm, options: dict | None = None):
        self.comm = comm
        self.options = dict(options or {})

    def alloc(self, count: int, dtype: str):
        return self.xp.zeros(count, dtype=dtype)

    def fill(self, buf, host_values: np.ndarray) -> None:
        buf[...] = self.xp.asarray(host_values)

    def to_host(self, buf) -> np.ndarray:
        return np.asarray(buf)

    def allreduce(self, send, recv) -> None:
        """Sum ``send`` over all ranks into ``recv``; ``recv is send`` means in place."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait until the last call's result is in ``recv`` (device transports)."""

    def time_one(self, send, recv) -> float:
        t0 = time.perf_counter()
        self.allreduce(send, recv)
        self.sync()
        return time.perf_counter() - t0

    def describe(self) -> dict:
        """Facts worth storing with the result (e.g. which path a GPU ring took)."""
        return {}
