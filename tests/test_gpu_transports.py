"""GPU transports without a GPU: their pure pieces, the skip reasons, and the very code paths the
GPU runs (ring schedule, staging, cached buffers, agreement, the kernel's copy-bandwidth hook)
driven on host arrays (``array_module=numpy``) inside real MPI worlds."""
from __future__ import annotations

import dataclasses
import os
import sys
import types

import numpy as np
import pytest

from perfsuite.store import fingerprint
from perfsuite.reading import report
from perfsuite import suite, transports
from perfsuite.bench import allreduce as bench_allreduce
from perfsuite.bench.allreduce import allreduce_cases
from perfsuite.records.errors import ConfigError, TransportUnavailable
from perfsuite.store.formats import SuiteRun
from perfsuite.kernels.collectives.allreduce import summarize
from perfsuite.launch.launchers import OPENMPI_ROOT_ENV, LaunchConfig
from perfsuite.launch.commands import default_program, run_command
from perfsuite.records.model import Case, Result
from perfsuite.transports import cuda_aware, gpu
from perfsuite.transports.gpu_ring import choose_path

GPU_TRANSPORTS = ("mpi-cuda", "mpi-staged", "nccl", "gpu-ring")
FAST = {"iters": 5, "warmup": 1, "array_module": "numpy", "copy_bytes": 1 << 20}


# --- registry and pytest-side skip reasons --------------------------------------------------

def test_gpu_transports_are_registered_as_device_transports():
    for name in GPU_TRANSPORTS:
        spec = transports.spec(name)
        assert spec.device == "gpu" and spec.module.startswith("perfsuite.transports.")
        assert transports.load(name).name == name  # the class really is there, named the same


def test_no_gpu_reason_names_the_driver(monkeypatch):
    monkeypatch.setattr(gpu, "nvml_gpu_count", lambda: (0, "no NVIDIA driver here (NVML: x)"))
    for name in GPU_TRANSPORTS:
        assert transports.unavailable_reason(name) == "no NVIDIA driver here (NVML: x)"
    monkeypatch.setattr(gpu, "nvml_gpu_count", lambda: (0, "NVML"))
    assert "NVML counts 0" in gpu.need_gpu()


