"""A short PyTorch epoch per transport, DDP or FSDP2, float32 or bf16: images/s (tokens/s for a
language model), step times, scaling efficiency, measured as ``tf-epoch`` measures them
(``training``), so the two frameworks' figures compare.

Per case (one model, per-worker batch, parallelism and precision in one world): rank 0 first
times one worker training alone on a plain loop (no DDP, no group yet) while the others wait
without spinning; then the transport's group forms, the model is wrapped (DDP broadcasts rank
0's weights; FSDP shards the weights every rank initialised alike), and ``warmup`` then ``iters``
steps run on every rank. After the epoch: every step's loss finite (and, for a language model,
falling), the weights compared across ranks bitwise (FSDP: the full parameters gathered from
the shards), then ``profile_steps`` more steps under the profiler, for each collective's time and
the part of it the step waited for (``exposure``). On synthetic data the same wrapped model also
trains ``iters`` steps in ``plain/torch_ddp.ddp_epoch``, the loop a user writes and times by the
wall clock, half just before the timed epoch and half just after: the harness's rate over that
loop's is ``vs_plain_loop`` (the harness's loop should cost nothing measurable).

CPU threads: torch's intra-op pool would take every core in every rank; like torchrun, each rank
gets the machine's cores divided among its ranks, emulated nodes included (``compute_threads``
sets it).
"""
from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...records.model import Case, Metric
from ...transports import load as load_transport
from ...transports.hosts import node_name
from ...transports.torch.support import import_torch
from ..context import RankContext, whole_option
from ..contention import world_view
from .exposure import profile
from ..faults import slowdown_fraction, spin
from ..memory import Watch, torch_state_bytes
from .peaks import mfu, peak_flops
from ..plain.torch_ddp import ddp_epoch
from ..models.catalogue import check_batch
from .torch_input import input_feed
from ..models.torch_models import Workload, workload
from .loop import SEED, epoch_options, invalid_why, loss_checks, parallel_amp, plain_epoch, rate_of, root_baseline, summarize, warm_and_time, weights_agree, world_checks

BENCHMARK = "torch-epoch"
#: Steps run under torch.profiler after the timed epoch, for each collective's exposed time.
DEFAULT_PROFILE_STEPS = 4


def ranks_on_machine(comm) -> int:
    """Ranks on this physical machine: those that read its boot id. Emulated nodes (network
    namespaces) are nodes to MPI and to the straggler rule but share one machine's cores, so
    dividing the cores among a node's ranks would give each emulated node all of them."""
    from ...transports.gpu import node_rank

    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = None
    ids = comm.allgather(boot)
    return ids.count(boot) if boot is not None and None not in ids else node_rank(comm)[1]


