"""What a careful reading of the GPU paths found, each pinned without a GPU: the rank's GPU chosen
before MPI starts, TF's device settings never touched after an op ran, kernels compiled inside the
agreed skip, NCCL's bootstrap agreed and its communicator destroyed, the CUDA-aware question asked
of the MPI mpi4py loaded, busbw 0 at one rank, batch timing, and the timed calls' own output
checked. Real TensorFlow, real MPI worlds and real MPI launchers where they run here; fakes only
for the device (and the fakes can fail)."""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import textwrap
import tomllib
import types
from pathlib import Path

import numpy as np
import pytest

from perfsuite.faces import cli
from perfsuite import suite, transports
from perfsuite.bench.allreduce import allreduce_cases, table
from perfsuite.records.errors import ConfigError, TransportUnavailable
from perfsuite.kernels.collectives.allreduce import MIN_BATCH_CALLS, MIN_ITERS, MIN_WARMUP, batched, busbw_factor, calls_per_sample, default_iters, summarize, timed_loop, zero_sum_pattern
from perfsuite.launch.launchers import OPENMPI_ROOT_ENV, LaunchConfig
from perfsuite.launch.commands import default_program, run_command
from perfsuite.records.model import Case, Result
from perfsuite.verdicts.rounds import RoundsPolicy
from perfsuite.transports import cuda_aware, gpu, nccl, placement
from perfsuite.transports.base import AllreduceTransport
from perfsuite.transports.tf import train as tf_train, train_gpu as tf_train_gpu
from test_tf_gpu_training import FakeCupyNccl, FakeMpiComm, install_fake_cupy, train_one_step

REPO = Path(__file__).resolve().parents[1]
HAS_TF = importlib.util.find_spec("tensorflow") is not None
needs_tf = pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")


# --- the rank's GPU, chosen before MPI_Init --------------------------------------------------

@pytest.mark.parametrize("env,count,want,by", [
    ({"MPI_LOCALRANKID": "1"}, 4, "1", "MPI_LOCALRANKID (MPICH Hydra)"),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "5"}, 4, "1", "OMPI_COMM_WORLD_LOCAL_RANK (Open MPI)"),
    ({"SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": "6,7"}, 0, "7", "SLURM_LOCALID (Slurm)"),
    ({"MPI_LOCALRANKID": "0", "CUDA_VISIBLE_DEVICES": "-1"}, 4, None, "MPI_LOCALRANKID"),
])
def test_place_rank_from_the_launchers_local_rank(env, count, want, by):
    env = dict(env)
    before = env.get("CUDA_VISIBLE_DEVICES")
    facts = placement.place_rank(env, gpu_count=lambda: count)
    assert env.get("CUDA_VISIBLE_DEVICES") == (want if want is not None else before)
    assert facts["cuda_visible_devices"] == want and by in facts["gpu_chosen_by"]
    # TF grows its memory: CuPy's buffers and NCCL share the GPU with it
    assert env[placement.ALLOW_GROWTH] == "true"


def test_place_rank_without_a_local_rank_leaves_the_choice_to_the_node_split():
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    facts = placement.place_rank(env, gpu_count=lambda: 2)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and "after MPI_Init" in facts["gpu_chosen_by"]


