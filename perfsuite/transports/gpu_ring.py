"""``gpu-ring``: the seed's ring on device buffers. Baidu's ring allreduce (the same schedule as
``ring``: ``ring.ring_allreduce``) with every reduction a CuPy kernel on the device, and the
scratch and staging buffers allocated once and cached across calls (grown only for a larger
size), so a timed call never allocates.

What it does not reproduce: the seed also cached each buffer's CUDA pointer attributes. Here
mpi4py takes each chunk's pointer from ``__cuda_array_interface__`` on every call, and a
CUDA-aware MPI looks up whether that pointer is device memory itself (UCX keeps its own cache
of that answer); neither lookup can be skipped from Python.

Two paths, and ``describe()`` says which ran (``ring_path``):
- ``direct``: MPI ``Sendrecv`` on device pointers; needs a CUDA-aware MPI;
- ``staged``: each step copies the outgoing chunk to a pinned host buffer, exchanges host
  buffers, and copies the incoming chunk back; works with any MPI.
Option ``ring_path``: ``auto`` (direct where MPI is CUDA-aware, else staged), ``direct``, ``staged``.
"""
from __future__ import annotations

from ..records.errors import ConfigError
from .cuda_aware import mpi_cuda_aware
from .gpu import BufferCache, GpuTransport, agree
from .ring import ring_allreduce

RING_PATHS = ("auto", "direct", "staged")


def choose_path(requested: str, cuda_aware: bool) -> tuple[str, str | None]:
    """Pure: (path to run, reason it cannot run or None)."""
    if requested not in RING_PATHS:
        raise ConfigError(f"ring_path {requested!r} is unknown; choose from {', '.join(RING_PATHS)}")
    if requested == "auto":
        return ("direct" if cuda_aware else "staged"), None
    if requested == "direct" and not cuda_aware:
        return requested, "gpu-ring ring_path=direct needs a CUDA-aware MPI"
    return requested, None


class GpuRingAllreduce(GpuTransport):
    name = "gpu-ring"
    _TAG = 8

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        self.right, self.left = (self.rank + 1) % self.n, (self.rank - 1) % self.n
        if self.ops.name == "numpy":
            aware, how = True, "host arrays: MPI reads them directly"
        else:
            aware, how = mpi_cuda_aware(need="pt2pt")  # Sendrecv only; the adds are ours
        path, reason = choose_path(str(self.options.get("ring_path", "auto")), aware)
        agree(comm, f"{reason} ({how})" if reason else None)
        self.path = path
        self._sendrecv = self._sendrecv_direct if path == "direct" else self._sendrecv_staged
        self.scratch = BufferCache(self.ops.empty)
        self.host_send = BufferCache(self.ops.host_empty)
        self.host_recv = BufferCache(self.ops.host_empty)
        self.facts.update(ring_path=path, cuda_aware=how,
                          reduction="cupy.add kernel" if self.ops.name == "cupy" else "numpy.add")

    def _sendrecv_direct(self, send, recv) -> None:
        # The chunk we send may have been reduced by a kernel still running on the stream.
        self.ops.synchronize()
        self.comm.Sendrecv(send, dest=self.right, sendtag=self._TAG,
                           recvbuf=recv, source=self.left, recvtag=self._TAG)

    def _sendrecv_staged(self, send, recv) -> None:
        hs = self.host_send.get(send.shape[0], send.dtype)
        hr = self.host_recv.get(recv.shape[0], recv.dtype)
        self.ops.to_host(send, hs)  # waits for the stream
        self.comm.Sendrecv(hs, dest=self.right, sendtag=self._TAG,
                           recvbuf=hr, source=self.left, recvtag=self._TAG)
        self.ops.to_device(hr, recv)
        self.ops.synchronize()  # hr is refilled by the next step's Sendrecv

    def allreduce(self, send, recv) -> None:
        if recv is not send:
            self.ops.copy(recv, send)
        count = recv.shape[0]
        scratch = self.scratch.get(-(-count // self.n), recv.dtype)  # one chunk
        ring_allreduce(recv, self.rank, self.n, scratch, self._sendrecv, self.ops.add_into)
