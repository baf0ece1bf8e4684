"""Training transports for the ``tf-epoch`` kernel: how one training step exchanges gradients.

Each transport builds a step (a callable that runs one forward/backward/update on this rank and
returns the seconds spent in the gradient allreduce, or None when the exchange happens inside
TensorFlow's graph and cannot be seen from Python); the step's ``losses`` holds every step's loss
(this rank's, as a tensor: read after the epoch, for its checks). The kernel owns warm-up, timing, the weight
check and the plain-loop baseline; a transport supplies only:

- ``configure()`` before TensorFlow is imported (TF_CONFIG, environment),
- ``start(tf)`` once TensorFlow is imported (strategy, ``hvd.init()``),
- ``scope()`` for building the model and optimizer, ``sync_initial(model)``, ``make_step(...)``.

Transports:
- ``plain``: no strategy and no exchange: each worker trains alone (the scaling baseline's loop).
- ``grpc``: ``MultiWorkerMirroredStrategy`` with ``CommunicationImplementation.RING``: gradients
  are summed by TF's collective ring over gRPC inside ``optimizer.apply_gradients``.
- ``mpi``: Horovod's design without Horovod: ``tf.GradientTape`` gradients are packed into fusion
  buffers (a threshold in bytes; 0 = one allreduce per tensor), summed with mpi4py ``Allreduce``,
  averaged and applied. The exchange runs after the whole backward pass (Horovod overlaps it).
- ``horovod``: ``hvd.DistributedGradientTape`` (Horovod over MPI; needs tf_keras).
- ``grpc-nccl``, ``horovod-nccl``: GPU variants of ``grpc`` and ``horovod``.
- ``nccl``, ``mpi-cuda``: ``mpi``'s fused step with the fusion buffers left on the GPU
  (``train_gpu.py``).
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...records.errors import ConfigError, TransportUnavailable
from ...records.model import parse_size
from .support import cluster_addresses, multi_worker_strategy, need_horovod, set_tf_config

#: Horovod's long-standing default fusion threshold (HOROVOD_FUSION_THRESHOLD), 64 MiB.
DEFAULT_FUSION_THRESHOLD = 64 << 20
ALIGN = 64  # bytes: numpy buffers handed to TF/DLPack must be 64-byte aligned
MPI_WAITS = ("poll", "spin")
#: Between MPI tests a waiting rank sleeps this long, leaving its core to TF's compute threads
#: (a blocking MPI call spins a core, which on an oversubscribed CPU slows the peer it waits for;
#: Horovod's background thread likewise sleeps between cycles).
POLL_S = 50e-6


def fusion_buckets(nbytes: Sequence[int], threshold: int) -> list[list[int]]:
    """Group tensors (by index, in order) into fusion buffers of at most ``threshold`` bytes.

    A tensor larger than the threshold travels alone; ``threshold <= 0`` means one allreduce
    per tensor (Horovod with fusion off).
    """
    if threshold <= 0:
        return [[i] for i in range(len(nbytes))]
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i, b in enumerate(nbytes):
        if current and filled + b > threshold:
            buckets.append(current)
            current, filled = [], 0
        current.append(i)
        filled += b
    if current:
        buckets.append(current)
    return buckets


def aligned_empty(count: int, dtype: Any = np.float32, align: int = ALIGN) -> np.ndarray:
    """An uninitialised 1-D array whose data starts on an ``align``-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(count * itemsize + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + count * itemsize].view(dtype)


def fusion_threshold(options: dict) -> int:
    raw = options.get("fusion_threshold", DEFAULT_FUSION_THRESHOLD)
    if isinstance(raw, str):
        raw = 0 if raw.strip() == "0" else parse_size(raw, "fusion threshold")
    if not isinstance(raw, int) or raw < 0:
        raise ConfigError(f"fusion threshold {raw!r} must be a byte count >= 0 (0 = one allreduce "
                          "per tensor), e.g. 64MiB")
    return raw


