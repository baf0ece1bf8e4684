"""What this machine can run, one line per component: the bring-up's first words on a machine
perfsuite has never seen (``python -m perfsuite.machine``; scripts/gpu-bringup.sh prints it).

It reads what is installed where the run will happen (GPU and driver by NVML, CuPy, NCCL as CuPy
loads it, mpi4py and the MPI library it can load, the launcher, PyTorch, TensorFlow, asv) and says,
for what is missing, what to carry in. Unlike the fingerprint it may import CuPy and PyTorch: it is
asked for explicitly, once, and never on the pytest side. It starts no process: whether mpi4py
finds an MPI library is asked with ``mpi4py.rc.initialize = False``, which loads the library
without ``MPI_Init`` (and so without a launcher around it).
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .store.fingerprint import gpus, nccl_version_string
from .launch.commands import OFFLINE, default_program
from .transports import has_module
from .transports.cuda_aware import libmpi_paths
from .transports.gpu import CupyOps, compile_reason, nvml_gpu_count

#: The oldest CuPy perfsuite's device code is written for (the ``[gpu]`` extras ask for it).
CUPY_MIN = (14,)
HINT = f"{OFFLINE}; with an index: pip install mpich"


@dataclass(frozen=True)
class Line:
    """One component: ``ok`` False where perfsuite cannot run its worlds without it."""

    what: str
    text: str
    ok: bool = True
    needed: bool = True  # False: optional (a missing one only skips some cases)

    def __str__(self) -> str:
        mark = "ok " if self.ok else ("-- " if not self.needed else "NO ")
        return f"{mark}{self.what}: {self.text}"


def _dist(*names: str) -> tuple[str, str] | None:
    for name in names:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def cupy_new_enough(version: str) -> bool:
    """Whether a CuPy of this version is used as it is (scripts/gpu-bringup.sh asks too)."""
    release = []
    for part in version.split("+")[0].split("."):
        if not part.isdigit():
            break
        release.append(int(part))
    return tuple(release) >= CUPY_MIN


def gpu_lines() -> list[Line]:
    found = gpus()
    if not found:
        _, how = nvml_gpu_count()
        return [Line("GPU", f"none: {how if how != 'NVML' else 'NVML counts 0 devices'}", ok=False, needed=False)]
    names = [g["name"] for g in found]
    kinds = ", ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))
    return [Line("GPU", f"{len(found)}: {kinds} (NVML)"),
            Line("driver", f"{found[0]['driver']}, CUDA {found[0]['cuda_driver']} (what the driver supports)")]


def cupy_lines(needed: bool = False) -> list[Line]:
    """CuPy, the CUDA runtime it loads, a kernel it compiles and the NCCL it finds; ``needed``
    where there is a GPU, whose transports need all four."""
    dist = _dist("cupy-cuda13x", "cupy-cuda12x", "cupy")
    if dist is None or not has_module("cupy"):
        return [Line("CuPy", "not installed: the GPU transports skip (carry cupy-cuda13x[ctk] or "
                     "cupy-cuda12x[ctk] >= 14 for the driver's CUDA)", ok=False, needed=needed)]
    name, version = dist
    where = Path(metadata.distribution(name).locate_file("")).resolve()
    if not cupy_new_enough(version):
        return [Line("CuPy", f"{version} ({name}, in {where}) is older than "
                     f"{'.'.join(map(str, CUPY_MIN))}: carry a newer {name} wheel", ok=False, needed=needed)]
    out = [Line("CuPy", f"{version} ({name}, in {where}): new enough, used as it is (not reinstalled)")]
    try:
        import cupy

        v = cupy.cuda.runtime.runtimeGetVersion()
        out.append(Line("CUDA runtime", f"{v // 1000}.{v % 1000 // 10} (as CuPy loads it)"))
        # Without NVRTC CuPy imports fine and every world is skipped at its first fill or add.
        why = compile_reason(CupyOps(cupy, 0))
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError, ImportError of a broken build
        out.append(Line("CUDA runtime", f"CuPy cannot reach CUDA ({type(exc).__name__}: {exc})",
                        ok=False, needed=needed))
        return out
    out.append(Line("kernel compile", why or "ok (NVRTC built and ran a CuPy kernel)", ok=why is None,
                    needed=needed))
    # CuPy turns a missing libnccl into a warning and nccl.available = False: keep its words.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            from cupy.cuda import nccl
        except ImportError as exc:
            nccl = None
            caught.append(warnings.WarningMessage(str(exc), ImportWarning, "", 0))
    wheel = _dist("nvidia-nccl-cu13", "nvidia-nccl-cu12")
    if nccl is not None and getattr(nccl, "available", False):
        where = f" from the {wheel[0]} {wheel[1]} wheel" if wheel else ""
        out.append(Line("NCCL", f"{nccl_version_string(nccl.get_version())}, as CuPy loads it{where}"))
    else:
        why = "; ".join(str(w.message) for w in caught) or "cupy.cuda.nccl.available is False"
        out.append(Line("NCCL", f"CuPy finds none ({why}): carry nvidia-nccl-cu13 (or -cu12)",
                        ok=False, needed=needed))
    return out


def mpi_lines() -> list[Line]:
    """mpi4py, the MPI library it loads, and the launcher beside this Python or on PATH."""
    dist = _dist("mpi4py")
    if dist is None:
        return [Line("mpi4py", "not installed: every world needs it (pip install mpi4py, or carry its wheel)",
                     ok=False)]
    try:
        import mpi4py

        mpi4py.rc.initialize = False  # load the library, start nothing
        from mpi4py import MPI
    except (RuntimeError, ImportError, OSError) as exc:  # 4.x: "cannot load MPI library", each name tried
        tried = sorted({Path(line.split(":")[0]).name for line in str(exc).splitlines()[1:]
                        if line.split(":")[0].strip()})
        looked = f" (it looked for {', '.join(tried)})" if tried else ""
        return [Line("MPI", f"mpi4py {dist[1]} finds no MPI library{looked}: {HINT}", ok=False)]
    lib = " ".join(MPI.Get_library_version().replace("\0", "").strip().splitlines()[0].split())
    files = libmpi_paths()
    out = [Line("MPI", f"mpi4py {dist[1]} loads {lib}" + (f" ({files[0]})" if files else ""))]
    launcher = default_program("mpiexec")
    if Path(launcher).is_absolute():
        out.append(Line("mpiexec", launcher))
    else:
        out.append(Line("mpiexec", f"none beside {sys.executable} or on PATH: {HINT}", ok=False))
    return out


def framework_lines() -> list[Line]:
    out = []
    if _dist("torch") is None:
        out.append(Line("PyTorch", "not installed", ok=False, needed=False))
    else:
        import torch

        nccl = ""
        try:
            v = torch.cuda.nccl.version()
            nccl = f", NCCL {'.'.join(map(str, v)) if isinstance(v, tuple) else v}"
        except Exception:  # noqa: BLE001 - a CPU build has no NCCL
            pass
        cuda = torch.version.cuda or "none (CPU build)"
        out.append(Line("PyTorch", f"{torch.__version__}, CUDA {cuda}{nccl}"))
    tf = _dist("tensorflow", "tensorflow-cpu")
    out.append(Line("TensorFlow", f"{tf[1]} ({tf[0]})" if tf else "not installed: tf-epoch cases skip",
                    ok=tf is not None, needed=False))
    asv = _dist("asv")
    out.append(Line("asv", asv[1] if asv else "not installed: --asv and perfsuite history need it",
                    ok=asv is not None, needed=False))
    return out


def report() -> list[Line]:
    import platform

    me = Line("Python", f"{platform.python_version()} ({sys.executable}, prefix {sys.prefix})")
    gpu = gpu_lines()
    return [me, *gpu, *cupy_lines(needed=gpu[0].ok), *mpi_lines(), *framework_lines()]


def main() -> int:
    """Print the report; exit 1 where a needed component is missing, so a script can stop there."""
    lines = report()
    for line in lines:
        print(str(line), flush=True)
    return 0 if all(line.ok or not line.needed for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
