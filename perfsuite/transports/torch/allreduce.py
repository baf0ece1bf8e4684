"""``torch-gloo``, ``torch-nccl``, ``torch-mpi``: torch.distributed's own call of every collective
(``all_reduce``, ``all_gather_single``, ``reduce_scatter_single``, ``all_to_all_single``,
``broadcast``, ``reduce``; alltoallv: ``all_to_all_single`` with split sizes) as the collective kernel's call, on host tensors (gloo, MPI) or on
this rank's GPU (NCCL).

torch's all_reduce and reduce work in place, as users call them; out of place the harness
copies ``send`` into ``recv`` first, which is what MPI libraries do inside an out-of-place call.
all_gather in place hands torch ``send`` as the slice of ``recv`` at rank x c/n (as NCCL's
in-place all_gather has it); broadcast has one buffer. ``torch-nccl`` is timed as ``nccl`` is
(CUDA events on the current stream, a batch of calls between them by default): a blocking call
makes the current stream wait for NCCL's own stream, so an event recorded after it marks the
end of the collective without the host waiting.

What a backend or this torch lacks (``torch_lacks``: AVG on gloo before torch 2.8, ProcessGroupMPI's
missing ops and types) is told apart from the version and the backend alone, never by trying a
call, so every rank gives the same one line. bfloat16 buffers are torch.bfloat16; their host
arrays are the 16 bits as uint16 (``collectives.as_type``), copied in and out bit for bit.

``torch_device="cpu"`` (an option for the suite's own tests) runs ``torch-nccl``'s code on host
tensors over gloo, so its batching, device choice and checks are tested without a GPU.
"""
from __future__ import annotations

import time

import numpy as np

from ...records.errors import ConfigError
from ...records.model import FP8
from ..base import AllreduceTransport, Call, peer_counts
from ..gpu import COPY_BYTES, COPY_REPEATS, device_timing
from .support import cuda_device, import_torch, start_group, stop_group

DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16",
          "int32": "int32"}
COLLECTIVES = ("allreduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "alltoallv")
#: Why each backend runs no fp8 here: gloo's and MPI's libraries have no fp8 type; torch's NCCL
#: group reduces float8_e4m3fn/e5m2 only where torch itself was built against NCCL >= 2.24
#: (ProcessGroupNCCL's isUnsupportedFloat8, NCCL_SUPPORTS_FP8), which no runtime call reports.
TORCH_FP8_LACKS = {
    "gloo": "torch's gloo has no {dtype} (gloo has no fp8 type to reduce or move); fp8 runs on nccl",
    "mpi": "torch's MPI backend has no {dtype} (MPI defines no fp8 datatype); fp8 runs on nccl",
    "nccl": ("torch-nccl runs no {dtype} here: ProcessGroupNCCL has fp8 only where torch was built "
             "against NCCL >= 2.24, which torch does not report; fp8 runs on nccl"),
}
#: nccl-tests' op names -> torch.distributed.ReduceOp's.
REDUCE_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "avg": "AVG"}
REDUCING = ("allreduce", "reduce_scatter", "reduce")


def _version(text: str) -> tuple[int, int]:
    parts = (text.split("+")[0].split(".") + ["0", "0"])[:2]
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts)  # type: ignore[return-value]


def torch_lacks(backend: str, torch_version: str, call: Call, dtype: str,
                nccl_version: tuple[int, ...] | None = None) -> str | None:
    """Why torch ``torch_version``'s ``backend`` group cannot make ``call`` on ``dtype`` (one
    line), or None. From the versions alone (pure: the same on every rank, tested without a
    world): what ProcessGroupGloo, ProcessGroupMPI and NCCL lack, as their sources have it.
    Ops and collectives torch has no name for are the transport's own ``lacks``."""
    if dtype in FP8:
        return TORCH_FP8_LACKS.get(backend, f"torch's {backend} backend has no {{dtype}}").format(dtype=dtype)
    avg = call.op == "avg" and call.collective in REDUCING
    v = _version(torch_version)
    if backend == "gloo" and avg:
        if v < (2, 8):
            return f"torch {torch_version}'s gloo has no AVG reduction (it came in torch 2.8)"
        if call.collective == "reduce_scatter" and v < (2, 11):
            return (f"torch {torch_version}'s gloo sums instead of averaging in reduce_scatter "
                    "(pytorch#162338, fixed in torch 2.11)")
    if backend == "mpi":
        if call.collective in ("all_gather", "reduce_scatter"):
            return (f"torch's MPI backend has no single-tensor {call.collective} "
                    "(ProcessGroupMPI has no _allgather_base or _reduce_scatter_base)")
        if avg:
            return "torch's MPI backend has no AVG reduction (ProcessGroupMPI maps SUM, PRODUCT, MIN, MAX)"
        if dtype in ("float16", "bfloat16"):
            return f"torch's MPI backend has no {dtype} (ProcessGroupMPI has no MPI type for it)"
    if backend == "nccl" and nccl_version is not None and tuple(nccl_version[:2]) < (2, 10) \
            and (avg or dtype == "bfloat16"):
        what = "AVG reduction" if avg else "bfloat16"
        return f"NCCL {'.'.join(map(str, nccl_version))} has no {what} (it came in NCCL 2.10)"
    return None