def test_hidden_devices_and_missing_cupy_are_reasons(monkeypatch):
    monkeypatch.setattr(gpu, "nvml_gpu_count", lambda: (1, "NVML"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "hides every GPU" in gpu.need_gpu()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(gpu, "has_module", lambda name: name != "cupy")
    assert "CuPy is not installed" in gpu.need_gpu() and "cupy-cuda12x[ctk]" in gpu.need_gpu()
    monkeypatch.setattr(gpu, "has_module", lambda name: True)
    assert gpu.need_gpu() is None


def test_suite_skips_without_starting_a_world(monkeypatch):
    monkeypatch.setattr(gpu, "nvml_gpu_count", lambda: (0, "no NVIDIA driver here (NVML: x)"))

    def no_world(*a, **k):
        raise AssertionError("a world was started for a transport that cannot run here")

    monkeypatch.setattr(suite, "run_world", no_world)
    (spec,) = suite.plan(allreduce_cases(["nccl"], [1], [4, 1024]), {})
    outcome = suite.run_one(spec, suite.SuiteConfig())
    assert outcome.skipped == "no NVIDIA driver here (NVML: x)" and outcome.result is None
    run = SuiteRun(outcomes=[outcome])
    assert "# skipped 1 world (2 cases) allreduce[nccl-n1]: no NVIDIA driver" in report.run_summary(run)
    assert run.to_dict()["skipped"][0]["cases"] == ["allreduce[nccl-n1-4B]", "allreduce[nccl-n1-1KiB]"]


# --- pure pieces ------------------------------------------------------------------------------

@pytest.mark.parametrize("query,library,env,aware,how", [
    (1, "Open MPI v5.0.5\n...", {}, True, "MPIX_Query_cuda_support() returned 1 in Open MPI v5.0.5"),
    (0, "MPICH Version: 5.0.2", {}, False, "returned 0 in MPICH Version: 5.0.2"),
    (0, "MPICH", {"PERFSUITE_MPI_CUDA_AWARE": "1"}, True, "PERFSUITE_MPI_CUDA_AWARE=1"),
    (1, "MPICH", {"PERFSUITE_MPI_CUDA_AWARE": "no"}, False, "PERFSUITE_MPI_CUDA_AWARE=no"),
    (None, "MVAPICH2-GDR Version 2.3.7", {"MV2_USE_CUDA": "1"}, True, "MV2_USE_CUDA=1"),
    (None, "MVAPICH2-GDR Version 2.3.7", {}, False, "--env PERFSUITE_MPI_CUDA_AWARE=1"),
    (None, "MPI VERSION : CRAY MPICH version 8.1", {"MPICH_GPU_SUPPORT_ENABLED": "1"}, True,
     "MPICH_GPU_SUPPORT_ENABLED=1"),
])
def test_cuda_aware_verdict(query, library, env, aware, how):
    got, why = cuda_aware.cuda_aware_verdict(query, library, env)
    assert got is aware and how in why


def test_cuda_aware_override_must_be_a_yes_or_no():
    with pytest.raises(ConfigError, match=r"PERFSUITE_MPI_CUDA_AWARE='maybe' must be 1"):
        cuda_aware.cuda_aware_verdict(0, "MPICH", {"PERFSUITE_MPI_CUDA_AWARE": "maybe"})


def test_ring_path_choice():
    assert choose_path("auto", True) == ("direct", None)
    assert choose_path("auto", False) == ("staged", None)
    assert choose_path("staged", True) == ("staged", None)
    path, reason = choose_path("direct", False)
    assert path == "direct" and "needs a CUDA-aware MPI" in reason
    with pytest.raises(ConfigError, match=r"ring_path 'gdr' is unknown; choose from auto, direct"):
        choose_path("gdr", True)


def test_device_choice_and_sharing():
    assert [gpu.pick_device(r, 2) for r in range(5)] == [0, 1, 0, 1, 0]
    with pytest.raises(ConfigError):
        gpu.pick_device(0, 0)
    # srun --gpus-per-task: every rank sees "device 0", but they are different GPUs (bus ids).
    assert gpu.shared_devices([("a", "0000:01"), ("a", "0000:02"), ("b", "0000:01")]) == []
    assert gpu.shared_devices([("a", "0000:01"), ("a", "0000:02"), ("a", "0000:01")]) == [[0, 2]]


def test_buffer_cache_allocates_once_and_grows_only_when_needed():
    cache = gpu.BufferCache(lambda n, dt: np.zeros(n, dtype=dt))
    a = cache.get(100, np.float32)
    b = cache.get(10, "float32")
    assert a.shape == (100,) and b.shape == (10,) and np.shares_memory(a, b)
    assert cache.allocations == 1
    cache.get(50, np.float64)  # another dtype: its own buffer
    cache.get(1000, np.float32)  # larger: grows once
    cache.get(0, np.float32)
    assert cache.allocations == 3


class FakeComm:
    def __init__(self, reasons):
        self.reasons = reasons

    def allgather(self, value):
        return self.reasons


def test_agree_raises_on_every_rank_with_the_reasons():
    gpu.agree(FakeComm([None, None]), None)  # nobody objects: returns
    with pytest.raises(TransportUnavailable, match=r"^MPI is not CUDA-aware$"):
        gpu.agree(FakeComm(["MPI is not CUDA-aware"] * 3), "MPI is not CUDA-aware")
    with pytest.raises(TransportUnavailable, match=r"^rank 1: CUDA sees no GPU$"):
        gpu.agree(FakeComm([None, "CUDA sees no GPU"]), None)  # rank 0 raises too


def test_libmpi_paths_from_a_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 0 08:01 1 /opt/venv/lib/libmpi.so.12\n"
        "7f01-7f02 r--p 0 08:01 1 /opt/venv/lib/libmpi.so.12\n"
        "7f02-7f03 r-xp 0 08:01 2 /usr/lib/libmpich_cray.so.12\n"
        "7f03-7f04 r-xp 0 08:01 3 /usr/lib/libcudart.so.12\n\n")
    assert cuda_aware.libmpi_paths(str(maps)) == ["/opt/venv/lib/libmpi.so.12", "/usr/lib/libmpich_cray.so.12"]
    assert cuda_aware.libmpi_paths(str(tmp_path / "absent")) == []


def test_copy_bandwidth_is_measured_and_timed_by_the_ops_timer():
    calls = []

    class CountingOps(gpu.NumpyOps):
        def copy(self, dst, src):
            calls.append(src.nbytes)
            super().copy(dst, src)

    rate = gpu.measure_copy_bandwidth(CountingOps(), nbytes=1 << 20, repeats=3)
    assert rate > 0 and calls == [1 << 20] * 4  # one warm-up, three timed


def test_summary_and_table_state_busbw_as_a_fraction_of_copy_bandwidth():
    case = Case("allreduce", "nccl", 2, size_bytes=1 << 20)
    times = np.full((4, 2), 1e-4)
    s = summarize(case, times, True, 4, 1, False, copy_GBps=20.0)
    busbw = (1 << 20) / 1e-4 / 1e9 * 1.0  # busbw factor 2(n-1)/n = 1 for n = 2
    assert s.info["busbw_GBps"] == pytest.approx(busbw)
    assert s.info["busbw_of_copy"] == pytest.approx(busbw / 20.0)
    assert "busbw_of_copy" not in summarize(case, times, True, 4, 1, False).info
    table = bench_allreduce.table(Result("allreduce", "nccl", 2, (s,),
                                          extra={"device_copy_GBps": 20.0}))
    assert "busbw/copy" in table.splitlines()[1]
    assert table.splitlines()[2].split()[-1] == f"{busbw / 20.0:.3f}"
    assert "device copy bandwidth 20.00 GB/s" in table


def test_device_identity_from_cuda_properties():
    props = {"name": b"NVIDIA H200", "pciDomainID": 0, "pciBusID": 0x1b, "pciDeviceID": 0}
    assert gpu.device_identity(props) == ("NVIDIA H200", "0000:1b:00.0")


class FakeCupy:
    """Records how CupyOps and EventTimer use CuPy (no GPU here): which device is made current,
    that copies and events go to the transport's stream, and that stop() waits on the end event."""

    def __init__(self):
        self.log = []
        log = self.log
        stream = types.SimpleNamespace(ptr=0, synchronize=lambda: log.append("stream.sync"),
                                       use=lambda: log.append("stream.use"))

        class Event:
            def __init__(self):
                self.t = None

            def record(self, s):
                assert s is stream
                self.t = len(log) * 1.0
                log.append("record")

            def synchronize(self):
                log.append("event.sync")

        self.cuda = types.SimpleNamespace(
            Device=lambda i: types.SimpleNamespace(use=lambda: log.append(f"use {i}")),
            Stream=lambda non_blocking=False: log.append(f"new stream {non_blocking}") or stream,
            get_current_stream=lambda: stream, Event=Event,
            get_elapsed_time=lambda a, b: (b.t - a.t) * 1000.0)  # ms, like CUDA
        self.stream = stream

    def asnumpy(self, a, out=None, stream=None):
        assert stream is self.stream
        self.log.append("d2h")
        if out is None:
            return np.array(a)
        np.copyto(out, a)
        return out


def test_cupy_ops_use_one_device_and_one_stream():
    cp = FakeCupy()
    ops = gpu.CupyOps(cp, 3)
    # its own non-blocking stream, made current, so CuPy's kernels and copies go to it too
    assert cp.log == ["use 3", "new stream True", "stream.use"] and ops.stream is cp.stream
    host = np.zeros(4, np.float32)
    ops.to_host(np.arange(4, dtype=np.float32), host)
    assert host.tolist() == [0, 1, 2, 3]
    timer = ops.timer()
    timer.start()
    ops.synchronize()
    assert timer.stop() == pytest.approx(2.0)  # (end - start) ms from the fake, in seconds
    assert cp.log[-3:] == ["stream.sync", "record", "event.sync"]  # waited before reading


# --- fingerprint with a fake NVML (nothing here has a GPU) -----------------------------------

def fake_pynvml(n_gpus: int, nvlinks: int | None):
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    m.NVMLError = NVMLError
    m.NVML_NVLINK_MAX_LINKS = 18
    m.NVML_FEATURE_ENABLED = 1
    m.NVML_TOPOLOGY_SYSTEM = 50
    m.NVML_TOPOLOGY_INTERNAL = 0
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: "580.159.04"
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: 13000
    m.nvmlDeviceGetCount = lambda: n_gpus
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=143771 << 20)
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=f"00000000:{h + 1:02X}:00.0".encode())
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 50

    def link_state(h, link):
        if nvlinks is None or link >= nvlinks:
            raise NVMLError("Not Supported")
        return 1

    m.nvmlDeviceGetNvLinkState = link_state
    return m


