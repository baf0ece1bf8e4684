"""``nccl``: NCCL's collectives through ``cupy.cuda.nccl``, one GPU per rank.

Rank 0 makes the NCCL unique id and broadcasts it over MPI (the usual bootstrap); NCCL then
builds its own rings/trees over NVLink, PCIe or the network. NCCL refuses two ranks on one
GPU, so that case is reported as unavailable (on every rank together) instead of crashing.

Every collective is issued as nccl-tests' ``RunColl`` issues it: allreduce, all_gather (send
count c/n), reduce_scatter (recv count c/n), broadcast (one buffer: send is recv), reduce, and
alltoall as a group of one ncclSend and one ncclRecv per peer at byte offsets p x c/n x size
(the native loop calls ncclAlltoAll instead where the loaded NCCL has it, >= 2.28, as nccl-tests
does), and alltoallv as nccl-tests' alltoallv issues it: the same group with each peer's own
counts and offsets from the split matrix (``peer_plan``), a zero count issuing nothing. Per ``bind`` the call's NCCL type and op enums and root are looked up once (``plan``), so a
timed call is one CuPy method call with its pointers and count.

Timing (option ``device_timing``, base.TIMINGS): ``auto`` times each batch with the native loop
(transports/native_nccl.py: C issues the batch between one pair of CUDA events) where the
launching side built it and every rank could load it, else with the Python batch and the reason
in ``timing_why``; ``native-batch`` insists on the loop (an agreed skip without it); ``batch``,
``per-call`` and ``graph`` as for every device transport.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..records.errors import TransportUnavailable
from ..records.model import FP8
from . import native_nccl
from ..records.model import DTYPES
from .base import COLLECTIVES, OPS, Call, peer_counts
from .gpu import GpuTransport, agree

#: NCCL's own enum values (nccl.h: ncclDataType_t, ncclRedOp_t), used where CuPy lacks the
#: constant (NCCL_BFLOAT16 and NCCL_AVG in older CuPy, the fp8 types in every CuPy so far);
#: bfloat16 buffers hold uint16 in CuPy, fp8 buffers uint8: NCCL reads the bytes as the enum says.
NCCL_TYPES = {"float32": ("NCCL_FLOAT32", 7), "float64": ("NCCL_FLOAT64", 8),
              "float16": ("NCCL_FLOAT16", 6), "bfloat16": ("NCCL_BFLOAT16", 9), "int32": ("NCCL_INT32", 2),
              "float8_e4m3": ("NCCL_FLOAT8E4M3", 10), "float8_e5m2": ("NCCL_FLOAT8E5M2", 11)}
FP8_ENUMS = {"float8_e4m3": "ncclFloat8e4m3", "float8_e5m2": "ncclFloat8e5m2"}  # nccl.h's words
NCCL_OPS = {"sum": ("NCCL_SUM", 0), "prod": ("NCCL_PROD", 1), "max": ("NCCL_MAX", 2),
            "min": ("NCCL_MIN", 3), "avg": ("NCCL_AVG", 4)}
#: NCCL_VERSION codes: ncclFloat8e4m3 and ncclFloat8e5m2 came with 2.24 (2.24.3), ncclAvg and
#: ncclBfloat16 with 2.10, ncclSend/ncclRecv with 2.7.
NCCL_2_24, NCCL_2_10, NCCL_2_7 = 22400, 21000, 2700
#: NCCL reduces fp8 (sum, prod, min, max, avg, all of them) only where every rank's GPU is
#: sm90 or newer; it moves fp8 (all_gather, broadcast, alltoall) on any (enqueue.cc's taskAppend:
#: "FP8 reduction support begins with sm90 capable devices", ncclInvalidArgument).
FP8_REDUCE_SM = 90
REDUCING = ("allreduce", "reduce_scatter", "reduce")


def version_text(code: int) -> str:
    """NCCL's version code as x.y.z (codes below 2.9 were x*1000 + y*100 + z)."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


@dataclass(frozen=True)
class NcclPlan:
    """What one bound call passes NCCL, looked up once per ``bind``."""

    collective: str
    code: int  # the native loop's collective code (native_nccl.CODES); -1: the loop has none
    type: Any  # ncclDataType_t (CuPy's constant, else NCCL's enum value)
    op: Any  # ncclRedOp_t (sum for the collectives that take none)
    root: int


