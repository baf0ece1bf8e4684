"""``mpi``: mpi4py ``Allreduce`` on numpy buffers, the MPI library's own algorithm."""
from __future__ import annotations

from .base import AllreduceTransport


class MpiAllreduce(AllreduceTransport):
    name = "mpi"

    def allreduce(self, send, recv) -> None:
        from mpi4py import MPI

        if recv is send:
            self.comm.Allreduce(MPI.IN_PLACE, recv, op=MPI.SUM)
        else:
            self.comm.Allreduce(send, recv, op=MPI.SUM)
