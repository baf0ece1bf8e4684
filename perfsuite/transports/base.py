"""The small interface every allreduce transport implements (nccl-tests' per-collective part).

The kernel owns warm-up, timing, gathering and validation; a transport supplies only buffers,
the call itself and a way to wait for it. Host transports use numpy; GPU transports use CuPy
and override ``time_one`` with CUDA events.

Everything a kernel may ask of a transport is declared on ``AllreduceTransport`` with the host
answer, and a kernel reads it as a plain attribute: a transport changes an answer by setting
it, never by leaving a name out for the kernel to probe.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np


#: How a device transport's calls are timed (option ``device_timing``):
#: - ``batch`` (default, nccl-tests): after warm-up, a batch of calls enqueued back to back
#:   between one pair of CUDA events; a sample is the batch's mean per call;
#: - ``per-call``: an event pair around each barrier-separated call (includes Python dispatch);
#: - ``graph``: the batch captured once as a CUDA graph and launched between the events
#:   (transports whose call is device work only: ``nccl``).
TIMINGS = ("batch", "per-call", "graph")


class AllreduceTransport:
    """Base: numpy buffers, host clock. Subclasses implement ``allreduce``."""

    name = "base"
    xp: Any = np  # the array module of this transport's buffers
    # Device transports: one of TIMINGS. Host transports time each barrier-separated call in a
    # loop: "python" (the kernel's mpi4py loop) or "native" (``native``'s C loop, ``mpi`` only).
    timing: str = "python"
    timing_why: str = ""  # why not the native loop, where it was wanted ("" when it is used or not wanted)
    native: Any = None  # transports/native.NativeLoop when the C loop times this transport's calls
    clock: str = "host"  # what reads the time: the host clock, or CUDA events on the device
    # Buffers in host memory, and a call is done when it returns: an injected slowdown spins
    # inline, inside the timed call. False for device buffers, whose calls are timed by events
    # on the device: the slowdown is spun after the call instead.
    host_buffers: bool = True

    _clock = staticmethod(time.perf_counter)

    def __init__(self, comm, options: dict | None = None):
        self.comm = comm
        self.options = dict(options or {})

    def reordered(self, comm) -> "AllreduceTransport | None":
        """This transport over ``comm``, the same ranks in another order (collective), or None
        where it cannot be made twice in one world (a framework's process group): the straggler
        rule's second rank order, which tells a slow node from its partner on a slow link."""
        return None

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

    def time_batch(self, send, recv, calls: int) -> float:
        """Seconds for ``calls`` calls issued back to back and then waited for (nccl-tests)."""
        t0 = time.perf_counter()
        for _ in range(calls):
            self.allreduce(send, recv)
        self.sync()
        return time.perf_counter() - t0

    def copy_bandwidth(self) -> float | None:
        """This rank's buffer memory's copy bandwidth (GB/s), measured by transports whose
        buffers live on a device; None: the kernel measures the host's itself."""
        return None

    def close(self) -> None:
        """After the last case, on every rank: release what the transport holds."""

    def describe(self) -> dict:
        """Facts worth storing with the result (e.g. which path a GPU ring took)."""
        return {}