def test_fingerprint_gpu_facts_from_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(2, nvlinks=18))
    g = fingerprint.gpus()
    assert [x["uuid"] for x in g] == ["GPU-0", "GPU-1"]
    assert g[0]["driver"] == "580.159.04" and g[0]["cuda_driver"] == "13.0"
    assert g[0]["pci_bus_id"] == "00000000:01:00.0" and g[0]["pcie"] == "gen5 x16"
    assert g[0]["nvlinks_active"] == 18 and g[1]["peers"] == {"0": "SYS"}


def test_fingerprint_is_harmless_without_nvlink_or_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(1, nvlinks=None))
    (g,) = fingerprint.gpus()
    assert g["nvlinks_active"] is None and g["peers"] == {}
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(0, nvlinks=None))
    assert fingerprint.gpus() == []
    assert fingerprint.nccl_version_string(22105) == "2.21.5"
    assert fingerprint.nccl_version_string(2804) == "2.8.4"


# --- the GPU code paths on host arrays, in real MPI worlds -----------------------------------

def run_gpu_world(monkeypatch, transport, n, sizes, env=None, **opts):
    """suite.run_one on a GPU transport with the pytest-side check faked to pass (no GPU here)."""
    spec = transports.REGISTRY[transport]
    monkeypatch.setitem(transports.REGISTRY, transport, dataclasses.replace(spec, check=lambda: None))
    (world,) = suite.plan(allreduce_cases([transport], [n], sizes), {**FAST, **opts})
    cfg = suite.SuiteConfig(launch=LaunchConfig(env=env or {}), timeout=90)
    return suite.run_one(world, cfg)


