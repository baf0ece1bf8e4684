"""``nccl`` and ``mpi-cuda`` training transports without a GPU.

Nothing here has a GPU or CuPy, and TensorFlow is CPU-only, so these tests pin what can be
pinned on the host: the device choice (CUDA_VISIBLE_DEVICES narrowed to the rank's GPU), the
fusion buffers that reach the allreduce (exactly TF's gradients, in bucket order, through the
real DLPack calls on host tensors), the unpacking and the 1/n scaling of the sums, the NCCL call
a fake communicator receives, and the agreed skip when MPI is not CUDA-aware. Whether the step
is right on a device is NOT shown here: it has not been run on a GPU.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import types

import numpy as np
import pytest

from perfsuite import suite, transports
from perfsuite.records.errors import TransportUnavailable
from perfsuite.launch.launchers import LaunchConfig
from perfsuite.records.model import Case, WorldSpec
from perfsuite.transports import gpu, mpi_cuda
from perfsuite.transports.tf import train_gpu as tf_train_gpu
from perfsuite.transports.tf.train import FusionPlan, aligned_empty
from perfsuite.transports.placement import rank_visible_devices
from perfsuite.transports.tf.train_gpu import MpiCudaTraining, NcclTraining
from test_gpu_transports import FakeCupy  # the CuPy stand-in the allreduce transports are tested with

HAS_TF = importlib.util.find_spec("tensorflow") is not None
needs_tf = pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
LR = 0.1


# --- registry and skip reasons (pytest side: no TF, no CuPy imported) --------------------------

def test_device_training_transports_are_registered_for_tf_epoch_only_as_gpu():
    for name, cls in (("nccl", "NcclTraining"), ("mpi-cuda", "MpiCudaTraining")):
        spec = transports.spec(name, "tf-epoch")
        assert transports.REGISTRY[f"tf-epoch:{name}"] is spec
        assert spec.device == "gpu" and spec.module == f"perfsuite.transports.tf.train_gpu:{cls}"
        assert spec.check is transports.tf.support.need_tf_gpu
        assert transports.load(name, "tf-epoch").name == name
        # the same name still means the allreduce transport for the allreduce kernel
        assert transports.spec(name).module.startswith(f"perfsuite.transports.{name.replace('-', '_')}:")


def test_without_a_gpu_both_are_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(gpu, "nvml_gpu_count", lambda: (0, "no NVIDIA driver here (NVML: x)"))
    for name in ("nccl", "mpi-cuda"):
        reason = transports.unavailable_reason(name, "tf-epoch")
        assert reason in ("no NVIDIA driver here (NVML: x)", transports.tf.support.TF_INSTALL)


def test_tensorflow_cpu_is_a_reason_even_with_a_gpu(monkeypatch):
    monkeypatch.setattr(transports.tf.support, "need_tf", lambda: None)
    monkeypatch.setattr(transports, "need_gpu", lambda: None)
    monkeypatch.setattr(transports.tf.support, "_tf_is_cpu_only", lambda: True)
    assert "tensorflow-cpu has no CUDA" in transports.unavailable_reason("mpi-cuda", "tf-epoch")


# --- device choice -----------------------------------------------------------------------------

@pytest.mark.parametrize("local_rank,visible,count,want", [
    (0, None, 4, "0"), (5, None, 4, "1"),  # local rank modulo the GPUs, as gpu.pick_device
    (1, "2,3", 8, "3"),  # an existing mask is indexed, not replaced
    (3, "GPU-aa, GPU-bb", 0, "GPU-bb"),  # UUIDs pass through; NVML's count is not needed
    (0, "7", 8, "7"),  # srun --gpus-per-task: the rank already sees only its GPU
    (0, None, 0, None), (0, "", 2, None), (0, "-1", 2, None),  # nothing to choose: TF will say so
])
def test_rank_visible_devices(local_rank, visible, count, want):
    assert rank_visible_devices(local_rank, visible, count) == want


def test_configure_narrows_cuda_visible_devices_before_cuda_starts(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (2, 4))
    t = NcclTraining(FakeMpiComm(rank=2, n=4), {"fusion_threshold": 64})
    t.configure()
    assert t.visible_devices == "2" and os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    assert t.threshold == 64 and t.describe()["cuda_visible_devices"] == "2"
    host = MpiCudaTraining(FakeMpiComm(), {"array_module": "numpy"})
    host.configure()  # host arrays (tests): the mask is left alone
    assert host.visible_devices is None and os.environ["CUDA_VISIBLE_DEVICES"] == "2"


# --- fakes: an MPI communicator of n simulated ranks, CuPy with NCCL --------------------------

class FakeMpiComm:
    """Rank ``rank`` of ``n``: every simulated rank says what this one says, each on its own GPU."""

    def __init__(self, rank: int = 0, n: int = 2, reasons: list | None = None):
        self.rank, self.n, self.reasons = rank, n, reasons
        self.bcasts: list = []

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.n

    def allgather(self, value):
        if isinstance(value, tuple):  # (host, PCI bus id): a distinct GPU per simulated rank
            return [(value[0], f"{value[1]}/{r}") for r in range(self.n)]
        return list(self.reasons) if self.reasons is not None else [value] * self.n

    def bcast(self, value, root=0):
        self.bcasts.append(value)
        return value


class DevArray(np.ndarray):
    """A host array that answers ``.data.ptr`` as a CuPy array does (the NCCL call takes pointers)."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


