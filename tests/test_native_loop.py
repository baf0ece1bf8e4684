"""The native timed loop of the ``mpi`` transport: built with the MPI's own mpicc on first use,
cached per user, checked on every rank before it runs, and never a crash when it cannot be
had (a bad compiler, an unwritable or damaged cache, a library of another MPI): the world is
then timed by the mpi4py loop and says why, in one line."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from perfsuite.store import formats
from perfsuite.verdicts import regress
from perfsuite import suite
from perfsuite.reading import verdict_text as vt
from perfsuite.bench.allreduce import allreduce_cases, table
from perfsuite.launch.native import mpi as native
from perfsuite.launch.launchers import LaunchConfig
from perfsuite.launch.world import run_world
from perfsuite.records.model import Baseline, Case, timing_of
from perfsuite.transports.native import ABI as NATIVE_ABI

FAST = {"iters": 20, "warmup": 2, "copy_bw": False, "canary": 0}
BUILT = native.build()
# conftest's native_loop: a skip without the library, a failure where .ci/run requires it.
needs_build = pytest.mark.usefixtures("native_loop")


def measure(sizes, transport="mpi", n=2, timeout=60, **opts):
    spec = suite.plan(allreduce_cases([transport], [n], sizes), {**FAST, **opts})[0]
    return run_world(spec, LaunchConfig(), timeout)


# --- building and the cache -----------------------------------------------------------------

@needs_build
def test_a_build_is_cached_stamped_and_reused(tmp_path, monkeypatch):
    first = native.build(cache=tmp_path)
    assert first.why is None and first.path.startswith(str(tmp_path))
    data = open(first.path, "rb").read()
    assert hashlib.sha256(data).hexdigest() == first.sha256
    stamp = json.loads((tmp_path / "native" / first.path.split("/")[-2] / native.STAMP).read_text())
    assert (stamp["format"], stamp["version"]) == (formats.NATIVE, formats.VERSIONS[formats.NATIVE])
    assert stamp["library_sha256"] == first.sha256 and stamp["perfsuite"]

    def no_compiler(argv, **kw):
        raise AssertionError(f"rebuilt although cached: {argv}")

    monkeypatch.setattr(native, "run_command", no_compiler)  # the wrapper's -show is remembered
    assert native.build(cache=tmp_path) == first


@pytest.mark.parametrize("cc, says", [
    ("/bin/false", "/bin/false could not build the native loop"),
    ("/no/such/mpicc", "MPICC='/no/such/mpicc' is not an executable"),
])
def test_a_bad_compiler_is_one_line_and_no_library(tmp_path, cc, says):
    got = native.build(cc=cc, cache=tmp_path)
    assert got.path is None and got.why.startswith(says) and "\n" not in got.why
    assert got.job_options() == {"native_loop": {"why": got.why}}


def test_a_failed_build_is_tried_once_per_process_not_once_per_world(tmp_path):
    log = tmp_path / "calls"
    cc = tmp_path / "mpicc"
    cc.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\necho 'error: no C compiler' >&2\nexit 1\n")
    cc.chmod(0o755)
    first = native.build(cc=str(cc), cache=tmp_path / "cache")
    assert native.build(cc=str(cc), cache=tmp_path / "cache") == first
    assert first.why.endswith("exited 1: error: no C compiler)")
    assert sum("-shared" in line for line in log.read_text().splitlines()) == 1


@needs_build
def test_the_injected_spin_is_calibrated_in_c():
    """The spin a slowdown adds inside the C loop lasts what it was asked to (generous bounds:
    the check is the calibration's order of magnitude, on a busy machine)."""
    import ctypes

    from perfsuite.kernels.faults import NativeSpin

    lib = ctypes.CDLL(BUILT.path)
    lib.perfsuite_native_spin.restype, lib.perfsuite_native_spin.argtypes = ctypes.c_double, [ctypes.c_long]

    class Loop:
        def spin_seconds(self, turns):
            return lib.perfsuite_native_spin(turns)

    spinner = NativeSpin(0.5, Loop())
    turns = spinner.turns(4e-3)  # half of a 4 ms call: 2 ms
    took = sorted(Loop().spin_seconds(turns) for _ in range(5))[2]
    assert 0.5e-3 < took < 10e-3, (turns, took)


@needs_build
def test_an_unwritable_cache_is_one_line_and_no_library():
    got = native.build(cache="/proc/perfsuite-cache")
    assert got.path is None and "\n" not in got.why
    assert got.why.startswith("the native loop's cache folder /proc/perfsuite-cache/native/")
    assert "not writable" in got.why and native.CACHE_ENV in got.why


@pytest.mark.world
@needs_build
@pytest.mark.parametrize("damage", ["library", "stamp"])
def test_a_damaged_cache_is_rebuilt_and_says_so(tmp_path, damage, no_leftover_ranks):
    first = native.build(cache=tmp_path)
    folder = tmp_path / "native" / first.path.split("/")[-2]
    if damage == "library":
        (folder / first.path.split("/")[-1]).write_bytes(b"\x7fELF not really")
    else:
        (folder / native.STAMP).write_text("{ half a stamp")
    again = native.build(cache=tmp_path)
    assert again.path and again.sha256 == hashlib.sha256(open(again.path, "rb").read()).hexdigest()
    assert again.note.endswith("; rebuilt")
    assert ("is corrupt" if damage == "library" else "is unreadable") in again.note
    # and the table of the world it timed says so
    res = measure([4], **again.job_options())
    assert res.extra["transport_facts"]["native_note"] == again.note
    assert f"# timing: native (each barrier-separated call timed by a C loop, not by Python); {again.note}" in table(res)


def test_host_timing_native_without_a_loop_is_refused_before_any_world(monkeypatch):
    monkeypatch.setenv(native.COMPILER_ENV, "/bin/false")
    specs = suite.plan(allreduce_cases(["mpi"], [2], [4]), {"host_timing": "native"})
    with pytest.raises(Exception) as info:
        suite.preflight(specs, suite.SuiteConfig())
    assert type(info.value).__name__ == "ConfigError"
    assert str(info.value).startswith("host timing native: /bin/false could not build")
    # auto falls back instead, with the same reason for the ranks
    assert suite.native_options({})["native_loop"]["why"].startswith("/bin/false could not build")


# --- on the ranks ---------------------------------------------------------------------------

@pytest.mark.world
@needs_build
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
def test_the_native_loop_times_exact_sums_in_every_dtype(dtype, inplace, no_leftover_ranks):
    cases = [Case("allreduce", "mpi", 3, size_bytes=s, dtype=dtype) for s in (8, 4096)]
    (spec,) = suite.plan(cases, {**FAST, **BUILT.job_options(), "inplace": inplace})
    res = run_world(spec, LaunchConfig(), 60)
    assert [s.valid for s in res.samples] == [True, True]
    assert all(s.info["valid_timed"] and s.info["valid_fresh"] for s in res.samples)
    assert {timing_of(s.info) for s in res.samples} == {"native"}
    assert all(len(s.times_s) == 20 and min(s.times_s) > 0 for s in res.samples)
    assert res.extra["transport_facts"] == {"timing": "native", "native_loop": BUILT.path}
    assert "# timing: native" in table(res)


@pytest.mark.world
def test_the_python_loop_when_asked_says_so(no_leftover_ranks):
    res = measure([4], host_timing="python", **BUILT.job_options())
    (s,) = res.samples
    assert s.valid and timing_of(s.info) == "python"
    assert s.info["timing_why"] == "the mpi4py loop was asked for (host_timing python)"
    assert "# timing: python" in table(res) and "not native: the mpi4py loop was asked" in table(res)


@pytest.mark.world
@needs_build
def test_a_library_changed_after_its_build_is_not_loaded(tmp_path, no_leftover_ranks):
    lib = tmp_path / "lib.so"
    lib.write_bytes(open(BUILT.path, "rb").read() + b"\0")
    res = measure([4], native_loop={"path": str(lib), "sha256": BUILT.sha256})
    (s,) = res.samples
    assert s.valid and timing_of(s.info) == "python"
    assert s.info["timing_why"] == (f"native loop {lib} is corrupt (its sha256 is not the one it "
                                    "was built with); the next run rebuilds it")


FAKE = r"""
#include <string.h>
int perfsuite_native_abi(void) { return %d; }  /* this perfsuite's: only the MPI differs */
int perfsuite_native_mpi_library(char *buf, int *len) {
    strcpy(buf, "%s"); *len = (int)strlen(buf); return 0;
}
void perfsuite_native_handle_sizes(int *s) { s[0] = %d; s[1] = %d; s[2] = %d; }
"""


def _fake_library(tmp_path, version: str, size: int) -> tuple[str, str]:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build a library of another MPI")
    src, lib = tmp_path / "fake.c", tmp_path / "libfake.so"
    src.write_text(FAKE % (NATIVE_ABI, version, size, size, size))
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=60)
    return str(lib), hashlib.sha256(lib.read_bytes()).hexdigest()