@pytest.mark.world
def test_worker_places_each_rank_from_the_launchers_environment(tmp_path):
    """The worker's own placement step, run where the launcher really sets the local rank
    (Hydra's MPI_LOCALRANKID, or Open MPI's OMPI_COMM_WORLD_LOCAL_RANK where that MPI is the one
    installed, as on a GPU machine with its distribution's Open MPI)."""
    script = tmp_path / "place.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        from perfsuite.transports.placement import local_rank_from_env
        from perfsuite.worker import _place
        facts = _place({"transport": sys.argv[1], "options": {}})
        assert "mpi4py.MPI" not in sys.modules  # chosen before MPI (and CUDA) start
        rank = local_rank_from_env(os.environ)[0]
        with open(f"{sys.argv[2]}/{rank}", "w") as f:  # a file each: ranks' stdout interleaves
            f.write(f"{rank} {os.environ.get('CUDA_VISIBLE_DEVICES')}")
    """))
    env = {**os.environ, **OPENMPI_ROOT_ENV, "CUDA_VISIBLE_DEVICES": "4,5", "PYTHONPATH": str(REPO)}
    for transport, want in (("nccl", {"0 4", "1 5"}), ("mpi", {"0 4,5", "1 4,5"})):
        out = tmp_path / transport
        out.mkdir()
        run_command([default_program("mpiexec"), "-n", "2", sys.executable, str(script),
                     transport, str(out)], timeout=60, env=env)
        assert {p.read_text() for p in out.iterdir()} == want


# --- TensorFlow: growth by environment, no device setting after an op -----------------------

def fake_one_gpu(tf, monkeypatch) -> list:
    """TF on a CPU machine told it has one GPU, whose device settings refuse changes once TF
    has initialised its devices, as TF does on a GPU machine after the first op."""
    fake = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    real = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [fake] if kind == "GPU" else real(kind))
    changed = []

    def refuse(*args, **kwargs):
        changed.append(args)
        raise RuntimeError("Physical devices cannot be modified after being initialized")

    monkeypatch.setattr(tf.config, "set_visible_devices", refuse)
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", refuse)
    return changed


@pytest.fixture(scope="module")
def tf():
    if not HAS_TF:
        pytest.skip("TensorFlow is not installed")
    from perfsuite.transports.tf.support import import_tf

    return import_tf()


@pytest.mark.tf
@needs_tf
def test_device_training_starts_after_the_baseline_ran_ops_on_the_gpu(tf, monkeypatch):
    fake = FakeCupyNccl(others=0.0)
    install_fake_cupy(monkeypatch, fake)
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (0, 1))
    monkeypatch.setattr(gpu, "nvml_gpu_count", lambda: (1, "NVML"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv(placement.ALLOW_GROWTH, "unset")  # restored (to absent) after the test
    monkeypatch.delenv(placement.ALLOW_GROWTH)
    changed = fake_one_gpu(tf, monkeypatch)
    t = tf_train_gpu.NcclTraining(FakeMpiComm(rank=0, n=2), {})
    t.configure()
    assert os.environ[placement.ALLOW_GROWTH] == "true"  # set before TF could start a device
    (tf.constant(1.0) + 1).numpy()  # rank 0's plain-loop baseline runs ops before start()
    train_one_step(tf, t, 64)  # start() and a step, as the kernel calls them
    assert changed == [] and t.describe()["allreduce"] == "nccl"
    t.close()
    assert "nccl.destroy" in fake.log


@pytest.mark.tf
@needs_tf
@pytest.mark.parametrize("cls", [tf_train.GrpcNcclTraining, tf_train.HorovodNcclTraining])
def test_gpu_training_on_cpu_tensorflow_is_an_agreed_skip(tf, cls):
    t = cls(FakeMpiComm(rank=0, n=2), {})
    with pytest.raises(TransportUnavailable, match=rf"^{cls.name}: TensorFlow sees 0 GPUs"):
        t.start(tf)


@pytest.mark.tf
@needs_tf
def test_host_training_hides_gpus_from_tf_and_gpu_training_does_not(tf, monkeypatch):
    fake = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    real = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [fake] if kind == "GPU" else real(kind))
    hidden = []
    monkeypatch.setattr(tf.config, "set_visible_devices", lambda devices, kind: hidden.append((devices, kind)))
    for cls in (tf_train.PlainTraining, tf_train.MpiTraining, tf_train.GrpcTraining):
        cls(FakeMpiComm(n=2), {}).prepare(tf)
    assert hidden == [([], "GPU")] * 3
    hidden.clear()
    tf_train.GrpcNcclTraining(FakeMpiComm(n=2), {}).prepare(tf)
    assert hidden == []


@pytest.mark.tf
@needs_tf
def test_gpu_steps_end_when_the_device_is_done(tf, monkeypatch):
    synced = []
    monkeypatch.setattr(tf.test.experimental, "sync_devices", lambda: synced.append(1))
    t = tf_train.PlainTraining(FakeMpiComm(n=1), {})
    t.start(tf)
    t.finish()()
    assert synced == []  # a host transport waits for nothing more
    t.on_gpu = True
    t.finish()()
    assert synced == [1]


def test_gpu_training_ranks_narrow_their_gpu_in_configure_when_no_launcher_said(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("TF_CONFIG", "")  # configure() writes these: restored after the test
    monkeypatch.setenv(placement.ALLOW_GROWTH, "")
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (1, 2))
    t = tf_train.GrpcNcclTraining(FakeMpiComm(rank=1, n=2), {"ports": [1, 2]})
    monkeypatch.setattr(tf_train, "cluster_addresses", lambda comm, options: ["a:1", "b:2"])
    t.configure()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1" and t.visible_devices == "1"


# --- CuPy: kernels compile inside the agreed skip; NCCL bootstrap agreed, destroyed ----------

def test_a_missing_nvrtc_is_an_agreed_skip_with_the_install_hint(monkeypatch):
    fake = FakeCupyNccl(others=0.0)

    def no_nvrtc(*a, **k):
        raise OSError("libnvrtc.so.12: cannot open shared object file")

    fake.add = no_nvrtc
    install_fake_cupy(monkeypatch, fake)
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (0, 1))
    with pytest.raises(TransportUnavailable, match=r"CuPy cannot compile a kernel \(OSError: "
                                                   r"libnvrtc.so.12.*cupy-cuda12x\[ctk\]"):
        nccl.NcclAllreduce(FakeMpiComm(n=2), {})


def test_gpu_extras_bring_nvrtc_and_nccl_from_wheels():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, cuda in (("gpu", "12"), ("gpu-cuda13", "13")):
        deps = " ".join(extras[extra])
        assert f"cupy-cuda{cuda}x[ctk]>=14" in deps and f"nvidia-nccl-cu{cuda}" in deps


@pytest.mark.parametrize("fails,match", [
    ("get_unique_id", r"^NCCL could not make its unique id \(no socket\)$"),
    ("NcclCommunicator", r"^NCCL could not build its communicator \(no socket\).*/dev/shm"),
])
def test_nccl_bootstrap_failure_is_agreed(monkeypatch, fails, match):
    fake = FakeCupyNccl(others=0.0)

    def broken(*a, **k):
        raise fake.nccl.NcclError("no socket")

    setattr(fake.nccl, fails, broken)
    with pytest.raises(TransportUnavailable, match=match):
        nccl.bootstrap(FakeMpiComm(rank=0, n=2), fake.nccl, 0, 2)


def test_nccl_communicator_is_destroyed_once_after_the_last_call(monkeypatch):
    fake = FakeCupyNccl(others=1.0)
    install_fake_cupy(monkeypatch, fake)
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (0, 1))
    t = nccl.NcclAllreduce(FakeMpiComm(n=2), {})
    assert t.facts["nccl_version"] == 22707 and t.facts["timing"] == "batch"
    t.close()
    t.close()
    assert fake.log.count("nccl.destroy") == 1


def test_nccl_graph_timing_captures_each_batch_once_and_launches_it(monkeypatch):
    """CuPy's capture API faked on the stream: what is captured, when, and what is launched."""
    fake = FakeCupyNccl(others=1.0)
    install_fake_cupy(monkeypatch, fake)
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (0, 1))
    stream, captured, launched = fake.stream, [], []

    class Graph:
        def __init__(self, calls):
            self.calls = calls

        def upload(self, s):
            assert s is stream

        def launch(self, s):
            assert s is stream
            launched.append(self.calls)

    def end_capture():
        captured.append(len(fake.calls) - stream.begun)
        return Graph(captured[-1])

    stream.begin_capture = lambda: setattr(stream, "begun", len(fake.calls))
    stream.end_capture = end_capture
    t = nccl.NcclAllreduce(FakeMpiComm(n=2), {"device_timing": "graph"})
    send, recv, other = (fake.zeros(8, "float32") for _ in range(3))
    for calls in (4, 4, 2, 4):  # a block's last, shorter batch gets its own graph
        assert t.time_batch(send, recv, calls) >= 0
    assert captured == [4, 2] and launched == [4, 4, 2, 4]
    t.time_batch(other, recv, 4)  # other buffers: captured afresh, the old graphs dropped
    assert captured == [4, 2, 4] and len(t._graphs) == 1