class TorchAllreduce(AllreduceTransport):
    """Host tensors over a torch.distributed group; the host clock times each call."""

    name = "torch-base"
    bfloat16 = True
    backend = "gloo"
    collectives = COLLECTIVES
    reduce_ops = tuple(REDUCE_OPS)

    def __init__(self, comm, options: dict | None = None):
        super().__init__(comm, options)
        self.torch, _ = import_torch()
        self.xp = self.torch
        self.device = self.torch.device("cpu")
        self.dist, self.facts = start_group(comm, self.backend)
        self.facts["transport"] = self.name
        self._calls()

    def _calls(self) -> None:
        """After the group forms: torch's names for the ops, and which all_gather and
        reduce_scatter this torch has, chosen once (torch 2.14 deprecates ``all_gather_into_tensor``
        and ``reduce_scatter_tensor`` for ``all_gather_single`` and ``reduce_scatter_single``)."""
        dist = self.dist
        self._ops = {k: getattr(dist.ReduceOp, v, None) for k, v in REDUCE_OPS.items()}
        self._all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        self.facts["all_gather_call"] = self._all_gather.__name__
        self.facts["reduce_scatter_call"] = self._reduce_scatter.__name__
        self._op, self._root = self._ops["sum"], 0
        self.call = self.allreduce  # an instance attribute: the kernel's call is the bound method itself

    def _dtype(self, dtype: str):
        if dtype not in DTYPES:
            raise ConfigError(f"dtype {dtype!r} has no torch type here; choose from {', '.join(DTYPES)}")
        return getattr(self.torch, DTYPES[dtype])

    def lacks(self, call: Call, dtype: str) -> str | None:
        if dtype in FP8:  # the backend's own reason, before the base class's generic one
            return torch_lacks(self.backend, str(self.torch.__version__), call, dtype)
        why = super().lacks(call, dtype)
        if why:
            return why
        if dtype not in DTYPES:
            return f"{self.name} has no {dtype} tensors (it has {', '.join(DTYPES)})"
        if call.collective in REDUCING and self._ops.get(call.op) is None:
            return f"torch {self.torch.__version__} has no ReduceOp.{REDUCE_OPS[call.op]}"
        nccl = self.facts.get("nccl_version")
        return torch_lacks(self.backend, str(self.torch.__version__), call, dtype,
                           tuple(int(x) for x in nccl.split(".")) if nccl else None)

    def bind(self, call: Call) -> None:
        super().bind(call)
        op = self._ops.get(call.op)
        self._op, self._root = self._ops["sum"] if op is None else op, call.root
        if call.splits:  # alltoallv: torch wants split sizes as lists, and output exactly their sum
            send, _, recv, _ = peer_counts(call.splits, self.comm.Get_rank())
            self._send_splits, self._recv_splits, self._received = list(send), list(recv), sum(recv)
        self.call = self._call  # no dispatch of the base class's ``call`` inside the timed call

    def alloc(self, count: int, dtype: str):
        return self.torch.zeros(count, dtype=self._dtype(dtype), device=self.device)

    def fill(self, buf, host_values: np.ndarray) -> None:
        """``host_values`` into ``buf`` (a tensor or a slice of one); bfloat16's arrive as their
        uint16 bits and are written bit for bit."""
        host = np.ascontiguousarray(host_values)
        if buf.dtype == self.torch.bfloat16:
            src = self.torch.from_numpy(host.astype(np.uint16, copy=False).view(np.int16)).view(self.torch.bfloat16)
        else:
            src = self.torch.from_numpy(host)
        buf.copy_(src)
        self.sync()

    def to_host(self, buf) -> np.ndarray:
        """A numpy copy of ``buf``; a bfloat16 buffer's as its uint16 bits."""
        if buf.dtype == self.torch.bfloat16:
            return buf.cpu().view(self.torch.int16).numpy().view(np.uint16)
        return buf.cpu().numpy()

    def allreduce(self, send, recv) -> None:
        if recv is not send:
            recv.copy_(send)
        self.dist.all_reduce(recv, op=self._op)

    def all_gather(self, send, recv) -> None:
        self._all_gather(recv, send)

    def reduce_scatter(self, send, recv) -> None:
        self._reduce_scatter(recv, send, op=self._op)

    def alltoall(self, send, recv) -> None:
        self.dist.all_to_all_single(recv, send)

    def alltoallv(self, send, recv) -> None:
        # recv is the largest receive total over ranks: this rank's part of it, the pad untouched
        self.dist.all_to_all_single(recv[:self._received], send, self._recv_splits, self._send_splits)

    def broadcast(self, send, recv) -> None:
        self.dist.broadcast(recv, src=self._root)

    def reduce(self, send, recv) -> None:
        if recv is not send:
            recv.copy_(send)
        self.dist.reduce(recv, dst=self._root, op=self._op)

    def close(self) -> None:
        stop_group(self.dist)

    def describe(self) -> dict:
        return dict(self.facts)


