"""``nccl``: NCCL allreduce through ``cupy.cuda.nccl``, one GPU per rank.

Rank 0 makes the NCCL unique id and broadcasts it over MPI (the usual bootstrap); NCCL then
builds its own rings/trees over NVLink, PCIe or the network. NCCL refuses two ranks on one
GPU, so that case is reported as unavailable (on every rank together) instead of crashing.
"""
from __future__ import annotations

from .gpu import GpuTransport, agree

_NCCL_TYPES = {"float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
               "float16": "NCCL_FLOAT16", "int32": "NCCL_INT32"}


class NcclAllreduce(GpuTransport):
    name = "nccl"
    graph_capture = True  # a call is one NCCL kernel on our stream: a batch can be a CUDA graph

    def __init__(self, comm, options=None):
        super().__init__(comm, options)
        nccl, reason = None, None
        if self.ops.name != "cupy":
            reason = "nccl needs CuPy device buffers (array_module=cupy)"
        else:
            try:
                from cupy.cuda import nccl
            except ImportError as exc:
                reason = f"cupy.cuda.nccl cannot be imported ({exc})"
            else:
                if not getattr(nccl, "available", True):
                    reason = "CuPy has no NCCL here (pip install nvidia-nccl-cu12, or -cu13)"
        if reason is None and self.facts.get("ranks_per_gpu", 1) > 1:
            reason = (f"NCCL needs one GPU per rank, but {self.facts['ranks_per_gpu']} ranks share "
                      "a GPU; use world sizes up to the number of GPUs")
        agree(comm, reason)
        self._nccl = nccl
        self._comm = bootstrap(comm, nccl, self.rank, self.n)  # NCCL's version: fingerprint
        self._graphs: dict[tuple, object] = {}
        self.facts["nccl_version"] = getattr(nccl, "get_version", lambda: None)()

    def allreduce(self, send, recv) -> None:
        nccl = self._nccl
        dtype = getattr(nccl, _NCCL_TYPES[str(send.dtype)])
        self._comm.allReduce(send.data.ptr, recv.data.ptr, send.size, dtype, nccl.NCCL_SUM,
                             self.ops.stream.ptr)

    def time_batch(self, send, recv, calls: int) -> float:
        if self.timing != "graph":
            return super().time_batch(send, recv, calls)
        stream = self.ops.stream
        key = (send.data.ptr, recv.data.ptr, send.size, str(send.dtype), calls)
        graph = self._graphs.get(key)
        if graph is None:
            self.ops.synchronize()
            if any(k[:4] != key[:4] for k in self._graphs):
                self._graphs.clear()  # graphs of other buffers: their addresses are gone
            stream.begin_capture()
            try:
                for _ in range(calls):
                    self.allreduce(send, recv)
            finally:
                graph = stream.end_capture()  # ends the capture even when a call raised
            graph.upload(stream)  # so the first timed launch does not pay for the upload
            self._graphs[key] = graph  # a batch of another length (a block's last) keeps its own
        self.ops.synchronize()
        self._timer.start()
        graph.launch(stream)
        return self._timer.stop()

    def close(self) -> None:
        """Called after the kernel's final barrier, so no rank is still inside a call; NCCL's
        own resources go now, not whenever the garbage collector gets to them."""
        self._graphs.clear()
        comm, self._comm = self._comm, None
        if comm is not None:
            self.ops.synchronize()
            comm.destroy()


def bootstrap(comm, nccl, rank: int, n: int):
    """Collective: rank 0's unique id over MPI, then the NCCL communicator. A failure of either
    (no network interface NCCL can use, a /dev/shm too small in a container) is agreed, so every
    rank skips with the reason instead of one rank aborting the world."""
    uid, reason = None, None
    if rank == 0:
        try:
            uid = nccl.get_unique_id()
        except nccl.NcclError as exc:
            reason = f"NCCL could not make its unique id ({exc})"
    agree(comm, reason)
    uid = comm.bcast(uid, root=0)
    try:
        made = nccl.NcclCommunicator(n, uid, rank)
    except nccl.NcclError as exc:
        made, reason = None, (f"NCCL could not build its communicator ({exc}); NCCL_DEBUG=INFO "
                              "says why (in a container, a small /dev/shm is a common cause)")
    agree(comm, reason)
    return made