def plain_train_step(tf: Any, model: Any, optimizer: Any, loss_fn: Any) -> Callable:
    """The step as a user writes it with no strategy: mean loss, tape, apply."""

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


class FusionPlan:
    """Which gradient goes into which fusion buffer, and where: tensors by index, in the order
    of ``model.trainable_variables`` (every rank builds the same model, so the same plan)."""

    def __init__(self, shapes: Sequence[tuple[int, ...]], threshold: int, itemsize: int = 4):
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.counts = [int(np.prod(s)) for s in self.shapes]
        self.buckets = fusion_buckets([c * itemsize for c in self.counts], threshold)
        self.bucket_counts = [sum(self.counts[i] for i in b) for b in self.buckets]

    @classmethod
    def of(cls, variables: Sequence[Any], threshold: int) -> FusionPlan:
        return cls([tuple(v.shape) for v in variables], threshold)


def fused_step_fns(tf: Any, model: Any, optimizer: Any, loss_fn: Any, plan: FusionPlan,
                   scale: float) -> tuple[Callable, Callable]:
    """(gradients, apply) as two tf.functions around a Python-side exchange.

    ``gradients(x, y)`` returns the loss and the fusion buffers, packed inside the graph as Horovod packs
    them on its side; ``apply(summed)`` unpacks the summed buffers, multiplies by ``scale``
    (1/world size: the sum becomes the average) and applies them. Shared by the host (``mpi``)
    and device (``nccl``, ``mpi-cuda``) transports, so all pack and average alike.
    """
    variables = model.trainable_variables

    @tf.function
    def gradients(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, variables)
        return loss, [tf.concat([tf.reshape(grads[i], [-1]) for i in b], axis=0) for b in plan.buckets]

    @tf.function
    def apply(fused):
        grads = [None] * len(variables)
        for b, buf in zip(plan.buckets, fused):
            for i, part in zip(b, tf.split(buf, [plan.counts[i] for i in b])):
                grads[i] = tf.reshape(part * scale, plan.shapes[i])
        optimizer.apply_gradients(zip(grads, variables))

    return gradients, apply


class TrainingTransport:
    name = "base"
    legacy_keras = False  # True: tf.keras must be tf_keras (Horovod's hooks need Keras 2)
    synchronous = True  # weights must be identical on every rank after the epoch
    # The plain-loop baseline runs before start(): once started, a transport's own threads
    # (Horovod's background loop polling MPI) take cores from it.
    baseline_before_start = True
    implementation = ""
    on_gpu = False  # True: TF trains on this rank's GPU, and a step ends when the device is done

    def __init__(self, comm, options: dict | None = None):
        self.comm = comm
        self.options = dict(options or {})
        self.rank, self.n = comm.Get_rank(), comm.Get_size()
        self.tf: Any = None

    def configure(self) -> None:
        """Before TensorFlow is imported."""

    def prepare(self, tf: Any) -> None:
        """Right after TensorFlow is imported, before it runs any op: a host transport's
        TensorFlow gets no GPU (GPU transports choose theirs before MPI starts)."""
        from ..placement import hide_gpus_from_tf

        if not self.on_gpu:
            hide_gpus_from_tf(tf)

    def start(self, tf: Any) -> None:
        self.tf = tf

    def scope(self):
        return contextlib.nullcontext()

    def sync_initial(self, model: Any) -> None:
        """Make every rank start from rank 0's weights."""
        for v in model.variables:
            value = np.ascontiguousarray(v.numpy())
            self.comm.Bcast(value, root=0)
            v.assign(value)

    def make_step(self, model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any
                  ) -> Callable[[], float | None]:
        raise NotImplementedError

    def finish(self, tf: Any = None) -> Callable[[], None]:
        """What ends a step: on a GPU, waiting for the device, because ``loss.numpy()`` returns
        once the loss is known while the optimizer's and the collectives' kernels still run and
        would spill into the next step's time."""
        if not self.on_gpu:
            return lambda: None
        return (tf or self.tf).test.experimental.sync_devices

    def close(self) -> None:
        """After the last case: release what the transport holds (NCCL communicators)."""

    def describe(self) -> dict:
        return {}


