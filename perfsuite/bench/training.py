"""What every training benchmark shares (tf-epoch; PyTorch's next): the model and batch options,
the case matrix, the world's table, the cross-transport ratio lines and the bytes a step puts
on the wires.

A training benchmark's record differs from another's in its kernel, its transports and the
framework facts its table heads with; the rest comes from here, so a second framework reads
and compares the same way as the first, and ``--models``/``--batches``/``--image-size`` are
one option each (``register`` refuses two of one name that differ).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .. import stats
from ..errors import ConfigError
from ..kernels.tf_models import MODELS, check_batch
from ..model import Case, Opt, Result, Sample, parse_names, round_values, split_list, whole_number
from . import heading
from .allreduce import allreduce_wire_bytes

DEFAULT_MODELS = "small-cnn"  # the CPU CI model; mobilenet and resnet50 on request
DEFAULT_BATCHES = "32"
#: A step's time and its rate are one number: a case is judged once, on images/s.
JUDGED = ("img_per_s",)
SHORT_NAMES = {"img_per_s": "img/s", "step_ms": "step"}

Pairs = Sequence[tuple[str, str]]


def parse_models(text: str | Sequence[str]) -> tuple[str, ...]:
    return parse_names(text, MODELS, "model")


def parse_batches(text: str | Iterable[int]) -> tuple[int, ...]:
    """'32,64' -> (32, 64): per-worker batch sizes, whole numbers >= 1."""
    parts = (split_list(text, "batches", "16,32") if isinstance(text, str)
             else [p for p in text if str(p).strip()])
    if not parts:
        raise ConfigError(f"batches {text!r} name none; use e.g. 32 or 16,32,64")
    return tuple(dict.fromkeys(check_batch(p) for p in parts))


def training_cases(benchmark: str, transports: Sequence[str], world_sizes: Sequence[int],
                   models: str | Sequence[str] = DEFAULT_MODELS,
                   batches: str | Sequence[int] = DEFAULT_BATCHES) -> list[Case]:
    """transport x world size x model x per-worker batch (batches innermost: one world per
    transport, world size and model sweeps its batches)."""
    picked, sizes = parse_models(models), parse_batches(batches)
    return [Case(benchmark, t, n, model=m, batch=b)
            for t in transports for n in world_sizes for m in picked for b in sizes]


def wire_bytes(sample: Sample) -> int:
    """A step allreduces every gradient (float32) once, when Python sees it being exchanged."""
    i = sample.info
    if not i.get("params") or i.get("allreduce_share") is None:
        return 0
    return allreduce_wire_bytes(4 * int(i["params"]), sample.case.world_size,
                                int(i.get("steps", 0)) + int(i.get("warmup", 0)))


COLUMNS = ("model", "batch", "global", "img/s", "img/s/wkr", "p50(ms)", "p99(ms)",
           "plain img/s", "scaling", "allreduce", "weights")


def training_table(result: Result, framework_label: str, version_key: str, import_key: str) -> str:
    """One row per model and per-worker batch; scaling = img/s / (n x plain one-worker img/s).
    The heading names the framework ('TF 2.20': ``framework_label`` and ``result.extra``'s
    ``version_key``) and, when the kernel timed it, its import (``import_key``, seconds)."""
    extra = result.extra or {}
    took = (f"  {framework_label} import {extra[import_key]:.1f} s"
            if extra.get(import_key) is not None else "")
    head = heading(result, f"{framework_label} {extra.get(version_key, '?')}", late=took)
    lines = [head, "#" + "".join(f"{c:>12}" for c in COLUMNS)[1:]]

    def num(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    for smp in result.samples:
        i = smp.info
        share = i.get("allreduce_share")
        weights = {True: "same", False: "DIFFER", None: "n/a"}[i.get("weights_identical")]
        lines.append(f"{i['model']:>11} {i['batch']:>11} {i['global_batch']:>11} "
                     f"{i['img_per_s']:>11.1f} {i['img_per_s_per_worker']:>11.1f} "
                     f"{i['step_ms_p50']:>11.2f} {i['step_ms_p99']:>11.2f} "
                     f"{num(i.get('plain_img_per_s'), '.1f'):>11} "
                     f"{num(i.get('scaling_efficiency'), '.3f'):>11} "
                     f"{(f'{share:.1%}' if share is not None else 'in graph'):>11} {weights:>11}")
    return "\n".join(lines)


def ratio_lines(samples: Sequence[Sample], benchmark: str, pairs: Pairs) -> list[str]:
    """'img/s(mpi)/img/s(grpc) = 1.80 [1.62, 2.00]' for every pair (numerator, denominator
    transport) of ``benchmark``'s samples, per model, batch and world size where both ran.
    With rounds, the suite interleaves the transports' worlds, so round k of one and round k
    of the other ran side by side: the ratio is the geometric mean of those pairs, with its
    95% t interval (``stats.paired_ratio_ci``)."""
    img = {(s.case.transport, s.case.model, s.case.batch, s.case.world_size): s
           for s in samples if s.case.benchmark == benchmark and "img_per_s" in s.metrics}
    out = []
    for num, den in pairs:
        for (t, model, batch, n), s in img.items():
            other = img.get((den, model, batch, n))
            if t != num or other is None:
                continue
            a, b = round_values(s, "img_per_s"), round_values(other, "img_per_s")
            what = (f"({model}, batch {batch}, {n} workers: {stats.median(a):.1f} vs "
                    f"{stats.median(b):.1f} img/s")
            aligned = not (s.info.get("rounds_dropped") or other.info.get("rounds_dropped"))
            if aligned and len(a) == len(b) and len(a) > 1 and min(a + b) > 0:
                ratio, lo, hi = stats.paired_ratio_ci(a, b)
                out.append(f"# img/s({num})/img/s({den}) = {ratio:.2f} [{lo:.2f}, {hi:.2f}] 95% over "
                           f"{len(a)} interleaved rounds  {what})")
            elif min(a + b) > 0:
                out.append(f"# img/s({num})/img/s({den}) = {stats.median(a) / stats.median(b):.2f} "
                           f"(no interval: {len(a)} vs {len(b)} rounds; use --rounds 3 or more)  {what})")
    return out


def ratio_pairs(over: str, *designs: str) -> tuple[tuple[str, str], ...]:
    """('mpi', 'grpc'), ('horovod', 'grpc'), ...: each design's img/s over the one it is
    measured against (``ratio_pairs("grpc", "mpi", "horovod")``)."""
    return tuple((d, over) for d in designs)


def ratio_comparisons(benchmark: str, pairs: Pairs) -> Callable[[Sequence[Sample]], list[str]]:
    """A record's ``comparisons``: the ratio lines of ``benchmark``'s ``pairs``."""
    pairs = tuple(pairs)

    def comparisons(samples: Sequence[Sample]) -> list[str]:
        return ratio_lines(samples, benchmark, pairs)

    return comparisons


#: The options every training benchmark reads; another framework's record lists these very
#: objects, so the registry sees one option, not two of one name.
MODELS_OPT = Opt("models", DEFAULT_MODELS, "training: comma list of small-cnn, mobilenet, resnet50, or 'all'",
                 metavar="LIST", parse=parse_models)
BATCHES_OPT = Opt("batches", DEFAULT_BATCHES, "training: comma list of per-worker batch sizes, e.g. 16,32,64",
                  metavar="LIST", parse=parse_batches)
IMAGE_SIZE_OPT = Opt("image-size", None, "training: image height = width in pixels (default: the model's, "
                     "32 or 224)", metavar="N", parse=lambda v: whole_number(v, "image size"),
                     knob="image_size")


def parse_on_off(text: str) -> bool:
    value = str(text).strip().lower()
    if value not in ("on", "off"):
        raise ConfigError(f"yardsticks {text!r} must be on or off")
    return value == "on"


YARDSTICKS_OPT = Opt("yardsticks", "on", "training: off skips the loops each epoch is measured beside (rank 0's "
                     "one-process baseline, hence scaling efficiency, and torch's plain DDP loop): a quicker run "
                     "when only the epoch's own numbers matter", metavar="on|off", parse=parse_on_off,
                     knob="yardsticks")
OPTIONS = (MODELS_OPT, BATCHES_OPT, IMAGE_SIZE_OPT, YARDSTICKS_OPT)
