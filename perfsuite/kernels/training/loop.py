"""The training loop both frameworks share: timed epochs, the plain reference loop, the summary
of a world's steps, the weight-agreement check and the quiet barrier.

A framework's kernel (``tf_epoch``, ``torch_epoch``) builds its model, data and step; what is
measured about a step, and how, is decided here once, so an img/s of TensorFlow and one of PyTorch
mean the same thing. Per case, from the slowest rank of each step:

- img_per_s = world_size * batch / p50(step time); per-step values are its samples; for a
  language model tokens_per_s = world_size * batch * seq_len / p50 (a batch is of sequences);
- step_ms p50 and p99;
- scaling_efficiency = img_per_s / (world_size * plain_img_per_s), where plain_img_per_s is one
  worker training alone on a plain loop, measured in the same world on rank 0 while the other
  ranks wait without spinning;
- allreduce_share = gradient-allreduce time / step time, when the transport lets Python see it.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...records import memory
from ...records.errors import ConfigError
from ...records.model import Case, Metric, Sample
from ..context import RankContext, whole_option
from .. import ranks
from ..contention import Probe
from ..faults import Spin
from ..memory import Watch

#: Parallelism and precision, a training case's axes (its variant: '' for ddp in float32, else
#: 'fsdp', 'bf16', 'fsdp-bf16'), so names of cases from before the axes existed are unchanged.
PARALLEL = ("ddp", "fsdp")
AMP = ("off", "bf16")
DEFAULT_STEPS, DEFAULT_WARMUP = 20, 3
DEFAULT_LEARNING_RATE = 0.01
SEED = 1234
QUIET_POLL_S = 0.01  # idle ranks poll a non-blocking barrier instead of spinning in MPI


def epoch_options(options: dict) -> dict[str, Any]:
    """The kernel's knobs, checked (the same check on every rank, so all ranks raise together)."""
    lr = options.get("learning_rate", DEFAULT_LEARNING_RATE)
    if not isinstance(lr, (int, float)) or not lr > 0:
        raise ConfigError(f"learning rate {lr!r} must be a number > 0, e.g. 0.01")
    return {
        "steps": whole_option(options, "iters", DEFAULT_STEPS, 1, "steps (iters)"),
        "warmup": whole_option(options, "warmup", DEFAULT_WARMUP, 0, "warm-up steps"),
        "image_size": options.get("image_size"),
        "classes": options.get("classes"),
        "learning_rate": float(lr),
        # ``yardsticks`` (--yardsticks) switches off every loop beside the epoch; ``baseline``
        # names this one alone (the kernels' own option, as tests set it).
        "baseline": bool(options.get("baseline", options.get("yardsticks", True))),
    }


def training_variant(parallel: str = "ddp", amp: str = "off") -> str:
    return "-".join([*([parallel] if parallel != PARALLEL[0] else []), *([amp] if amp != AMP[0] else [])])


def parallel_amp(variant: str) -> tuple[str, str]:
    """The (parallelism, precision) a training case's variant names."""
    parts = [p for p in (variant or "").split("-") if p]
    return (next((p for p in parts if p in PARALLEL), PARALLEL[0]), next((p for p in parts if p in AMP), AMP[0]))


#: Fewer losses than this cannot say whether the loss fell (an epoch of 1 step and no warm-up):
#: such an epoch is not judged on it.
MIN_LOSSES_FALLING = 3