def compute_threads(options: dict, ranks_on_node: int) -> int:
    n = whole_option(options, "compute_threads", None, 1, "compute threads per rank")
    if n is None:
        n = whole_option(options, "tf_threads", None, 1, "compute threads per rank")
    return n if n is not None else max(1, (os.cpu_count() or 1) // max(ranks_on_node, 1))


def run(ctx: RankContext) -> dict:
    comm = ctx.comm
    opts = epoch_options(ctx.options)
    reference = bool(ctx.options.get("plain_ddp", ctx.options.get("yardsticks", True)))
    profile_steps = whole_option(ctx.options, "profile_steps", DEFAULT_PROFILE_STEPS, 0, "profiled steps")
    works = {case.name: _workload(case, opts, ctx.options) for case in ctx.cases}  # bad cases named before torch loads
    t0 = time.perf_counter()
    torch, _ = import_torch()
    import_s = time.perf_counter() - t0
    threads = compute_threads(ctx.options, ranks_on_machine(comm))
    torch.set_num_threads(threads)
    transport = load_transport(ctx.transport, BENCHMARK)(comm, ctx.options)
    device = transport.device
    learning_rate = ctx.options.get("learning_rate")
    baselines: dict[str, list[float] | None] = {}
    if opts["baseline"]:
        for case in ctx.cases:
            baselines[case.name] = root_baseline(
                ctx, lambda: _plain_baseline(torch, case, works[case.name], opts, learning_rate, device,
                                             transport.finish()))
    t0 = time.perf_counter()
    transport.start()
    start_s = time.perf_counter() - t0
    slow = slowdown_fraction()
    spinner = spin(slow)
    nodes = comm.gather(node_name(), root=0)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    for case in ctx.cases:
        work = works[case.name]
        parallel, amp = parallel_amp(case.variant)
        batch = int(case.batch)
        x, y = work.batch(torch, batch, SEED + ctx.rank, device)
        feed = input_feed(torch, ctx.options, ctx.rank, ctx.world_size, batch, work, opts["warmup"],
                          opts["steps"], device)  # None: synthetic data
        if feed is not None:
            x, y = feed.x, feed.y
        torch.manual_seed(SEED)
        model = work.model(torch).to(device)
        facts = work.facts(model)
        wrapped = transport.wrap(model, parallel, amp)
        optimizer = work.optimizer(torch, wrapped.parameters(), learning_rate, opts["learning_rate"])
        loss_fn = work.loss(torch)
        raw_step = transport.make_step(wrapped, optimizer, loss_fn, x, y)
        step = feed.wrap(raw_step) if feed is not None else raw_step
        # The plain loop runs half its steps just before the timed epoch and half just after
        # (A-B-A): a drift of the machine during the case weighs on both alike.
        halves = (opts["steps"] // 2, opts["steps"] - opts["steps"] // 2) if reference and feed is None else None
        plain = (comm, wrapped, optimizer, loss_fn, x, y, transport.finish())
        plain_s: list[float] = []
        before = functools.partial(_plain_loop, plain_s, *plain, halves[0]) if halves else (lambda: None)
        if getattr(ctx.fault, "corrupts", lambda c: False)(case):
            _poison(torch, model)
        watch = Watch("cpu" if device.type == "cpu" else str(device), "torch")
        times, allreduce, machine, warmup_s = warm_and_time(comm, step, feed, opts, ctx.fault, case, spinner,
                                                            before_timed=before, watch=watch)
        figures = {**watch.figures, "model_state_B": torch_state_bytes(wrapped, optimizer)}
        checks = loss_checks(raw_step.losses)
        identical, max_diff = _replicas_agree(comm, model, parallel, ctx.world_size)
        if halves:
            _plain_loop(plain_s, *plain, halves[1])
        exposed, compute = _profile(torch, raw_step, profile_steps, device)
        gathered = comm.gather((times, allreduce, machine, exposed, compute, checks, figures), root=0)
        if ctx.is_root:
            checked = world_checks([g[5] for g in gathered])
            why = invalid_why(checked, identical, work.spec.is_lm, sharded=parallel == "fsdp")
            info = {**world_view([g[2] for g in gathered]), **facts, "parallel": parallel, "amp": amp,
                    "warmup": opts["warmup"], "warmup_s": warmup_s, "compute_threads": threads,
                    "weights_identical": identical if max_diff is not None else None,
                    **({"shards_consistent": identical} if parallel == "fsdp" else {}),
                    "weights_max_diff": max_diff, **checked,
                    "transport_facts": transport.describe(), "device_name": device_name,
                    **({"invalid_reason": why} if why else {}),
                    **_exposure_info([g[3] for g in gathered]),
                    **(feed.describe() if feed is not None else {"data": "synthetic"})}
            profiled = [g[4] for g in gathered]
            per_rank = (np.stack(profiled, axis=1) if parallel == "fsdp" and all(len(c) for c in profiled)
                        else None)
            sample = summarize(case, np.stack([g[0] for g in gathered], axis=1),
                               np.stack([g[1] for g in gathered], axis=1), baselines.get(case.name), info,
                               valid=not why, nodes=nodes, compute=per_rank,
                               memory_figures=[g[6] for g in gathered])
            _add_mfu(sample, amp, ctx.world_size)
            if halves and sum(plain_s) > 0:
                key, _ = rate_of(sample.info)
                per_worker = batch * int(sample.info.get("seq_len") or 1)
                plain_rate = ctx.world_size * per_worker * opts["steps"] / sum(plain_s)
                sample.info.update(plain_loop_per_s=plain_rate, vs_plain_loop=sample.info[key] / plain_rate)
            ctx.emit(sample.to_dict())
        del wrapped, model, optimizer, step, raw_step, plain, before
    comm.Barrier()
    transport.close()
    return {"torch": torch.__version__, "torch_import_s": import_s, "transport_start_s": start_s,
            "compute_threads": threads, "slowdown_injected": slow,
            "transport_facts": transport.describe()}


def _workload(case: Case, opts: dict, options: dict) -> Workload:
    """The case's model, its input size checked (the same check on every rank, as tf-epoch's)."""
    check_batch(case.batch)
    return workload(case.model or "", opts["image_size"], opts["classes"], options.get("seq_len"))


def _replicas_agree(comm, model: Any, parallel: str, world_size: int) -> tuple[bool, float | None]:
    """DDP: every rank's replica bitwise the same. FSDP: every rank's view of the full parameters,
    all-gathered from the shards, bitwise the same and finite."""
    if world_size == 1 and parallel == "ddp":
        return True, None
    params = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
    weights = [p.detach().float().cpu().numpy() for p in params]
    identical, max_diff = weights_agree(comm, weights)
    finite = all(bool(np.all(np.isfinite(w))) for w in weights)
    return identical and bool(comm.allreduce(finite, op=_land())), max_diff


def _profile(torch: Any, step: Callable, steps: int, device: Any) -> tuple[dict | None, list[float]]:
    """Each collective's time and exposed time per step over ``steps`` profiled steps (after the
    timed epoch; None when off or where the profiler fails), and each profiled step's compute."""
    if steps <= 0:
        return None, []
    try:
        return profile(torch, step, steps, device.type)
    except Exception as exc:  # the profile is a breakdown beside the measurement, never its failure
        return {"error": f"{type(exc).__name__}: {exc}"}, []


def _exposure_info(per_rank: list[dict | None]) -> dict[str, Any]:
    """Per collective, the median over ranks of its ms and exposed ms per step."""
    if not per_rank or per_rank[0] is None:
        return {}
    failed = next((r["error"] for r in per_rank if r and "error" in r), None)
    if failed:
        return {"collectives_per_step": None, "collectives_why": f"profiler failed: {failed}"}
    names = sorted({k for r in per_rank for k in r})
    table = {}
    for name in names:
        rows = [r.get(name, {"calls": 0.0, "ms": 0.0, "exposed_ms": 0.0}) for r in per_rank]
        table[name] = {m: float(np.median([row[m] for row in rows])) for m in ("calls", "ms", "exposed_ms")}
    return {"collectives_per_step": table}


def _add_mfu(sample: Any, amp: str, world_size: int) -> None:
    i = sample.info
    peak = peak_flops(i.get("device_name"), amp)
    value = mfu(i.get("tokens_per_s") or 0.0, i.get("flops_per_token") or 0.0, world_size, peak)
    if value is not None:
        i.update(mfu=value, peak_flops=peak)
        sample.metrics["mfu"] = Metric("mfu", value, "", True)


def _poison(torch: Any, model: Any) -> None:
    """The test fault ``corrupt``: a NaN in this rank's first parameter (or shard), which the
    exchange carries to every rank, as a real numerical fault would: the loss checks must fail
    the world."""
    with torch.no_grad():
        first = next(iter(model.parameters()))
        local = first.to_local() if hasattr(first, "to_local") else first
        if local.numel():
            local.view(-1)[0] = float("nan")


def _land():
    from mpi4py import MPI

    return MPI.LAND


def _plain_loop(seconds: list[float], comm, ddp: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any,
               done: Callable[[], None], steps: int) -> None:
    """The plain loop's ``steps`` steps (of the DDP or FSDP model), started together: the slowest
    rank's seconds join ``seconds``."""
    comm.Barrier()
    seconds.append(comm.allreduce(ddp_epoch(ddp, optimizer, loss_fn, x, y, steps, done), op=_max()))


def _max():
    from mpi4py import MPI

    return MPI.MAX


def _plain_baseline(torch: Any, case: Case, work: Workload, opts: dict, learning_rate: float | None,
                    device: Any, done: Callable[[], None]) -> list[float]:
    """One worker, no DDP or FSDP: a fresh model and optimizer on a plain loop (rank 0 only), in
    the case's precision."""
    torch.manual_seed(SEED)
    model = work.model(torch).to(device)
    amp = parallel_amp(case.variant)[1]
    optimizer = work.optimizer(torch, model.parameters(), learning_rate, opts["learning_rate"])
    loss_fn = work.loss(torch)
    x, y = work.batch(torch, int(case.batch), SEED, device)

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp == "bf16"):
            out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        optimizer.step()
        loss.item()

    for _ in range(opts["warmup"]):
        train_step()
    done()
    return plain_epoch(train_step, opts["steps"], done)
