"""The native timed loop on a rank: the library the launching side built
(``perfsuite.launch.native.mpi``), checked and loaded through ctypes.

Before anything in it runs, a rank checks that the file is the one that was built (sha256),
that it speaks this interface (ABI), that its MPI is this rank's MPI (library version and the
size of a communicator handle, which differ between MPICH's own ABI and the standard one), and
then all ranks agree: one rank that cannot use it makes the whole world use the mpi4py loop,
with that rank's reason, so no world mixes two loops.
"""
from __future__ import annotations

import ctypes
import hashlib

import numpy as np

from .base import Call, peer_counts
from .cuda_aware import library_text
from .mpi_calls import MPI_OPS

#: 3: the loop takes alltoallv's counts and displacements (an int array, NULL for the others).
ABI = 3
#: The collectives in the C loop's order (its enum).
COLLECTIVES = ("allreduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "alltoallv")
#: MPI's count argument is an int: bigger buffers are timed by the mpi4py loop.
MAX_COUNT = 2**31 - 1
_LIBRARY_VERSION_CHARS = 8192  # MPI_MAX_LIBRARY_VERSION_STRING is 8192 in MPICH, 256 in Open MPI

_c_void_p, _c_long = ctypes.c_void_p, ctypes.c_long


class NativeLoop:
    """``loop(send, recv, iters, turns)``: seconds of each of ``iters`` barrier-separated calls."""

    def __init__(self, lib: ctypes.CDLL, comm, path: str):
        from mpi4py import MPI

        self.path = path
        self._mpi = MPI
        self._loop = lib.perfsuite_native_loop
        self._loop.restype = ctypes.c_int
        self._loop.argtypes = [_c_void_p, _c_void_p, _c_void_p, ctypes.c_int, ctypes.c_int,
                               _c_void_p, _c_void_p, _c_long, _c_long, _c_long, _c_long, _c_void_p,
                               _c_void_p]
        self._spin = lib.perfsuite_native_spin
        self._spin.restype, self._spin.argtypes = ctypes.c_double, [_c_long]
        self._comm = MPI._addressof(comm)
        self._rank = comm.Get_rank()
        self._ops = {op: MPI._addressof(getattr(MPI, name)) for op, name in MPI_OPS.items()}
        self._types: dict[str, int] = {}
        self.bind(Call())

    def bind(self, call: Call) -> None:
        """The collective, op, root and in-place form the next loops make."""
        self._coll = COLLECTIVES.index(call.collective)
        self._op = self._ops.get(call.op, self._ops["sum"])
        self._root, self._inplace = call.root, call.inplace
        self._bits = call.dtype == "bfloat16"  # held as uint16: the mpi4py loop names its type
        # alltoallv: MPI_Alltoallv's four int arrays in one, kept alive while bound
        self._v = (np.array([c for part in peer_counts(call.splits, self._rank) for c in part], np.intc)
                   if call.splits else None)

    def fits(self, buf) -> bool:
        return (isinstance(buf, np.ndarray) and buf.size <= MAX_COUNT and buf.flags.c_contiguous
                and not self._bits)

    def _type(self, dtype: np.dtype) -> int:
        code = dtype.char
        if code not in self._types:  # mpi4py's own datatype for the buffer, as Allreduce picks it
            self._types[code] = self._mpi._addressof(self._mpi.Datatype.fromcode(code))
        return self._types[code]

    def loop(self, send, recv, iters: int, turns: int = 0) -> np.ndarray:
        times = np.empty(iters)
        rc = self._loop(self._comm, self._type(recv.dtype), self._op, self._coll, self._root,
                        None if send is recv or self._inplace else send.ctypes.data, recv.ctypes.data,
                        send.size, recv.size, iters, max(turns, 0), times.ctypes.data,
                        None if self._v is None else self._v.ctypes.data)
        if rc != 0:
            raise RuntimeError(f"MPI error in the native loop: {self._mpi.Get_error_string(rc)}")
        return times

    def spin_seconds(self, turns: int) -> float:
        """Seconds ``turns`` turns of the injected spin take, timed in C as the loop spins."""
        return float(self._spin(turns))


def open_loop(facts: dict | None, comm) -> tuple[NativeLoop | None, str | None]:
    """This rank's loop from the launching side's ``native_loop`` facts, or why not (one line)."""
    lib, got = load_checked(facts, "native loop", "perfsuite_native_abi", ABI,
                            "no native loop was prepared for this world")
    if lib is None:
        return None, got
    why = _other_mpi(lib, got)
    return (None, why) if why else (NativeLoop(lib, comm, got), None)


def load_checked(facts: dict | None, what: str, abi_symbol: str, abi: int, absent: str
                 ) -> tuple[ctypes.CDLL | None, str]:
    """(the library, its path) the launching side's facts name, read on this host, with the
    sha256 it was built with and the interface (ABI) this perfsuite calls; else (None, why)."""
    if not facts or facts.get("why") or not facts.get("path"):
        return None, str((facts or {}).get("why") or absent)
    path = str(facts["path"])
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return None, f"{what} {path} cannot be read on this host ({exc.strerror})"
    if hashlib.sha256(data).hexdigest() != facts.get("sha256"):
        return None, (f"{what} {path} is corrupt (its sha256 is not the one it was built "
                      "with); the next run rebuilds it")
    try:
        lib = ctypes.CDLL(path)
        found = getattr(lib, abi_symbol)()
    except (OSError, AttributeError) as exc:
        return None, f"{what} {path} cannot be loaded ({' '.join(str(exc).split())})"
    if found != abi:
        return None, f"{what} {path} has interface {found}, this perfsuite needs {abi}"
    return lib, path


def _other_mpi(lib: ctypes.CDLL, path: str) -> str | None:
    """Why the library's MPI is not this rank's, or None when it is."""
    from mpi4py import MPI

    buf, n = ctypes.create_string_buffer(_LIBRARY_VERSION_CHARS), ctypes.c_int(0)
    try:
        lib.perfsuite_native_mpi_library(buf, ctypes.byref(n))
        sizes = (ctypes.c_int * 3)()
        lib.perfsuite_native_handle_sizes(sizes)
    except AttributeError as exc:
        return f"native loop {path} lacks {exc}"
    theirs = _first_line(buf.value.decode(errors="replace"))
    ours = _first_line(MPI.Get_library_version())
    if theirs != ours:
        return (f"native loop {path} was built for another MPI ({theirs!r}; this rank runs {ours!r}); "
                "set MPICC to this MPI's mpicc")
    want = [MPI._sizeof(MPI.Comm), MPI._sizeof(MPI.Datatype), MPI._sizeof(MPI.Op)]
    if list(sizes) != want:
        return (f"native loop {path} uses {list(sizes)}-byte MPI handles, mpi4py {want} (another "
                "ABI of the same MPI); set MPICC to the mpicc mpi4py was built with")
    return None


def _first_line(text: str) -> str:
    """The library's first line, spaces collapsed."""
    return " ".join((library_text(text).splitlines() or [""])[0].split())


def agree(comm, loop: NativeLoop | None, why: str | None) -> tuple[NativeLoop | None, str | None]:
    """Every rank's verdict: the loop if all ranks can use it, else None and the first reason."""
    whys = comm.allgather(why if loop is None else None)
    bad = [(r, w) for r, w in enumerate(whys) if w]
    if not bad:
        return loop, None
    if len({w for _, w in bad}) == 1 and len(bad) == len(whys):
        return None, bad[0][1]
    return None, f"rank {bad[0][0]}: {bad[0][1]}"
