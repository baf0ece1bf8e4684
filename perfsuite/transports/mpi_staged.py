"""``mpi-staged``: device-to-host copy, the host MPI collective, host-to-device copy.

What a stack without CUDA-aware MPI does (and what Horovod did before NCCL). Every collective
goes through ``MpiCalls`` (the same mpi4py call ``mpi`` and ``mpi-cuda`` make) on pinned host
buffers, allocated once per dtype and grown only for a larger size, so the timed loop measures
copies and MPI, never allocation. What is copied is what the call reads and writes: send's
elements down, recv's up (all_gather in place: this rank's slice down, the whole buffer up;
broadcast: the root's buffer down, every other rank's up; reduce: the result up at the root only).
"""
from __future__ import annotations

from .base import COLLECTIVES, Call
from .gpu import BufferCache, GpuTransport
from .mpi_calls import MPI_OPS, MpiCalls, mpi_lacks


class MpiStagedAllreduce(GpuTransport):
    name = "mpi-staged"
    bfloat16 = True  # where MPI defines MPI_BFLOAT16_T: mpi_lacks says
    collectives = COLLECTIVES
    reduce_ops = tuple(MPI_OPS)

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        self._host_send = BufferCache(self.ops.host_empty)
        self._host_recv = BufferCache(self.ops.host_empty)
        self._mpi = MpiCalls(comm)
        self.bind(Call())
        self.facts["path"] = "D2H copy, the host MPI collective, H2D copy (pinned host buffers)"

    def lacks(self, call: Call, dtype: str) -> str | None:
        return mpi_lacks(call, dtype) or super().lacks(call, dtype)

    def bind(self, call: Call) -> None:
        super().bind(call)
        self._mpi.bind(call)

    def _down(self, buf):
        """A pinned host copy of device buffer ``buf`` (waits for the stream: buf is complete)."""
        host = self._host_send.get(buf.shape[0], buf.dtype)
        self.ops.to_host(buf, host)
        return host

    def _up(self, host, buf) -> None:
        """``host`` into device buffer ``buf``, done before the next call refills ``host``."""
        self.ops.to_device(host, buf)
        self.ops.synchronize()

    def _recv(self, buf):
        return self._host_recv.get(buf.shape[0], buf.dtype)

    def allreduce(self, send, recv) -> None:
        hs = self._down(send)
        if recv is send:
            self._mpi.allreduce(hs, hs)  # in place
            self._up(hs, recv)
        else:
            hr = self._recv(recv)
            self._mpi.allreduce(hs, hr)
            self._up(hr, recv)

    def all_gather(self, send, recv) -> None:
        hr = self._recv(recv)
        if self.bound.inplace:  # send is recv's slice at rank x c/n: that slice goes down
            k = send.shape[0]
            self.ops.to_host(send, hr[self.rank * k:(self.rank + 1) * k])
            self._mpi.all_gather(None, hr)
        else:
            self._mpi.all_gather(self._down(send), hr)
        self._up(hr, recv)

    def reduce_scatter(self, send, recv) -> None:
        hr = self._recv(recv)
        self._mpi.reduce_scatter(self._down(send), hr)
        self._up(hr, recv)

    def alltoall(self, send, recv) -> None:
        hr = self._recv(recv)
        self._mpi.alltoall(self._down(send), hr)
        self._up(hr, recv)

    def alltoallv(self, send, recv) -> None:
        hr = self._recv(recv)
        self._mpi.alltoallv(self._down(send), hr)
        k = sum(self._mpi.v_recv[0])  # what MPI wrote: the pad beyond stays the device's zeros
        self._up(hr[:k], recv[:k])

    def broadcast(self, send, recv) -> None:
        hr = self._recv(recv)
        root = self._mpi.is_root
        if root:
            self.ops.to_host(recv, hr)
        self._mpi.broadcast(hr, hr)
        if not root:
            self._up(hr, recv)

    def reduce(self, send, recv) -> None:
        hs = self._down(send)
        hr = hs if recv is send else self._recv(recv)  # in place: the root's buffer is both
        self._mpi.reduce(hs, hr)
        if self._mpi.is_root:
            self._up(hr, recv)