# --- is MPI CUDA-aware: the library mpi4py loaded, UCX under Open MPI ------------------------

@pytest.mark.parametrize("query,need,ucx,aware,how", [
    (0, "pt2pt", "libuct_cuda.so.0", True, "its UCX moves device buffers"),
    (0, "reduce", "libuct_cuda.so.0", False, "point-to-point only"),
    (0, "pt2pt", None, False, "returned 0 in Open MPI v5.0.5"),
    (1, "reduce", None, True, "returned 1"),
])
def test_open_mpi_with_cuda_only_in_ucx(query, need, ucx, aware, how):
    got, why = cuda_aware.cuda_aware_verdict(query, "Open MPI v5.0.5", {}, need, ucx)
    assert got is aware and how in why


def test_mpich_with_a_ucx_is_not_taken_for_open_mpi():
    got, why = cuda_aware.cuda_aware_verdict(0, "MPICH Version: 5.0.2", {}, "pt2pt", "libuct_cuda.so")
    assert got is False and "UCX" not in why


def test_ucx_cuda_module_found_beside_the_loaded_libucp(tmp_path):
    (tmp_path / "lib" / "ucx").mkdir(parents=True)
    (tmp_path / "lib" / "ucx" / "libuct_cuda.so.0").touch()
    maps = tmp_path / "maps"
    maps.write_text(f"7f00-7f01 r-xp 0 08:01 1 {tmp_path}/lib/libucp.so.0.0.0\n")
    assert cuda_aware.ucx_cuda_module(str(maps)) == f"{tmp_path}/lib/ucx/libuct_cuda.so.0"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n")
    assert cuda_aware.ucx_cuda_module(str(maps)) is None


