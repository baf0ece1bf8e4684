"""Training transports whose fused gradients stay on the GPU: ``nccl`` and ``mpi-cuda``.

``mpi``'s Horovod-style step (``tf_train.py``) with the fusion buffers left on the device,
handed to CuPy by DLPack (zero copy) and summed by the allreduce kernel's own ``nccl`` /
``mpi-cuda`` transport (``DeviceTraining``).
"""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from .tf_train import FusionPlan, TrainingTransport, aligned_empty, fused_step_fns, fusion_threshold


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


def rank_visible_devices(local_rank: int, visible: str | None, gpu_count: int) -> str | None:
    """Pure: the ``CUDA_VISIBLE_DEVICES`` value that leaves this rank only its own GPU, chosen
    as ``gpu.pick_device`` chooses (local rank modulo the GPUs the rank may use, in CUDA's
    order); None when there is nothing to choose from (no GPU, or every GPU hidden)."""
    from .gpu import pick_device

    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if not ids or ids == ["-1"]:
            return None
    else:
        ids = [str(i) for i in range(gpu_count)]
    if not ids:
        return None
    return ids[pick_device(local_rank, len(ids))]


class DeviceTraining(TrainingTransport):
    """``mpi``'s Horovod-style step with the fusion buffers kept on this rank's GPU.

    Per step: ``gradients`` packs the fusion buffers inside the graph; each buffer's device
    memory becomes a CuPy array through DLPack (no copy); ``allreduce`` (the allreduce kernel's
    own transport, so its NCCL bootstrap or CUDA-aware check is the one used here) sums them
    into receive buffers allocated once; the stream is synchronised before the host clock is
    read; the sums return to TF through DLPack, are scaled by 1/n and applied.

    One GPU per rank, seen as device 0 by both TF and CuPy: DLPack names TF's *logical* device
    id (``GPU:0``), so a rank that saw several GPUs and pinned TF to the second one would hand
    CuPy a buffer labelled device 0 that lives on device 1. ``configure`` therefore narrows
    ``CUDA_VISIBLE_DEVICES`` to the rank's GPU before TF or CuPy touches CUDA, choosing it
    as ``gpu.pick_device`` does.
    """

    allreduce_transport = ""  # the allreduce kernel's transport that moves the bytes

    def configure(self) -> None:
        self.threshold = fusion_threshold(self.options)
        self.on_gpu = str(self.options.get("array_module", "cupy")) == "cupy"
        self.visible_devices = None
        if self.on_gpu:
            self.visible_devices = self.pin_rank_gpu()

    def pin_rank_gpu(self) -> str | None:
        """Collective (node split). Must run before CUDA is initialised in this process: a
        later change of CUDA_VISIBLE_DEVICES is ignored by the CUDA runtime."""
        from .gpu import node_rank, nvml_gpu_count

        local_rank, _ = node_rank(self.comm)
        value = rank_visible_devices(local_rank, os.environ.get("CUDA_VISIBLE_DEVICES"),
                                     nvml_gpu_count()[0])
        if value is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = value
        return value

    def start(self, tf: Any) -> None:
        from . import load
        from .gpu import agree

        super().start(tf)
        agree(self.comm, self.pin_tf_gpu(tf) if self.on_gpu else None)
        # Collective: opens the device (CuPy on this rank's GPU), checks, agrees, bootstraps.
        self.exchange = load(self.allreduce_transport)(self.comm, self.options)
        self.ops = self.exchange.ops

    @staticmethod
    def pin_tf_gpu(tf: Any) -> str | None:
        """Before TF initialises its devices: TF on the one GPU, growing its memory as needed
        (by default TF takes nearly all of it, leaving none for CuPy's buffers and NCCL).
        Returns the reason it cannot, or None."""
        gpus = tf.config.list_physical_devices("GPU")
        if len(gpus) != 1:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            return (f"TensorFlow sees {len(gpus)} GPUs with CUDA_VISIBLE_DEVICES={visible!r}; "
                    "device training needs exactly one per rank (and TensorFlow built with CUDA)")
        tf.config.set_visible_devices(gpus, "GPU")
        tf.config.experimental.set_memory_growth(gpus[0], True)
        return None

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

        def step() -> float:
            sends = [tf_to_array(tf, xp, t) for t in gradients(x, y)]
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
