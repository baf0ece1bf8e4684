"""Is this rank's MPI CUDA-aware, and for what: point-to-point only, or reductions too?

Asked of the very libmpi mpi4py loaded (another MPI's library may be mapped into the process
too, e.g. one a CUDA or TensorFlow wheel brought), in this order:

1. the user's override ``PERFSUITE_MPI_CUDA_AWARE=1`` / ``0`` (``--env``), for MPIs that cannot say;
2. that library's ``MPIX_Query_cuda_support()`` (MPICH >= 4, Open MPI): 1 means device buffers
   work everywhere, reductions included;
3. Open MPI answering 0 while its UCX has CUDA transports (``libuct_cuda``): UCX moves device
   buffers point to point, but Open MPI's own reductions and datatype copies read them as host
   memory and crash, so ``Sendrecv`` is CUDA-aware and ``Allreduce`` is not;
4. switches of MPIs with no query (MVAPICH2-GDR ``MV2_USE_CUDA``, Cray ``MPICH_GPU_SUPPORT_ENABLED``).
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
from collections.abc import Mapping

from ..records.errors import ConfigError

#: Set to 1 or 0 (e.g. ``--env PERFSUITE_MPI_CUDA_AWARE=1``) where the MPI cannot say itself.
CUDA_AWARE_ENV = "PERFSUITE_MPI_CUDA_AWARE"
NEEDS = ("reduce", "pt2pt")  # what the transport asks of device buffers
_TRUE, _FALSE = ("1", "yes", "true", "on"), ("0", "no", "false", "off")


def mapped_libraries(pattern: str, maps: str = "/proc/self/maps") -> list[str]:
    """Paths of loaded shared libraries whose path matches ``pattern`` (Linux), in map order."""
    found: list[str] = []
    try:
        with open(maps) as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                if re.search(pattern, path) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def libmpi_paths(maps: str = "/proc/self/maps") -> list[str]:
    """Paths of the MPI libraries this process has loaded, e.g. libmpi.so.12, libmpi.so.40."""
    return mapped_libraries(r"/lib(mpi|mpich)[^/]*\.so", maps)


def library_text(version: str) -> str:
    """An MPI library version as C gives it: Open MPI's string, as mpi4py returns it, keeps its
    terminator (and ctypes' copy of the same string does not), so text is compared up to it."""
    return version.split("\0", 1)[0].strip()


def _library_version(lib: ctypes.CDLL) -> str | None:
    fn = getattr(lib, "MPI_Get_library_version", None)
    if fn is None:
        return None
    buf, length = ctypes.create_string_buffer(8192), ctypes.c_int(0)
    fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_int
    if fn(buf, ctypes.byref(length)) != 0:
        return None
    return buf.value.decode(errors="replace")


def loaded_libmpi(version: str, paths: list[str]) -> ctypes.CDLL | None:
    """The mapped libmpi whose ``MPI_Get_library_version`` is ``version`` (mpi4py's), or None."""
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if library_text(_library_version(lib) or "") == library_text(version):
            return lib
    return None


def query_mpix_cuda_support(version: str | None = None) -> int | None:
    """``MPIX_Query_cuda_support()`` of the libmpi mpi4py loaded, or None where it has none.
    Call only after MPI_Init (inside a rank): it is a runtime answer (MPICH says 0 when built
    without CUDA or run with MPIR_CVAR_ENABLE_GPU=0)."""
    if version is None:
        from mpi4py import MPI

        version = MPI.Get_library_version()
    lib = loaded_libmpi(version, libmpi_paths())
    fn = getattr(lib, "MPIX_Query_cuda_support", None) if lib is not None else None
    if fn is None:
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    return int(fn())


def ucx_cuda_module(maps: str = "/proc/self/maps") -> str | None:
    """UCX's CUDA transport module beside the libucp this process loaded, or None."""
    for ucp in mapped_libraries(r"/libucp\.so", maps):
        found = sorted(glob.glob(os.path.join(os.path.dirname(ucp), "ucx", "libuct_cuda.so*")))
        if found:
            return found[0]
    return None


def cuda_aware_verdict(query: int | None, library: str, env: Mapping[str, str],
                       need: str = "reduce", ucx_cuda: str | None = None) -> tuple[bool, str]:
    """Pure: (can MPI take device buffers for ``need``, how we know)."""
    if need not in NEEDS:
        raise ConfigError(f"need {need!r} is unknown; choose from {', '.join(NEEDS)}")
    lib = (library_text(library).splitlines() or ["unknown MPI"])[0].strip()
    forced = env.get(CUDA_AWARE_ENV)
    if forced is not None:
        if forced.strip().lower() in _TRUE:
            return True, f"{CUDA_AWARE_ENV}={forced}"
        if forced.strip().lower() in _FALSE:
            return False, f"{CUDA_AWARE_ENV}={forced}"
        raise ConfigError(f"{CUDA_AWARE_ENV}={forced!r} must be 1 (MPI is CUDA-aware) or 0")
    if query:
        return True, f"MPIX_Query_cuda_support() returned {query} in {lib}"
    if query == 0:
        said = f"MPIX_Query_cuda_support() returned 0 in {lib}"
        if ucx_cuda and "OPEN MPI" in library.upper():
            if need == "pt2pt":
                return True, f"{said}, but its UCX moves device buffers ({os.path.basename(ucx_cuda)})"
            return False, (f"{said}; its UCX has CUDA transports ({os.path.basename(ucx_cuda)}), "
                           "which cover point-to-point only, not Open MPI's reductions")
        return False, said
    upper = library.upper()
    if "MVAPICH" in upper and env.get("MV2_USE_CUDA") == "1":
        return True, f"{lib} with MV2_USE_CUDA=1"
    if "CRAY" in upper and env.get("MPICH_GPU_SUPPORT_ENABLED") == "1":
        return True, f"{lib} with MPICH_GPU_SUPPORT_ENABLED=1"
    return False, (f"{lib} has no MPIX_Query_cuda_support() and no known CUDA switch is set; "
                   f"pass --env {CUDA_AWARE_ENV}=1 if it is CUDA-aware")


def mpi_cuda_aware(need: str = "reduce") -> tuple[bool, str]:
    """Inside a rank: can this MPI take device buffers for ``need``, and how we know."""
    from mpi4py import MPI

    version = MPI.Get_library_version()
    return cuda_aware_verdict(query_mpix_cuda_support(version), version, os.environ, need,
                              ucx_cuda_module())