@pytest.mark.world
def test_the_query_goes_to_the_libmpi_mpi4py_loaded(tmp_path):
    """Another library mapped first (libc has no MPI_Get_library_version) is passed over."""
    script = tmp_path / "q.py"
    script.write_text(textwrap.dedent("""
        from mpi4py import MPI
        from perfsuite.transports import cuda_aware
        paths = ["libc.so.6", *cuda_aware.libmpi_paths()]
        version = MPI.Get_library_version()
        lib = cuda_aware.loaded_libmpi(version, paths)
        # Open MPI's string keeps its C terminator; the library's own copy ends before it.
        ended = cuda_aware.loaded_libmpi(version.rstrip("\\0") + "\\0", paths)
        print("found", lib is not None, ended is not None, cuda_aware.mpi_cuda_aware()[1])
    """))
    out = run_command([default_program("mpiexec"), "-n", "1", sys.executable, str(script)],
                      timeout=60, env={**os.environ, **OPENMPI_ROOT_ENV, "PYTHONPATH": str(REPO)}).stdout
    assert "found True True" in out and "\0" not in out, out
    # MPICH >= 4 exports the query; Open MPI 4 does not, and the answer says so.
    assert ("MPIX_Query_cuda_support() returned" in out or "has no MPIX_Query_cuda_support()" in out), out


# --- busbw at one rank, batch timing, the timed calls' own output ----------------------------

def test_busbw_is_zero_at_one_rank_and_not_a_metric():
    assert busbw_factor(1) == 0.0 and busbw_factor(2) == 1.0
    case = Case("allreduce", "gpu-ring", 1, 1 << 20)
    s = summarize(case, np.full((10, 1), 1e-5), True, 10, 1, True, copy_GBps=100.0)
    assert s.info["busbw_GBps"] == 0.0 and "busbw_GBps" not in s.metrics
    assert s.info["algbw_GBps"] > 0 and "busbw_of_copy" not in s.info
    text = table(Result("allreduce", "gpu-ring", 1, (s,), extra={"inplace": True}))
    assert "busbw is 0 at world size 1" in text


