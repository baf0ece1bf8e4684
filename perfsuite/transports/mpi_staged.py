"""``mpi-staged``: device-to-host copy, host MPI ``Allreduce``, host-to-device copy.

What a stack without CUDA-aware MPI does (and what Horovod did before NCCL). The host buffers
are pinned, allocated once per dtype and grown only for a larger size, so the timed loop
measures copies and MPI, never allocation.
"""
from __future__ import annotations

from .gpu import BufferCache, GpuTransport


class MpiStagedAllreduce(GpuTransport):
    name = "mpi-staged"

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        self._host_send = BufferCache(self.ops.host_empty)
        self._host_recv = BufferCache(self.ops.host_empty)
        self.facts["path"] = "D2H copy, host MPI_Allreduce, H2D copy (pinned host buffers)"

    def allreduce(self, send, recv) -> None:
        from mpi4py import MPI

        count = send.shape[0]
        hs = self._host_send.get(count, send.dtype)
        self.ops.to_host(send, hs)  # waits for the stream: send is complete on the device
        if recv is send:
            self.comm.Allreduce(MPI.IN_PLACE, hs, op=MPI.SUM)
            self.ops.to_device(hs, recv)
        else:
            hr = self._host_recv.get(count, recv.dtype)
            self.comm.Allreduce(hs, hr, op=MPI.SUM)
            self.ops.to_device(hr, recv)
        # The next call overwrites the pinned buffers, so the H2D copy must be done before it.
        self.ops.synchronize()