class FakeCupyNccl(FakeCupy):
    """FakeCupy plus what the device training path uses: DLPack import, allocation, device
    properties and ``cupy.cuda.nccl``. Memory is registered by pointer so the fake NCCL
    communicator can find the arrays it is handed, as NCCL finds device memory."""

    def __init__(self, others: float):
        super().__init__()
        self.memory: dict[int, DevArray] = {}
        self.calls: list[dict] = []
        self.others = others
        fake = self

        class Communicator:
            def __init__(self, n, uid, rank):
                fake.comm_args = (n, uid, rank)

            def destroy(self):
                fake.log.append("nccl.destroy")

            def allReduce(self, send_ptr, recv_ptr, count, dtype, op, stream_ptr):
                send, recv = fake.memory[send_ptr], fake.memory[recv_ptr]
                fake.calls.append({"send": np.array(send), "count": count, "dtype": dtype,
                                   "op": op, "stream": stream_ptr})
                # The other n-1 ranks contribute ``others`` per element each (n known to the comm).
                recv[:count] = send[:count] + (fake.comm_args[0] - 1) * fake.others

        self.nccl = types.ModuleType("cupy.cuda.nccl")
        self.nccl.NcclError = type("NcclError", (RuntimeError,), {})
        self.nccl.get_version = lambda: 22707
        self.nccl.available = True
        self.nccl.NCCL_FLOAT32, self.nccl.NCCL_SUM = "f32", "sum"
        self.nccl.get_unique_id = lambda: "uid-0"
        self.nccl.NcclCommunicator = Communicator
        self.cuda.runtime = types.SimpleNamespace(
            getDeviceCount=lambda: 1,
            getDeviceProperties=lambda i: {"name": b"Fake GPU", "pciBusID": 0x1b})
        self.cuda.nccl = self.nccl

    def _register(self, a: np.ndarray) -> DevArray:
        d = a.view(DevArray)
        self.memory[d.ctypes.data] = d
        return d

    def from_dlpack(self, capsule):
        return self._register(np.from_dlpack(tf_train_gpu.HostDlpack(capsule)))

    def zeros(self, count, dtype):
        a = aligned_empty(count, dtype)
        a[:] = 0
        return self._register(a)

    def ones(self, count, dtype):
        return self.zeros(count, dtype) + 1

    def add(self, a, b, out=None):  # the compile check's one-element kernel
        self.log.append("kernel add")
        return np.add(a, b, out=out)


def install_fake_cupy(monkeypatch, fake: FakeCupyNccl) -> None:
    cuda = types.ModuleType("cupy.cuda")
    cuda.__dict__.update(vars(fake.cuda))
    fake.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake.nccl)


@pytest.fixture(scope="module")
def tf():
    if not HAS_TF:
        pytest.skip("TensorFlow is not installed")
    from perfsuite.transports.tf.support import import_tf

    return import_tf()


