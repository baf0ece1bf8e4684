"""A short TensorFlow training epoch per transport: images/s, step times, scaling efficiency.

Per case (one model and per-worker batch in one world): build the model in the transport's
scope, start every rank from rank 0's weights, run ``warmup`` steps (tracing, collective set-up),
then ``iters`` timed steps on every rank. Reported, from the slowest rank of each step:

- img_per_s = world_size * batch / p50(step time): images per second of the whole world
  (median, so one descheduled step on a shared machine does not move it); per-step values are
  its samples;
- step_ms p50 and p99;
- scaling_efficiency = img_per_s / (world_size * plain_img_per_s), where plain_img_per_s is one
  worker training alone on a plain loop with no strategy, measured in the same world on rank 0
  while the other ranks wait without spinning, before the transport starts (a started transport's
  own threads share the cores: Horovod's background loop halved the plain loop on 2 cores) or,
  where the transport must start before TensorFlow runs any op (MWMS), after the epoch;
- allreduce_share = gradient-allreduce time / step time, when the transport lets Python see it.

After the epoch the trainable weights are compared across ranks (bitwise): a synchronous
transport whose ranks disagree yields an invalid sample. TensorFlow is imported once per rank,
after the transport has set TF_CONFIG / TF_USE_LEGACY_KERAS.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..model import Case, Metric, Sample
from ..transports import load as load_transport
from ..transports.tf.support import import_tf
from ..transports.tf.train import plain_train_step
from .context import RankContext, whole_option
from .contention import Probe, world_view
from .faults import Spin, slowdown_fraction, spin
from .tf_input import configure_threads, input_feed
from .tf_models import build_model, check_batch, check_image_size, model_spec, synthetic_batch

BENCHMARK = "tf-epoch"
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
        "baseline": bool(options.get("baseline", True)),
    }


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


def plain_epoch(train_step: Callable, x: Any, y: Any, steps: int,
                done: Callable[[], None] = lambda: None) -> list[float]:
    """The same epoch written plainly, as a user would time it: the baseline, and the yardstick
    that shows the harness loop above adds nothing measurable per step. ``done`` ends a step
    as the transport's steps end (on a GPU: the device has finished)."""
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        train_step(x, y).numpy()
        done()
        times.append(time.perf_counter() - t0)
    return times


def summarize(case: Case, times: np.ndarray, allreduce: np.ndarray | None,
              baseline: Sequence[float] | None, info: dict[str, Any], valid: bool = True) -> Sample:
    """``times`` and ``allreduce`` are steps x ranks, seconds; ``baseline`` the plain loop's step
    times of one worker. Pure, so it is unit-tested without TensorFlow or MPI."""
    n = times.shape[1]
    batch = int(case.batch or 0)
    world_time = times.max(axis=1)  # per step, the slowest rank: the time the world spent
    p50, p99 = float(np.percentile(world_time, 50)), float(np.percentile(world_time, 99))
    img_per_s = n * batch / p50 if p50 > 0 else 0.0
    info = {**info, "transport": case.transport, "world_size": n, "model": case.model,
            "batch": batch, "global_batch": n * batch, "steps": int(times.shape[0]),
            "img_per_s": img_per_s, "img_per_s_per_worker": img_per_s / n,
            "step_ms_p50": p50 * 1e3, "step_ms_p99": p99 * 1e3,
            "step_ms_mean": float(world_time.mean() * 1e3)}
    with np.errstate(divide="ignore"):
        img_samples = np.where(world_time > 0, n * batch / world_time, 0.0)
    metrics = {
        "img_per_s": Metric("img_per_s", img_per_s, "img/s", True, tuple(float(v) for v in img_samples)),
        "step_ms": Metric("step_ms", p50 * 1e3, "ms", False, tuple(float(v) for v in world_time * 1e3)),
        "step_p99_ms": Metric("step_p99_ms", p99 * 1e3, "ms", False),
    }
    if baseline:
        plain_p50 = float(np.percentile(baseline, 50))
        plain_img = batch / plain_p50 if plain_p50 > 0 else 0.0
        eff = img_per_s / (n * plain_img) if plain_img > 0 else 0.0
        info.update(plain_step_ms_p50=plain_p50 * 1e3, plain_img_per_s=plain_img,
                    scaling_efficiency=eff)
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
    else:
        info.setdefault("allreduce_share", None)  # inside TF's graph: not visible from Python
    return Sample(case, metrics, bool(valid), tuple(float(v) for v in world_time), info)


def weights_agree(comm, variables: Sequence[Any]) -> tuple[bool, float]:
    """(bitwise identical on every rank, largest absolute difference from rank 0)."""
    from mpi4py import MPI

    flat = np.concatenate([np.asarray(v.numpy(), dtype=np.float32).ravel() for v in variables]) \
        if variables else np.zeros(0, np.float32)
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


def _loss(tf: Any):
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def _count_params(variables: Sequence[Any]) -> int:
    return int(sum(int(np.prod(v.shape)) for v in variables))


