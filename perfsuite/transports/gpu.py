"""What the GPU transports share: availability checks, device choice, device operations behind
one small interface, CUDA-event timing, and the device's copy bandwidth.

Two sides, kept apart on purpose:

- The pytest/CLI side calls ``need_gpu`` only. It looks for modules and asks NVML (the driver's
  management library) how many GPUs there are; it never imports CuPy or creates a CUDA context,
  so collecting a GPU case on a CPU machine costs nothing and skips with the reason.
- Inside a rank, ``open_device`` picks this rank's GPU and returns ``DeviceOps``. Whatever a rank
  finds out there (no CuPy, no device, MPI not CUDA-aware, two ranks on one GPU for NCCL) goes
  through ``agree``: every rank raises ``TransportUnavailable`` together, so no rank waits in a
  collective for one that gave up. The worker turns that into a result with no samples and
  ``extra["unavailable"]``, which the suite reports as a skip, not a crash.

``array_module="numpy"`` (an option for the suite's own tests) runs the same transports on host
arrays, so the ring schedule, staging, caching and agreement are tested without a GPU.
"""
from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..records.errors import ConfigError, TransportUnavailable
from ..records.model import storage_dtype
from . import has_module, need_mpi4py
from .base import TIMINGS, AllreduceTransport

ARRAY_MODULES = ("cupy", "numpy")
COPY_BYTES = 256 << 20  # large enough that launch overhead is < 1% of a D2D copy on an H200
COPY_REPEATS = 10


# ---------------------------------------------------------------------------------------------
# pytest side: never imports CuPy, never creates a CUDA context


@functools.lru_cache(maxsize=1)
def nvml_gpu_count() -> tuple[int, str]:
    """(number of NVIDIA GPUs, how we know). NVML talks to the driver, not to CUDA."""
    try:
        import pynvml
    except ImportError:
        return 0, "nvidia-ml-py is not installed, so GPUs cannot be counted"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # LibraryNotFound / DriverNotLoaded: no NVIDIA driver here
        return 0, f"no NVIDIA driver here (NVML: {exc})"
    try:
        return int(pynvml.nvmlDeviceGetCount()), "NVML"
    except pynvml.NVMLError as exc:
        return 0, f"NVML could not count GPUs ({exc})"
    finally:
        pynvml.nvmlShutdown()


def visible_devices_hidden(env: Mapping[str, str] | None = None) -> bool:
    """CUDA_VISIBLE_DEVICES set to nothing (or -1) hides every GPU from CUDA, whatever NVML says."""
    value = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    return value is not None and value.strip() in ("", "-1")


def visible_gpus(env: Mapping[str, str] | None = None) -> int:
    """GPUs a world on this node can use: NVML's count, narrowed by CUDA_VISIBLE_DEVICES."""
    env = os.environ if env is None else env
    count, _ = nvml_gpu_count()
    if visible_devices_hidden(env):
        return 0
    listed = env.get("CUDA_VISIBLE_DEVICES")
    return count if listed is None else min(count, len([d for d in listed.split(",") if d.strip()]))


def fit_world_sizes(world_sizes: tuple[int, ...], gpus: int) -> tuple[tuple[int, ...], str | None]:
    """Default world sizes for a GPU transport on one node of ``gpus`` GPUs: none larger than
    the GPUs (a larger world would time-slice its ranks on one GPU, and NCCL refuses it), and
    the line that says so; unchanged (and no line) where they fit or no GPU is seen at all."""
    if gpus < 1 or max(world_sizes) <= gpus:
        return world_sizes, None
    fitted = tuple(dict.fromkeys(min(n, gpus) for n in world_sizes))
    big = max(world_sizes)
    return fitted, (f"{big} ranks need {big} GPUs, {gpus} here: --world-sizes "
                    f"{','.join(map(str, fitted))} (name --world-sizes to run ranks time-sliced on shared GPUs)")


def need_gpu() -> str | None:
    """None when GPU transports can be tried here, else the skip reason (cheap, no CUDA)."""
    count, how = nvml_gpu_count()
    if count == 0:
        return how if how != "NVML" else "no NVIDIA GPU found (NVML counts 0 devices)"
    if visible_devices_hidden():
        return "CUDA_VISIBLE_DEVICES hides every GPU"
    if not has_module("cupy"):
        return ("CuPy is not installed (pip install 'cupy-cuda12x[ctk]' nvidia-nccl-cu12 for CUDA 12, "
                "'cupy-cuda13x[ctk]' nvidia-nccl-cu13 for CUDA 13: perfsuite's gpu and gpu-cuda13 extras)")
    return need_mpi4py()


# ---------------------------------------------------------------------------------------------
# inside a rank: agreement, device choice (whether MPI is CUDA-aware: cuda_aware.py)


