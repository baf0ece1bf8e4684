"""How bytes move. A registry of transports, each able to say why it cannot run here.

The registry is importable on the pytest side without starting MPI or importing TensorFlow or
CuPy: ``unavailable_reason`` only looks for modules and devices. The transport classes themselves
live in one module each and are imported inside the ranks (``load``).
"""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

from ..records.errors import ConfigError

TF1_ONLY = ("exists only in TensorFlow 1 (tf.contrib / the grpc+verbs, grpc+mpi and grpc+gdr "
            "server protocols were removed in TensorFlow 2)")


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def need_mpi4py() -> str | None:
    return None if has_module("mpi4py") else "mpi4py is not installed (pip install mpi4py mpich)"


@dataclass(frozen=True)
class TransportSpec:
    """What the registry knows of a transport before anything heavy is imported."""

    name: str
    summary: str
    benchmarks: tuple[str, ...]  # which kernels it serves: "allreduce", "tf-epoch"
    module: str | None = None  # "perfsuite.transports.mpi:MpiAllreduce" (None: never runs in TF 2)
    device: str = "host"  # host | gpu
    check: Callable[[], str | None] = field(default=need_mpi4py, compare=False)
    needs_ports: bool = False  # the launching side fills options["ports"]: one free port per rank
    native: bool = False  # the launching side builds the native timed loop (launch/native/mpi.py)
    device_native: bool = False  # ... or the native NCCL loop (launch/native/nccl.py)
    # MPI thread level the rank asks of MPI_Init_thread: Horovod's background thread calls MPI
    # itself, so it needs "multiple"; every other transport calls MPI from the main thread only.
    thread_level: str = "funneled"

    def unavailable_reason(self) -> str | None:
        if self.module is None:
            return TF1_ONLY
        return self.check()


REGISTRY: dict[str, TransportSpec] = {}


def register(spec: TransportSpec, key: str | None = None) -> TransportSpec:
    """``key`` "BENCHMARK:NAME" lets one user-facing name (``mpi``) mean different transports
    for different kernels (allreduce ``mpi`` vs training ``mpi``)."""
    REGISTRY[key or spec.name] = spec
    return spec


def names(benchmark: str = "allreduce") -> list[str]:
    return list(dict.fromkeys(s.name for s in REGISTRY.values() if benchmark in s.benchmarks))


def default_names(benchmark: str = "allreduce") -> list[str]:
    """The transports a run selects when none are named ('all', the default): every one of
    ``benchmark``'s but the designs that exist only in TensorFlow 1, which can never run; they
    stay listed (``perfsuite transports``) and, when named, are skipped with ``TF1_ONLY``."""
    return [n for n in names(benchmark) if spec(n, benchmark).module is not None]


def spec(name: str, benchmark: str = "allreduce") -> TransportSpec:
    s = REGISTRY.get(f"{benchmark}:{name}") or REGISTRY.get(name)
    if (s is None or benchmark not in s.benchmarks) and f"collective:{name}" in REGISTRY:
        s = REGISTRY[f"collective:{name}"]
    if s is None or benchmark not in s.benchmarks:
        raise ConfigError(f"transport {name!r} is unknown for {benchmark}; "
                          f"choose from {', '.join(names(benchmark))}")
    return s


#: The benchmarks that train a model, one per framework; a training transport's name belongs to one.
TRAINING = ("tf-epoch", "torch-epoch")


def training_benchmark(name: str) -> str:
    """The training benchmark whose transport ``name`` is ('mpi' -> tf-epoch, 'torch-gloo' ->
    torch-epoch), so a command that takes one training transport needs no framework flag."""
    for benchmark in TRAINING:
        if name in names(benchmark):
            return benchmark
    raise ConfigError(f"training transport {name!r} is unknown; choose from "
                      f"{', '.join(n for b in TRAINING for n in names(b))}")


def unavailable_reason(name: str, benchmark: str = "allreduce") -> str | None:
    """None when the transport can run here, else the reason it is skipped."""
    return spec(name, benchmark).unavailable_reason()


def load(name: str, benchmark: str = "allreduce"):
    """Import and return the transport class (inside a rank)."""
    s = spec(name, benchmark)
    if s.module is None:
        raise ConfigError(f"transport {name!r} {TF1_ONLY}")
    mod, _, attr = s.module.partition(":")
    return getattr(importlib.import_module(mod), attr)


