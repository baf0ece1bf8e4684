"""A rank's memory over its timed steps, read where it lives (``records.memory`` summarises it).

- **Host**: the kernel's own high-water mark of resident memory (``VmHWM``), reset when the timed
  steps start (``/proc/self/clear_refs`` with ``5``, Linux 4.0+), so the peak is the timed steps'
  own and not the imports'; where that reset is refused, the process's peak (``getrusage``), and
  the figure says so (``host_span``). Growth is that peak less the resident memory at the start.
- **Device** (the step runs on a GPU): the framework's caching allocator, its peak reset at the
  start: torch's ``max_memory_allocated``/``max_memory_reserved``, TensorFlow's
  ``get_memory_info`` peak; CuPy keeps no peak, so its pool's holdings at the end (a pool only
  grows until freed). And NVML's view of this process on its GPU, which counts what no allocator
  sees (the CUDA context, NCCL's buffers), at the end.
- **Model state** (training): parameters, gradients and optimizer state counted from the tensors
  a rank holds, each its local shard under FSDP: exact, whatever the allocator keeps.

Only figures: nothing here judges or prints. Every reader degrades to None with the reason
rather than failing a world, since memory is reported beside a measurement, never instead of it.
"""
from __future__ import annotations

import os
import re
import resource
import sys
from typing import Any

import numpy as np

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _status() -> dict[str, int]:
    """VmHWM and VmRSS of this process, bytes ({} where /proc has no status)."""
    try:
        with open(_STATUS) as f:
            text = f.read()
    except OSError:
        return {}
    out = {}
    for key in ("VmHWM", "VmRSS"):
        m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.M)
        if m:
            out[key] = int(m.group(1)) * 1024
    return out


def _rusage_peak() -> int:
    """The process's peak resident set from getrusage, bytes (Linux counts KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def _reset_peak() -> bool:
    """Reset the kernel's resident high-water mark to the current resident set; False where the
    kernel refuses (not Linux, before 4.0, a locked-down /proc)."""
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Watch:
    """One rank's peak memory over a span of its work: ``start()`` before the timed steps,
    ``stop()`` after them; ``figures`` then holds what ``stop`` returned (bytes)."""

    def __init__(self, device: str = "cpu", framework: str = ""):
        self.device = device  # "cpu", or the rank's GPU ("cuda:0")
        self.framework = framework  # whose allocator holds the device memory: torch, cupy, tensorflow
        self.figures: dict[str, Any] = {}
        self._start: dict[str, Any] = {}

    def start(self) -> "Watch":
        st = _status()
        before = st.get("VmHWM") or _rusage_peak()
        reset = _reset_peak()
        self._start = {"process_peak": before, "rss": st.get("VmRSS"), "reset": reset}
        if self.device != "cpu":
            _device_reset(self.framework)
        return self

    def stop(self) -> dict[str, Any]:
        st = _status()
        reset = self._start.get("reset", False)
        peak = st.get("VmHWM") if reset and st.get("VmHWM") else _rusage_peak()
        start_rss = self._start.get("rss")
        out: dict[str, Any] = {
            "host_peak_B": int(peak),
            "host_span": "timed" if reset else "process",
            "host_start_B": int(start_rss) if start_rss else None,
            "host_growth_B": int(peak - start_rss) if reset and start_rss else None,
            "host_process_peak_B": int(max(peak, self._start.get("process_peak") or 0)),
        }
        if self.device != "cpu":
            out.update(device=self.device, **_device_peaks(self.framework), **_nvml_used())
        self.figures = out
        return out


def _device_reset(framework: str) -> None:
    try:
        if framework == "torch":
            import torch

            torch.cuda.reset_peak_memory_stats()
        elif framework == "tensorflow":
            import tensorflow as tf

            tf.config.experimental.reset_memory_stats("GPU:0")
    except Exception:  # noqa: BLE001 - a reader that cannot reset reports the process's peak below
        pass


def _device_peaks(framework: str) -> dict[str, Any]:
    """The allocator's peak bytes on this rank's GPU since ``_device_reset``."""
    try:
        if framework == "torch":
            import torch

            return {"device_peak_B": int(torch.cuda.max_memory_allocated()),
                    "device_reserved_B": int(torch.cuda.max_memory_reserved()), "device_source": "torch"}
        if framework == "tensorflow":
            import tensorflow as tf

            info = tf.config.experimental.get_memory_info("GPU:0")
            return {"device_peak_B": int(info["peak"]), "device_source": "tensorflow"}
        if framework == "cupy":
            import cupy

            pool = cupy.get_default_memory_pool()
            return {"device_peak_B": int(pool.total_bytes()), "device_source": "cupy pool (held at the end)"}
    except Exception as exc:  # noqa: BLE001 - the figure is missing, with why
        return {"device_peak_B": None, "device_source": f"unreadable: {type(exc).__name__}: {exc}"[:200]}
    return {"device_peak_B": None, "device_source": f"no allocator reader for {framework or 'this step'}"}


def _nvml_used() -> dict[str, Any]:
    """What NVML counts for this process on its GPU at the end (context and libraries' buffers
    included), bytes; None where NVML is missing or cannot see this process (another PID
    namespace)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            pid = os.getpid()
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if p.pid == pid and p.usedGpuMemory is not None:
                        return {"device_used_B": int(p.usedGpuMemory)}
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML here: the allocator's figures stand alone
        pass
    return {"device_used_B": None}


def _nbytes(t: Any) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t  # an FSDP2 DTensor: this rank's shard
    return int(local.numel()) * int(local.element_size())


def torch_state_bytes(model: Any, optimizer: Any) -> dict[str, int]:
    """Bytes of the parameters, gradients and optimizer state this rank holds (its shards under
    FSDP), counted from the tensors."""
    import torch

    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return {"parameters": sum(_nbytes(p) for p in params),
            "gradients": sum(_nbytes(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(_nbytes(v) for v in state)}


def tf_state_bytes(model: Any, optimizer: Any) -> dict[str, int | None]:
    """Bytes of the trainable variables and the optimizer's variables; a TensorFlow step's
    gradients live only inside the step, so none are held between steps (None)."""
    import tensorflow as tf

    def size(v: Any) -> int:  # a Keras 3 variable names its dtype by a string, tf's by a DType
        return int(np.prod(tuple(v.shape), dtype=np.int64)) * int(tf.as_dtype(v.dtype).size)

    opt_vars = getattr(optimizer, "variables", ())
    opt_vars = opt_vars() if callable(opt_vars) else opt_vars
    return {"parameters": sum(size(v) for v in model.trainable_variables), "gradients": None,
            "optimizer": sum(size(v) for v in opt_vars)}
