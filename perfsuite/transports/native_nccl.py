"""The native NCCL timed loop on a rank: the library the launching side built
(``perfsuite.launch.native.nccl``; option ``native_nccl``), checked and loaded through ctypes.

The library links against nothing but libc. What it calls comes from the process itself: the
libnccl CuPy loaded (its path read from /proc/self/maps, opened in C with RTLD_NOLOAD, so the
very instance the communicator lives in and never a second copy) and the CUDA driver,
libcuda.so.1, which every CUDA process has loaded under that name. Before anything in it runs,
a rank checks the file's sha256 and its interface (ABI), finds exactly one libnccl loaded, and
makes the C side find every function it needs and create its two CUDA events; then all ranks
agree: one rank that cannot use it makes every rank time its batches from Python, with that
rank's reason, so no world mixes two loops.
"""
from __future__ import annotations

import ctypes
import os

from .base import COLLECTIVES
from .cuda_aware import mapped_libraries
from .native import load_checked

ABI = 2
OPTION = "native_nccl"  # launch/native_nccl.OPTION: what the launching side prepared
#: The collective codes the C loop takes: the index in base.COLLECTIVES, of the regular ones
#: (alltoallv's per-peer counts are not among its arguments: the Python batch times it).
CODES = {name: code for code, name in enumerate(COLLECTIVES) if name != "alltoallv"}
NCCL_LIBRARY = r"/libnccl\.so(\.[0-9]+)*$"  # libnccl.so.2, not libnccl-net.so (a plugin)
CUDA_DRIVER = r"/libcuda\.so(\.[0-9]+)*$"
_ERRORS = {1: "NCCL", 2: "CUDA", 3: "an argument"}
_WHY_CHARS = 512

_vp, _sz, _int, _long = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_long


def loaded_nccl(maps: str = "/proc/self/maps") -> tuple[str | None, str | None]:
    """(the path of the one libnccl this process has loaded, None) or (None, why not)."""
    paths = list(dict.fromkeys(os.path.realpath(p) for p in mapped_libraries(NCCL_LIBRARY, maps)))
    if not paths:
        return None, "no libnccl is loaded in this process (CuPy loads it with its NCCL module)"
    if len(paths) > 1:
        return None, (f"{len(paths)} libnccl are loaded in this process ({', '.join(paths)}); the "
                      "loop cannot tell which one CuPy's communicator lives in")
    if not mapped_libraries(CUDA_DRIVER, maps):
        return None, "the CUDA driver (libcuda.so.1) is not loaded in this process"
    return paths[0], None


class NcclLoop:
    """``batch(...)``: seconds of ``calls`` calls of one collective issued back to back by C
    between one pair of CUDA events on the stream. One per rank; ``close`` before the
    communicator is destroyed."""

    def __init__(self, lib: ctypes.CDLL, handle: int, path: str, nccl_path: str):
        self.path, self.nccl_path = path, nccl_path
        self._lib, self._handle = lib, handle
        self._batch = lib.perfsuite_nccl_batch
        self._batch.restype = _int
        self._batch.argtypes = [_vp, _vp, _int, _vp, _vp, _sz, _sz, _int, _int, _int, _int, _vp, _long,
                                _long, _sz, _long, ctypes.POINTER(ctypes.c_float)]
        self._error = lib.perfsuite_nccl_error
        self._error.restype, self._error.argtypes = ctypes.c_char_p, [_vp]
        self._close = lib.perfsuite_nccl_close
        self._close.restype, self._close.argtypes = None, [_vp]
        self._ms = ctypes.c_float(0.0)
        self._ms_ref = ctypes.byref(self._ms)
        self.version = int(lib.perfsuite_nccl_version(_vp(handle)))
        self.alltoall = ("ncclAlltoAll" if lib.perfsuite_nccl_alltoall(_vp(handle))
                         else "grouped ncclSend/ncclRecv")

    def batch(self, comm: int, code: int, send: int, recv: int, count: int, peer_bytes: int,
              datatype: int, op: int, root: int, nranks: int, stream: int, calls: int,
              copies: int = 1, stride: int = 0, turn: int = 0) -> float:
        """Call i works on the buffers' copy (turn + i) % copies, ``stride`` bytes apart."""
        rc = self._batch(self._handle, comm, code, send, recv, count, peer_bytes, datatype, op, root,
                         nranks, stream, calls, copies, stride, turn, self._ms_ref)
        if rc != 0:
            what = _ERRORS.get(rc, f"code {rc}")
            raise RuntimeError(f"native NCCL loop failed ({what}): "
                               f"{(self._error(self._handle) or b'').decode(errors='replace')}")
        return self._ms.value / 1e3

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle:
            self._close(handle)

    def describe(self) -> dict:
        return {"native_nccl": self.path, "nccl_library": self.nccl_path, "alltoall_call": self.alltoall}


def open_loop(facts: dict | None, maps: str = "/proc/self/maps",
              cuda: str = "libcuda.so.1") -> tuple[NcclLoop | None, str | None]:
    """This rank's loop from the launching side's ``native_nccl`` facts, or why not (one line).
    Call it after the NCCL communicator exists (CuPy has loaded NCCL, a CUDA context is current)."""
    lib, path = load_checked(facts, "native NCCL loop", "perfsuite_nccl_abi", ABI,
                             "no native NCCL loop was prepared for this world (the launching side builds "
                             "it: launch/native_nccl.job_options)")
    if lib is None:
        return None, path
    nccl_path, why = loaded_nccl(maps)
    if why:
        return None, why
    opener = lib.perfsuite_nccl_open
    opener.restype, opener.argtypes = _vp, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, _sz]
    why_buf = ctypes.create_string_buffer(_WHY_CHARS)
    handle = opener(os.fsencode(nccl_path), os.fsencode(cuda), why_buf, _WHY_CHARS)
    if not handle:
        return None, f"native NCCL loop: {why_buf.value.decode(errors='replace')}"
    return NcclLoop(lib, handle, path, nccl_path), None


def agree(comm, loop: NcclLoop | None, why: str | None) -> tuple[NcclLoop | None, str | None]:
    """Every rank's verdict: the loop if all ranks can use it, else None (this rank's loop
    closed) and the first reason."""
    whys = comm.allgather(why if loop is None else None)
    bad = [(r, w) for r, w in enumerate(whys) if w]
    if not bad:
        return loop, None
    if loop is not None:
        loop.close()
    if len({w for _, w in bad}) == 1 and len(bad) == len(whys):
        return None, bad[0][1]
    return None, f"rank {bad[0][0]}: {bad[0][1]}"
