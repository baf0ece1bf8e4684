"""How a rank issues one captured call again on a transport: the MPI library's collectives
through mpi4py on numpy buffers (``mpi``), or torch.distributed's on tensors (``torch-gloo``,
``torch-nccl``, ``torch-mpi``), each on the call's own process group.

Each call gets buffers of its own sizes and dtype, cut from one pool per dtype (the largest
call's), and works in place where c10d's op does (allreduce, broadcast, reduce), as the job's
did. Values: the collectives' records' exact inputs for the checked pass; zeros while timed,
so an in-place sum cannot grow call on call into infinities (a reduction's speed does not
depend on its values, but a float's special cases may).

Every issued call is also described as issued (kind, dtype, sizes, splits, group read back
from the buffers and the communicator handed to the library), so a test compares the replay
with the capture, not with the plan.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ... import collectives
from ...collectives import as_type, rank_values, reduced
from ...collectives.alltoall import chunk_values
from ...records import trace as traces
from ...records.errors import TransportUnavailable
from ...records.trace import Comm
from ...transports.base import Call
from ...transports.torch.allreduce import torch_lacks

#: c10d's ops -> torch.distributed's ReduceOp names.
TORCH_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "avg": "AVG"}
MPI_OPS = {"sum": "SUM", "prod": "PROD", "min": "MIN", "max": "MAX"}


def factor(kind: str, n: int) -> float:
    """nccl-tests' busbw factor of a kind over a group of n (its collective's record)."""
    return 0.0 if kind == "barrier" else collectives.get(kind).busbw_factor(n)


def bus_bytes(c: Comm, n: int) -> float:
    return c.nbytes() * factor(c.kind, n)


def expected_values(c: Comm, gr: int, gn: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(what this rank sends, what it must hold after the call; None: nothing to check), exact,
    from the collectives' records; ``gr`` is this rank's place in the group of ``gn``."""
    op = c.op or "sum"
    if c.kind == "allreduce":
        return rank_values(gr, c.in_count, op), reduced(gn, c.in_count, op)
    if c.kind in ("all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall"):
        rec = collectives.get(c.kind)
        return (rec.inputs(gr, gn, c.in_count, op, c.root),
                rec.expected(gr, gn, c.out_count, op, c.root))
    if c.kind == "alltoallv":
        ins, outs = traces.splits_of(c, gn)
        send = np.concatenate([chunk_values(gr, p, gn, k) for p, k in enumerate(ins)] or [np.zeros(0)])
        want = np.concatenate([chunk_values(q, gr, gn, k) for q, k in enumerate(outs)] or [np.zeros(0)])
        return send, want
    return None, None


class Issuer:
    """One rank's calls on one transport family; subclasses make groups, buffers and calls."""

    def __init__(self, comm, trace: traces.Trace):
        self.comm, self.rank, self.n = comm, comm.Get_rank(), comm.Get_size()
        self.trace = trace
        self.pools: dict[tuple[str, str], object] = {}
        #: The calls as made, described from what was handed over (None: not kept, while timed).
        self.issued: list[tuple] | None = []
        self.notes: list[str] = []  # how this transport made a call other than the trace says

    def made_as(self, c: Comm) -> Comm:
        """The call as this transport makes it (the same, where it has what the trace asks)."""
        return c

    # buffers
    def pool(self, which: str, dtype: str, count: int):
        buf = self.pools.get((which, dtype))
        if buf is None or self.length(buf) < count:
            buf = self.pools[(which, dtype)] = self.alloc(max(count, 1), dtype)
        return self.view(buf, count)

    def prepare(self, c: Comm):
        """(send, recv) views for call ``c`` (recv is send for in-place kinds)."""
        if c.kind in ("allreduce", "broadcast", "reduce"):
            buf = self.pool("recv", c.dtype, c.out_count or c.in_count)
            return buf, buf
        return self.pool("send", c.dtype, c.in_count), self.pool("recv", c.dtype, c.out_count)

    def zero(self) -> None:
        for buf in self.pools.values():
            self.fill(buf, np.zeros(self.length(buf)))

    def check(self, c: Comm, gr: int, gn: int, corrupt: bool = False) -> bool | None:
        """Issue ``c`` once from the record's inputs and compare what it left: True, False, or
        None where nothing is defined to check (a barrier, reduce's non-root, bool buffers)."""
        send, recv = self.prepare(c)
        given, want = expected_values(self.made_as(c), gr, gn)
        if given is not None and c.dtype != "bool":
            self.fill(send, as_type(given, c.dtype))
        self.call(c, send, recv)
        self.sync()
        if want is None or c.dtype == "bool":
            return None
        got = self.to_host(recv)[:len(want)]
        if corrupt and got.size:
            got = got.copy()
            got[0] += 1
        return bool(np.array_equal(got, as_type(want, c.dtype)))

    # the transport family's part
    def alloc(self, count: int, dtype: str): raise NotImplementedError
    def length(self, buf) -> int: raise NotImplementedError
    def view(self, buf, count: int): raise NotImplementedError
    def fill(self, buf, values: np.ndarray) -> None: raise NotImplementedError
    def to_host(self, buf) -> np.ndarray: raise NotImplementedError
    def call(self, c: Comm, send, recv) -> None: raise NotImplementedError
    def sync(self) -> None: pass
    def close(self) -> None: pass