def run(ctx: RankContext) -> dict:
    comm = ctx.comm
    opts = epoch_options(ctx.options)
    for case in ctx.cases:  # every bad case is named before TensorFlow is even imported
        model_spec(case.model or "")
        check_batch(case.batch)
        if opts["image_size"] is not None:
            check_image_size(case.model, opts["image_size"])
    transport = load_transport(ctx.transport, BENCHMARK)(comm, ctx.options)
    transport.configure()
    t0 = time.perf_counter()
    tf = import_tf(legacy_keras=transport.legacy_keras)
    tf_import_s = time.perf_counter() - t0
    transport.prepare(tf)  # before TF runs an op: a host transport's TF uses no GPU
    configure_threads(tf, ctx.options)  # before TF runs an op: per-rank thread budget
    baselines: dict[str, list[float] | None] = {}
    if opts["baseline"] and transport.baseline_before_start:
        for case in ctx.cases:
            image, classes = _image_classes(case, opts)
            baselines[case.name] = _root_baseline(
                ctx, lambda: _plain_baseline(tf, case.model, image, classes, opts, _loss(tf),
                                             *synthetic_batch(tf, int(case.batch), image, classes, seed=SEED),
                                             done=transport.finish(tf)))
    t0 = time.perf_counter()
    transport.start(tf)
    start_s = time.perf_counter() - t0
    slow = slowdown_fraction()
    spinner = spin(slow)
    loss_fn = _loss(tf)
    for case in ctx.cases:
        image, classes = _image_classes(case, opts)
        batch = int(case.batch)
        x, y = synthetic_batch(tf, batch, image, classes, seed=SEED + ctx.rank)
        feed = input_feed(tf, ctx.options, ctx.rank, ctx.world_size, batch, image, classes,
                          opts["warmup"], opts["steps"])  # None: synthetic data
        if feed is not None:
            x, y = feed.x, feed.y
        tf.keras.utils.set_random_seed(SEED)
        with transport.scope():
            model = build_model(tf, case.model, image, classes)
            optimizer = tf.keras.optimizers.SGD(learning_rate=opts["learning_rate"])
        transport.sync_initial(model)
        step = transport.make_step(model, optimizer, loss_fn, x, y)
        if feed is not None:
            step = feed.wrap(step)
        t0 = time.perf_counter()
        for _ in range(opts["warmup"]):
            step()
        warmup_s = time.perf_counter() - t0
        if feed is not None:
            feed.start_timed()
        comm.Barrier()  # every rank starts the timed epoch together
        probe = Probe(scope="process")
        times, allreduce = timed_epoch(step, opts["steps"], ctx.fault, case, slow=spinner)
        machine = probe.stop()
        if transport.synchronous and ctx.world_size > 1:
            identical, max_diff = weights_agree(comm, model.trainable_variables)
        else:
            identical, max_diff = True, None
        baseline = baselines.get(case.name)
        if opts["baseline"] and case.name not in baselines:
            baseline = _root_baseline(
                ctx, lambda: _plain_baseline(tf, case.model, image, classes, opts, loss_fn, x, y,
                                             done=transport.finish(tf)))
        gathered = comm.gather((times, allreduce, machine), root=0)
        if ctx.is_root:
            info = {**world_view([g[2] for g in gathered]), "image_size": image, "classes": classes, "warmup": opts["warmup"],
                    "warmup_s": warmup_s, "params": _count_params(model.trainable_variables),
                    "weights_identical": identical if max_diff is not None else None,
                    "weights_max_diff": max_diff, "transport_facts": transport.describe(),
                    **(feed.describe() if feed is not None else {"data": "synthetic"})}
            sample = summarize(case, np.stack([g[0] for g in gathered], axis=1),
                               np.stack([g[1] for g in gathered], axis=1), baseline, info,
                               valid=identical)
            ctx.emit(sample.to_dict())
        del model, optimizer, step
    comm.Barrier()
    transport.close()
    return {"tensorflow": tf.__version__, "keras": _keras_version(tf), "tf_import_s": tf_import_s,
            "transport_start_s": start_s, "slowdown_injected": slow,
            "transport_facts": transport.describe()}


def _image_classes(case: Case, opts: dict) -> tuple[int, int]:
    spec = model_spec(case.model)
    return int(opts["image_size"] or spec.image_size), int(opts["classes"] or spec.classes)


def _root_baseline(ctx: RankContext, measure: Callable[[], list[float]]) -> list[float] | None:
    """Rank 0 measures the plain loop; the others wait in a sleeping barrier (None there)."""
    baseline = measure() if ctx.is_root else None
    quiet_barrier(ctx.comm)
    return baseline


def _plain_baseline(tf: Any, model_name: str, image: int, classes: int, opts: dict, loss_fn: Any,
                    x: Any, y: Any, done: Callable[[], None] = lambda: None) -> list[float]:
    """One worker, no strategy: a fresh model and optimizer on a plain loop (rank 0 only)."""
    tf.keras.utils.set_random_seed(SEED)
    model = build_model(tf, model_name, image, classes)
    optimizer = tf.keras.optimizers.SGD(learning_rate=opts["learning_rate"])
    train_step = plain_train_step(tf, model, optimizer, loss_fn)
    for _ in range(opts["warmup"]):
        train_step(x, y).numpy()
    done()
    return plain_epoch(train_step, x, y, opts["steps"], done)


def _keras_version(tf: Any) -> str:
    """Keras 3, or tf_keras (Keras 2) when TF_USE_LEGACY_KERAS=1 made it tf.keras."""
    import os
    from importlib import metadata

    dist = "tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else "keras"
    try:
        return f"{dist} {metadata.version(dist)}"
    except metadata.PackageNotFoundError:
        return str(getattr(tf.keras, "__version__", "?"))
