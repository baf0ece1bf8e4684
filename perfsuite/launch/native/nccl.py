"""The native NCCL timed loop's library (launch/native/c/nccl_loop.c), built on the launching side on
first use with the system C compiler against NCCL's own header, and cached per user beside the
MPI loop's builds (launch/native/mpi.py: the same cache folder, stamp and checks). Ranks receive the
path and the sha256 (``job_options``: option ``native_nccl``) and check both before loading it
(transports/native_nccl.py).

What it needs: a C compiler (``$CC``, else ``cc``) and ``nccl.h``: the nvidia-nccl wheel's
``include/`` in the ranks' Python (the NCCL CuPy loads), else ``$NCCL_HOME``, ``$CUDA_HOME`` or
the system's. No CUDA header: the build puts a stand-in
``cuda_runtime.h`` first on the include path (``SHIM``), declaring the one CUDA type nccl.h's
prototypes name; NVIDIA's runtime wheels ship an incomplete header set (their cuda_runtime.h
includes crt/host_config.h, which only the compiler's wheel has), and the loop calls the CUDA
driver through its own declarations anyway. The library links against nothing but libc
(``-Wl,-z,defs`` proves it): NCCL and the driver are found at load time, in the process
(transports/native_nccl.py).

The cache key covers the source, the stand-in headers, nccl.h's bytes, this perfsuite's
version, the compiler's real path and version line, and the machine's architecture. Nothing here
raises for a missing compiler or header, a failed build or an unwritable cache: ``why`` is the
one line that says so, and the ``nccl`` transport times its batches from Python instead.
"""
from __future__ import annotations

import functools
import importlib.resources
import importlib.util
import os
import platform
import shutil
import sys
from pathlib import Path

from ... import __version__
from ...records.errors import ConfigError, LaunchError
from .mpi import NativeBuild, _cached, _one_line, _sha256, cache_root, compile_cached
from ..commands import run_command

SOURCE = "c/nccl_loop.c"  # in perfsuite.launch.native
FOLDER = "native-nccl"  # under the cache root, beside launch/native/mpi.py's "native"
OPTION = "native_nccl"  # the ranks' option: {"path", "sha256"[, "note"]} or {"why"}
COMPILER_ENV = "CC"
#: The stand-in CUDA headers nccl.h includes: cudaStream_t exactly as the runtime's
#: driver_types.h declares it, and nothing else (CUDART_VERSION left undefined, so nccl.h skips
#: its bfloat16 and fp8 includes; the loop passes types as NCCL's integer enum values).
SHIM = {
    "cuda_runtime.h": ("/* perfsuite: the one CUDA runtime type nccl.h's prototypes name */\n"
                       "#ifndef PERFSUITE_CUDA_RUNTIME_SHIM\n#define PERFSUITE_CUDA_RUNTIME_SHIM\n"
                       "typedef struct CUstream_st *cudaStream_t;\n#endif\n"),
    "cuda_fp16.h": "/* perfsuite: nothing of it is needed */\n",
    "cuda_bf16.h": "/* perfsuite: nothing of it is needed */\n",
}
FLAGS = ("-O2", "-shared", "-fPIC", "-std=gnu11", "-Wall", "-Wl,-z,defs")
_NCCL_HOMES = ("NCCL_HOME", "NCCL_ROOT", "CUDA_HOME", "CUDA_PATH")
_SYSTEM_INCLUDES = ("/usr/local/cuda/include", "/usr/include")


def compiler() -> str:
    return os.environ.get(COMPILER_ENV) or "cc"


_WHEELS_PROBE = ("import importlib.util as u; s = u.find_spec('nvidia'); "
                 "print('\\n'.join(s.submodule_search_locations or []) if s else '')")


@functools.lru_cache(maxsize=8)
def _wheel_roots(python: str | None = None) -> tuple[Path, ...]:
    """The folders of the ``nvidia`` namespace package (NVIDIA's wheels) that ``python`` (the
    ranks' interpreter; default this one) sees."""
    if python and os.path.realpath(python) != os.path.realpath(sys.executable):
        try:
            out = run_command([python, "-c", _WHEELS_PROBE], timeout=30).stdout
        except LaunchError:
            return ()
        return tuple(Path(p) for p in out.splitlines() if p.strip())
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return ()
    return tuple(Path(p) for p in (spec.submodule_search_locations or [])) if spec else ()


def header_candidates(nccl_library: str | None = None, python: str | None = None) -> list[Path]:
    """Folders that may hold nccl.h, best first: the one beside a libnccl named
    (``.../nvidia/nccl/lib/libnccl.so.2`` -> ``.../nvidia/nccl/include``), the nvidia-nccl
    wheel's in ``python``, then $NCCL_HOME, $NCCL_ROOT, $CUDA_HOME, $CUDA_PATH and the system's."""
    found: list[Path] = []
    if nccl_library:
        found.append(Path(nccl_library).resolve().parent.parent / "include")
    for root in _wheel_roots(python):
        found.append(root / "nccl" / "include")
    found += [Path(os.environ[v]) / "include" for v in _NCCL_HOMES if os.environ.get(v)]
    found += [Path(p) for p in _SYSTEM_INCLUDES]
    return list(dict.fromkeys(found))


