"""One case's buffers on a rank, as its collective's record lays them out (send inside recv in
place, copies for a device batch to rotate through), the call it is bound to, and the checks of
what the calls left there against the record's exact values. The timed loop that uses them is
``kernels/allreduce``'s; the yardstick's too.
"""
from __future__ import annotations

import numpy as np

from ... import collectives
from ...collectives import Collective, as_type
from ...records.errors import ConfigError, TransportUnavailable
from ...records.model import DTYPES, Case
from ...transports.base import Call
from ..context import RankContext


class Buffers:
    """One case's buffers on this rank, as its collective's record lays them out, and the
    exact values they must hold: ``send`` is a slice of ``recv`` in place where the record
    says so (all_gather's chunk at rank x c/n), ``recv`` itself where it is the whole buffer."""

    def __init__(self, transport, coll: Collective, call: Call, case: Case, rank: int, n: int,
                 copies: int = 1):
        self.transport, self.coll, self.call, self.rank, self.n = transport, coll, call, rank, n
        self.send_count, self.recv_count = coll.buffers(case.size_bytes or 0, case.dtype, n, call.splits)
        # An irregular collective's values follow from its split matrix (alltoallv).
        self.split = {"matrix": call.splits} if coll.splits is not None else {}
        self.dtype = case.dtype
        # ``copies`` of both buffers one stride apart (the larger buffer's length, nccl-tests'
        # shift), for batches that rotate through them; copy 0 is the one warmed up and checked.
        stride = max(self.send_count, self.recv_count)
        whole = self.send_count == self.recv_count
        offset = coll.inplace_offset(rank, n, self.recv_count) if call.inplace else 0
        if copies == 1 and call.inplace:
            self.recv = transport.alloc(stride, case.dtype)
            self.send = self.recv if whole and offset == 0 else self.recv[offset:offset + self.send_count]
            self.views = [(self.send, self.recv)]
        elif copies == 1:
            self.send = transport.alloc(self.send_count, case.dtype)
            self.recv = transport.alloc(self.recv_count, case.dtype)
            self.views = [(self.send, self.recv)]
        else:
            recv_all = transport.alloc(copies * stride, case.dtype)
            send_all = recv_all if call.inplace else transport.alloc(copies * stride, case.dtype)
            self.views = []
            for k in range(copies):
                recv = recv_all[k * stride:k * stride + self.recv_count]
                send = (recv if call.inplace and whole and offset == 0 else
                        send_all[k * stride + offset:k * stride + offset + self.send_count])
                self.views.append((send, recv))
            self.send, self.recv = self.views[0]
        self.stride_bytes = stride * DTYPES[case.dtype]
        # The bytes this rank allocated for the case, as laid out above.
        if copies == 1:
            count = stride if call.inplace else self.send_count + self.recv_count
        else:
            count = copies * stride * (1 if call.inplace else 2)
        self.nbytes = count * DTYPES[case.dtype]

    def inputs(self, stable: bool = False) -> None:
        """Fill send with this rank's values (in place and ``stable``: ones whose result every
        call leaves unchanged, where the record has such)."""
        c, call = self.coll, self.call
        if stable and call.inplace and c.stable_inputs is not None:
            values = c.stable_inputs(self.rank, self.n, self.send_count, call.op, dtype=self.dtype)
        else:
            values = c.inputs(self.rank, self.n, self.send_count, call.op, call.root, dtype=self.dtype, **self.split)
        values = as_type(values, self.dtype)
        for send, recv in self.views:
            if call.inplace and send is not recv:
                self.transport.fill(recv, as_type(np.zeros(self.recv_count), self.dtype))
            self.transport.fill(send, values)

    def expected(self, timed: bool) -> np.ndarray | None:
        """What recv must hold after the timed loop (``timed``) or after one fresh call; None:
        nothing to check there (an unstable in-place loop, or a rank whose recv is undefined)."""
        c, call = self.coll, self.call
        if timed and call.inplace:
            if not c.inplace_stable:
                return None
            if c.stable_expected is not None:
                return as_type(c.stable_expected(self.n, self.recv_count, call.op, dtype=self.dtype), self.dtype)
        want = c.expected(self.rank, self.n, self.recv_count, call.op, call.root, dtype=self.dtype, **self.split)
        return None if want is None else as_type(want, self.dtype)

    def check(self, timed: bool, corrupt: bool) -> bool | None:
        """This rank's result right (True), wrong (False) or not checked here (None). A rank
        whose recv is undefined (reduce's non-root) checks out of place that its send is intact."""
        want = self.expected(timed)
        if want is not None:
            return same(self.transport.to_host(self.recv), want, corrupt)
        if not self.call.inplace and self.coll.expected(self.rank, self.n, self.recv_count, self.call.op,
                                                       self.call.root, dtype=self.dtype, **self.split) is None:
            sent = self.coll.inputs(self.rank, self.n, self.send_count, self.call.op, self.call.root,
                                    dtype=self.dtype, **self.split)
            return same(self.transport.to_host(self.send), as_type(sent, self.dtype), corrupt)
        return None


