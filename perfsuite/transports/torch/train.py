"""Training transports for the ``torch-epoch`` kernel: DistributedDataParallel or FSDP2
(``fully_shard``) over a torch.distributed group of one backend, in float32 or bf16.

Parallelism and precision are a case's axes (``kernels.training.parallel_amp``):

- ``ddp``: a replica per rank, gradients allreduced in buckets (below);
- ``fsdp``: FSDP2, each transformer block sharded on its own (``fully_shard`` per block, then
  the root), as PyTorch's FSDP2 tutorial and torchtitan do; a model without blocks (a CNN) is one
  unit. Parameters are all-gathered before a unit's forward and backward, and gradients
  reduce-scattered after its backward. ``fsdp_prefetch`` (the kernel's option) sets the
  prefetching: ``on`` gathers the next block asynchronously during this one, forward and
  backward (``_prefetch_async``); ``off`` prefetches nothing (FSDP2's own backward prefetch off
  too); ``default`` leaves FSDP2's own.
- ``bf16``: DDP runs forward and loss under ``torch.autocast``; FSDP casts its parameters to bf16
  for compute and reduces gradients in float32 (its ``MixedPrecisionPolicy``), as torchtitan.

DDP exchanges gradients inside ``backward()``: its autograd hooks fill buckets of
``bucket_cap_mb`` megabytes (torch's default 25, the analogue of Horovod's fusion threshold) and
allreduce each bucket as soon as it is full, overlapping the exchange with the rest of the
backward pass. So the allreduce's own time is not visible from Python (as for TensorFlow's
MWMS); on host tensors a step reports the time its rank was not computing (``make_step``), the
exposed exchange. Every rank starts from rank 0's weights because DDP broadcasts them when it
wraps the model.

- ``torch-gloo``: host tensors, gloo; ``torch-mpi``: host tensors, MPI (torch built with it);
- ``torch-nccl``: the model and batch on this rank's GPU, NCCL; a step ends when the device is
  done. ``torch_device="cpu"`` (the suite's own tests) runs the same code over gloo on the host.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from ...records.errors import ConfigError
from .support import cuda_device, import_torch, start_group, stop_group

DEFAULT_BUCKET_CAP_MB = 25  # torch.nn.parallel.DistributedDataParallel's own default
FSDP_PREFETCH = ("on", "off", "default")
DEFAULT_FSDP_PREFETCH = "on"


def bucket_cap_mb(options: dict) -> float:
    raw = options.get("bucket_cap_mb", DEFAULT_BUCKET_CAP_MB)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not raw > 0:
        raise ConfigError(f"bucket size {raw!r} must be a number of megabytes > 0, e.g. 25 (DDP's default)")
    return float(raw)


class TorchTraining:
    name = "torch-base"
    backend = "gloo"
    on_gpu = False
    synchronous = True  # weights must be identical on every rank after the epoch

    def __init__(self, comm, options: dict | None = None):
        self.comm = comm
        self.options = dict(options or {})
        self.rank, self.n = comm.Get_rank(), comm.Get_size()
        self.bucket_cap_mb = bucket_cap_mb(self.options)
        self.torch, self.dist = import_torch()
        self.device = self.torch.device("cpu")
        self.facts: dict[str, Any] = {"transport": self.name, "bucket_cap_mb": self.bucket_cap_mb}

    def start(self) -> None:
        """Collective: the process group (after the plain baseline, which needs no group)."""
        self.dist, facts = start_group(self.comm, self.backend,
                                       device=self.device if self.device.type == "cuda" else None)
        self.facts.update(facts)

    def wrap(self, model: Any, parallel: str = "ddp", amp: str = "off"):
        """The model made data-parallel (``ddp`` or ``fsdp``) in ``amp`` precision (off, bf16)."""
        if parallel == "fsdp":
            return self._fully_shard(model, amp)
        from torch.nn.parallel import DistributedDataParallel

        if amp == "bf16":
            model = _autocast(self.torch)(model, self.device.type)
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=self.bucket_cap_mb)

    def _fully_shard(self, model: Any, amp: str):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        torch = self.torch
        policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                  if amp == "bf16" else MixedPrecisionPolicy())
        blocks = model.blocks() if hasattr(model, "blocks") else []
        for block in blocks:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        prefetch = fsdp_prefetch(self.options)
        if prefetch != "default" and blocks:
            for block in blocks:  # FSDP2's own prefetch blocks the host until it is done (no streams there)
                block.set_modules_to_forward_prefetch([])
                block.set_modules_to_backward_prefetch([])
            if prefetch == "on":
                _prefetch_async(blocks)
        self.facts.update(fsdp_units=len(blocks) + 1, fsdp_prefetch=prefetch)
        return model

    def make_step(self, model: Any, optimizer: Any, loss_fn: Any, x: Any,
                  y: Any) -> Callable[[], float | None]:
        """One training step, returning the seconds this rank spent on the exchange rather than
        on its own compute (so a rank whose compute is slow can be told from the ranks that
        wait for it, ``stragglers``): before its forward starts (DDP's buffer broadcast), and
        from its last gradient to the end of ``backward()`` (the last bucket's allreduce, and
        the wait for every bucket). Two hooks mark those moments: a forward pre-hook on the
        wrapped module, after DDP's own, and a gradient hook on its first parameter, whose
        gradient backward computes last. None where the host's clock cannot see it: on a GPU
        the hooks fire when work is queued and NCCL's wait leaves the host running, so the
        device's compute and exchange both land after ``backward()`` returns."""
        done = self.finish()
        clock = time.perf_counter
        marks = [0.0, 0.0]
        losses: list[float] = []
        sharded = _is_fsdp(model)
        if self.device.type == "cpu" and not sharded:
            inner = getattr(model, "module", model)
            inner.register_forward_pre_hook(lambda *_: marks.__setitem__(0, clock()))
            first = next((p for p in inner.parameters() if p.requires_grad), None)
            if first is not None:
                first.register_hook(lambda grad: marks.__setitem__(1, clock()))

        def step() -> float | None:
            t0 = clock()
            marks[0] = marks[1] = 0.0
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP's buckets are allreduced in here
            backward_end = clock()
            optimizer.step()
            losses.append(loss.item())
            done()
            if not marks[0] or not marks[1]:
                return None  # not seen by the host's clock, or a hook did not fire: unknown, not nothing
            return (marks[0] - t0) + (backward_end - marks[1])

        step.losses = losses  # every step's loss, for the epoch's checks (finite, falling)
        return step

    def finish(self) -> Callable[[], None]:
        """What ends a step: on a GPU, the device finishing the optimizer's kernels."""
        if self.device.type != "cuda":
            return lambda: None
        torch, device = self.torch, self.device
        return lambda: torch.cuda.synchronize(device)

    def close(self) -> None:
        stop_group(self.dist)

    def describe(self) -> dict:
        return dict(self.facts)


def fsdp_prefetch(options: dict) -> str:
    value = str(options.get("fsdp_prefetch", DEFAULT_FSDP_PREFETCH)).strip().lower()
    if value not in FSDP_PREFETCH:
        raise ConfigError(f"FSDP prefetch {value!r} is unknown; choose from {', '.join(FSDP_PREFETCH)}")
    return value


def _prefetch_async(blocks: list) -> None:
    """Gather the next block's parameters while this block computes, forward and backward, with
    FSDP2's public ``unshard(async_op=True)``: the block's own pre-forward (pre-backward) then
    waits for the gather instead of issuing it. The tutorial's ``set_modules_to_*_prefetch``
    gathers with ``async_op=False``, which on a GPU overlaps through CUDA streams but on the host
    blocks until the gather ends: this overlaps on both."""
    def gather(block: Any) -> Callable[..., None]:
        def hook(*_: Any) -> None:  # a hook's return value would replace the block's input
            block.unshard(async_op=True)

        return hook

    for i, block in enumerate(blocks):
        if i + 1 < len(blocks):
            block.register_forward_pre_hook(gather(blocks[i + 1]))
        if i > 0:
            block.register_full_backward_pre_hook(gather(blocks[i - 1]))


def _is_fsdp(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


@functools.lru_cache(maxsize=None)
def _autocast(torch: Any):
    class Autocast(torch.nn.Module):
        """A model whose forward runs under ``torch.autocast`` in bf16 (DDP's mixed precision)."""

        def __init__(self, module: Any, device_type: str):
            super().__init__()
            self.module, self.device_type = module, device_type

        def forward(self, *args):
            with torch.autocast(self.device_type, dtype=torch.bfloat16):
                return self.module(*args)

    return Autocast


class GlooTraining(TorchTraining):
    name = "torch-gloo"
    backend = "gloo"


class MpiTraining(TorchTraining):
    name = "torch-mpi"
    backend = "mpi"


class NcclTraining(TorchTraining):
    name = "torch-nccl"
    backend = "nccl"
    on_gpu = True

    def __init__(self, comm, options: dict | None = None):
        super().__init__(comm, options)
        on_cpu = str(self.options.get("torch_device", "cuda")) == "cpu"
        if on_cpu:
            self.backend, self.on_gpu = "gloo", False
        self.device, facts = cuda_device(comm, self.torch, on_cpu)
        self.facts.update(facts)