@pytest.mark.world
@pytest.mark.parametrize("n,path", [(2, "direct"), (3, "staged"), (3, "direct")])
def test_gpu_ring_on_host_arrays_validates(monkeypatch, no_leftover_ranks, n, path):
    # 4 B is fewer elements than ranks (empty chunks); 1028 B does not split evenly.
    out = run_gpu_world(monkeypatch, "gpu-ring", n, [4, 1028, 65536], ring_path=path, copy_bw=True)
    assert out.failure is None and out.skipped is None, out.failure or out.skipped
    res = out.result
    assert [s.case.size_bytes for s in res.samples] == [4, 1028, 65536]
    assert all(s.valid for s in res.samples)
    facts = res.extra["transport_facts"]
    assert facts["ring_path"] == path and facts["array_module"] == "numpy"
    assert res.extra["device_copy_GBps"] > 0
    assert all(s.info["busbw_of_copy"] >= 0 for s in res.samples)


@pytest.mark.world
def test_gpu_ring_auto_on_host_arrays_goes_direct_in_place(monkeypatch, no_leftover_ranks):
    out = run_gpu_world(monkeypatch, "gpu-ring", 2, [12, 4096], inplace=True)
    assert out.result is not None and all(s.valid for s in out.result.samples)
    assert out.result.extra["transport_facts"]["ring_path"] == "direct"


@pytest.mark.world
@pytest.mark.parametrize("inplace", [False, True])
def test_mpi_staged_on_host_arrays_validates(monkeypatch, no_leftover_ranks, inplace):
    out = run_gpu_world(monkeypatch, "mpi-staged", 2, [4, 4096], inplace=inplace)
    assert out.result is not None, out.failure
    assert all(s.valid for s in out.result.samples)


@pytest.mark.world
def test_mpi_cuda_skips_inside_the_world_when_mpi_is_not_cuda_aware(monkeypatch, no_leftover_ranks):
    out = run_gpu_world(monkeypatch, "mpi-cuda", 2, [4, 1024],
                        env={"PERFSUITE_MPI_CUDA_AWARE": "0"})
    assert out.failure is None and out.result is None
    assert out.skipped == ("MPI is not CUDA-aware (PERFSUITE_MPI_CUDA_AWARE=0); "
                           "mpi-staged measures the copy-through-host path")


@pytest.mark.world
def test_nccl_refuses_host_arrays_on_every_rank(monkeypatch, no_leftover_ranks):
    out = run_gpu_world(monkeypatch, "nccl", 2, [4])
    assert out.skipped == "nccl needs CuPy device buffers (array_module=cupy)"


@pytest.mark.world
def test_mpix_query_answers_inside_an_mpich_rank(tmp_path):
    pytest.importorskip("mpi4py")
    script = tmp_path / "q.py"
    script.write_text("from mpi4py import MPI\nfrom perfsuite.transports import cuda_aware\n"
                      "print('query', cuda_aware.query_mpix_cuda_support(), MPI.Get_library_version()[:5])\n")
    out = run_command([default_program("mpiexec"), "-n", "1", sys.executable, str(script)], timeout=60,
                      env={**os.environ, **OPENMPI_ROOT_ENV}).stdout
    if "MPICH" not in out:
        pytest.skip(f"not an MPICH world ({out.strip()})")
    # MPICH >= 4 exports MPIX_Query_cuda_support; the pip wheel is built without CUDA.
    assert "query 0 MPICH" in out or "query 1 MPICH" in out