class PlainTraining(TrainingTransport):
    name = "plain"
    synchronous = False  # workers train independently; their weights differ by design

    def sync_initial(self, model: Any) -> None:
        pass

    def make_step(self, model, optimizer, loss_fn, x, y):
        train_step, done = plain_train_step(self.tf, model, optimizer, loss_fn), self.finish()
        losses: list = []

        def step() -> None:
            loss = train_step(x, y)
            loss.numpy()  # .numpy(): the step is complete when the clock is read
            losses.append(loss)
            done()

        step.losses = losses
        return step


class GrpcTraining(TrainingTransport):
    name = "grpc"
    implementation = "RING"
    # MultiWorkerMirroredStrategy must be created before TensorFlow runs any op, so the plain
    # loop runs after the epoch; gRPC's threads sleep while rank 0 measures it.
    baseline_before_start = False

    def configure(self) -> None:
        self.addresses = cluster_addresses(self.comm, self.options)
        set_tf_config(self.addresses, self.rank)

    def start(self, tf: Any) -> None:
        super().start(tf)
        self.strategy = multi_worker_strategy(tf, self.implementation)
        replicas = self.strategy.num_replicas_in_sync
        if replicas != self.n:
            raise RuntimeError(f"MultiWorkerMirroredStrategy sees {replicas} replicas, the world has {self.n}")

    def scope(self):
        return self.strategy.scope()

    def sync_initial(self, model: Any) -> None:
        pass  # the strategy initialises every mirrored variable from worker 0

    def make_step(self, model, optimizer, loss_fn, x, y):
        tf, strategy, n = self.tf, self.strategy, self.n

        @tf.function
        def train_step(x, y):
            def replica(x, y):
                with tf.GradientTape() as tape:
                    # sum / the world's losses (examples, or tokens of a language model), so the
                    # strategy's sum of gradients is their average
                    per_item = loss_fn(y, model(x, training=True))
                    loss = tf.reduce_sum(per_item) / (tf.cast(tf.size(per_item), per_item.dtype) * n)
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss * n  # this rank's mean loss, as the other transports report it

            return strategy.experimental_local_results(strategy.run(replica, args=(x, y)))[0]

        done = self.finish()
        losses: list = []

        def step() -> None:
            loss = train_step(x, y)
            loss.numpy()
            losses.append(loss)
            done()

        step.losses = losses
        return step

    def describe(self) -> dict:
        return {"collective": f"MultiWorkerMirroredStrategy {self.implementation}",
                "workers": self.addresses}


def start_on_gpu(transport: TrainingTransport, tf: Any) -> None:
    """Every rank skips together unless TF sees exactly this rank's one GPU (a CPU-only
    TensorFlow would otherwise time CPU training under a GPU label)."""
    from ..gpu import agree
    from ..placement import tf_gpu_reason

    reason = tf_gpu_reason(tf)
    agree(transport.comm, f"{transport.name}: {reason}" if reason else None)


class GrpcNcclTraining(GrpcTraining):
    """MWMS with NCCL collectives: gRPC only for set-up, gradients over NCCL between GPUs.
    Each worker sees one GPU, so the strategy has one replica per worker."""

    name = "grpc-nccl"
    implementation = "NCCL"
    on_gpu = True

    def configure(self) -> None:
        from ..placement import pin_rank_gpu

        self.visible_devices = pin_rank_gpu(self.comm)  # where the launcher gave no local rank
        super().configure()

    def start(self, tf: Any) -> None:
        start_on_gpu(self, tf)
        super().start(tf)