@pytest.mark.world
def test_a_library_of_another_mpi_is_refused_before_any_call(tmp_path, no_leftover_ranks):
    path, sha = _fake_library(tmp_path, "Open MPI v0.0.1, package: another MPI", 4)
    res = measure([4], native_loop={"path": path, "sha256": sha})
    (s,) = res.samples
    assert s.valid and timing_of(s.info) == "python"
    assert s.info["timing_why"].startswith(f"native loop {path} was built for another MPI "
                                           "('Open MPI v0.0.1, package: another MPI'; this rank runs ")
    assert "set MPICC to this MPI's mpicc" in s.info["timing_why"]


@pytest.mark.world
def test_a_library_of_another_abi_of_this_mpi_is_refused(tmp_path, no_leftover_ranks):
    ours = measure([4]).fingerprint["mpi_library"]  # this MPI's own first line, from a rank
    path, sha = _fake_library(tmp_path, ours, 64)
    res = measure([4], native_loop={"path": path, "sha256": sha})
    (s,) = res.samples
    assert timing_of(s.info) == "python"
    assert s.info["timing_why"].startswith(f"native loop {path} uses [64, 64, 64]-byte MPI handles")


@pytest.mark.world
@needs_build
def test_the_suite_prepares_the_native_loop_and_a_slowdown_acts_inside_it(monkeypatch, no_leftover_ranks):
    """suite.run_one builds (or finds) the library itself; an injected slowdown is spun by the C
    loop (its own calibration), so a gate test measures the loop real runs use."""
    monkeypatch.setenv("PERFSUITE_INJECT_SLOWDOWN", "1.0")
    (spec,) = suite.plan(allreduce_cases(["mpi"], [2], [4]), FAST)
    out = suite.run_one(spec, suite.SuiteConfig(timeout=120))
    (s,) = out.result.samples
    assert s.valid and timing_of(s.info) == "native"
    assert out.result.extra["slowdown_injected"] == 1.0