def find_header(nccl_library: str | None = None, python: str | None = None) -> Path | None:
    """The folder of the first nccl.h among ``header_candidates``, or None."""
    return next((d for d in header_candidates(nccl_library, python) if (d / "nccl.h").is_file()), None)


_VERSIONS: dict[str, str] = {}  # compiler real path -> its first --version line (one process each)
def _compiler_version(cc: str) -> str:
    real = os.path.realpath(shutil.which(cc) or cc)
    if real not in _VERSIONS:
        try:
            out = run_command([cc, "--version"], timeout=30).stdout
        except LaunchError:
            out = ""
        _VERSIONS[real] = (out.strip().splitlines() or [""])[0]
    return _VERSIONS[real]


def _key(cc: str, source: bytes, header: bytes) -> str:
    shim = "".join(f"{name}\n{text}" for name, text in sorted(SHIM.items()))
    text = "\n".join((_sha256(source), _sha256(shim.encode()), _sha256(header), __version__,
                      os.path.realpath(shutil.which(cc) or cc), _compiler_version(cc),
                      platform.machine(), " ".join(FLAGS)))
    return _sha256(text.encode())[:20]


def build(cc: str | None = None, cache: str | os.PathLike | None = None, python: str | None = None,
          nccl_library: str | None = None, include: str | os.PathLike | None = None) -> NativeBuild:
    """The cached library, built now when it is missing or damaged; never raises. ``include``:
    the folder of nccl.h (default: ``find_header(nccl_library, python)``; ``python`` is the
    ranks' interpreter, whose nvidia-nccl wheel holds the NCCL CuPy loads)."""
    named = cc or os.environ.get(COMPILER_ENV)
    cc = named or compiler()
    if shutil.which(cc) is None:
        if named:
            return NativeBuild(why=f"{COMPILER_ENV}={cc!r} is not an executable; name a C compiler")
        return NativeBuild(why="no C compiler (cc) on PATH to build the native NCCL loop (set "
                               f"{COMPILER_ENV} to one)")
    folder_h = Path(include) if include is not None else find_header(nccl_library, python)
    if folder_h is None or not (folder_h / "nccl.h").is_file():
        looked = [str(d) for d in ([Path(include)] if include is not None
                                   else header_candidates(nccl_library, python))]
        return NativeBuild(why=f"no nccl.h to build the native NCCL loop against (looked in "
                               f"{', '.join(looked)}); pip install nvidia-nccl-cu13 (or -cu12) brings it")
    try:
        header = (folder_h / "nccl.h").read_bytes()
        source_ref = importlib.resources.files("perfsuite.launch.native").joinpath(SOURCE)
        source = source_ref.read_bytes()
    except OSError as exc:
        return NativeBuild(why=f"the native NCCL loop's sources cannot be read ({_one_line(exc)})")
    folder = Path(cache or cache_root()) / FOLDER / _key(cc, source, header)
    found, damaged = _cached(folder)
    if found is not None:
        return found

    def argv(tmp: Path, src: Path, out: Path) -> list[str]:
        shim = tmp / "shim"
        shim.mkdir()
        for name, text in SHIM.items():
            (shim / name).write_text(text)
        return [cc, *FLAGS, "-I", str(shim), "-I", str(folder_h), "-o", str(out), str(src), "-ldl"]

    return compile_cached(folder, cc, source_ref, "libperfsuite_nccl", "native NCCL loop", argv,
                          {"compiler": os.path.realpath(shutil.which(cc) or cc),
                           "compiler_version": _compiler_version(cc), "source_sha256": _sha256(source),
                           "nccl_header": str(folder_h / "nccl.h"), "nccl_header_sha256": _sha256(header)},
                          damaged)


#: ``device_timing`` values that want the loop (transports/gpu.py: DEVICE_TIMINGS).
WANTS_LOOP = ("auto", "native-batch")


def job_options(options: dict, python: str | None = None) -> dict:
    """What an ``nccl`` world's ranks get (option ``native_nccl``), built on first use unless the
    device timing asked for is not the native loop's; with ``device_timing native-batch`` a loop
    that cannot be built is bad input (ConfigError), as ``--host-timing native`` is for mpi."""
    timing = str(options.get("device_timing", "auto"))
    if timing not in WANTS_LOOP:
        return {}
    built = build(python=python)
    if built.why and timing == "native-batch":
        raise ConfigError(f"device timing native-batch: {built.why}; use --device-timing auto to "
                          "fall back to the Python batch")
    if built.path is None:
        return {OPTION: {"why": built.why}}
    facts = {"path": built.path, "sha256": built.sha256}
    return {OPTION: {**facts, "note": built.note} if built.note else facts}