def agree(comm, reason: str | None) -> None:
    """Collective: if any rank has a reason, every rank raises TransportUnavailable with it.

    A rank that raised alone would leave the others blocked in their next collective until the
    world's timeout; agreeing first makes "cannot run here" a clean, fast outcome on all ranks.
    """
    reasons = comm.allgather(reason)
    bad = [(r, why) for r, why in enumerate(reasons) if why]
    if not bad:
        return
    distinct = sorted({why for _, why in bad})
    if len(distinct) == 1 and len(bad) == len(reasons):
        raise TransportUnavailable(distinct[0])
    raise TransportUnavailable("; ".join(f"rank {r}: {why}" for r, why in bad))


def node_rank(comm) -> tuple[int, int]:
    """(this rank's index among the ranks on its node, ranks on the node). Collective."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return node.Get_rank(), node.Get_size()
    finally:
        node.Free()


def pick_device(local_rank: int, device_count: int) -> int:
    """Round-robin: rank i of a node uses GPU i % count (several ranks share a GPU when fewer)."""
    if device_count < 1:
        raise ConfigError(f"device count {device_count} must be >= 1 to pick a GPU")
    return local_rank % device_count


def shared_devices(placements: list[tuple[str, str]]) -> list[list[int]]:
    """Pure: groups of ranks that landed on the same (host, GPU bus id); [] when none share."""
    by_gpu: dict[tuple[str, str], list[int]] = {}
    for rank, where in enumerate(placements):
        by_gpu.setdefault(tuple(where), []).append(rank)
    return [ranks for ranks in by_gpu.values() if len(ranks) > 1]


# ---------------------------------------------------------------------------------------------
# device operations: one small interface, a CuPy one and a numpy one (tests)


class HostTimer:
    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        return time.perf_counter() - self._t0


class EventTimer:
    """CUDA events on the stream the transport uses; ``stop`` waits for the end event, so no host
    clock is read before the device finished (events resolve to about half a microsecond)."""

    def __init__(self, cupy: Any, stream: Any):
        self._cupy, self._stream = cupy, stream
        self._start, self._end = cupy.cuda.Event(), cupy.cuda.Event()  # created once, reused

    def start(self) -> None:
        self._start.record(self._stream)

    def stop(self) -> float:
        self._end.record(self._stream)
        self._end.synchronize()
        return self._cupy.cuda.get_elapsed_time(self._start, self._end) / 1e3


class NumpyOps:
    """Host arrays behind the device interface: same code path, no GPU (for the suite's tests)."""

    name = "numpy"
    xp = np

    def empty(self, count: int, dtype) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    def host_empty(self, count: int, dtype) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    def to_host(self, dev, host) -> None:
        np.copyto(host, dev)

    def to_device(self, host, dev) -> None:
        np.copyto(dev, host)

    def copy(self, dst, src) -> None:
        np.copyto(dst, src)

    def add_into(self, dst, src) -> None:
        np.add(dst, src, out=dst)

    def asnumpy(self, buf) -> np.ndarray:
        return np.asarray(buf)

    def synchronize(self) -> None:
        pass

    def timer(self) -> HostTimer:
        return HostTimer()


class CupyOps:
    """CuPy arrays on one device and one stream (the current one, CuPy's default)."""

    name = "cupy"

    def __init__(self, cupy: Any, device_id: int):
        self.cupy = self.xp = cupy
        self.device_id = device_id
        cupy.cuda.Device(device_id).use()  # before any allocation, so every buffer lives here
        # A stream of our own, as nccl-tests uses: it does not wait on the legacy default
        # stream, and a CUDA graph can be captured on it (never on the default stream).
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stream.use()  # CuPy's kernels and copies go to it

    def empty(self, count: int, dtype):
        return self.cupy.empty(count, dtype=dtype)

    def host_empty(self, count: int, dtype) -> np.ndarray:
        import cupyx

        return cupyx.empty_pinned((count,), dtype=dtype)  # pinned: DMA straight from/to it

    def to_host(self, dev, host) -> None:
        self.cupy.asnumpy(dev, out=host, stream=self.stream)  # blocking: waits for the stream

    def to_device(self, host, dev) -> None:
        dev.set(host, stream=self.stream)  # may be asynchronous from pinned memory

    def copy(self, dst, src) -> None:
        if src.nbytes:
            dst.data.copy_from_device_async(src.data, src.nbytes, stream=self.stream)

    def add_into(self, dst, src) -> None:
        self.cupy.add(dst, src, out=dst)  # an elementwise CUDA kernel on the stream

    def asnumpy(self, buf) -> np.ndarray:
        return self.cupy.asnumpy(buf, stream=self.stream)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def timer(self) -> EventTimer:
        return EventTimer(self.cupy, self.stream)


DeviceOps = NumpyOps | CupyOps


class BufferCache:
    """Buffers allocated once per dtype and grown only when a larger one is asked for, so a size
    sweep allocates O(1) times and every timed call reuses the same memory (no allocation is
    ever timed). ``get`` returns a view of exactly ``count`` elements."""

    def __init__(self, alloc: Callable[[int, Any], Any]):
        self._alloc = alloc
        self._bufs: dict[str, Any] = {}
        self.allocations = 0

    def get(self, count: int, dtype):
        key = str(np.dtype(dtype))
        buf = self._bufs.get(key)
        if buf is None or buf.shape[0] < count:
            buf = self._bufs[key] = self._alloc(max(count, 1), key)
            self.allocations += 1
        return buf[:count]


def measure_copy_bandwidth(ops, nbytes: int = COPY_BYTES, repeats: int = COPY_REPEATS) -> float:
    """The memory's own copy bandwidth in GB/s (bytes copied per second, median of repeats),
    timed like the transports (CUDA events on a GPU), so busbw can be read as a fraction of it."""
    src = ops.xp.ones(nbytes, dtype=np.uint8)
    dst = ops.xp.empty(nbytes, dtype=np.uint8)
    timer = ops.timer()
    ops.copy(dst, src)  # warm-up
    ops.synchronize()
    rates = []
    for _ in range(repeats):
        timer.start()
        ops.copy(dst, src)
        dt = timer.stop()
        rates.append(nbytes / dt / 1e9 if dt > 0 else 0.0)
    del src, dst
    return float(np.median(rates))


def device_identity(props: Mapping[str, Any]) -> tuple[str, str]:
    """Pure: (GPU name, PCI bus id) from ``cupy.cuda.runtime.getDeviceProperties``; the bus id
    tells GPUs apart when every rank sees its own as device 0 (srun --gpus-per-task)."""
    name = props.get("name", b"")
    name = name.decode() if isinstance(name, bytes) else str(name)
    bus = (f"{props.get('pciDomainID', 0):04x}:{props.get('pciBusID', 0):02x}:"
           f"{props.get('pciDeviceID', 0):02x}.0")
    return name, bus


def compute_capability(props: Mapping[str, Any]) -> int | None:
    """Pure: the device's compute capability as NCCL counts it (major x 10 + minor: 90 for
    Hopper), from ``getDeviceProperties``; None where it does not say."""
    major, minor = props.get("major"), props.get("minor")
    return None if major is None else 10 * int(major) + int(minor or 0)


def compile_reason(ops: CupyOps) -> str | None:
    """None when CuPy can build and run a kernel here, else why not. Every CuPy transport
    compiles kernels (fill, add) with NVRTC, which a bare driver install lacks; asked here,
    inside the agreed skip, so a missing toolchain is a skip with its reason, not a dead world."""
    try:
        one = ops.xp.ones(1, dtype=np.float32)
        ops.add_into(one, one)
        ops.synchronize()
        if float(ops.asnumpy(one)[0]) != 2.0:
            return "a one-element CuPy kernel computed 1 + 1 wrongly"
    except Exception as exc:  # CompileException, NVRTCError, OSError (libnvrtc not found), ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return (f"CuPy cannot compile a kernel ({type(exc).__name__}: {first}); install "
                "CuPy's CUDA components from wheels: pip install 'cupy-cuda12x[ctk]' (or cuda13x)")
    return None


