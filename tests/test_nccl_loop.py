"""The native NCCL timed loop without a GPU: it builds here against NVIDIA's wheel's nccl.h (torch
brings nvidia-nccl-cu13, so CI has it), exports its interface and links against nothing but
libc; and the C loop itself runs, in a child process, against stand-in libnccl and libcuda built
here that log every call, so the calls each collective issues, the events around the batch and
the errors are pinned. Whether it times a real GPU right is scripts/gpu-collectives.sh's to show."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfsuite.records.errors import ConfigError, LaunchError
from perfsuite.launch.native import nccl as builder
from perfsuite.launch.native.mpi import NativeBuild
from perfsuite.transports import native_nccl

REPO = Path(__file__).resolve().parents[1]
SYMBOLS = ("perfsuite_nccl_abi", "perfsuite_nccl_open", "perfsuite_nccl_version", "perfsuite_nccl_alltoall",
           "perfsuite_nccl_batch", "perfsuite_nccl_error", "perfsuite_nccl_close")


def dynamic_symbols(lib: Path, which: str) -> set[str]:
    out = subprocess.run(["nm", "-D", which, str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> NativeBuild:
    """The library built here against the wheel's nccl.h, in a cache of this module's own."""
    if builder.find_header() is None:
        pytest.skip(f"no nccl.h here (looked in {', '.join(map(str, builder.header_candidates()))}); "
                    "pip install nvidia-nccl-cu13 (torch brings it)")
    made = builder.build(cache=tmp_path_factory.mktemp("cache"))
    assert made.why is None, made.why
    return made


def test_builds_against_the_wheel_header_and_exports_the_interface(built):
    lib = Path(built.path)
    assert lib.parent.parent.name == builder.FOLDER and lib.name.startswith("libperfsuite_nccl-")
    assert set(SYMBOLS) <= dynamic_symbols(lib, "--defined-only")
    # Nothing from NCCL or CUDA at link time: both are found in the process when it loads.
    undefined = dynamic_symbols(lib, "--undefined-only")
    assert not {s for s in undefined if s.startswith(("nccl", "cu", "pnccl"))}, undefined
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert "libnccl" not in needed and "libcuda" not in needed and "libcudart" not in needed
    loaded = ctypes.CDLL(str(lib))  # loads without a GPU: nothing is resolved until open
    assert loaded.perfsuite_nccl_abi() == native_nccl.ABI


def test_a_second_build_is_the_cached_one(built, monkeypatch):
    def no_compiler(*a, **k):
        raise LaunchError("the cache was not used")

    monkeypatch.setattr(builder, "run_command", no_compiler)
    monkeypatch.setattr(builder, "_compiler_version", lambda cc: builder._VERSIONS.get(
        os.path.realpath(shutil.which(cc) or cc), ""))
    again = builder.build(cache=Path(built.path).parents[2])
    assert (again.path, again.sha256, again.why) == (built.path, built.sha256, None)


def test_the_builder_never_raises(tmp_path):
    assert "is not an executable" in builder.build(cc=str(tmp_path / "no-cc"), cache=tmp_path).why
    why = builder.build(cache=tmp_path, include=tmp_path).why
    assert why.startswith("no nccl.h to build the native NCCL loop against") and str(tmp_path) in why
    (tmp_path / "nccl.h").write_text("#error this header is broken\n")
    why = builder.build(cache=tmp_path, include=tmp_path).why
    assert "could not build the native NCCL loop" in why and "broken" in why and "\n" not in why
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / builder.FOLDER).write_text("a file where the cache folder goes")
    if builder.find_header() is not None:
        why = builder.build(cache=tmp_path / "cache").why
        assert "is not writable" in why and "PERFSUITE_CACHE" in why


def test_the_header_beside_the_loaded_library_comes_first(tmp_path):
    lib = tmp_path / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    lib.touch()
    assert builder.header_candidates(str(lib))[0] == tmp_path / "nccl" / "include"


def test_job_options_follow_the_device_timing(monkeypatch):
    made = NativeBuild("/cache/libperfsuite_nccl-x.so", "abc")
    monkeypatch.setattr(builder, "build", lambda python=None: made)
    assert builder.job_options({"device_timing": "batch"}) == {}
    assert builder.job_options({"device_timing": "graph"}) == {}
    want = {"native_nccl": {"path": made.path, "sha256": "abc"}}
    assert builder.job_options({}) == want == builder.job_options({"device_timing": "native-batch"})
    monkeypatch.setattr(builder, "build", lambda python=None: NativeBuild(why="no nccl.h here"))
    assert builder.job_options({"device_timing": "auto"}) == {"native_nccl": {"why": "no nccl.h here"}}
    with pytest.raises(ConfigError, match=r"^device timing native-batch: no nccl.h here; use --device-timing auto"):
        builder.job_options({"device_timing": "native-batch"})


def test_the_one_loaded_libnccl_is_found_in_the_maps(tmp_path):
    maps = tmp_path / "maps"
    driver = "7f10-7f11 r-xp 0 08:01 9 /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05\n"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /venv/nvidia/nccl/lib/libnccl.so.2\n"
                    "7f01-7f02 r--p 0 08:01 1 /venv/nvidia/nccl/lib/libnccl.so.2\n"
                    "7f02-7f03 r-xp 0 08:01 2 /opt/plugins/libnccl-net.so\n" + driver)
    assert native_nccl.loaded_nccl(str(maps)) == ("/venv/nvidia/nccl/lib/libnccl.so.2", None)
    maps.write_text(driver)
    assert native_nccl.loaded_nccl(str(maps))[1].startswith("no libnccl is loaded")
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /a/libnccl.so.2\n7f02-7f03 r-xp 0 08:01 2 /b/libnccl.so.2\n" + driver)
    assert "2 libnccl are loaded" in native_nccl.loaded_nccl(str(maps))[1]
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /a/libnccl.so.2\n")
    assert "libcuda.so.1) is not loaded" in native_nccl.loaded_nccl(str(maps))[1]


def test_open_loop_refuses_what_it_cannot_trust(tmp_path):
    assert "no native NCCL loop was prepared" in native_nccl.open_loop(None)[1]
    assert native_nccl.open_loop({"why": "no cc"}) == (None, "no cc")
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"not the library that was built")
    assert "is corrupt" in native_nccl.open_loop({"path": str(lib), "sha256": "0" * 64})[1]
    assert "cannot be read" in native_nccl.open_loop({"path": str(tmp_path / "gone.so"), "sha256": "0"})[1]


# --- the C loop against stand-in libraries that log what they are called with ---------------

STUB_NCCL = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static char log_[65536];
static void note(const char *fmt, size_t a, size_t b, size_t c, int d, int e, int f) {
    char line[256];
    snprintf(line, sizeof line, fmt, a, b, c, d, e, f);
    strncat(log_, line, sizeof log_ - strlen(log_) - 1);
}
const char *stub_log(void) { return log_; }
void stub_clear(void) { log_[0] = 0; }
int ncclGetVersion(int *v) { *v = atoi(getenv("STUB_NCCL_VERSION")); return 0; }
const char *ncclGetErrorString(int r) { return r == 5 ? "invalid usage" : "?"; }
#define P(x) ((size_t)(x))
int ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *c, void *st) {
    note("allreduce %zx %zx %zu t%d op%d %d;", P(s), P(r), n, t, op, c == (void *)0x5eed);
    return n == 13 ? 5 : 0;
}
int ncclAllGather(const void *s, void *r, size_t n, int t, void *c, void *st) {
    note("all_gather %zx %zx %zu t%d %d %d;", P(s), P(r), n, t, st == (void *)0x57, 0); return 0; }
int ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, void *c, void *st) {
    note("reduce_scatter %zx %zx %zu t%d op%d %d;", P(s), P(r), n, t, op, 0); return 0; }
int ncclBroadcast(const void *s, void *r, size_t n, int t, int root, void *c, void *st) {
    note("broadcast %zx %zx %zu t%d root%d %d;", P(s), P(r), n, t, root, 0); return 0; }
int ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, void *c, void *st) {
    note("reduce %zx %zx %zu t%d op%d root%d;", P(s), P(r), n, t, op, root); return 0; }
int ncclSend(const void *s, size_t n, int t, int peer, void *c, void *st) {
    note("send %zx %zu %zu t%d peer%d %d;", P(s), n, 0, t, peer, 0); return 0; }
int ncclRecv(void *r, size_t n, int t, int peer, void *c, void *st) {
    note("recv %zx %zu %zu t%d peer%d %d;", P(r), n, 0, t, peer, 0); return 0; }
int ncclGroupStart(void) { note("group(%zu%zu%zu%d%d%d;", 0, 0, 0, 0, 0, 0); return 0; }
int ncclGroupEnd(void) { note(")group%zu%zu%zu%d%d%d;", 0, 0, 0, 0, 0, 0); return 0; }
int ncclAlltoAll(const void *s, void *r, size_t n, int t, void *c, void *st) {
    note("ncclAlltoAll %zx %zx %zu t%d %d %d;", P(s), P(r), n, t, 0, 0); return 0; }
"""

