"""A short PyTorch DistributedDataParallel epoch per transport: images/s, step times, scaling
efficiency, measured as ``tf-epoch`` measures them (``training``), so the two frameworks'
figures compare.

Per case (one model and per-worker batch in one world): rank 0 first times one worker training
alone on a plain loop (no DDP, no group yet) while the others wait without spinning; then the
transport's group forms, the model is wrapped in DDP (which broadcasts rank 0's weights), and
``warmup`` then ``iters`` steps run on every rank. After the epoch the weights are compared
across ranks (bitwise). On synthetic data the same DDP model also trains ``iters`` steps in
``plain/torch_ddp.ddp_epoch``, the loop a user writes and times by the wall clock, half just
before the timed epoch and half just after: the harness's img/s over that loop's is
``vs_plain_ddp`` (the harness's loop should cost nothing measurable).

CPU threads: torch's intra-op pool would take every core in every rank; like torchrun, each rank
gets the node's cores divided among its ranks (``compute_threads`` sets it).
"""
from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..model import Case
from ..transports import load as load_transport
from ..transports.hosts import node_name
from ..transports.torch.support import import_torch
from .context import RankContext, whole_option
from .contention import world_view
from .faults import slowdown_fraction, spin
from .plain.torch_ddp import ddp_epoch
from .tf_models import check_batch, check_image_size, model_spec
from .torch_input import input_feed
from .torch_models import ARCHITECTURES, build_model, synthetic_batch
from .training import SEED, epoch_options, plain_epoch, root_baseline, summarize, warm_and_time, weights_agree

BENCHMARK = "torch-epoch"


