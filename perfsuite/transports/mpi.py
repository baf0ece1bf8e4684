"""``mpi``: the MPI library's own collectives (MPI_Allreduce, MPI_Allgather,
MPI_Reduce_scatter_block, MPI_Alltoall, MPI_Bcast, MPI_Reduce, MPI_Alltoallv) on numpy buffers.

Its timed loop runs in C when the launching side could build the native loop for this MPI
(``transports/native.py``; option ``host_timing``): the barrier, clock reads and call are then
C's, as in OMB or nccl-tests, and a 4-byte call is timed without what a Python call into
mpi4py adds. Otherwise, or with ``host_timing python``, the kernel's mpi4py loop times it;
``timing`` says which, and ``timing_why`` why not the native one.
"""
from __future__ import annotations

from . import native
from .base import AllreduceTransport, Call
from .mpi_calls import COLLECTIVES, MPI_OPS, MpiCalls, mpi_lacks


class MpiAllreduce(AllreduceTransport):
    name = "mpi"
    bfloat16 = True  # where MPI defines MPI_BFLOAT16_T: mpi_lacks says
    collectives = COLLECTIVES
    reduce_ops = tuple(MPI_OPS)

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        from mpi4py import MPI

        # Bound once: every attribute lookup inside the timed call is harness overhead that
        # `perfsuite overhead` charges against the C loop.
        self._allreduce, self._in_place, self._sum = comm.Allreduce, MPI.IN_PLACE, MPI.SUM
        self._calls = MpiCalls(comm)
        if self.options.get("host_timing", "auto") == "python":
            loop, why = None, "the mpi4py loop was asked for (host_timing python)"
        else:
            loop, why = native.open_loop(self.options.get("native_loop"), comm)
        self.native, self.timing_why = native.agree(comm, loop, why)
        self.timing = "native" if self.native is not None else "python"
        self.native_note = (self.options.get("native_loop") or {}).get("note")  # e.g. rebuilt

    def reordered(self, comm) -> AllreduceTransport:
        return type(self)(comm, self.options)

    def lacks(self, call: Call, dtype: str) -> str | None:
        return mpi_lacks(call, dtype) or super().lacks(call, dtype)

    def bind(self, call: Call) -> None:
        self._calls.bind(call)
        if self.native is not None:
            self.native.bind(call)
        super().bind(call)
        if call.collective == "allreduce" and call.op == "sum":  # the fastest path, as before
            self._call = self.allreduce
        else:
            self._call = getattr(self._calls, call.collective)

    def allreduce(self, send, recv) -> None:
        """MPI_Allreduce with MPI_SUM (``bind`` routes other ops to ``MpiCalls``)."""
        if recv is send:
            self._allreduce(self._in_place, recv, self._sum)
        else:
            self._allreduce(send, recv, self._sum)

    def all_gather(self, send, recv) -> None:
        self._calls.all_gather(send, recv)

    def reduce_scatter(self, send, recv) -> None:
        self._calls.reduce_scatter(send, recv)

    def alltoall(self, send, recv) -> None:
        self._calls.alltoall(send, recv)

    def alltoallv(self, send, recv) -> None:
        self._calls.alltoallv(send, recv)

    def broadcast(self, send, recv) -> None:
        self._calls.broadcast(send, recv)

    def reduce(self, send, recv) -> None:
        self._calls.reduce(send, recv)

    def time_one(self, send, recv) -> float:
        # The base class's generic path (a sync call per iteration) costs a few hundred ns of
        # Python on a slow host; host buffers need no sync, so time the call alone.
        clock, call = self._clock, self._call
        t0 = clock()
        call(send, recv)
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
