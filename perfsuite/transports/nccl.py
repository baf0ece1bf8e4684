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
        uid = nccl.get_unique_id() if self.rank == 0 else None
        uid = comm.bcast(uid, root=0)
        self._comm = nccl.NcclCommunicator(self.n, uid, self.rank)  # NCCL's version: fingerprint

    def allreduce(self, send, recv) -> None:
        nccl = self._nccl
        dtype = getattr(nccl, _NCCL_TYPES[str(send.dtype)])
        self._comm.allReduce(send.data.ptr, recv.data.ptr, send.size, dtype, nccl.NCCL_SUM,
                             self.ops.stream.ptr)
