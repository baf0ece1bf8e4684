"""``mpi``: MPI_Allreduce on numpy buffers, the MPI library's own algorithm.

Its timed loop runs in C when the launching side could build the native loop for this MPI
(``transports/native.py``; option ``host_timing``): the barrier, clock reads and call are then
C's, as in OMB or nccl-tests, and a 4-byte call is timed without the ~0.5 us (here) that a
Python call into mpi4py adds. Otherwise, or with ``host_timing python``, the kernel's mpi4py loop times it;
``timing`` says which, and ``timing_why`` why not the native one.
"""
from __future__ import annotations

from . import native
from .base import AllreduceTransport


class MpiAllreduce(AllreduceTransport):
    name = "mpi"

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        from mpi4py import MPI

        # Bound once: every attribute lookup inside the timed call is harness overhead that
        # `perfsuite overhead` charges against the C loop.
        self._allreduce, self._in_place, self._sum = comm.Allreduce, MPI.IN_PLACE, MPI.SUM
        if self.options.get("host_timing", "auto") == "python":
            loop, why = None, "the mpi4py loop was asked for (host_timing python)"
        else:
            loop, why = native.open_loop(self.options.get("native_loop"), comm)
        self.native, self.timing_why = native.agree(comm, loop, why)
        self.timing = "native" if self.native is not None else "python"
        self.native_note = (self.options.get("native_loop") or {}).get("note")  # e.g. rebuilt

    def reordered(self, comm) -> AllreduceTransport:
        return type(self)(comm, self.options)

    def allreduce(self, send, recv) -> None:
        if recv is send:
            self._allreduce(self._in_place, recv, self._sum)
        else:
            self._allreduce(send, recv, self._sum)

    def time_one(self, send, recv) -> float:
        # The base class's generic path (a sync call per iteration) costs a few hundred ns of
        # Python on a slow host; host buffers need no sync, so time the call alone.
        clock = self._clock
        t0 = clock()
        self.allreduce(send, recv)
        return clock() - t0

    def describe(self) -> dict:
        facts = {"timing": self.timing}
        if self.native is not None:
            facts["native_loop"] = self.native.path
        if self.timing_why:
            facts["timing_why"] = self.timing_why
        if self.native_note and self.native is not None:
            facts["native_note"] = self.native_note
        return facts
