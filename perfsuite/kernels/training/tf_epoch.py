"""A short TensorFlow training epoch per transport: images/s (tokens/s for a language model),
step times, scaling efficiency.

Per case (one model and per-worker batch in one world): build the model in the transport's
scope (``keras_models.Workload``: an image model, or GPT-2 in Keras, ``gpt_keras``), start every rank
from rank 0's weights, run ``warmup`` steps (tracing, collective set-up), then ``iters`` timed
steps on every rank, timed and summarised by ``training`` (img/s or tokens/s, step times,
scaling efficiency against the plain loop). TensorFlow's plain loop runs before the
transport starts (a started transport's own threads share the cores: Horovod's background loop
halved the plain loop on 2 cores) or, where the transport must start before TensorFlow runs any
op (MWMS), after the epoch.

After the epoch the trainable weights are compared across ranks (bitwise), and every step's loss
must be finite (and, for a language model, falling), as torch-epoch checks them: otherwise the
sample is invalid. TensorFlow is imported once per rank,
after the transport has set TF_CONFIG / TF_USE_LEGACY_KERAS.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...records.errors import ConfigError
from ...records.model import Case
from ...transports import load as load_transport
from ...transports.hosts import node_name
from ...transports.tf.support import import_tf
from ...transports.tf.train import plain_train_step
from ..context import RankContext
from ..contention import world_view
from ..faults import slowdown_fraction, spin
from ..memory import Watch, tf_state_bytes
from .tf_input import configure_threads, input_feed
from .input_files import input_options
from .loop import SEED, epoch_options, invalid_why, loss_checks, plain_epoch, root_baseline, summarize, warm_and_time, weights_agree, world_checks
from ..models.keras_models import Workload, workload
from ..models.catalogue import check_batch, model_spec

BENCHMARK = "tf-epoch"


def run(ctx: RankContext) -> dict:
    comm = ctx.comm
    opts = epoch_options(ctx.options)
    learning_rate = ctx.options.get("learning_rate")  # None: each kind's own (SGD's, AdamW's)
    works = {case.name: _workload(case, opts, ctx.options) for case in ctx.cases}  # named before TF loads
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
            work = works[case.name]
            baselines[case.name] = root_baseline(
                ctx, lambda: _plain_baseline(tf, work, opts, learning_rate, *work.batch(tf, int(case.batch), SEED),
                                             done=transport.finish(tf)))
    t0 = time.perf_counter()
    transport.start(tf)
    start_s = time.perf_counter() - t0
    slow = slowdown_fraction()
    spinner = spin(slow)
    nodes = comm.gather(node_name(), root=0)
    for case in ctx.cases:
        work = works[case.name]
        batch = int(case.batch)
        x, y = work.batch(tf, batch, SEED + ctx.rank)
        feed = None if work.spec.is_lm else input_feed(
            tf, ctx.options, ctx.rank, ctx.world_size, batch, work.image, work.classes,
            opts["warmup"], opts["steps"])  # None: synthetic data
        if feed is not None:
            x, y = feed.x, feed.y
        tf.keras.utils.set_random_seed(SEED)
        loss_fn = work.loss(tf)
        with transport.scope():
            model = work.model(tf)
            optimizer = work.optimizer(tf, learning_rate, opts["learning_rate"])
        transport.sync_initial(model)
        raw_step = transport.make_step(model, optimizer, loss_fn, x, y)
        step = feed.wrap(raw_step) if feed is not None else raw_step
        watch = Watch("cuda:0" if tf.config.list_logical_devices("GPU") else "cpu", "tensorflow")
        times, allreduce, machine, warmup_s = warm_and_time(comm, step, feed, opts, ctx.fault, case, spinner,
                                                            watch=watch)
        figures = {**watch.figures, "model_state_B": tf_state_bytes(model, optimizer)}
        # Every step's loss, warm-up included, as torch-epoch's; kept as tensors by the step (reading
        # one there would make a GPU step wait for it) and read here, after the clock.
        checks = loss_checks([float(v) for v in raw_step.losses])
        if transport.synchronous and ctx.world_size > 1:
            identical, max_diff = weights_agree(comm, [v.numpy() for v in model.trainable_variables])
        else:
            identical, max_diff = True, None
        baseline = baselines.get(case.name)
        if opts["baseline"] and case.name not in baselines:
            baseline = root_baseline(
                ctx, lambda: _plain_baseline(tf, work, opts, learning_rate, x, y, done=transport.finish(tf)))
        gathered = comm.gather((times, allreduce, machine, checks, figures), root=0)
        if ctx.is_root:
            checked = world_checks([g[3] for g in gathered])
            why = invalid_why(checked, identical, work.spec.is_lm)
            info = {**world_view([g[2] for g in gathered]), **work.facts(model), "warmup": opts["warmup"],
                    "warmup_s": warmup_s, "weights_identical": identical if max_diff is not None else None,
                    "weights_max_diff": max_diff, **checked, "transport_facts": transport.describe(),
                    **({"invalid_reason": why} if why else {}),
                    **(feed.describe() if feed is not None else {"data": "synthetic"})}
            sample = summarize(case, np.stack([g[0] for g in gathered], axis=1),
                               np.stack([g[1] for g in gathered], axis=1), baseline, info,
                               valid=not why, nodes=nodes, memory_figures=[g[4] for g in gathered])
            ctx.emit(sample.to_dict())
        del model, optimizer, step, raw_step
    comm.Barrier()
    transport.close()
    return {"tensorflow": tf.__version__, "keras": _keras_version(tf), "tf_import_s": tf_import_s,
            "transport_start_s": start_s, "slowdown_injected": slow,
            "transport_facts": transport.describe()}


def _workload(case: Case, opts: dict, options: dict) -> Workload:
    """The case's model, its input size checked (the same check on every rank)."""
    model_spec(case.model or "")
    check_batch(case.batch)
    work = workload(case.model, opts["image_size"], opts["classes"], options.get("seq_len"))
    if work.spec.is_lm and input_options(options)["data"] != "synthetic":
        raise ConfigError(f"data source {options.get('data')!r} for {case.model}: tf-epoch trains a language "
                          "model on synthetic tokens only (torch-epoch reads token shards)")
    return work


def _plain_baseline(tf: Any, work: Workload, opts: dict, learning_rate: float | None, x: Any, y: Any,
                    done: Callable[[], None] = lambda: None) -> list[float]:
    """One worker, no strategy: a fresh model and optimizer on a plain loop (rank 0 only)."""
    tf.keras.utils.set_random_seed(SEED)
    model = work.model(tf)
    optimizer = work.optimizer(tf, learning_rate, opts["learning_rate"])
    train_step = plain_train_step(tf, model, optimizer, work.loss(tf))
    for _ in range(opts["warmup"]):
        train_step(x, y).numpy()
    done()
    return plain_epoch(lambda: train_step(x, y).numpy(), opts["steps"], done)


def _keras_version(tf: Any) -> str:
    """Keras 3, or tf_keras (Keras 2) when TF_USE_LEGACY_KERAS=1 made it tf.keras."""
    import os
    from importlib import metadata

    dist = "tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else "keras"
    try:
        return f"{dist} {metadata.version(dist)}"
    except metadata.PackageNotFoundError:
        return str(getattr(tf.keras, "__version__", "?"))
