"""A short TensorFlow training epoch per transport: images/s, step times, scaling efficiency.

Per case (one model and per-worker batch in one world): build the model in the transport's
scope, start every rank from rank 0's weights, run ``warmup`` steps (tracing, collective set-up),
then ``iters`` timed steps on every rank, timed and summarised by ``training`` (img/s, step
times, scaling efficiency against the plain loop). TensorFlow's plain loop runs before the
transport starts (a started transport's own threads share the cores: Horovod's background loop
halved the plain loop on 2 cores) or, where the transport must start before TensorFlow runs any
op (MWMS), after the epoch.

After the epoch the trainable weights are compared across ranks (bitwise): a synchronous
transport whose ranks disagree yields an invalid sample. TensorFlow is imported once per rank,
after the transport has set TF_CONFIG / TF_USE_LEGACY_KERAS.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..model import Case
from ..transports import load as load_transport
from ..transports.hosts import node_name
from ..transports.tf.support import import_tf
from ..transports.tf.train import plain_train_step
from .context import RankContext
from .contention import world_view
from .faults import slowdown_fraction, spin
from .tf_input import configure_threads, input_feed
from .training import (SEED, epoch_options, plain_epoch, root_baseline, summarize, warm_and_time, weights_agree)
from .tf_models import build_model, check_batch, check_image_size, model_spec, synthetic_batch

BENCHMARK = "tf-epoch"




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
            baselines[case.name] = root_baseline(
                ctx, lambda: _plain_baseline(tf, case.model, image, classes, opts, _loss(tf),
                                             *synthetic_batch(tf, int(case.batch), image, classes, seed=SEED),
                                             done=transport.finish(tf)))
    t0 = time.perf_counter()
    transport.start(tf)
    start_s = time.perf_counter() - t0
    slow = slowdown_fraction()
    spinner = spin(slow)
    loss_fn = _loss(tf)
    nodes = comm.gather(node_name(), root=0)
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
        times, allreduce, machine, warmup_s = warm_and_time(comm, step, feed, opts, ctx.fault, case, spinner)
        if transport.synchronous and ctx.world_size > 1:
            identical, max_diff = weights_agree(comm, [v.numpy() for v in model.trainable_variables])
        else:
            identical, max_diff = True, None
        baseline = baselines.get(case.name)
        if opts["baseline"] and case.name not in baselines:
            baseline = root_baseline(
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
                               valid=identical, nodes=nodes)
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
