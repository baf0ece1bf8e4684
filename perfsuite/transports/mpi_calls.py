"""The MPI call of each collective through mpi4py, on the buffers a transport hands it (numpy
arrays, or CuPy arrays for a CUDA-aware MPI): one place for ``mpi``'s Python loop, ``mpi-staged``
and ``mpi-cuda``, so the three time the same call as the native loop does in C."""
from __future__ import annotations

from ..records.model import FP8
from .base import Call, peer_counts

#: MPI has no average: nccl-tests' avg is NCCL's own op (ncclAvg).
MPI_OPS = {"sum": "SUM", "prod": "PROD", "min": "MIN", "max": "MAX"}
COLLECTIVES = ("allreduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "alltoallv")


def mpi_lacks(call: Call, dtype: str) -> str | None:
    """Why MPI cannot make this call (one line), or None."""
    from mpi4py import MPI

    if call.collective in ("allreduce", "reduce_scatter", "reduce") and call.op not in MPI_OPS:
        return f"MPI has no {call.op} reduction (it has {', '.join(MPI_OPS)}; avg is NCCL's ncclAvg)"
    if dtype in FP8:
        return f"MPI defines no fp8 datatype, so {dtype} has no MPI type to reduce or move; fp8 runs on nccl"
    if dtype == "bfloat16" and bfloat16_type() is None:
        return (f"this MPI defines no MPI_BFLOAT16_T ({MPI.Get_library_version().splitlines()[0].strip()}); "
                "bfloat16 runs on torch-gloo, torch-nccl and nccl")
    return None


def bfloat16_type():
    """MPI 4.1's MPI_BFLOAT16_T where this MPI defines it, else None (MPICH 5.0 has it null)."""
    from mpi4py import MPI

    t = getattr(MPI, "BFLOAT16_T", MPI.DATATYPE_NULL)
    return None if t == MPI.DATATYPE_NULL else t


class MpiCalls:
    """The bound call as mpi4py methods, looked up once per case (``bind``): each attribute
    lookup inside the timed call is harness overhead."""

    def __init__(self, comm):
        from mpi4py import MPI

        self.comm, self.MPI = comm, MPI
        self.in_place = MPI.IN_PLACE
        self.rank = comm.Get_rank()
        self.bind(Call())

    def bind(self, call: Call) -> None:
        self.call = call
        self.op = getattr(self.MPI, MPI_OPS.get(call.op, "SUM"))
        self.root = call.root
        self.is_root = self.rank == call.root
        self.bf16 = bfloat16_type() if call.dtype == "bfloat16" else None
        if call.splits:  # alltoallv: this rank's (counts, displacements), sent and received
            sc, sd, rc, rd = peer_counts(call.splits, self.rank)
            self.v_send, self.v_recv = (sc, sd), (rc, rd)
        c, wrap = self.comm, self.typed
        # Only the bound collective's method is looked up: a communicator may have no other
        # (a test's stand-in; a training transport's that only sums).
        name = {"allreduce": "Allreduce", "all_gather": "Allgather", "reduce_scatter": "Reduce_scatter_block",
                "alltoall": "Alltoall", "broadcast": "Bcast", "reduce": "Reduce",
                "alltoallv": "Alltoallv"}[call.collective]
        method = getattr(c, name)
        if self.bf16 is None:
            self.method = method
            return
        # bfloat16: every buffer typed, a few lookups more per call, for bfloat16 only
        place = self.in_place
        self.method = {
            "Allreduce": lambda s, r, op: method(s if s is place else wrap(s), wrap(r), op),
            "Allgather": lambda s, r: method(s if s is place else wrap(s), wrap(r)),
            "Reduce_scatter_block": lambda s, r, op: method(wrap(s), wrap(r), op),
            "Alltoall": lambda s, r: method(wrap(s), wrap(r)),
            "Alltoallv": method,  # alltoallv names the type in its buffer specs itself
            "Bcast": lambda b, root: method(wrap(b), root),
            "Reduce": lambda s, r, op, root: method(s if s is place else wrap(s), wrap(r), op, root),
        }[name]

    def typed(self, buf):
        """bfloat16's uint16 arrays with MPI's bfloat16 type named (mpi4py would infer a uint16)."""
        return [buf, self.bf16] if self.bf16 is not None and buf is not None else buf

    def allreduce(self, send, recv) -> None:
        self.method(self.in_place if recv is send else send, recv, self.op)

    def all_gather(self, send, recv) -> None:
        self.method(self.in_place if self.call.inplace else send, recv)

    def reduce_scatter(self, send, recv) -> None:
        self.method(send, recv, self.op)

    def alltoall(self, send, recv) -> None:
        self.method(send, recv)

    def alltoallv(self, send, recv) -> None:
        if self.bf16 is None:
            self.method([send, self.v_send], [recv, self.v_recv])
        else:
            self.method([send, self.v_send, self.bf16], [recv, self.v_recv, self.bf16])

    def broadcast(self, send, recv) -> None:
        self.method(recv, self.root)

    def reduce(self, send, recv) -> None:
        if recv is send:  # in place: the root's buffer is both; the others send theirs
            self.method(self.in_place if self.is_root else recv, recv if self.is_root else None,
                        self.op, self.root)
        else:
            self.method(send, recv, self.op, self.root)
