"""``torch-gloo``, ``torch-nccl``, ``torch-mpi``: ``torch.distributed.all_reduce`` as the allreduce
kernel's call, on host tensors (gloo, MPI) or on this rank's GPU (NCCL).

torch's allreduce works in place, as users call it; out of place the harness copies ``send``
into ``recv`` first, which is what MPI libraries do inside an out-of-place call. ``torch-nccl``
is timed as ``nccl`` is (CUDA events on the current stream, a batch of calls between them by
default): a blocking ``all_reduce`` makes the current stream wait for NCCL's own stream, so an
event recorded after it marks the end of the collective without the host waiting.

``torch_device="cpu"`` (an option for the suite's own tests) runs ``torch-nccl``'s code on host
tensors over gloo, so its batching, device choice and checks are tested without a GPU.
"""
from __future__ import annotations

import time

import numpy as np

from ...errors import ConfigError
from ..base import AllreduceTransport
from ..gpu import COPY_BYTES, COPY_REPEATS, device_timing
from .support import cuda_device, import_torch, start_group, stop_group

DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "int32": "int32"}


class TorchAllreduce(AllreduceTransport):
    """Host tensors over a torch.distributed group; the host clock times each call."""

    name = "torch-base"
    backend = "gloo"

    def __init__(self, comm, options: dict | None = None):
        super().__init__(comm, options)
        self.torch, _ = import_torch()
        self.xp = self.torch
        self.device = self.torch.device("cpu")
        self.dist, self.facts = start_group(comm, self.backend)
        self.facts["transport"] = self.name

    def _dtype(self, dtype: str):
        if dtype not in DTYPES:
            raise ConfigError(f"dtype {dtype!r} has no torch type here; choose from {', '.join(DTYPES)}")
        return getattr(self.torch, DTYPES[dtype])

    def alloc(self, count: int, dtype: str):
        return self.torch.zeros(count, dtype=self._dtype(dtype), device=self.device)

    def fill(self, buf, host_values: np.ndarray) -> None:
        buf.copy_(self.torch.from_numpy(np.ascontiguousarray(host_values)))
        self.sync()

    def to_host(self, buf) -> np.ndarray:
        return buf.cpu().numpy()

    def allreduce(self, send, recv) -> None:
        if recv is not send:
            recv.copy_(send)
        self.dist.all_reduce(recv)

    def close(self) -> None:
        stop_group(self.dist)

    def describe(self) -> dict:
        return dict(self.facts)


class TorchGlooAllreduce(TorchAllreduce):
    name = "torch-gloo"
    backend = "gloo"


class TorchMpiAllreduce(TorchAllreduce):
    name = "torch-mpi"
    backend = "mpi"


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
        self.sync()  # nothing queued earlier may fall inside these events
        start.record()
        for _ in range(calls):
            self.allreduce(send, recv)
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