def tiny_model(tf):
    """Four trainable tensors of four shapes: kernel 4x3 (48 B), bias 3 (12 B), kernel 3x2
    (24 B), bias 2 (8 B); a 64-byte threshold fuses them as [[0, 1], [2, 3]]."""
    tf.keras.utils.set_random_seed(7)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation="tanh"),
                                 tf.keras.layers.Dense(2)])
    x = tf.constant(np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32))
    y = tf.constant([0, 1, 1, 0, 1])
    return model, x, y


def reference_gradients(tf, model, loss_fn, x, y) -> list[np.ndarray]:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def train_one_step(tf, transport, threshold):
    """configure/start/make_step/step as the tf-epoch kernel calls them; returns what a test
    compares: the plan, the weights before and after, TF's own gradients, the step's result."""
    model, x, y = tiny_model(tf)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    optimizer = tf.keras.optimizers.SGD(learning_rate=LR)
    transport.options["fusion_threshold"] = threshold
    transport.configure()
    transport.start(tf)
    before = [v.numpy().copy() for v in model.trainable_variables]
    grads = reference_gradients(tf, model, loss_fn, x, y)
    step = transport.make_step(model, optimizer, loss_fn, x, y)
    allreduce_s = step()
    after = [v.numpy() for v in model.trainable_variables]
    return FusionPlan.of(model.trainable_variables, threshold), before, after, grads, allreduce_s


def expected_after(before, grads, n, others):
    """SGD on the average of this rank's gradient and n-1 ranks' ``others``."""
    return [b - LR * (g + (n - 1) * others) / n for b, g in zip(before, grads)]


# --- nccl: the whole step with a fake CuPy/NCCL, real TF (CPU) and real DLPack --------------

