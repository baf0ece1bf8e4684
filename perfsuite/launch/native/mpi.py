"""The native timed loop's library (launch/native/c/native_loop.c), built on the launching side with
the MPI's own ``mpicc`` on first use and cached per user.

The cache key covers the source, this perfsuite's version, the compiler wrapper's real path and
what it says it runs (``mpicc -show`` / ``--showme``: include and library folders), so another MPI
or another perfsuite gets its own build. Each build folder holds the library under a name with
its own sha256 and a versioned stamp naming that file: a reader never sees a half-written
library, and two builders racing leave a stamp and a library that agree. Ranks receive the
path and the sha256 (``job_options``) and check both before loading anything.

Nothing here raises for a missing compiler, a failed build or an unwritable cache: the world
then runs the mpi4py loop, and ``why`` is the one line that says so.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.resources
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ... import __version__
from ...store import formats
from ...records.errors import FormatError, LaunchError
from ..commands import default_program, run_command

CACHE_ENV = "PERFSUITE_CACHE"  # a folder; default $XDG_CACHE_HOME/perfsuite or ~/.cache/perfsuite
COMPILER_ENV = "MPICC"  # the compiler wrapper, as mpi4py's own build reads it
SOURCE = "c/native_loop.c"  # in perfsuite.launch.native
STAMP = "stamp.json"
BUILD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class NativeBuild:
    """A usable library (``path``, ``sha256``), or ``why`` there is none, in one line."""

    path: str | None = None
    sha256: str | None = None
    why: str | None = None
    note: str | None = None  # something worth a line even though the build is usable

    def job_options(self) -> dict:
        """What a world's ranks get (option ``native_loop``)."""
        if self.path is None:
            return {"native_loop": {"why": self.why}}
        facts = {"path": self.path, "sha256": self.sha256}
        return {"native_loop": {**facts, "note": self.note} if self.note else facts}


def cache_root() -> Path:
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "perfsuite" if xdg else Path.home() / ".cache" / "perfsuite"


def compiler(python: str | None = None) -> str:
    """$MPICC, else the mpicc beside the Python the ranks run (its MPI wheel's), else PATH's."""
    if os.environ.get(COMPILER_ENV):
        return os.environ[COMPILER_ENV]
    beside = Path(python or sys.executable).parent / "mpicc"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return default_program("mpicc")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_SHOWN: dict[str, str] = {}  # compiler real path -> what it says it runs (one process each)
_FAILED: dict[tuple[str, str], NativeBuild] = {}  # (compiler, folder) -> a failed build, once a process


def _shows(cc: str) -> str:
    """The wrapper's own account of its compile line (MPICH ``-show``, Open MPI ``--showme``)."""
    real = os.path.realpath(cc)
    if real not in _SHOWN:
        shown = ""
        for flag in ("-show", "--showme"):
            try:
                shown = run_command([cc, flag], timeout=30).stdout.strip()
                break
            except LaunchError:
                continue
        _SHOWN[real] = shown
    return _SHOWN[real]


def _key(cc: str, source: bytes) -> str:
    text = "\n".join((_sha256(source), __version__, os.path.realpath(cc), _shows(cc)))
    return _sha256(text.encode())[:20]


def _cached(folder: Path) -> tuple[NativeBuild | None, str | None]:
    """The build in ``folder`` if intact; else (None, why it is not, or None when absent)."""
    stamp_path = folder / STAMP
    if not stamp_path.exists():
        return None, None
    try:
        stamp = formats.read_native_stamp(stamp_path)
        lib = folder / stamp["library"]
        data = lib.read_bytes()
    except (FormatError, OSError, KeyError, TypeError) as exc:
        return None, f"cached native loop in {folder} is unreadable ({exc})"
    if _sha256(data) != stamp.get("library_sha256"):
        return None, f"cached native loop {lib} is corrupt (its sha256 is not the one it was built with)"
    return NativeBuild(str(lib), stamp["library_sha256"]), None


def build(cc: str | None = None, cache: str | os.PathLike | None = None,
          python: str | None = None) -> NativeBuild:
    """The cached library for the MPI of ``python`` (the ranks' interpreter; default this one)
    and this perfsuite, built now when it is missing or damaged."""
    named = cc or os.environ.get(COMPILER_ENV)
    cc = named or compiler(python)
    if shutil.which(cc) is None:
        if named:
            return NativeBuild(why=f"{COMPILER_ENV}={cc!r} is not an executable; name the MPI's "
                                   "compiler wrapper (mpicc)")
        return NativeBuild(why=f"no mpicc beside {python or sys.executable} or on PATH (set "
                               f"{COMPILER_ENV} to the MPI's compiler wrapper)")
    source_ref = importlib.resources.files("perfsuite.launch.native").joinpath(SOURCE)
    source = source_ref.read_bytes()
    folder = Path(cache or cache_root()) / "native" / _key(cc, source)
    found, damaged = _cached(folder)
    if found is not None:
        return found
    return compile_cached(folder, cc, source_ref, "libperfsuite_loop", "native loop",
                          lambda tmp, src, out: [cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(src)],
                          {"compiler": os.path.realpath(cc), "compiler_shows": _shows(cc),
                           "source_sha256": _sha256(source)}, damaged)


def compile_cached(folder: Path, cc: str, source_ref, stem: str, what: str,
                   argv: Callable[[Path, Path, Path], list[str]], stamp: dict, damaged: str | None) -> NativeBuild:
    """Compile ``source_ref`` by ``argv(tmp, source, out)`` into ``folder``: the library named by
    its sha256 and the stamp that vouches for it, each written atomically. A failure is one line
    (the compiler's first error), remembered per process for (compiler, folder): every world asks,
    one compiler error per process is enough."""
    if (cc, str(folder)) in _FAILED:
        return _FAILED[(cc, str(folder))]
    with tempfile.TemporaryDirectory(prefix=f"{stem}-") as tmp, importlib.resources.as_file(source_ref) as src:
        out = Path(tmp) / "lib.so"
        try:
            done = run_command(argv(Path(tmp), Path(src), out), timeout=BUILD_TIMEOUT_S, check=False)
            if done.returncode != 0:
                raise LaunchError(f"exited {done.returncode}: {first_error(done.stderr or done.stdout)}")
            data = out.read_bytes()
        except (LaunchError, OSError) as exc:
            failed = NativeBuild(why=f"{cc} could not build the {what} ({_one_line(exc)})")
            _FAILED[(cc, str(folder))] = failed
            return failed
    digest = _sha256(data)
    lib = folder / f"{stem}-{digest[:16]}.so"
    try:
        formats.atomic_write(lib, data)
        formats.write_native_stamp(folder / STAMP, {
            "library": lib.name, "library_sha256": digest, "perfsuite": __version__, **stamp,
            "built": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
    except OSError as exc:
        return NativeBuild(why=f"the {what}'s cache folder {folder} is not writable "
                               f"({exc.strerror or exc}; set {CACHE_ENV} to a writable folder)")
    return NativeBuild(str(lib), digest, note=f"{damaged}; rebuilt" if damaged else None)


def first_error(output: str) -> str:
    """The compiler's first error line (the cause; what follows it is often its consequences)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in lines if "error" in line.lower()), lines[-1] if lines else "no output")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."