#: At most this many copies of a case's buffers for a batch to rotate through: nccl-tests
#: rotates through as many as fit in the sweep's largest buffer, but below a few KiB every copy
#: sits in cache anyway, and each copy is filled and checked.
MAX_COPIES = 64


def copies_of(transport, coll: Collective, case: Case, n: int, largest: int, batch: int) -> int:
    """How many copies of the buffers this case's batches rotate through: nccl-tests' steps
    (the sweep's largest buffer over this case's), where the transport rotates its batches."""
    if not transport.rotates or batch <= 1:
        return 1
    size = coll.sizes(case.size_bytes or 0, case.dtype, n, case_matrix(coll, case, n))["size_bytes"]
    return max(1, min(largest // max(size, 1), MAX_COPIES))


def case_matrix(coll: Collective, case: Case, n: int) -> collectives.Matrix:
    """The split matrix the case's variant names (alltoallv); () for a regular collective."""
    return coll.matrix(case.size_bytes or 0, case.dtype, n, collectives.splits_of(case.variant))


def bind_case(transport, coll: Collective, case: Case, inplace: bool, n: int) -> Call:
    """The call this case makes, bound on the transport; a call the transport cannot make, or
    whose result could not be checked exactly (fp8 past its ranks), skips the world with the
    reason (every rank finds the same)."""
    op, root = collectives.op_root(case.variant)
    if root >= n:
        raise ConfigError(f"root {root} is not a rank of a world of {n}; give --root below {n}")
    wants_inplace = inplace or coll.one_buffer
    if wants_inplace and coll.inplace_offset is None:
        raise TransportUnavailable(f"{coll.name} has no in-place form here (NCCL has none for "
                                   "alltoall nor nccl-tests for alltoallv; MPI and NCCL place "
                                   "reduce_scatter's result apart)")
    call = Call(coll.name, op if coll.reduces else "sum", root if coll.rooted else 0, wants_inplace, case.dtype,
                case_matrix(coll, case, n))
    why = transport.lacks(call, case.dtype) or collectives.inexact(call.op, case.dtype, n, coll.reduces)
    if why:
        raise TransportUnavailable(why)
    transport.bind(call)
    return call


def transport_set(ctx: RankContext) -> str:
    """The registry key of this world's transport: its collective's own (``all_gather:nccl``)."""
    name = ctx.cases[0].benchmark if ctx.cases else "allreduce"
    return name if collectives.find(name) else "allreduce"


def same(got: np.ndarray, want: np.ndarray, corrupt: bool = False) -> bool:
    """Exact equality; ``corrupt`` (a fault switch) flips one value first, to show a wrong
    result is caught."""
    if corrupt and got.size:
        got = got.copy()
        got[0] += 1
    return bool(np.array_equal(got, want))