def compute_threads(options: dict, ranks_on_node: int) -> int:
    n = whole_option(options, "compute_threads", None, 1, "compute threads per rank")
    if n is None:
        n = whole_option(options, "tf_threads", None, 1, "compute threads per rank")
    return n if n is not None else max(1, (os.cpu_count() or 1) // max(ranks_on_node, 1))


def run(ctx: RankContext) -> dict:
    from ..transports.gpu import node_rank

    comm = ctx.comm
    opts = epoch_options(ctx.options)
    reference = bool(ctx.options.get("plain_ddp", ctx.options.get("yardsticks", True)))
    for case in ctx.cases:  # every bad case is named before torch is even imported
        model_spec(case.model or "")
        check_batch(case.batch)
        if opts["image_size"] is not None:
            check_image_size(case.model, opts["image_size"])
    t0 = time.perf_counter()
    torch, _ = import_torch()
    import_s = time.perf_counter() - t0
    threads = compute_threads(ctx.options, node_rank(comm)[1])
    torch.set_num_threads(threads)
    transport = load_transport(ctx.transport, BENCHMARK)(comm, ctx.options)
    device = transport.device
    loss_fn = torch.nn.CrossEntropyLoss()
    baselines: dict[str, list[float] | None] = {}
    if opts["baseline"]:
        for case in ctx.cases:
            image, classes = _image_classes(case, opts)
            baselines[case.name] = root_baseline(
                ctx, lambda: _plain_baseline(torch, case, image, classes, opts, loss_fn, device,
                                             transport.finish()))
    t0 = time.perf_counter()
    transport.start()
    start_s = time.perf_counter() - t0
    slow = slowdown_fraction()
    spinner = spin(slow)
    nodes = comm.gather(node_name(), root=0)
    for case in ctx.cases:
        image, classes = _image_classes(case, opts)
        batch = int(case.batch)
        x, y = synthetic_batch(torch, batch, image, classes, SEED + ctx.rank, device)
        feed = input_feed(torch, ctx.options, ctx.rank, ctx.world_size, batch, image, classes,
                          opts["warmup"], opts["steps"], device)  # None: synthetic data
        if feed is not None:
            x, y = feed.x, feed.y
        torch.manual_seed(SEED)
        model = build_model(torch, case.model, image, classes).to(device)
        ddp = transport.wrap(model)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=opts["learning_rate"])
        step = transport.make_step(ddp, optimizer, loss_fn, x, y)
        if feed is not None:
            step = feed.wrap(step)
        # The plain DDP loop runs half its steps just before the timed epoch and half just after
        # (A-B-A): a drift of the machine during the case weighs on both alike.
        halves = (opts["steps"] // 2, opts["steps"] - opts["steps"] // 2) if reference and feed is None else None
        plain = (comm, ddp, optimizer, loss_fn, x, y, transport.finish())
        plain_ddp_s: list[float] = []
        before = functools.partial(_plain_ddp, plain_ddp_s, *plain, halves[0]) if halves else (lambda: None)
        times, allreduce, machine, warmup_s = warm_and_time(comm, step, feed, opts, ctx.fault, case, spinner,
                                                            before_timed=before)
        weights = [p.detach().cpu().numpy() for p in model.parameters()]
        identical, max_diff = weights_agree(comm, weights) if ctx.world_size > 1 else (True, None)
        if halves:
            _plain_ddp(plain_ddp_s, *plain, halves[1])
        gathered = comm.gather((times, allreduce, machine), root=0)
        if ctx.is_root:
            info = {**world_view([g[2] for g in gathered]), "image_size": image, "classes": classes,
                    "warmup": opts["warmup"], "warmup_s": warmup_s, "architecture": ARCHITECTURES[case.model],
                    "params": int(sum(p.numel() for p in model.parameters())),
                    "weights_identical": identical if max_diff is not None else None,
                    "weights_max_diff": max_diff, "compute_threads": threads,
                    "transport_facts": transport.describe(),
                    **(feed.describe() if feed is not None else {"data": "synthetic"})}
            sample = summarize(case, np.stack([g[0] for g in gathered], axis=1),
                               np.stack([g[1] for g in gathered], axis=1), baselines.get(case.name), info,
                               valid=identical, nodes=nodes)
            if halves and sum(plain_ddp_s) > 0:
                plain_img = ctx.world_size * batch * opts["steps"] / sum(plain_ddp_s)
                sample.info.update(plain_ddp_img_per_s=plain_img,
                                   vs_plain_ddp=sample.info["img_per_s"] / plain_img)
            ctx.emit(sample.to_dict())
        del ddp, model, optimizer, step, plain, before
    comm.Barrier()
    transport.close()
    return {"torch": torch.__version__, "torch_import_s": import_s, "transport_start_s": start_s,
            "compute_threads": threads, "slowdown_injected": slow,
            "transport_facts": transport.describe()}


def _plain_ddp(seconds: list[float], comm, ddp: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any,
               done: Callable[[], None], steps: int) -> None:
    """The plain DDP loop's ``steps`` steps, started together: the slowest rank's seconds join
    ``seconds``."""
    comm.Barrier()
    seconds.append(comm.allreduce(ddp_epoch(ddp, optimizer, loss_fn, x, y, steps, done), op=_max()))


def _max():
    from mpi4py import MPI

    return MPI.MAX


def _image_classes(case: Case, opts: dict) -> tuple[int, int]:
    spec = model_spec(case.model)
    return int(opts["image_size"] or spec.image_size), int(opts["classes"] or spec.classes)


def _plain_baseline(torch: Any, case: Case, image: int, classes: int, opts: dict, loss_fn: Any,
                    device: Any, done: Callable[[], None]) -> list[float]:
    """One worker, no DDP: a fresh model and optimizer on a plain loop (rank 0 only)."""
    torch.manual_seed(SEED)
    model = build_model(torch, case.model, image, classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=opts["learning_rate"])
    x, y = synthetic_batch(torch, int(case.batch), image, classes, SEED, device)

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        loss.item()

    for _ in range(opts["warmup"]):
        train_step()
    done()
    return plain_epoch(train_step, opts["steps"], done)