# --- verdicts and baselines across loops ----------------------------------------------------

def _sample(timing: str, value: float = 1.0):
    from perfsuite.records.model import Metric, Sample

    case = Case("allreduce", "mpi", 2, size_bytes=4)
    m = Metric("latency_us", value, "us", False, (value,) * 5)
    return Sample(case, {"latency_us": m}, True, (value * 1e-6,) * 5,
                  {"timing": timing, "clock": "host"})


def test_no_verdict_across_loops_and_it_says_why():
    base = regress.baseline_from_sample(_sample("python", 2.0), "latency_us")
    assert base.timing == "python" and Baseline.from_dict(base.case, base.metric, base.to_dict()) == base
    v = regress.verdict(base.case, "latency_us", _sample("native", 0.5), base)
    assert v.status == "unknown"
    assert v.reason == "timing" and vt.line(v) == (
        "allreduce[mpi-n2-4B] latency: the baseline was timed by python, this run by "
        "native; no verdict across timings (re-record the baseline, or time this run "
        "by python: --host-timing / --device-timing)")
    same = regress.verdict(base.case, "latency_us", _sample("python", 2.0), base)
    assert "timed by" not in vt.line(same)


def test_version_1_baselines_were_timed_by_python_on_the_host():
    entry = {"unit": "us", "higher_is_better": False, "value": 2.0, "rounds": [2.0]}
    v1 = {"format": formats.BASELINE, "version": 1, "cases": {
        "allreduce[mpi-n2-4B]": {"latency_us": dict(entry)},
        "allreduce[tf-grpc-n2-4B]": {"latency_us": dict(entry)},
        "allreduce[nccl-n2-4B]": {"latency_us": dict(entry)},
        "tf-epoch[mpi-n2-small-cnn]": {"img_per_s": dict(entry)}}}
    d = formats.check_format(v1, formats.BASELINE, "old.json")
    timings = {case: m.popitem()[1].get("timing") for case, m in d["cases"].items()}
    assert timings == {"allreduce[mpi-n2-4B]": "python", "allreduce[tf-grpc-n2-4B]": "python",
                       "allreduce[nccl-n2-4B]": None, "tf-epoch[mpi-n2-small-cnn]": None}


def test_the_compiler_is_the_one_beside_the_ranks_python(tmp_path, monkeypatch):
    """An A/B arm with another venv (another MPI wheel) gets a build with that venv's mpicc."""
    monkeypatch.delenv(native.COMPILER_ENV, raising=False)
    venv = tmp_path / "bin"
    venv.mkdir()
    (venv / "mpicc").write_text("#!/bin/sh\nexit 1\n")
    (venv / "mpicc").chmod(0o755)
    assert native.compiler(str(venv / "python")) == str(venv / "mpicc")
    got = native.build(cache=tmp_path / "cache", python=str(venv / "python"))
    assert got.why.startswith(f"{venv / 'mpicc'} could not build the native loop")
    monkeypatch.setenv(native.COMPILER_ENV, "/usr/bin/mpicc-of-my-cluster")
    assert native.compiler(str(venv / "python")) == "/usr/bin/mpicc-of-my-cluster"


def test_library_versions_compare_without_terminators_or_spacing():
    from perfsuite.transports.native import _first_line

    ompi = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11"
    assert _first_line(ompi + "\x00") == _first_line(ompi) == ompi  # mpi4py keeps Open MPI's NUL
    assert _first_line("MPICH Version:      5.0.2\nMPICH Release date: x\n") == "MPICH Version: 5.0.2"
