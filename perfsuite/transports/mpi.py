"""``mpi``: mpi4py ``Allreduce`` on numpy buffers, the MPI library's own algorithm."""
from __future__ import annotations

from .base import AllreduceTransport


class MpiAllreduce(AllreduceTransport):
    name = "mpi"

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        from mpi4py import MPI

        # Bound once: every attribute lookup inside the timed call is harness overhead that
        # `perfsuite overhead` charges against the C loop.
        self._allreduce, self._in_place, self._sum = comm.Allreduce, MPI.IN_PLACE, MPI.SUM

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