@pytest.mark.tf
@needs_tf
@pytest.mark.parametrize("threshold,buckets", [(64, [[0, 1], [2, 3]]), (0, [[0], [1], [2], [3]])])
def test_nccl_step_allreduces_exactly_the_fused_buffers_and_applies_the_average(
        tf, monkeypatch, threshold, buckets):
    fake = FakeCupyNccl(others=0.25)
    install_fake_cupy(monkeypatch, fake)
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (0, 1))
    monkeypatch.setattr(gpu, "nvml_gpu_count", lambda: (1, "NVML"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(tf_train_gpu, "tf_gpu_reason", lambda tf: None)
    comm = FakeMpiComm(rank=0, n=4)
    t = NcclTraining(comm, {})
    plan, before, after, grads, allreduce_s = train_one_step(tf, t, threshold)

    # bootstrap: rank 0's unique id went through MPI's bcast into the communicator
    assert comm.bcasts == ["uid-0"] and fake.comm_args == (4, "uid-0", 0)
    assert plan.buckets == buckets and t.describe()["fusion_buffers"] == [len(b) for b in buckets]
    # one NCCL call per fusion buffer, holding TF's gradients in bucket order, float32 sums
    assert len(fake.calls) == len(buckets)
    for call, b in zip(fake.calls, buckets):
        fused = np.concatenate([grads[i].ravel() for i in b])
        assert call["count"] == fused.size and (call["dtype"], call["op"]) == ("f32", "sum")
        assert call["stream"] == fake.stream.ptr
        np.testing.assert_allclose(call["send"], fused, rtol=1e-6, atol=1e-7)
    # unpacked to the right variables and scaled by 1/n: the average of 4 ranks' gradients
    for got, want in zip(after, expected_after(before, grads, 4, 0.25)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert allreduce_s >= 0 and "stream.sync" in fake.log  # synchronised before the clock
    facts = t.describe()
    assert facts["allreduce"] == "nccl" and facts["gpu"] == "Fake GPU" and "transport" not in facts


def test_nccl_with_two_ranks_on_one_gpu_skips_on_every_rank(monkeypatch):
    fake = FakeCupyNccl(others=0.0)
    install_fake_cupy(monkeypatch, fake)
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (0, 2))

    class SharedGpuComm(FakeMpiComm):
        def allgather(self, value):
            return [value] * self.n  # both ranks report the same (host, bus id)

    t = NcclTraining(SharedGpuComm(n=2), {})
    t.threshold, t.on_gpu = 0, False
    with pytest.raises(TransportUnavailable, match="NCCL needs one GPU per rank, but 2 ranks share"):
        t.start(types.SimpleNamespace())


def test_tf_gpu_reason_on_cpu_tensorflow(tf):
    reason = tf_train_gpu.tf_gpu_reason(tf)
    assert reason.startswith("TensorFlow sees 0 GPUs") and "built with CUDA" in reason


# --- mpi-cuda: CUDA-aware or an agreed skip; on host arrays, the same step -------------------

def test_mpi_cuda_refuses_mpi_that_is_not_cuda_aware_on_every_rank(monkeypatch):
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (0, 1))
    monkeypatch.setattr(mpi_cuda, "mpi_cuda_aware",
                        lambda: (False, "MPIX_Query_cuda_support() returned 0 in MPICH"))
    t = MpiCudaTraining(FakeMpiComm(n=2), {"array_module": "numpy"})
    t.configure()
    with pytest.raises(TransportUnavailable, match=r"^MPI is not CUDA-aware \(MPIX_Query_cuda_support"
                                                   r"\(\) returned 0 in MPICH\); mpi-staged"):
        t.start(types.SimpleNamespace())


class SummingComm(FakeMpiComm):
    """mpi4py's Allreduce for n simulated ranks, the others contributing ``others`` each."""

    def __init__(self, n, others):
        super().__init__(n=n)
        self.others, self.sends = others, []

    def Allreduce(self, send, recv, op=None):
        self.sends.append(np.array(send))
        recv[...] = send + (self.n - 1) * self.others


@pytest.mark.tf
@needs_tf
def test_mpi_cuda_step_on_host_arrays(tf, monkeypatch):
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (0, 1))
    monkeypatch.setattr(mpi_cuda, "mpi_cuda_aware", lambda: (True, "test says so"))
    comm = SummingComm(n=3, others=-0.5)
    t = MpiCudaTraining(comm, {"array_module": "numpy"})
    plan, before, after, grads, _ = train_one_step(tf, t, 64)
    assert [s.size for s in comm.sends] == plan.bucket_counts == [15, 8]
    np.testing.assert_allclose(comm.sends[1], np.concatenate([grads[2].ravel(), grads[3]]),
                               rtol=1e-6, atol=1e-7)
    for got, want in zip(after, expected_after(before, grads, 3, -0.5)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert t.describe()["cuda_aware"] == "test says so"


# --- real MPI worlds: the skip, and the host-array step end to end ----------------------------

def tf_gpu_world(monkeypatch, transport, n, env=None, **options):
    key = f"tf-epoch:{transport}"
    monkeypatch.setitem(transports.REGISTRY, key,
                        dataclasses.replace(transports.REGISTRY[key], check=lambda: None))
    cases = (Case("tf-epoch", transport, n, model="small-cnn", batch=8),)
    spec = WorldSpec("tf-epoch", transport, n, cases,
                     {"iters": 3, "warmup": 1, "baseline": False, "array_module": "numpy", **options})
    return suite.run_one(spec, suite.SuiteConfig(launch=LaunchConfig(env=env or {}), timeout=120))


@pytest.mark.tf
@pytest.mark.world
@needs_tf
def test_mpi_cuda_world_skips_when_mpi_is_not_cuda_aware(monkeypatch, no_leftover_ranks):
    out = tf_gpu_world(monkeypatch, "mpi-cuda", 2, env={"PERFSUITE_MPI_CUDA_AWARE": "0"})
    assert out.failure is None and out.result is None
    assert out.skipped == ("MPI is not CUDA-aware (PERFSUITE_MPI_CUDA_AWARE=0); "
                           "mpi-staged measures the copy-through-host path")


@pytest.mark.tf
@pytest.mark.world
@needs_tf
def test_mpi_cuda_world_on_host_arrays_keeps_ranks_identical(monkeypatch, no_leftover_ranks):
    out = tf_gpu_world(monkeypatch, "mpi-cuda", 2, env={"PERFSUITE_MPI_CUDA_AWARE": "1"})
    assert out.failure is None and out.skipped is None, out.failure or out.skipped
    (s,) = out.result.samples
    assert s.valid and s.info["weights_identical"] is True and s.info["weights_max_diff"] == 0.0
    assert 0 < s.metrics["allreduce_share"].value < 1
    facts = out.result.extra["transport_facts"]
    assert facts["allreduce"] == "mpi-cuda" and facts["array_module"] == "numpy"
    assert facts["fusion_buffers"] == [8]  # small-cnn's 8 tensors in one 64 MiB buffer