def open_device(comm, options: Mapping[str, Any]) -> tuple[DeviceOps, dict[str, Any]]:
    """Collective. This rank's device operations and facts, or TransportUnavailable on every rank."""
    import socket

    module = str(options.get("array_module", "cupy"))
    if module not in ARRAY_MODULES:
        raise ConfigError(f"array_module {module!r} is unknown; choose from {', '.join(ARRAY_MODULES)}")
    local_rank, local_size = node_rank(comm)
    facts: dict[str, Any] = {"array_module": module, "ranks_on_node": local_size}
    ops: DeviceOps | None = None
    reason = None
    where = "host"
    if module == "numpy":
        ops = NumpyOps()
    else:
        try:
            import cupy

            count = cupy.cuda.runtime.getDeviceCount()
            if count < 1:
                reason = "CUDA sees no GPU"
            else:
                dev = pick_device(local_rank, count)
                ops = CupyOps(cupy, dev)
                props = cupy.cuda.runtime.getDeviceProperties(dev)
                name, where = device_identity(props)
                facts.update(device=dev, gpu=name, pci_bus_id=where, gpus_visible=count,
                             sm=compute_capability(props))
                reason = compile_reason(ops)
        except ImportError as exc:
            reason = f"CuPy cannot be imported in the rank ({exc})"
        except RuntimeError as exc:  # CUDARuntimeError: driver/runtime mismatch, no device
            reason = f"CUDA is not usable in the rank ({exc})"
    agree(comm, reason)
    placements = comm.allgather((socket.gethostname(), where))
    shared = shared_devices(placements) if module == "cupy" else []
    facts["ranks_per_gpu"] = max([len(g) for g in shared], default=1)
    if module == "cupy":
        # The world's oldest GPU, as NCCL's comm->minCompCap: a call may use what every rank has.
        sms = comm.allgather(facts.get("sm"))
        facts["min_sm"] = min((sm for sm in sms if isinstance(sm, int)), default=None)
    return ops, facts