def plan(call: Call, nccl: Any = None) -> NcclPlan:
    """Pure: the NCCL arguments of ``call`` (``nccl``: CuPy's module, for its constants)."""
    tname, tvalue = NCCL_TYPES[call.dtype]
    oname, ovalue = NCCL_OPS[call.op if call.collective in REDUCING else "sum"]
    return NcclPlan(call.collective, native_nccl.CODES.get(call.collective, -1), getattr(nccl, tname, tvalue),
                    getattr(nccl, oname, ovalue), call.root)


def counts(collective: str, send_size: int, recv_size: int, n: int, itemsize: int) -> tuple[int, int]:
    """Pure: (NCCL's count argument, alltoall's bytes between peers' chunks) for buffers of
    ``send_size`` and ``recv_size`` elements (base.Call's layout): all_gather's count is what each
    rank sends, reduce_scatter's what each receives, alltoall's what goes to each peer."""
    if collective == "reduce_scatter":
        return recv_size, 0
    if collective == "alltoall":
        chunk = send_size // n
        return chunk, chunk * itemsize
    if collective == "broadcast":
        return recv_size, 0
    return send_size, 0


def peer_plan(splits: tuple[tuple[int, ...], ...], rank: int, itemsize: int
              ) -> tuple[tuple[int, int, int, int, int], ...]:
    """Pure: alltoallv's ncclSend/ncclRecv of ``rank``, one row per peer: (peer, send byte
    offset, send count, recv byte offset, recv count); both buffers are packed in peer order."""
    sc, sd, rc, rd = peer_counts(splits, rank)
    return tuple((p, sd[p] * itemsize, sc[p], rd[p] * itemsize, rc[p]) for p in range(len(sc)))


def nccl_lacks(call: Call, dtype: str, version: int, min_sm: int | None = None) -> str | None:
    """Pure: why the loaded NCCL (``version``, its code; 0 when unknown) cannot make ``call`` on
    GPUs whose oldest is ``min_sm`` (compute capability x 10; None when unknown)."""
    if dtype not in NCCL_TYPES:
        return f"nccl has no {dtype} here (it runs {', '.join(NCCL_TYPES)})"
    if dtype in FP8:
        if version and version < NCCL_2_24:
            return f"{FP8_ENUMS[dtype]} needs NCCL >= 2.24; this NCCL is {version_text(version)}"
        if min_sm is not None and min_sm < FP8_REDUCE_SM and call.collective in REDUCING:
            return (f"NCCL reduces fp8 only on sm90 or newer GPUs (Hopper on); this world's oldest is "
                    f"sm{min_sm} ({dtype} moves there: all_gather, broadcast, alltoall)")
    if version and version < NCCL_2_10:
        if dtype == "bfloat16":
            return f"ncclBfloat16 needs NCCL >= 2.10; this NCCL is {version_text(version)}"
        if call.op == "avg" and call.collective in REDUCING:
            return f"ncclAvg needs NCCL >= 2.10; this NCCL is {version_text(version)}"
    if version and version < NCCL_2_7 and call.collective in ("alltoall", "alltoallv"):
        return (f"{call.collective} needs ncclSend/ncclRecv, NCCL >= 2.7; this NCCL is "
                f"{version_text(version)}")
    return None