class MpiIssuer(Issuer):
    """mpi4py on numpy buffers; a sub-group is a communicator split from the world's (every
    rank splits for every group, in the trace's order, as MPI_Comm_split needs)."""

    def __init__(self, comm, trace: traces.Trace):
        super().__init__(comm, trace)
        from mpi4py import MPI

        from ...transports.mpi_calls import bfloat16_type

        from mpi4py.util.dtlib import from_numpy_dtype

        self.MPI, self.mpi_type = MPI, from_numpy_dtype
        self.bf16 = bfloat16_type()
        self.comms = {tuple(range(self.n)): comm}
        for group in trace.groups():
            sub = comm.Split(0 if self.rank in group else MPI.UNDEFINED,
                             group.index(self.rank) if self.rank in group else 0)
            if self.rank in group:
                self.comms[group] = sub
        for rt in trace.ranks:
            for c in rt.comms:
                why = self.lacks(c)
                if why:
                    raise TransportUnavailable(why)
        avg = sum(1 for c in trace.ranks[self.rank].comms if self.made_as(c) is not c)
        if avg:
            self.notes.append(f"{avg} avg reductions per rank made as sums: MPI has no average (the bytes "
                              "moved are the same; the division is the job's compute)")

    def made_as(self, c: Comm) -> Comm:
        return replace(c, op="sum") if c.op == "avg" else c

    def lacks(self, c: Comm) -> str | None:
        if c.kind in ("allreduce", "reduce_scatter", "reduce") and (c.op or "sum") not in MPI_OPS | {"avg": ""}:
            return f"MPI has no {c.op} reduction (the trace's {c.kind} asks for it); torch-gloo has it"
        if c.dtype == "bfloat16" and self.bf16 is None:
            return "this MPI defines no MPI_BFLOAT16_T and the trace holds bfloat16 calls; replay it on torch-gloo"
        if c.dtype == "float16" and c.kind in ("allreduce", "reduce_scatter", "reduce"):
            return "MPI has no float16 reduction and the trace reduces float16; replay it on torch-gloo"
        return None

    def alloc(self, count, dtype):
        return np.zeros(count, dtype=traces_storage(dtype))

    def length(self, buf):
        return buf.shape[0]

    def view(self, buf, count):
        return buf[:count]

    def fill(self, buf, values):
        buf[...] = values

    def to_host(self, buf):
        return np.asarray(buf)

    def typed(self, buf):
        return [buf, self.bf16] if buf.dtype == np.uint16 and self.bf16 is not None else buf

    def call(self, c: Comm, send, recv) -> None:
        comm = self.comms[c.ranks(self.n)]
        MPI, t = self.MPI, self.typed
        op = getattr(MPI, MPI_OPS.get(self.made_as(c).op or "sum", "SUM"))
        kind = c.kind
        if kind == "allreduce":
            comm.Allreduce(MPI.IN_PLACE, t(recv), op)
        elif kind == "all_gather":
            comm.Allgather(t(send), t(recv))
        elif kind == "reduce_scatter":
            comm.Reduce_scatter_block(t(send), t(recv), op)
        elif kind == "alltoall":
            comm.Alltoall(t(send), t(recv))
        elif kind == "alltoallv":
            ins, outs = traces.splits_of(c, comm.Get_size())
            mpi_type = self.bf16 if send.dtype == np.uint16 and self.bf16 is not None else self.mpi_type(send.dtype)
            comm.Alltoallv([send, (list(ins), _displs(ins)), mpi_type], [recv, (list(outs), _displs(outs)), mpi_type])
        elif kind == "broadcast":
            comm.Bcast(t(recv), c.root)
        elif kind == "reduce":
            comm.Reduce(MPI.IN_PLACE if comm.Get_rank() == c.root else t(recv),
                        t(recv) if comm.Get_rank() == c.root else None, op, c.root)
        elif kind == "barrier":
            comm.Barrier()
        if self.issued is not None:
            self.issued.append(_described(kind, send, recv, comm.Get_group().Translate_ranks(
                list(range(comm.Get_size())), self.comm.Get_group()), c))

    def close(self) -> None:
        for group, sub in self.comms.items():
            if sub is not self.comm:
                sub.Free()