#: The ``device_timing`` option's values: base.TIMINGS (what a sample records), and ``auto``,
#: the default: ``native-batch`` for a transport with a C loop (nccl), ``batch`` for the others.
DEVICE_TIMINGS = (*TIMINGS, "auto")


def device_timing(options: Mapping[str, Any], transport: str, graph_capture: bool,
                  native: bool = False) -> str:
    """The ``device_timing`` option, checked and ``auto`` resolved (``native``: the transport has
    a C loop that can issue its batches; whether it loads is the transport's to find out)."""
    timing = str(options.get("device_timing", "auto"))
    if timing not in DEVICE_TIMINGS:
        raise ConfigError(f"device_timing {timing!r} is unknown; choose from {', '.join(DEVICE_TIMINGS)}")
    if timing == "auto":
        return "native-batch" if native else "batch"
    # Every rank reads the same option, so every rank skips together.
    if timing == "graph" and not graph_capture:
        raise TransportUnavailable(f"device_timing graph needs a call that is device work only "
                                   f"(nccl); {transport}'s calls wait on MPI from the host")
    if timing == "native-batch" and not native:
        raise TransportUnavailable(f"device_timing native-batch needs a transport with a C loop "
                                   f"(nccl); {transport}'s batches are issued from Python")
    return timing


class GpuTransport(AllreduceTransport):
    """Base of the device transports: buffers through ``DeviceOps``, CUDA-event timing, the
    device's copy bandwidth, and facts for ``describe``. Construction is collective."""

    graph_capture = False  # True where a call is device work only, so a batch can be a CUDA graph
    native_timing = False  # True where a C loop can issue the batches (nccl: native_nccl.py)
    host_buffers = False

    def __init__(self, comm, options: dict | None = None):
        super().__init__(comm, options)
        self.timing = device_timing(self.options, self.name, self.graph_capture, self.native_timing)
        self.ops, self.facts = open_device(comm, self.options)
        self.xp = self.ops.xp
        self.clock = "cuda-events" if self.ops.name == "cupy" else "host"
        # Host arrays standing in for device buffers (the suite's tests) are host buffers.
        self.host_buffers = self.ops.name == "numpy"
        self.rank, self.n = comm.Get_rank(), comm.Get_size()
        self._timer = self.ops.timer()
        self.facts.update(timing=self.timing, clock=self.clock)

    def alloc(self, count: int, dtype: str):
        return self.xp.zeros(count, dtype=storage_dtype(dtype))  # bfloat16: its bits, as uint16

    def fill(self, buf, host_values: np.ndarray) -> None:
        super().fill(buf, host_values)
        self.ops.synchronize()

    def to_host(self, buf) -> np.ndarray:
        return self.ops.asnumpy(buf)

    def sync(self) -> None:
        self.ops.synchronize()

    def time_one(self, send, recv) -> float:
        return self.time_batch(send, recv, 1)

    rotates = True
    _views: list = []
    _stride = 0
    _turn = 0  # the copy the next batch starts on: the rotation runs on across batches

    def rotate(self, views: list, stride_bytes: int) -> None:
        self._views, self._stride, self._turn = list(views) if len(views) > 1 else [], stride_bytes, 0

    def next_turn(self, calls: int) -> tuple[int, int]:
        """(the copy this batch starts on, how many copies) and the rotation moved on by ``calls``."""
        turn, copies = self._turn, max(1, len(self._views))
        self._turn = (turn + calls) % copies
        return turn, copies

    def time_batch(self, send, recv, calls: int) -> float:
        call = getattr(self, "_call", self.allreduce)  # the bound collective (base.call), looked up once
        views = self._views
        turn, copies = self.next_turn(calls)
        self.ops.synchronize()  # nothing queued earlier may fall inside these events
        self._timer.start()
        if views:
            for i in range(turn, turn + calls):
                call(*views[i % copies])
        else:
            for _ in range(calls):
                call(send, recv)
        return self._timer.stop()

    def copy_bandwidth(self) -> float:
        """Device-to-device copy bandwidth of this rank's GPU (GB/s); the kernel stores it."""
        return measure_copy_bandwidth(self.ops, int(self.options.get("copy_bytes", COPY_BYTES)))

    def describe(self) -> dict:
        return {"transport": self.name, **self.facts}