@pytest.mark.world
def test_ring_at_one_rank_reports_busbw_zero(tmp_path, capsys):
    assert cli.main(["run", "--transports", "ring", "--world-sizes", "1", "--sizes", "4,1MiB",
                     "--iters", "20", "--warmup", "2", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "busbw is 0 at world size 1" in out
    from perfsuite.store.formats import load_run

    run = load_run(str(tmp_path / "r.json"))
    assert all(s.info["busbw_GBps"] == 0.0 for s in run.samples())


@pytest.mark.parametrize("dtype", ["float16", "float32", "int32", "float64"])
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_zero_sum_fill_keeps_in_place_calls_exact(dtype, n):
    fills = [zero_sum_pattern(r, n, 7, dtype) for r in range(n)]
    assert all(f.dtype == np.dtype(dtype) for f in fills)
    total = np.sum(fills, axis=0, dtype=dtype)
    assert not total.any()
    if n > 1:
        assert any(f.any() for f in fills)  # a transport that writes nothing still fails


def test_calls_per_sample_by_timing():
    host = types.SimpleNamespace(timing="per-call")
    assert calls_per_sample(host, 1000) == 1 and calls_per_sample(AllreduceTransport(None), 1000) == 1
    dev = types.SimpleNamespace(timing="batch")
    assert calls_per_sample(dev, 1000) == 100 and calls_per_sample(dev, 16) == 1


def test_a_device_batch_holds_ten_calls_at_every_size():
    """Host transports keep OMB's byte budget; a device batch never shrinks to one call."""
    dev = types.SimpleNamespace(timing="batch")
    for size in (4, 1 << 20, 16 << 20, 256 << 20, 1 << 30):
        iters, warmup = default_iters(size, batched(dev))
        assert calls_per_sample(dev, iters) >= MIN_BATCH_CALLS and warmup >= MIN_WARMUP
    assert default_iters(256 << 20) == (MIN_ITERS, MIN_WARMUP)
    assert not batched(types.SimpleNamespace(timing="native"))


class _CountingTransport(AllreduceTransport):  # the base declares what the kernel reads
    def __init__(self):
        self.calls = 0

    def allreduce(self, send, recv):
        self.calls += 1

    def time_one(self, send, recv):
        return self.time_batch(send, recv, 1)

    def time_batch(self, send, recv, calls):
        for _ in range(calls):
            self.allreduce(send, recv)
        return 1e-3 * calls


class _NoSpin:
    def add(self, dt):
        return 0.0


@pytest.mark.parametrize("turns", [-1, 0, 5])  # -1: device-timed; >= 0: host arrays, injection on
def test_batched_timed_loop_makes_every_call(turns):
    t = _CountingTransport()
    case = Case("allreduce", "mpi-staged", 2, size_bytes=4)
    times = timed_loop(t, None, None, 10, lambda: None, None, case, _NoSpin() if turns >= 0 else None,
                       turns, batch=4)
    assert t.calls == 10 and len(times) == 3  # batches of 4, 4 and 2
    assert times == pytest.approx([1e-3] * 3)  # each value is its batch's mean per call


def test_device_timing_is_checked():
    assert gpu.device_timing({}, "nccl", True) == "batch"
    with pytest.raises(ConfigError, match=r"device_timing 'events' is unknown; choose from batch"):
        gpu.device_timing({"device_timing": "events"}, "nccl", True)
    with pytest.raises(TransportUnavailable, match=r"graph needs a call that is device work only"):
        gpu.device_timing({"device_timing": "graph"}, "mpi-staged", False)
    assert cli.main(["run", "--transports", "nccl", "--device-timing", "events"]) == 2


def run_gpu_world(monkeypatch, transport, n, sizes, **opts):
    spec = transports.REGISTRY[transport]
    monkeypatch.setitem(transports.REGISTRY, transport, dataclasses.replace(spec, check=lambda: None))
    (world,) = suite.plan(allreduce_cases([transport], [n], sizes),
                          {"array_module": "numpy", "copy_bytes": 1 << 20, **opts})
    # The batching mechanics, not the contention rules: a busy machine must not add rounds.
    return suite.run_one(world, suite.SuiteConfig(launch=LaunchConfig(), timeout=90,
                                                  rounds=RoundsPolicy(max_contention=None, retries=0)))


@pytest.mark.world
@pytest.mark.parametrize("timing,samples,per", [("batch", 10, 4), ("per-call", 40, 1)])
def test_device_transport_batches_on_host_arrays(monkeypatch, no_leftover_ranks, timing, samples, per):
    out = run_gpu_world(monkeypatch, "mpi-staged", 2, [4, 4096], iters=40, warmup=2,
                        device_timing=timing, inplace=True)
    assert out.result is not None, out.failure or out.skipped
    for s in out.result.samples:
        assert len(s.times_s) == samples and s.info["calls_per_sample"] == per
        assert s.info["timing"] == timing and s.info["clock"] == "host"
        assert s.valid and s.info["valid_timed"] and s.info["valid_fresh"]
    assert out.result.extra["transport_facts"]["timing"] == timing
    timed_line = "# timed by host, batch: 4 call(s) per sample" in table(out.result)
    assert timed_line == (timing == "batch")


@pytest.mark.world
def test_graph_timing_on_an_mpi_transport_is_a_skip_with_the_reason(monkeypatch, no_leftover_ranks):
    out = run_gpu_world(monkeypatch, "gpu-ring", 2, [4], iters=5, warmup=1, device_timing="graph")
    assert out.result is None and out.failure is None
    assert "graph needs a call that is device work only" in out.skipped
