"""The small interface every allreduce transport implements (nccl-tests' per-collective part).

The kernel owns warm-up, timing, gathering and validation; a transport supplies only buffers,
the call itself and a way to wait for it. Host transports use numpy; GPU transports use CuPy
and override ``time_one`` with CUDA events.

Everything a kernel may ask of a transport is declared on ``AllreduceTransport`` with the host
answer, and a kernel reads it as a plain attribute: a transport changes an answer by setting
it, never by leaving a name out for the kernel to probe.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..records.model import FP8, storage_dtype

#: The collectives a kernel can ask for, nccl-tests' names (one record each in perfsuite/bench/).
COLLECTIVES = ("allreduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "alltoallv")
#: Reduction ops, nccl-tests' names (``-o``); a transport lists those its library has.
OPS = ("sum", "prod", "min", "max", "avg")


@dataclass(frozen=True)
class Call:
    """What one timed call is: the collective, its reduction op, its root (broadcast and
    reduce) and whether it works in place. Buffers, by collective (``c`` = the case's count
    rounded down to a multiple of the world size ``n``, as nccl-tests does):

    - allreduce: send c, recv c (in place: send is recv);
    - all_gather: send c/n, recv c (in place: send is recv's slice at rank x c/n);
    - reduce_scatter: send c, recv c/n (rank r gets the reduction of chunk r);
    - alltoall: send c, recv c (chunk p of send goes to rank p; chunk q of recv came from q);
    - broadcast: one buffer, c (send is recv; the root's is the source);
    - reduce: send c, recv c; only the root's recv is defined (in place: send is recv);
    - alltoallv: send the total, recv the largest receive total over ranks; rank i sends
      ``splits[i][j]`` elements to rank j, packed in peer order (``peer_counts``).
    """

    collective: str = "allreduce"
    op: str = "sum"
    root: int = 0
    inplace: bool = False
    dtype: str = "float32"  # the element type (bfloat16's and fp8's host arrays hold their bits)
    #: alltoallv's split matrix (``collectives.Matrix``): the same on every rank, so each
    #: transport reads its own row and column at ``bind``; () for every other collective.
    splits: tuple[tuple[int, ...], ...] = ()


def peer_counts(splits: tuple[tuple[int, ...], ...], rank: int
                ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(send counts, send displacements, recv counts, recv displacements) of ``rank`` in an
    alltoallv of ``splits``, in elements, MPI_Alltoallv's arguments: what it sends to each peer
    packed in peer order, what it receives from each sender likewise."""
    send = tuple(int(c) for c in splits[rank])
    recv = tuple(int(row[rank]) for row in splits)
    return send, _displacements(send), recv, _displacements(recv)


def _displacements(counts: tuple[int, ...]) -> tuple[int, ...]:
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return tuple(out)


#: How a device transport's calls are timed (option ``device_timing``; its default, ``auto``,
#: is ``native-batch`` where the transport has a C loop and every rank loads it, else ``batch``
#: with the reason in ``timing_why``; gpu.DEVICE_TIMINGS). What a sample records:
#: - ``batch`` (nccl-tests' shape): after warm-up, a batch of calls enqueued back to back by
#:   Python between one pair of CUDA events; a sample is the batch's mean per call;
#: - ``per-call``: an event pair around each barrier-separated call (includes Python dispatch);
#: - ``graph``: the batch captured once as a CUDA graph and launched between the events
#:   (transports whose call is device work only: ``nccl``);
#: - ``native-batch``: the batch issued by a C loop between the events, no Python between the
#:   calls (``nccl``: transports/native_nccl.py). A line of its own beside ``batch``: a fallback
#:   from one to the other is never read as a step.
TIMINGS = ("batch", "per-call", "graph", "native-batch")


class AllreduceTransport:
    """Base: numpy buffers, host clock. Subclasses implement ``allreduce``."""

    name = "base"
    xp: Any = np  # the array module of this transport's buffers
    # Device transports: one of TIMINGS. Host transports time each barrier-separated call in a
    # loop: "python" (the kernel's mpi4py loop) or "native" (``native``'s C loop, ``mpi`` only).
    timing: str = "python"
    timing_why: str = ""  # why not the native loop, where it was wanted ("" when it is used or not wanted)
    native: Any = None  # transports/native.NativeLoop when the C loop times this transport's calls
    clock: str = "host"  # what reads the time: the host clock, or CUDA events on the device
    # Buffers in host memory, and a call is done when it returns: an injected slowdown spins
    # inline, inside the timed call. False for device buffers, whose calls are timed by events
    # on the device: the slowdown is spun after the call instead.
    host_buffers: bool = True
    # Whose run-queue wait says the world was contended (kernels/contention.Probe): "thread",
    # the calling thread, where the call runs; "process" where the library runs the call on its
    # own thread pool (TensorFlow's collectives, torch's process-group workers): on a small
    # machine those threads wait for one another by design, which says nothing of other load,
    # so the figure is recorded and not judged (rounds.contention_of), as for training steps.
    contention_scope: str = "thread"

    _clock = staticmethod(time.perf_counter)

    def __init__(self, comm, options: dict | None = None):
        self.comm = comm
        self.options = dict(options or {})
        self._call = self.allreduce

    def reordered(self, comm) -> "AllreduceTransport | None":
        """This transport over ``comm``, the same ranks in another order (collective), or None
        where it cannot be made twice in one world (a framework's process group): the straggler
        rule's second rank order, which tells a slow node from its partner on a slow link."""
        return None

    def alloc(self, count: int, dtype: str):
        return self.xp.zeros(count, dtype=storage_dtype(dtype))

    def fill(self, buf, host_values: np.ndarray) -> None:
        buf[...] = self.xp.asarray(host_values)

    def to_host(self, buf) -> np.ndarray:
        return np.asarray(buf)

    #: The collectives this transport has (a method of that name each) and the reduction
    #: ops it has; a design that is allreduce by nature keeps the defaults.
    collectives: tuple[str, ...] = ("allreduce",)
    reduce_ops: tuple[str, ...] = ("sum",)
    #: Its library has a bfloat16 type (NCCL, torch; an MPI that defines MPI_BFLOAT16_T): a
    #: design that reduces with numpy has none (numpy holds bfloat16's bits as uint16).
    bfloat16: bool = False
    #: Its library has the fp8 types (NCCL >= 2.24 alone here: MPI defines none, gloo none).
    fp8: bool = False
    bound: Call = Call()

    def lacks(self, call: Call, dtype: str) -> str | None:
        """Why this transport cannot make ``call`` on ``dtype`` buffers (one line), or None.
        The same answer on every rank: the kernel skips the world with it."""
        if call.collective not in self.collectives:
            return f"{self.name} has no {call.collective} (it runs {', '.join(self.collectives)})"
        if call.collective in ("allreduce", "reduce_scatter", "reduce") and call.op not in self.reduce_ops:
            return f"{self.name} has no {call.op} reduction (it has {', '.join(self.reduce_ops)})"
        if dtype == "bfloat16" and not self.bfloat16:
            return f"{self.name} has no bfloat16 (it reduces with numpy, which has none)"
        if dtype in FP8 and not self.fp8:
            return f"{self.name} has no {dtype} (fp8 runs on nccl alone, NCCL >= 2.24)"
        if call.collective == "alltoallv" and not call.splits:
            return "alltoallv needs its split matrix on the call (Call.splits)"
        return None

    def bind(self, call: Call) -> None:
        """Make ``call`` the one ``call``, ``time_one`` and ``time_batch`` issue (per case)."""
        self.bound = call
        self._call = getattr(self, call.collective)

    def call(self, send, recv) -> None:
        """One call of the bound collective (``bind``; allreduce with sum until then)."""
        getattr(self, "_call", self.allreduce)(send, recv)

    def allreduce(self, send, recv) -> None:
        """Reduce ``send`` over all ranks into ``recv`` with the bound op (sum unless bound
        otherwise); ``recv is send`` means in place."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait until the last call's result is in ``recv`` (device transports)."""

    def time_one(self, send, recv) -> float:
        t0 = time.perf_counter()
        self.call(send, recv)
        self.sync()
        return time.perf_counter() - t0

    def time_batch(self, send, recv, calls: int) -> float:
        """Seconds for ``calls`` calls issued back to back and then waited for (nccl-tests)."""
        t0 = time.perf_counter()
        for _ in range(calls):
            self.call(send, recv)
        self.sync()
        return time.perf_counter() - t0

    #: Its batches cycle through copies of the buffers, as nccl-tests shifts its buffers each
    #: iteration "to avoid cache effects" (device transports: a 16 MiB buffer would stay in an
    #: H200's 50 MB L2 between calls); the kernel lays the copies out (``rotate``).
    rotates: bool = False

    def rotate(self, views: list, stride_bytes: int) -> None:
        """This case's copies of (send, recv), ``stride_bytes`` apart, for the batches to cycle
        through; one copy: no rotation."""

    def copy_bandwidth(self) -> float | None:
        """This rank's buffer memory's copy bandwidth (GB/s), measured by transports whose
        buffers live on a device; None: the kernel measures the host's itself."""
        return None

    def close(self) -> None:
        """After the last case, on every rank: release what the transport holds."""

    def describe(self) -> dict:
        """Facts worth storing with the result (e.g. which path a GPU ring took)."""
        return {}