def loss_checks(losses: Sequence[float]) -> dict[str, Any]:
    """Is every step's loss finite, and did it fall over the epoch (the median of the last third
    of the steps below that of the first third; None: too few steps to say)?"""
    x = np.asarray(losses, dtype=float)
    finite = bool(x.size) and bool(np.all(np.isfinite(x)))
    third = max(len(x) // 3, 1)
    falling = (None if finite and len(x) < MIN_LOSSES_FALLING
               else finite and float(np.median(x[-third:])) < float(np.median(x[:third])))
    return {"loss_finite": finite, "loss_falling": falling,
            "loss_first": float(x[0]) if x.size else None, "loss_last": float(x[-1]) if x.size else None}


def world_checks(per_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The epoch's loss checks over the world (``loss_checks`` of every rank): finite on every
    rank, falling on every rank; the first and last loss as rank 0 saw them."""
    falls = [c["loss_falling"] for c in per_rank]
    return {"loss_finite": all(c["loss_finite"] for c in per_rank),
            "loss_falling": False if False in falls else None if None in falls else True,
            "loss_first": per_rank[0]["loss_first"], "loss_last": per_rank[0]["loss_last"]}


def invalid_why(checks: dict[str, Any], identical: bool, is_lm: bool, sharded: bool = False) -> str | None:
    """Why an epoch did not train as it claims, or None: a loss that was not finite, a language
    model's loss that did not fall (its data has something to learn), replicas that differ after
    the epoch (or, ``sharded``, the parameters gathered from the shards)."""
    if not checks["loss_finite"]:
        return "the loss was not finite on some step"
    if is_lm and checks["loss_falling"] is False:
        return f"the loss did not fall over the epoch ({checks['loss_first']:.3f} -> {checks['loss_last']:.3f})"
    if not identical:
        return ("the parameters gathered from the shards differ between ranks or are not finite" if sharded
                else "the replicas differ after the epoch")
    return None


def timed_epoch(step: Callable[[], float | None], steps: int, fault: Callable, case: Case,
                clock: Callable[[], float] = time.perf_counter, slow: Spin | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(step seconds, allreduce seconds or NaN) for ``steps`` calls of ``step``."""
    times = np.empty(steps)
    allreduce = np.full(steps, np.nan)
    for i in range(steps):
        t0 = clock()
        fault("timed", case)
        comm_s = step()
        dt = clock() - t0
        times[i] = dt + slow.add(dt) if slow else dt
        if comm_s is not None:
            allreduce[i] = comm_s
    return times, allreduce


def plain_epoch(train_step: Callable[[], Any], steps: int,
                done: Callable[[], None] = lambda: None) -> list[float]:
    """The same epoch written plainly, as a user would time it: the baseline, and the yardstick
    that shows the harness loop above adds nothing measurable per step. ``train_step`` runs one
    step and returns once its loss is on the host; ``done`` ends a step as the transport's steps
    end (on a GPU: the device has finished)."""
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        train_step()
        done()
        times.append(time.perf_counter() - t0)
    return times


def summarize(case: Case, times: np.ndarray, allreduce: np.ndarray | None,
              baseline: Sequence[float] | None, info: dict[str, Any], valid: bool = True,
              nodes: Sequence[str] | None = None, compute: np.ndarray | None = None,
              memory_figures: Sequence[dict | None] | None = None) -> Sample:
    """``times`` and ``allreduce`` are steps x ranks, seconds; ``baseline`` the plain loop's step
    times of one worker; ``nodes`` each rank's node, for the straggler rule on each rank's
    compute (its step apart from the exchange, where the transport shows the exchange, or
    ``compute``, steps x ranks seconds, where a profile measured it); ``memory_figures`` each
    rank's memory over the timed epoch (``kernels.memory``). Pure, so it is unit-tested without
    TensorFlow or MPI."""
    n = times.shape[1]
    batch = int(case.batch or 0)
    key, unit = rate_of(info)
    per_worker = batch * int(info.get("seq_len") or 1)  # images, or tokens, per worker and step
    world_time = times.max(axis=1)  # per step, the slowest rank: the time the world spent
    p50, p99 = float(np.percentile(world_time, 50)), float(np.percentile(world_time, 99))
    rate = n * per_worker / p50 if p50 > 0 else 0.0
    info = {**info, "transport": case.transport, "world_size": n, "model": case.model,
            "batch": batch, "global_batch": n * batch, "steps": int(times.shape[0]),
            key: rate, f"{key}_per_worker": rate / n,
            "step_ms_p50": p50 * 1e3, "step_ms_p99": p99 * 1e3,
            "step_ms_mean": float(world_time.mean() * 1e3)}
    with np.errstate(divide="ignore"):
        rate_samples = np.where(world_time > 0, n * per_worker / world_time, 0.0)
    metrics = {
        key: Metric(key, rate, unit, True, tuple(float(v) for v in rate_samples)),
        "step_ms": Metric("step_ms", p50 * 1e3, "ms", False, tuple(float(v) for v in world_time * 1e3)),
        "step_p99_ms": Metric("step_p99_ms", p99 * 1e3, "ms", False),
    }
    if baseline:
        plain_p50 = float(np.percentile(baseline, 50))
        plain_rate = per_worker / plain_p50 if plain_p50 > 0 else 0.0
        eff = rate / (n * plain_rate) if plain_rate > 0 else 0.0
        info.update({"plain_step_ms_p50": plain_p50 * 1e3, f"plain_{key}": plain_rate,
                     "scaling_efficiency": eff})
        metrics["scaling_efficiency"] = Metric("scaling_efficiency", eff, "", True)
        if case.transport == "plain" and n == 1:
            # The same step, timed by the harness loop and by a plain loop in one process.
            info["harness_overhead_ms"] = (p50 - plain_p50) * 1e3
    if allreduce is not None and not np.all(np.isnan(allreduce)):
        share = float(np.median(np.nanmean(allreduce / times, axis=1)))
        ar_p50 = float(np.median(np.nanmean(allreduce, axis=1)))
        info.update(allreduce_ms_p50=ar_p50 * 1e3, allreduce_share=share,
                    compute_ms_p50=(p50 - ar_p50) * 1e3)
        metrics["allreduce_share"] = Metric("allreduce_share", share, "", False)
        if n > 1 and not np.any(np.isnan(allreduce)):  # for the straggler rule (stragglers.annotate)
            info.update(nodes=list(nodes or [f"rank{r}" for r in range(n)]),
                        **ranks.kept(np.maximum(times - allreduce, 1e-9), "compute"))
    else:
        info.setdefault("allreduce_share", None)  # inside TF's graph: not visible from Python
        if n > 1 and compute is not None and len(compute):
            info.update(nodes=list(nodes or [f"rank{r}" for r in range(n)]),
                        **ranks.kept(np.maximum(compute, 1e-9), "compute"))
    mem_metrics, mem_info = memory.summarize(memory_figures or [])
    metrics.update(mem_metrics)
    info.update(mem_info)
    return Sample(case, metrics, bool(valid), tuple(float(v) for v in world_time), info)


def rate_of(info: dict[str, Any]) -> tuple[str, str]:
    """(metric, unit) of a training sample's rate: tokens/s for a language model (its info names
    a seq_len), else images/s."""
    return ("tokens_per_s", "tokens/s") if info.get("seq_len") else ("img_per_s", "img/s")


def weights_agree(comm, arrays: Sequence[np.ndarray]) -> tuple[bool, float]:
    """(bitwise identical on every rank, largest absolute difference from rank 0); ``arrays``
    are the trainable weights on the host, in the same order on every rank."""
    from mpi4py import MPI

    flat = np.concatenate([np.asarray(a, dtype=np.float32).ravel() for a in arrays]) \
        if len(arrays) else np.zeros(0, np.float32)
    ref = flat.copy()
    comm.Bcast(ref, root=0)
    same = flat.tobytes() == ref.tobytes()
    diff = float(np.nanmax(np.abs(flat - ref))) if flat.size else 0.0
    if not same and diff == 0.0:
        diff = float("nan")  # NaNs differ where no finite value does
    return bool(comm.allreduce(same, op=MPI.LAND)), float(comm.allreduce(diff, op=MPI.MAX))


def quiet_barrier(comm, poll_s: float = QUIET_POLL_S) -> None:
    """A barrier that sleeps between polls, so waiting ranks leave the cores to rank 0's baseline."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll_s)


def root_baseline(ctx: RankContext, measure: Callable[[], list[float]]) -> list[float] | None:
    """Rank 0 measures the plain loop; the others wait in a sleeping barrier (None there)."""
    baseline = measure() if ctx.is_root else None
    quiet_barrier(ctx.comm)
    return baseline


def warm_and_time(comm, step: Callable[[], float | None], feed: Any, opts: dict, fault: Callable, case: Case,
                  spinner: Spin | None, before_timed: Callable[[], None] = lambda: None,
                  watch: Watch | None = None) -> tuple[np.ndarray, np.ndarray, dict, float]:
    """A case's warm-up steps, then its timed epoch on every rank, started together after a
    barrier (and, on real data, with the timed files opened only now): (step seconds, allreduce
    seconds or NaN, this rank's contention over the epoch, warm-up seconds). ``before_timed``
    runs between the two, outside both clocks; ``watch`` reads the rank's peak memory over the
    timed epoch (its ``figures`` after), from after the warm-up: a steady step's memory, with its
    optimizer state made by the first steps."""
    t0 = time.perf_counter()
    for _ in range(opts["warmup"]):
        step()
    warmup_s = time.perf_counter() - t0
    before_timed()
    if feed is not None:
        feed.start_timed()
    comm.Barrier()
    if watch is not None:
        watch.start()
    probe = Probe(scope="process")
    times, allreduce = timed_epoch(step, opts["steps"], fault, case, slow=spinner)
    machine = probe.stop()
    if watch is not None:
        watch.stop()
    return times, allreduce, machine, warmup_s
