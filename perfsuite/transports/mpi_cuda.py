"""``mpi-cuda``: mpi4py ``Allreduce`` straight on CuPy buffers; needs a CUDA-aware MPI.

mpi4py hands the device pointer (``__cuda_array_interface__``) to MPI, which must know it is
device memory; a non-CUDA-aware MPI would read it as host memory and crash, so the transport
asks first (``cuda_aware.mpi_cuda_aware``) and every rank reports "unavailable" together otherwise.
"""
from __future__ import annotations

from .cuda_aware import mpi_cuda_aware
from .gpu import GpuTransport, agree


class MpiCudaAllreduce(GpuTransport):
    name = "mpi-cuda"

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        # Asked even on host arrays (tests): it is this transport's precondition, not the array's.
        aware, how = mpi_cuda_aware()
        agree(comm, None if aware else
              f"MPI is not CUDA-aware ({how}); mpi-staged measures the copy-through-host path")
        self.facts["cuda_aware"] = how

    def allreduce(self, send, recv) -> None:
        from mpi4py import MPI

        self.ops.synchronize()  # MPI reads the buffer outside CuPy's stream order
        if recv is send:
            self.comm.Allreduce(MPI.IN_PLACE, recv, op=MPI.SUM)
        else:
            self.comm.Allreduce(send, recv, op=MPI.SUM)