STUB_CUDA = r"""
#include <string.h>
extern void stub_mark(const char *what);
static char log_[4096];
const char *stub_cuda_log(void) { return log_; }
static void note(const char *what) { strncat(log_, what, sizeof log_ - strlen(log_) - 1); }
static int events;
int cuEventCreate(void **e, unsigned flags) { *e = (void *)(size_t)(0xe0 + events++); note("create;"); return 0; }
int cuEventRecord(void *e, void *s) { note(e == (void *)0xe0 ? "start;" : "end;"); return s == (void *)0x57 ? 0 : 400; }
int cuEventSynchronize(void *e) { note("wait;"); return 0; }
int cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 2.5f; return 0; }
int cuEventDestroy_v2(void *e) { note("destroy;"); return 0; }
int cuStreamSynchronize(void *s) { note("sync;"); return 0; }
int cuGetErrorString(int r, const char **t) { *t = "invalid handle"; return 0; }
"""

CHILD = r"""
import ctypes, hashlib, json, sys
from perfsuite.transports import native_nccl
lib, stub_nccl, stub_cuda = sys.argv[1:4]
n = ctypes.CDLL(stub_nccl)
c = ctypes.CDLL(stub_cuda)
n.stub_log.restype = c.stub_cuda_log.restype = ctypes.c_char_p
sha = hashlib.sha256(open(lib, "rb").read()).hexdigest()
loop, why = native_nccl.open_loop({"path": lib, "sha256": sha}, cuda=stub_cuda)
out = {"why": why}
if loop is not None:
    out.update(version=loop.version, alltoall=loop.alltoall, calls={})
    C, S, R, COMM, STREAM = native_nccl.CODES, 0x1000, 0x9000, 0x5eed, 0x57
    for name, count, peer in (("allreduce", 8, 0), ("all_gather", 2, 0), ("reduce_scatter", 3, 0),
                              ("alltoall", 2, 8), ("broadcast", 8, 0), ("reduce", 8, 0)):
        n.stub_clear()
        seconds = loop.batch(COMM, C[name], S, R, count, peer, 9, 4, 1, 3, STREAM, 2)
        out["calls"][name] = [seconds, n.stub_log().decode()]
    n.stub_clear()  # three calls over two copies 0x40 bytes apart, from the second copy on
    loop.batch(COMM, C["allreduce"], S, R, 8, 0, 7, 0, 0, 3, STREAM, 3, 2, 0x40, 1)
    out["rotated"] = n.stub_log().decode()
    n.stub_clear()
    out["zero"] = loop.batch(COMM, C["allreduce"], S, S, 8, 0, 7, 0, 0, 3, STREAM, 0)
    try:
        loop.batch(COMM, C["allreduce"], S, R, 13, 0, 7, 0, 0, 3, STREAM, 2)
    except RuntimeError as exc:
        out["nccl_error"] = str(exc)
    try:
        loop.batch(COMM, C["allreduce"], S, R, 8, 0, 7, 0, 0, 3, 0x99, 1)
    except RuntimeError as exc:
        out["cuda_error"] = str(exc)
    loop.close()
    out["cuda"] = c.stub_cuda_log().decode()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def stubs(tmp_path_factory, built) -> dict[str, Path]:
    """libnccl.so.2 and libcuda.so.1 stand-ins, named as the real ones so the maps find them."""
    folder = tmp_path_factory.mktemp("stubs")
    made = {}
    for name, code in (("libnccl.so.2", STUB_NCCL), ("libcuda.so.1", STUB_CUDA)):
        (folder / f"{name}.c").write_text(code)
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(folder / name), str(folder / f"{name}.c")],
                       check=True, capture_output=True, timeout=120)
        made[name] = folder / name
    return made


def run_child(built, stubs, version: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, built.path, str(stubs["libnccl.so.2"]),
                          str(stubs["libcuda.so.1"])], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "STUB_NCCL_VERSION": str(version), "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_c_loop_issues_each_collective_as_nccl_tests_does(built, stubs):
    got = run_child(built, stubs, 22703)  # NCCL 2.27: alltoall as grouped send/recv
    assert got["why"] is None and got["version"] == 22703 and got["alltoall"] == "grouped ncclSend/ncclRecv"
    calls = {k: v[1] for k, v in got["calls"].items()}
    assert all(v[0] == pytest.approx(2.5e-3) for v in got["calls"].values())  # the events' 2.5 ms
    # bfloat16 (9), avg (4), root 1, twice each, the communicator and stream passed through
    assert calls["allreduce"] == "allreduce 1000 9000 8 t9 op4 1;" * 2
    assert calls["all_gather"] == "all_gather 1000 9000 2 t9 1 0;" * 2
    assert calls["reduce_scatter"] == "reduce_scatter 1000 9000 3 t9 op4 0;" * 2
    assert calls["broadcast"] == "broadcast 1000 9000 8 t9 root1 0;" * 2
    assert calls["reduce"] == "reduce 1000 9000 8 t9 op4 root1;" * 2
    group = ("group(000000;" + "".join(f"send {0x1000 + 8 * p:x} 2 0 t9 peer{p} 0;recv {0x9000 + 8 * p:x} 2 0 t9 peer{p} 0;"
                                       for p in range(3)) + ")group000000;")
    assert calls["alltoall"] == group * 2
    # nccl-tests' shift per iteration: call i on copy (turn + i) % copies
    assert got["rotated"] == "allreduce 1040 9040 8 t7 op0 1;allreduce 1000 9000 8 t7 op0 1;allreduce 1040 9040 8 t7 op0 1;"
    assert got["zero"] == pytest.approx(2.5e-3)
    assert "NCCL" in got["nccl_error"] and "invalid usage (NCCL error 5" in got["nccl_error"]
    assert "cuEventRecord: CUDA error 400: invalid handle" in got["cuda_error"]
    # events made once, each batch: wait for the stream, start, the calls, end, wait for the end
    assert got["cuda"].startswith("create;create;sync;start;end;wait;") and got["cuda"].endswith("destroy;destroy;")


def test_the_c_loop_calls_nccl_alltoall_where_nccl_has_it(built, stubs):
    got = run_child(built, stubs, 23007)
    assert got["alltoall"] == "ncclAlltoAll"
    assert got["calls"]["alltoall"][1] == "ncclAlltoAll 1000 9000 2 t9 0 0;" * 2


def test_open_without_the_process_libraries_says_why(built, tmp_path):
    """Here no libnccl is loaded: the loop refuses before anything is looked up."""
    loop, why = native_nccl.open_loop({"path": built.path, "sha256": built.sha256},
                                      maps=str(tmp_path / "no-maps"))
    assert loop is None and why.startswith("no libnccl is loaded in this process")
    script = textwrap.dedent(f"""
        import ctypes
        lib = ctypes.CDLL({built.path!r})
        lib.perfsuite_nccl_open.restype = ctypes.c_void_p
        lib.perfsuite_nccl_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        why = ctypes.create_string_buffer(512)
        print(lib.perfsuite_nccl_open(b"/nowhere/libnccl.so.2", None, why, 512), why.value.decode())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("None /nowhere/libnccl.so.2 is not loaded in this process")
