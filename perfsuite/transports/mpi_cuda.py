"""``mpi-cuda``: mpi4py's collectives straight on CuPy buffers; needs a CUDA-aware MPI.

mpi4py hands the device pointer (``__cuda_array_interface__``) to MPI, which must know it is
device memory; a non-CUDA-aware MPI would read it as host memory and crash, so the transport
asks first (``cuda_aware.mpi_cuda_aware``) and every rank reports "unavailable" together otherwise.
Every collective is ``MpiCalls``' (the call ``mpi`` and ``mpi-staged`` make), after the stream is
waited for: MPI reads the buffers outside CuPy's stream order.
"""
from __future__ import annotations

from .base import COLLECTIVES, Call
from .cuda_aware import mpi_cuda_aware
from .gpu import GpuTransport, agree
from .mpi_calls import MPI_OPS, MpiCalls, mpi_lacks


class MpiCudaAllreduce(GpuTransport):
    name = "mpi-cuda"
    bfloat16 = True  # where MPI defines MPI_BFLOAT16_T: mpi_lacks says
    collectives = COLLECTIVES
    reduce_ops = tuple(MPI_OPS)

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        # Asked even on host arrays (tests): it is this transport's precondition, not the array's.
        aware, how = mpi_cuda_aware()
        agree(comm, None if aware else
              f"MPI is not CUDA-aware ({how}); mpi-staged measures the copy-through-host path")
        self.facts["cuda_aware"] = how
        self._mpi = MpiCalls(comm)
        self.bind(Call())

    def lacks(self, call: Call, dtype: str) -> str | None:
        return mpi_lacks(call, dtype) or super().lacks(call, dtype)

    def bind(self, call: Call) -> None:
        super().bind(call)
        self._mpi.bind(call)

    def allreduce(self, send, recv) -> None:
        self.ops.synchronize()
        self._mpi.allreduce(send, recv)

    def all_gather(self, send, recv) -> None:
        self.ops.synchronize()
        self._mpi.all_gather(send, recv)

    def reduce_scatter(self, send, recv) -> None:
        self.ops.synchronize()
        self._mpi.reduce_scatter(send, recv)

    def alltoall(self, send, recv) -> None:
        self.ops.synchronize()
        self._mpi.alltoall(send, recv)

    def alltoallv(self, send, recv) -> None:
        self.ops.synchronize()
        self._mpi.alltoallv(send, recv)

    def broadcast(self, send, recv) -> None:
        self.ops.synchronize()
        self._mpi.broadcast(send, recv)

    def reduce(self, send, recv) -> None:
        self.ops.synchronize()
        self._mpi.reduce(send, recv)