class TorchGlooAllreduce(TorchAllreduce):
    name = "torch-gloo"
    backend = "gloo"
    contention_scope = "process"  # gloo's work threads make the call


class TorchMpiAllreduce(TorchAllreduce):
    name = "torch-mpi"
    backend = "mpi"
    contention_scope = "process"  # ProcessGroupMPI's worker thread makes the call


class TorchNcclAllreduce(TorchAllreduce):
    """One GPU per rank (the worker narrowed CUDA_VISIBLE_DEVICES to it, as for ``nccl``), CUDA
    events for timing, and the GPU's copy bandwidth for busbw's fraction of it."""

    name = "torch-nccl"
    backend = "nccl"
    host_buffers = False

    def __init__(self, comm, options: dict | None = None):
        AllreduceTransport.__init__(self, comm, options)
        self.torch, _ = import_torch()
        self.xp = self.torch
        self.timing = device_timing(self.options, self.name, graph_capture=False)
        on_cpu = str(self.options.get("torch_device", "cuda")) == "cpu"
        if on_cpu:
            self.backend = "gloo"
        self.device, facts = cuda_device(comm, self.torch, on_cpu)
        self.dist, self.facts = start_group(comm, self.backend,
                                            device=None if on_cpu else self.device)
        self.facts.update(facts, transport=self.name, timing=self.timing)
        self.clock = "host" if on_cpu else "cuda-events"
        self.facts["clock"] = self.clock
        self._calls()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def _events(self):
        if self.device.type != "cuda":
            return None
        ev = getattr(self, "_event_pair", None)
        if ev is None:
            ev = self._event_pair = (self.torch.cuda.Event(enable_timing=True),
                                     self.torch.cuda.Event(enable_timing=True))
        return ev

    def time_one(self, send, recv) -> float:
        return self.time_batch(send, recv, 1)

    def time_batch(self, send, recv, calls: int) -> float:
        events = self._events()
        if events is None:
            return super().time_batch(send, recv, calls)
        start, end = events
        call = self.call
        self.sync()  # nothing queued earlier may fall inside these events
        start.record()
        for _ in range(calls):
            call(send, recv)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def copy_bandwidth(self) -> float | None:
        """Device-to-device copy bandwidth of this rank's GPU (GB/s), timed by CUDA events."""
        nbytes = int(self.options.get("copy_bytes", COPY_BYTES))
        torch = self.torch
        src = torch.ones(nbytes, dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        dst.copy_(src)
        rates = []
        for _ in range(COPY_REPEATS):
            if self.device.type == "cuda":
                start, end = self._events()
                start.record()
                dst.copy_(src)
                end.record()
                end.synchronize()
                dt = start.elapsed_time(end) / 1e3
            else:
                t0 = time.perf_counter()
                dst.copy_(src)
                dt = time.perf_counter() - t0
            rates.append(nbytes / dt / 1e9 if dt > 0 else 0.0)
        del src, dst
        return float(np.median(rates))