class MpiTraining(TrainingTransport):
    name = "mpi"

    def configure(self) -> None:
        self.threshold = fusion_threshold(self.options)
        self.wait = self.options.get("mpi_wait", "poll")
        if self.wait not in MPI_WAITS:
            raise ConfigError(f"mpi_wait {self.wait!r} is unknown; choose from {', '.join(MPI_WAITS)}")

    def make_step(self, model, optimizer, loss_fn, x, y):
        from mpi4py import MPI

        tf, comm = self.tf, self.comm
        variables = model.trainable_variables
        plan = FusionPlan.of(variables, self.threshold)
        recv = [aligned_empty(c) for c in plan.bucket_counts]
        gradients, apply = fused_step_fns(tf, model, optimizer, loss_fn, plan, 1.0 / self.n)
        self.buckets = [len(b) for b in plan.buckets]

        clock = time.perf_counter

        spin = self.wait == "spin"
        losses: list = []

        def step() -> float:
            loss, fused = gradients(x, y)
            losses.append(loss)
            t0 = clock()
            if spin:
                for buf, out in zip(fused, recv):
                    comm.Allreduce(buf.numpy(), out, op=MPI.SUM)
            else:
                sends = [buf.numpy() for buf in fused]  # alive until every request is done
                reqs = [comm.Iallreduce(b, out, op=MPI.SUM) for b, out in zip(sends, recv)]
                while not MPI.Request.Testall(reqs):
                    time.sleep(POLL_S)
            allreduce_s = clock() - t0
            apply([tf.constant(out) for out in recv])
            return allreduce_s

        step.losses = losses
        return step

    def describe(self) -> dict:
        return {"fusion_threshold": self.threshold, "fusion_buffers": getattr(self, "buckets", []),
                "mpi_wait": self.wait}


class HorovodTraining(TrainingTransport):
    name = "horovod"
    legacy_keras = True
    needs_nccl = False

    def configure(self) -> None:
        # The ranks' Python decides, before TensorFlow is imported with legacy Keras: an A/B arm
        # or study library may be another venv, without the Horovod the launching one has.
        reason = need_horovod()
        if reason:
            raise TransportUnavailable(reason)
        # One threshold for ``mpi`` and ``horovod`` so the two are compared like for like.
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(fusion_threshold(self.options))

    def start(self, tf: Any) -> None:
        super().start(tf)
        try:
            import horovod.tensorflow as hvd
        except ImportError as exc:
            raise TransportUnavailable(f"horovod.tensorflow cannot be imported ({exc}); rebuild it "
                                       "against this TensorFlow with scripts/install-horovod.sh") from None
        hvd.init()
        if hvd.size() != self.n:
            raise RuntimeError(f"Horovod sees {hvd.size()} ranks, the MPI world has {self.n}")
        if self.needs_nccl and not hvd.nccl_built():
            raise TransportUnavailable("this Horovod was built without NCCL (HOROVOD_GPU_OPERATIONS=NCCL)")
        self.hvd = hvd

    def sync_initial(self, model: Any) -> None:
        self.hvd.broadcast_variables(model.variables, root_rank=0)

    def make_step(self, model, optimizer, loss_fn, x, y):
        tf, hvd = self.tf, self.hvd

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
            tape = hvd.DistributedGradientTape(tape)  # averages across ranks
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        done = self.finish()
        losses: list = []

        def step() -> None:
            loss = train_step(x, y)
            loss.numpy()
            losses.append(loss)
            done()

        step.losses = losses
        return step

    def describe(self) -> dict:
        hvd = self.hvd
        return {"horovod": getattr(__import__("horovod"), "__version__", "?"),
                "mpi_enabled": bool(hvd.mpi_enabled()), "nccl_built": bool(hvd.nccl_built()),
                "fusion_threshold": int(os.environ["HOROVOD_FUSION_THRESHOLD"])}


class HorovodNcclTraining(HorovodTraining):
    """Horovod over NCCL: its usual pinning (one GPU per local rank) is done before MPI starts,
    by CUDA_VISIBLE_DEVICES, so TF here sees only that GPU as GPU:0."""

    name = "horovod-nccl"
    needs_nccl = True
    on_gpu = True

    def configure(self) -> None:
        from ..placement import pin_rank_gpu

        self.visible_devices = pin_rank_gpu(self.comm)
        super().configure()

    def start(self, tf: Any) -> None:
        start_on_gpu(self, tf)
        super().start(tf)