#: The collective benchmarks (perfsuite.collectives, one record each); the transports that have
#: every one serve them all, the designs that are allreduce by nature only allreduce.
COLLECTIVES = ("allreduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "alltoallv")
OTHER_COLLECTIVES = COLLECTIVES[1:]

register(TransportSpec("mpi", "the MPI library's collectives on host (numpy) buffers, timed by a C loop",
                       COLLECTIVES, "perfsuite.transports.mpi:MpiAllreduce", native=True))
register(TransportSpec("mpi", "MPI point-to-point (Isend/Irecv) between pairs of nodes", ("p2p",),
                       "perfsuite.transports.mpi:MpiAllreduce"), key="p2p:mpi")
register(TransportSpec("ring", "Baidu ring allreduce: reduce-scatter + allgather over MPI Sendrecv",
                       ("allreduce",), "perfsuite.transports.ring:RingAllreduce"))
for _proto in ("verbs", "mpi", "gdr"):
    register(TransportSpec(f"grpc+{_proto}", f"TF 1 gRPC+{_proto} server protocol",
                           ("allreduce", "tf-epoch"), None))


def need_gpu() -> str | None:
    """NVML + module look-ups only (gpu.py); never imports CuPy or creates a CUDA context."""
    from .gpu import need_gpu as check

    return check()


for _name, _summary, _cls in (
        ("mpi-cuda", "mpi4py's collectives on CuPy buffers (needs CUDA-aware MPI)", "mpi_cuda:MpiCudaAllreduce"),
        ("mpi-staged", "D2H copy, the host MPI collective, H2D copy", "mpi_staged:MpiStagedAllreduce"),
        ("nccl", "NCCL's collectives via cupy.cuda.nccl, one GPU per rank", "nccl:NcclAllreduce"),
        ("gpu-ring", "ring allreduce with CuPy-kernel reductions and cached buffers, over "
                     "CUDA-aware MPI or staged", "gpu_ring:GpuRingAllreduce")):
    register(TransportSpec(_name, _summary, ("allreduce",) if _name == "gpu-ring" else COLLECTIVES,
                           f"perfsuite.transports.{_cls}", device="gpu", check=need_gpu,
                           device_native=_name == "nccl"))


# TensorFlow: tf-grpc for the allreduce kernel, and the training transports of tf-epoch (keyed
# "tf-epoch:NAME" because mpi and nccl are also allreduce transports). tf.support imports only
# the standard library at module level, so TensorFlow is never imported here.
from .tf import support as _tf  # noqa: E402

register(TransportSpec("tf-grpc", "TensorFlow collective ring over gRPC (MultiWorkerMirroredStrategy RING)",
                       ("allreduce",), "perfsuite.transports.tf.grpc:TfGrpcAllreduce",
                       check=_tf.need_tf, needs_ports=True))
for _name, _summary, _cls, _device, _check, _ports in (
        ("plain", "no strategy, no gradient exchange: each worker trains alone", "tf.train:PlainTraining",
         "host", _tf.need_tf, False),
        ("grpc", "MultiWorkerMirroredStrategy, RING collectives over gRPC", "tf.train:GrpcTraining",
         "host", _tf.need_tf, True),
        ("mpi", "GradientTape gradients fused and averaged with mpi4py Allreduce (Horovod-style)",
         "tf.train:MpiTraining", "host", _tf.need_tf, False),
        ("horovod", "hvd.DistributedGradientTape over MPI", "tf.train:HorovodTraining",
         "host", _tf.need_horovod, False),
        ("grpc-nccl", "MultiWorkerMirroredStrategy, NCCL collectives", "tf.train:GrpcNcclTraining",
         "gpu", _tf.need_tf_gpu, True),
        ("horovod-nccl", "hvd.DistributedGradientTape over NCCL", "tf.train:HorovodNcclTraining",
         "gpu", _tf.need_horovod_gpu, False),
        ("nccl", "fused gradients on the GPU, DLPack to CuPy, NCCL allreduce", "tf.train_gpu:NcclTraining",
         "gpu", _tf.need_tf_gpu, False),
        ("mpi-cuda", "fused gradients on the GPU, DLPack to CuPy, CUDA-aware MPI Allreduce",
         "tf.train_gpu:MpiCudaTraining", "gpu", _tf.need_tf_gpu, False)):
    register(TransportSpec(_name, _summary, ("tf-epoch",), f"perfsuite.transports.{_cls}",
                           device=_device, check=_check, needs_ports=_ports,
                           thread_level="multiple" if _name.startswith("horovod") else "funneled"),
             key=f"tf-epoch:{_name}")


# PyTorch: torch.distributed groups for the allreduce kernel, and the same backends under DDP for
# torch-epoch (keyed "torch-epoch:NAME"). torch.support imports only the standard library at
# module level, so torch is never imported here.
from .torch import support as _torch  # noqa: E402

for _name, _summary, _cls, _device, _check in (
        ("torch-gloo", "torch.distributed collectives, gloo backend, host tensors", "GlooAllreduce",
         "host", _torch.need_torch),
        ("torch-nccl", "torch.distributed collectives, NCCL backend, one GPU per rank", "NcclAllreduce",
         "gpu", _torch.need_torch_gpu),
        ("torch-mpi", "torch.distributed collectives, MPI backend (torch built with USE_MPI)",
         "MpiAllreduce", "host", _torch.need_torch_mpi)):
    register(TransportSpec(_name, _summary, COLLECTIVES, f"perfsuite.transports.torch.allreduce:Torch{_cls}",
                           device=_device, check=_check))
for _name, _summary, _cls, _device, _check in (
        ("torch-gloo", "DistributedDataParallel over gloo, host tensors", "GlooTraining", "host", _torch.need_torch),
        ("torch-nccl", "DistributedDataParallel over NCCL, one GPU per rank", "NcclTraining", "gpu",
         _torch.need_torch_gpu),
        ("torch-mpi", "DistributedDataParallel over MPI (torch built with USE_MPI)", "MpiTraining", "host",
         _torch.need_torch_mpi)):
    register(TransportSpec(_name, _summary, ("torch-epoch",), f"perfsuite.transports.torch.train:{_cls}",
                           device=_device, check=_check), key=f"torch-epoch:{_name}")


# A user's own benchmark (perfsuite.benchmark): its step gets the mpi4py communicator, or a
# torch.distributed group of the backend (kernels/user/step.py starts it); keyed "user:NAME".
for _name, _summary, _device, _check in (
        ("mpi", "the user's step, with the world's mpi4py communicator", "host", need_mpi4py),
        ("torch-gloo", "the user's step, in a torch.distributed gloo group", "host", _torch.need_torch),
        ("torch-nccl", "the user's step, in a torch.distributed NCCL group, one GPU per rank", "gpu",
         _torch.need_torch_gpu),
        ("torch-mpi", "the user's step, in a torch.distributed MPI group", "host", _torch.need_torch_mpi)):
    register(TransportSpec(_name, _summary, ("user",), "perfsuite.kernels.user.step:World", device=_device,
                           check=_check), key=f"user:{_name}")


def allreduce_only(name: str) -> Callable[[], str | None]:
    def reason() -> str:
        return (f"{name} is an allreduce design (its algorithm is an allreduce), so it runs no other "
                "collective; mpi, nccl, torch-gloo and torch-nccl run every one")
    return reason


# The designs that are allreduce by nature are listed under every other collective, skipped
# with that reason, so `--transports ring --benchmarks all_gather` says why rather than "unknown".
for _spec in [s for s in list(REGISTRY.values()) if s.benchmarks == ("allreduce",) and s.module]:
    register(TransportSpec(_spec.name, _spec.summary, OTHER_COLLECTIVES, _spec.module, device=_spec.device,
                           check=allreduce_only(_spec.name)), key=f"collective:{_spec.name}")


def collectives_of(name: str) -> list[str]:
    """The collectives transport ``name`` runs (none for a training transport)."""
    return [c for c in COLLECTIVES if (s := REGISTRY.get(f"{c}:{name}") or REGISTRY.get(name)) is not None
            and c in s.benchmarks and not (f"collective:{name}" in REGISTRY and c in OTHER_COLLECTIVES)]