class NcclAllreduce(GpuTransport):
    name = "nccl"
    bfloat16 = True  # ncclBfloat16 (NCCL >= 2.10: nccl_lacks says)
    fp8 = True  # ncclFloat8e4m3, ncclFloat8e5m2 (NCCL >= 2.24, reductions on sm90: nccl_lacks says)
    graph_capture = True  # a call is NCCL kernels on our stream: a batch can be a CUDA graph
    native_timing = True  # a C loop can issue its batches (device_timing auto / native-batch)
    collectives = COLLECTIVES
    reduce_ops = OPS

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
        self._version = int(self.facts["nccl_version"] or 0)
        self._stream = self.ops.stream.ptr
        self._peers = range(self.n)
        self.nccl_loop: native_nccl.NcclLoop | None = None
        self.bind(Call())
        if self.timing == "native-batch":
            self._open_loop()

    def _open_loop(self) -> None:
        """The native loop on every rank, or on none: the Python batch with the reason (auto),
        or an agreed skip (native-batch asked for)."""
        loop, why = native_nccl.open_loop(self.options.get(native_nccl.OPTION))
        loop, why = native_nccl.agree(self.comm, loop, why)
        if loop is None:
            if self.options.get("device_timing") == "native-batch":
                raise TransportUnavailable(f"device timing native-batch: {why}")
            self.timing, self.timing_why = "batch", why
            self.facts.update(timing="batch", timing_why=why)
            return
        self.nccl_loop = loop
        self.facts.update(loop.describe())
        note = (self.options.get(native_nccl.OPTION) or {}).get("note")
        if note:
            self.facts["native_note"] = note

    def lacks(self, call: Call, dtype: str) -> str | None:
        why = super().lacks(call, dtype) or nccl_lacks(call, dtype, self._version, self.facts.get("min_sm"))
        if why is None and call.collective not in native_nccl.CODES \
                and self.options.get("device_timing") == "native-batch":
            why = f"device timing native-batch: the native NCCL loop has no {call.collective}"
        return why

    def bind(self, call: Call) -> None:
        super().bind(call)
        self._plan = p = plan(call, self._nccl)
        self._type, self._op, self._root = p.type, p.op, p.root
        if call.splits:
            self._v = peer_plan(call.splits, self.rank, DTYPES[call.dtype])
        if self.nccl_loop is not None:  # the loop's collectives, else the Python batch, saying why
            native = p.code >= 0
            self.timing = "native-batch" if native else "batch"
            self.timing_why = "" if native else f"the native NCCL loop has no {call.collective}"

    # One method per collective, each one CuPy call (alltoall: a group of them), nccl-tests' way.

    def allreduce(self, send, recv) -> None:
        self._comm.allReduce(send.data.ptr, recv.data.ptr, send.size, self._type, self._op, self._stream)

    def all_gather(self, send, recv) -> None:
        self._comm.allGather(send.data.ptr, recv.data.ptr, send.size, self._type, self._stream)

    def reduce_scatter(self, send, recv) -> None:
        self._comm.reduceScatter(send.data.ptr, recv.data.ptr, recv.size, self._type, self._op, self._stream)

    def broadcast(self, send, recv) -> None:
        ptr = recv.data.ptr  # one buffer: the root's is the source
        self._comm.broadcast(ptr, ptr, recv.size, self._type, self._root, self._stream)

    def reduce(self, send, recv) -> None:
        self._comm.reduce(send.data.ptr, recv.data.ptr, send.size, self._type, self._op, self._root,
                          self._stream)

    def alltoall(self, send, recv) -> None:
        comm, t, stream, nccl = self._comm, self._type, self._stream, self._nccl
        chunk = send.size // self.n
        step = chunk * send.itemsize
        s, r = send.data.ptr, recv.data.ptr
        nccl.groupStart()
        try:
            for p in self._peers:
                comm.send(s + p * step, chunk, t, p, stream)
                comm.recv(r + p * step, chunk, t, p, stream)
        finally:
            nccl.groupEnd()  # a group left open would swallow the next call

    def alltoallv(self, send, recv) -> None:
        comm, t, stream, nccl = self._comm, self._type, self._stream, self._nccl
        s, r = send.data.ptr, recv.data.ptr
        nccl.groupStart()
        try:
            for p, s_off, s_count, r_off, r_count in self._v:
                if s_count:
                    comm.send(s + s_off, s_count, t, p, stream)
                if r_count:
                    comm.recv(r + r_off, r_count, t, p, stream)
        finally:
            nccl.groupEnd()

    def time_batch(self, send, recv, calls: int) -> float:
        if self.nccl_loop is not None and self._plan.code >= 0:
            p = self._plan
            count, peer_bytes = counts(p.collective, send.size, recv.size, self.n, recv.itemsize)
            turn, copies = self.next_turn(calls)
            return self.nccl_loop.batch(self._comm.comm, p.code, send.data.ptr, recv.data.ptr, count,
                                        peer_bytes, p.type, p.op, p.root, self.n, self._stream, calls,
                                        copies, self._stride, turn)
        if self.timing != "graph":
            return super().time_batch(send, recv, calls)
        stream = self.ops.stream
        views = self._views or [(send, recv)]
        key = (send.data.ptr, recv.data.ptr, send.size, recv.size, self.bound, len(views), calls)
        graph = self._graphs.get(key)
        if graph is None:
            self.ops.synchronize()
            if any(k[:-1] != key[:-1] for k in self._graphs):
                self._graphs.clear()  # graphs of other buffers or calls: their addresses are gone
            call = self._call
            stream.begin_capture()
            try:
                for i in range(calls):  # the graph holds the rotation through the copies
                    call(*views[i % len(views)])
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
            loop, self.nccl_loop = self.nccl_loop, None
            if loop is not None:
                loop.close()
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