class TorchIssuer(Issuer):
    """torch.distributed on tensors of the world's group (already started) and of a group per
    sub-group the trace names (``new_group``, made by every rank in the trace's order)."""

    def __init__(self, comm, trace: traces.Trace, dist, torch, device, backend: str):
        super().__init__(comm, trace)
        self.dist, self.torch, self.device = dist, torch, device
        for rt in trace.ranks:  # what the backend lacks (torch_lacks: from versions alone), on every rank
            for c in rt.comms:
                if c.kind != "barrier":
                    call = Call("alltoall" if c.kind == "alltoallv" else c.kind, c.op or "sum", dtype=c.dtype)
                    why = torch_lacks(backend, str(torch.__version__), call, c.dtype)
                    if why:
                        raise TransportUnavailable(f"{why} (the trace's {c.kind} asks for it)")
        self.groups = {tuple(range(self.n)): None}
        for group in trace.groups():
            self.groups[group] = dist.new_group(list(group))
        self.ops = {k: getattr(dist.ReduceOp, v, None) for k, v in TORCH_OPS.items()}
        self.all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self.reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        self.dtypes = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
                       "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64,
                       "uint8": torch.uint8, "int8": torch.int8, "bool": torch.bool}

    def alloc(self, count, dtype):
        return self.torch.zeros(count, dtype=self.dtypes[dtype], device=self.device)

    def length(self, buf):
        return buf.shape[0]

    def view(self, buf, count):
        return buf[:count]

    def fill(self, buf, values):
        host = np.ascontiguousarray(values)
        if buf.dtype == self.torch.bfloat16:
            src = self.torch.from_numpy(host.astype(np.uint16, copy=False).view(np.int16)).view(self.torch.bfloat16)
        else:
            src = self.torch.from_numpy(host.astype(_numpy_of(buf.dtype, self.torch), copy=False))
        buf.copy_(src)

    def to_host(self, buf):
        if buf.dtype == self.torch.bfloat16:
            return buf.cpu().view(self.torch.int16).numpy().view(np.uint16)
        return buf.cpu().numpy()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def call(self, c: Comm, send, recv) -> None:
        ranks = c.ranks(self.n)
        group, dist = self.groups[ranks], self.dist
        op = self.ops.get(c.op or "sum") or self.ops["sum"]
        kind = c.kind
        if kind == "allreduce":
            dist.all_reduce(recv, op=op, group=group)
        elif kind == "all_gather":
            self.all_gather(recv, send, group=group)
        elif kind == "reduce_scatter":
            self.reduce_scatter(recv, send, op=op, group=group)
        elif kind == "alltoall":  # even: no split sizes, as the job called it
            dist.all_to_all_single(recv, send, group=group)
        elif kind == "alltoallv":
            ins, outs = traces.splits_of(c, len(ranks))
            dist.all_to_all_single(recv, send, list(outs), list(ins), group=group)
        elif kind == "broadcast":
            dist.broadcast(recv, src=ranks[c.root], group=group)
        elif kind == "reduce":
            dist.reduce(recv, dst=ranks[c.root], op=op, group=group)
        elif kind == "barrier":
            dist.barrier(group=group)
        if self.issued is not None:
            members = tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(self.n))
            self.issued.append(_described(kind, send, recv, members, c))

    def close(self) -> None:
        for group in self.groups.values():
            if group is not None:
                self.dist.destroy_process_group(group)


def _displs(counts) -> list[int]:
    return [int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]])] if len(counts) else []


def traces_storage(dtype: str) -> str:
    """The numpy dtype a host buffer of a trace's ``dtype`` is held in (bfloat16 as its bits)."""
    return {"bfloat16": "uint16"}.get(dtype, dtype)


def _numpy_of(torch_dtype, torch) -> str:
    return {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
            torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8", torch.int8: "int8",
            torch.bool: "bool"}[torch_dtype]


def _described(kind: str, send, recv, group, c: Comm) -> tuple:
    """What was handed to the library, in ``Comm.shape``'s terms: the buffers' dtype and element
    counts, the group's global ranks, the splits passed."""
    name = str(recv.dtype).removeprefix("torch.")  # a tensor's torch.float32, an array's float32
    dtype = "bfloat16" if name == "uint16" else name  # numpy holds bfloat16 as its bits
    in_count = int(send.shape[0]) if kind not in ("barrier",) else 0
    out_count = int(recv.shape[0]) if kind not in ("barrier",) else 0
    if kind in ("allreduce", "broadcast", "reduce"):
        in_count = out_count
    splits = traces.splits_of(c, len(group)) if kind == "alltoallv" else (None, None)
    return (kind, dtype, in_count, out_count, tuple(int(g) for g in group), *splits)
