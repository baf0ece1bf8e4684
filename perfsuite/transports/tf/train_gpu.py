"""Training transports whose fused gradients stay on the GPU: ``nccl`` and ``mpi-cuda``.

``mpi``'s Horovod-style step (``train.py``) with the fusion buffers left on the device,
handed to CuPy by DLPack (zero copy) and summed by the allreduce kernel's own ``nccl`` /
``mpi-cuda`` transport (``DeviceTraining``).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..placement import pin_rank_gpu, tf_gpu_reason
from .train import FusionPlan, TrainingTransport, aligned_empty, fused_step_fns, fusion_threshold


class HostDlpack:
    """A bare DLPack capsule of host memory, given the protocol methods numpy's ``from_dlpack``
    asks for (CuPy takes the bare capsule itself). Used on host arrays only (the suite's tests)."""

    def __init__(self, capsule: Any):
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0


def tf_to_array(tf: Any, xp: Any, tensor: Any) -> Any:
    """The tensor's own memory as an ``xp`` array (zero copy). ``to_dlpack`` returns only once
    the tensor's data is ready, so the array can be read on any stream afterwards."""
    capsule = tf.experimental.dlpack.to_dlpack(tensor)
    if xp is np:
        return np.from_dlpack(HostDlpack(capsule))
    return xp.from_dlpack(capsule)  # cupy.from_dlpack accepts a bare capsule (documented)


def array_to_tf(tf: Any, array: Any) -> Any:
    """An eager tensor on the array's memory (zero copy). The caller must have synchronised the
    array's stream: TF reads it on its own stream. Host memory must be 64-byte aligned (TF
    aborts the process otherwise), which ``aligned_empty`` and CuPy's allocator both give."""
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


class DeviceTraining(TrainingTransport):
    """``mpi``'s Horovod-style step with the fusion buffers kept on this rank's GPU.

    Per step: ``gradients`` packs the fusion buffers inside the graph; each buffer's device
    memory becomes a CuPy array through DLPack (no copy); ``allreduce`` (the allreduce kernel's
    own transport, so its NCCL bootstrap or CUDA-aware check is the one used here) sums them
    into receive buffers allocated once; the stream is synchronised before the host clock is
    read; the sums return to TF through DLPack, are scaled by 1/n and applied.

    One GPU per rank, seen as device 0 by both TF and CuPy: DLPack names TF's *logical* device
    id (``GPU:0``), so a rank that saw several GPUs and pinned TF to the second one would hand
    CuPy a buffer labelled device 0 that lives on device 1. The worker narrows
    ``CUDA_VISIBLE_DEVICES`` to the rank's GPU before MPI starts (``placement.place_rank``);
    where the launcher gave no local rank, ``configure`` does it from the node split, still
    before TF or CuPy touches CUDA. Both set TF's memory growth by environment, before TF
    starts: rank 0's plain-loop baseline runs ops on the GPU before ``start``, after which TF
    refuses any change of its device settings.
    """

    allreduce_transport = ""  # the allreduce kernel's transport that moves the bytes

    def configure(self) -> None:
        self.threshold = fusion_threshold(self.options)
        self.on_gpu = str(self.options.get("array_module", "cupy")) == "cupy"
        self.visible_devices = None
        if self.on_gpu:
            self.visible_devices = pin_rank_gpu(self.comm)

    def start(self, tf: Any) -> None:
        from .. import load
        from ..gpu import agree

        super().start(tf)
        agree(self.comm, tf_gpu_reason(tf) if self.on_gpu else None)
        # Collective: opens the device (CuPy on this rank's GPU), checks, agrees, bootstraps.
        self.exchange = load(self.allreduce_transport)(self.comm, self.options)
        self.ops = self.exchange.ops

    def close(self) -> None:
        exchange = getattr(self, "exchange", None)
        if exchange is not None:
            exchange.close()

    def receive_buffer(self, count: int) -> Any:
        if self.ops.name == "numpy":
            return aligned_empty(count)  # TF takes host memory only 64-byte aligned
        return self.exchange.alloc(count, "float32")

    def make_step(self, model, optimizer, loss_fn, x, y):
        tf, xp, ops, exchange = self.tf, self.ops.xp, self.ops, self.exchange
        plan = FusionPlan.of(model.trainable_variables, self.threshold)
        gradients, apply = fused_step_fns(tf, model, optimizer, loss_fn, plan, 1.0 / self.n)
        recv = [self.receive_buffer(c) for c in plan.bucket_counts]  # once: cached device memory
        self.buckets = [len(b) for b in plan.buckets]
        clock = time.perf_counter
        losses: list = []

        def step() -> float:
            loss, fused = gradients(x, y)
            losses.append(loss)  # a tensor: read after the epoch, never inside a timed step
            sends = [tf_to_array(tf, xp, t) for t in fused]
            t0 = clock()
            for send, out in zip(sends, recv):
                exchange.allreduce(send, out)
            ops.synchronize()  # the sums are complete before the clock and before TF reads them
            allreduce_s = clock() - t0
            apply([array_to_tf(tf, out) for out in recv])
            # TF reads ``recv`` on its own stream: the step ends when it has, so the next step's
            # allreduce cannot overwrite a buffer still being read, and the step time is whole.
            tf.test.experimental.sync_devices()
            return allreduce_s

        step.losses = losses
        return step

    def describe(self) -> dict:
        facts = {k: v for k, v in self.exchange.describe().items() if k != "transport"} \
            if getattr(self, "exchange", None) is not None else {}
        return {"allreduce": self.allreduce_transport, "dlpack": "zero-copy TF <-> CuPy",
                "fusion_threshold": self.threshold, "fusion_buffers": getattr(self, "buckets", []),
                "cuda_visible_devices": self.visible_devices, **facts}


class NcclTraining(DeviceTraining):
    """Fused gradients allreduced with NCCL (``cupy.cuda.nccl``) straight from TF's GPU memory:
    the ``nccl`` allreduce transport (unique id broadcast over MPI, one GPU per rank)."""

    name = "nccl"
    allreduce_transport = "nccl"


class MpiCudaTraining(DeviceTraining):
    """Fused gradients allreduced by mpi4py on the device buffers: the ``mpi-cuda`` allreduce
    transport, which asks whether MPI is CUDA-aware and otherwise skips on every rank together."""

    name = "mpi-cuda"
    allreduce_transport = "mpi-cuda"
