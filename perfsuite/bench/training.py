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

from ..records import memory, stats
from ..records.errors import ConfigError
from ..kernels.models.catalogue import LM_MODELS, MODELS, check_batch, check_image_size, check_seq_len, model_spec
from ..kernels.training.loop import AMP, PARALLEL, parallel_amp, rate_of, training_variant
from ..records.model import Case, Opt, Result, Sample, parse_names, round_values, split_list, whole_number
from . import heading
from .allreduce import allreduce_wire_bytes

DEFAULT_MODELS = "small-cnn"  # the CPU CI model; mobilenet, resnet50, gpt-tiny, gpt2-small on request
DEFAULT_BATCHES = None  # each model's own (catalogue.ModelSpec.batch: 32 images, 8 sequences)
#: A step's time and its rate are one number: a case is judged once on it, on images/s (tokens/s
#: for a language model), and once on its peak memory per rank.
JUDGED = ("img_per_s", "tokens_per_s", memory.METRIC)
SHORT_NAMES = {"img_per_s": "img/s", "tokens_per_s": "tokens/s", "step_ms": "step", memory.METRIC: memory.SHORT_NAME}

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


def check_model_inputs(models: str | Sequence[str], image_size: object = None, seq_len: object = None) -> None:
    """``--image-size`` and ``--seq-len`` against the chosen models: each is checked for every
    model it applies to (image models, language models) and refused, in one line, where it applies
    to none of them (an image size for gpt-tiny alone); a run of both kinds applies each to its kind."""
    picked = parse_models(models)
    for value, check, applies in ((image_size, check_image_size, lambda m: not model_spec(m).is_lm),
                                  (seq_len, check_seq_len, lambda m: model_spec(m).is_lm)):
        if value is None:
            continue
        fits = [m for m in picked if applies(m)]
        for m in fits or picked[:1]:  # none fits: the first model's check says why not
            check(m, value)


def training_cases(benchmark: str, transports: Sequence[str], world_sizes: Sequence[int],
                   models: str | Sequence[str] = DEFAULT_MODELS,
                   batches: str | Sequence[int] | None = DEFAULT_BATCHES,
                   parallel: Sequence[str] = PARALLEL[:1], amp: Sequence[str] = AMP[:1]) -> list[Case]:
    """transport x world size x model x parallelism x precision x per-worker batch (batches
    innermost: one world per transport, world size, model, parallelism and precision sweeps its
    batches). Without ``batches``, each model's own batch."""
    picked = parse_models(models)
    sizes = {m: parse_batches(batches) if batches else (model_spec(m).batch,) for m in picked}
    return [Case(benchmark, t, n, model=m, batch=b, variant=training_variant(p, a))
            for t in transports for n in world_sizes for m in picked for p in parallel for a in amp
            for b in sizes[m]]


def wire_bytes(sample: Sample) -> int:
    """A step allreduces every gradient (float32) once, when Python sees it being exchanged."""
    i = sample.info
    if not i.get("params") or i.get("allreduce_share") is None:
        return 0
    return allreduce_wire_bytes(4 * int(i["params"]), sample.case.world_size,
                                int(i.get("steps", 0)) + int(i.get("warmup", 0)))


COLUMNS = ("model", "batch", "global", "rate", "rate/wkr", "p50(ms)", "p99(ms)",
           "plain rate", "scaling", "allreduce", "weights", "peak MiB")


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
        key, unit = rate_of(i)
        share = i.get("allreduce_share")
        weights = {True: "same", False: "DIFFER", None: "n/a"}[i.get("weights_identical")]
        model = "-".join([i["model"], *([smp.case.variant] if smp.case.variant else [])])
        lines.append(f"{model:>11} {i['batch']:>11} {i['global_batch']:>11} "
                     f"{i[key]:>11.1f} {i[f'{key}_per_worker']:>11.1f} "
                     f"{i['step_ms_p50']:>11.2f} {i['step_ms_p99']:>11.2f} "
                     f"{num(i.get(f'plain_{key}'), '.1f'):>11} "
                     f"{num(i.get('scaling_efficiency'), '.3f'):>11} "
                     f"{_share(share, i):>11} {weights:>11} {memory.column(i):>11}  {unit}")
    for smp in result.samples:
        said = memory_line(smp)
        if said:
            lines.append(said)
    return "\n".join(lines)


def memory_line(smp: Sample) -> str | None:
    """'# gpt-tiny-fsdp batch 8: peak 341.2 MiB resident (rank 1 of 2 ...); model state per rank
    0.41 0.41 MiB (parameters + gradients + optimizer state, rank 0: ...)': the world's memory
    beside its rate, where its ranks read it."""
    i = smp.info
    if i.get(memory.METRIC) is None:
        return None
    what = "-".join([i["model"], *([smp.case.variant] if smp.case.variant else [])]) + f" batch {i['batch']}"
    where = ("allocated on the GPU" if i.get("peak_mem_where") == "device" else
             "resident over the timed steps" if i.get("peak_mem_span") == "timed" else "resident, the process's peak")
    ranks = " ".join(f"{v:.1f}" for v in i.get("rank_peak_mem_MiB") or [])
    growth = [f.get("host_growth_B") for f in i.get(memory.KEY) or []]
    grew = (f", +{max(growth) / memory.MIB:.1f} MiB over them at most"
            if growth and all(g is not None for g in growth) and i.get("peak_mem_where") != "device" else "")
    text = (f"# {what}: peak memory {i[memory.METRIC]:.1f} MiB {where} (largest rank {memory.peak_rank(i)}; "
            f"per rank in the last round {ranks}{grew})")
    state = i.get("model_state_MiB")
    if state:
        first = (i.get(memory.KEY) or [{}])[0].get("model_state_B") or {}
        parts = ", ".join(f"{k} {v / memory.MIB:.2f}" for k, v in first.items() if v is not None)
        text += (f"; model state per rank {' '.join(f'{v:.2f}' for v in state)} MiB "
                 f"(parameters + gradients + optimizer state; rank 0: {parts})")
    return text


def loss_line(info: dict, what: str, held: str = "replicas identical") -> str | None:
    """'# gpt-tiny batch 8: loss 7.630 -> 5.626, finite yes, falling yes; replicas identical yes'
    for a sample whose kernel checked its losses (else None): what makes a language model's sample
    valid, said beside its rate."""
    if "loss_finite" not in info:
        return None
    agree = {True: "yes", False: "NO", None: "n/a (1 rank)"}[info.get("weights_identical")]
    return (f"# {what}: loss {_loss(info.get('loss_first'))} -> {_loss(info.get('loss_last'))}, finite "
            f"{'yes' if info['loss_finite'] else 'NO'}, falling {_falling(info.get('loss_falling'))}; "
            f"{held} {agree}")


def _falling(v) -> str:
    return {True: "yes", False: "NO", None: "n/a (under 3 steps)"}[v]


def _loss(v) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "-"


def _share(share: float | None, info: dict) -> str:
    """The exposed exchange's share of a step; where Python cannot see it, why."""
    if share is not None:
        return f"{share:.1%}"
    if info.get("collectives_per_step"):
        return "see below"
    return "-" if info.get("parallel") else "in graph"  # torch: not seen (FSDP, a GPU); TF: in its graph


def ratio_lines(samples: Sequence[Sample], benchmark: str, pairs: Pairs) -> list[str]:
    """'img/s(mpi)/img/s(grpc) = 1.80 [1.62, 2.00]' for every pair (numerator, denominator
    transport) of ``benchmark``'s samples, per model, variant, batch and world size where both
    ran (``paired_line``)."""
    img = _by_case(samples, benchmark)
    out = []
    for num, den in pairs:
        for (t, model, variant, batch, n), s in img.items():
            other = img.get((den, model, variant, batch, n))
            if t == num and other is not None:
                label = "-".join([model, *([variant] if variant else [])])
                out.extend(paired_line(s, other, num, den, f"{label}, batch {batch}, {n} workers"))
    return out


def axis_lines(samples: Sequence[Sample], benchmark: str) -> list[str]:
    """Per case run over rounds, its rate with a 95% interval; per case of FSDP or bf16, its rate
    over the same case's under DDP or in float32, paired by round (``paired_line``)."""
    img = _by_case(samples, benchmark)
    out = []
    for (t, model, variant, batch, n), s in img.items():
        key, unit = rate_of(s.info)
        v = round_values(s, key)
        what = f"{t}, {'-'.join([model, *([variant] if variant else [])])}, batch {batch}, {n} workers"
        if len(v) > 1 and min(v) > 0:
            g, lo, hi = stats.paired_ratio_ci(v, [1.0] * len(v))
            out.append(f"# {unit} {g:.1f} [{lo:.1f}, {hi:.1f}] 95% over {len(v)} rounds ({what}; geometric mean)")
        parallel, amp = parallel_amp(variant)
        for other, num, den, held in ((training_variant(PARALLEL[0], amp), parallel, PARALLEL[0], amp),
                                      (training_variant(parallel, AMP[0]), amp, AMP[0], parallel)):
            base = img.get((t, model, other, batch, n))
            if other != variant and base is not None:  # named with the axis both share: 'fsdp/ddp in bf16'
                out.extend(paired_line(s, base, num, den, f"{t}, {model}, {held}, batch {batch}, {n} workers"))
    return out


def sharding_lines(samples: Sequence[Sample], benchmark: str) -> list[str]:
    """Per FSDP case with a DDP twin: its model state per rank against what sharding predicts
    (DDP's replicated state over the ranks), and its peak memory over DDP's, paired by round
    (``paired_line``'s way): the memory FSDP buys with its time."""
    img = _by_case(samples, benchmark)
    out = []
    for (t, model, variant, batch, n), s in img.items():
        parallel, amp = parallel_amp(variant)
        base = img.get((t, model, training_variant(PARALLEL[0], amp), batch, n))
        if parallel == PARALLEL[0] or base is None:
            continue
        what = f"{t}, {model}, {amp}, batch {batch}, {n} workers"
        shard = [sum(v or 0 for v in (f.get("model_state_B") or {}).values()) for f in s.info.get(memory.KEY) or []]
        full = [(f.get("model_state_B") or {}) for f in base.info.get(memory.KEY) or []]
        if shard and full:
            predicted = memory.state_prediction(full[0], n)
            out.append(f"# model state per rank({parallel}) = {max(shard) / memory.MIB:.3f} MiB (largest rank; "
                       f"{sum(shard) / memory.MIB:.3f} over {n} ranks) vs {PARALLEL[0]}'s "
                       f"{predicted * n / memory.MIB:.3f} MiB / {n} = {predicted / memory.MIB:.3f} MiB predicted: "
                       f"x{max(shard) / predicted:.3f}  ({what})")
        a, b = round_values(s, memory.METRIC) if memory.METRIC in s.metrics else [], \
            round_values(base, memory.METRIC) if memory.METRIC in base.metrics else []
        if a and b:
            aligned = len(a) == len(b) and len(a) > 1 and not (s.info.get("rounds_dropped") or base.info.get("rounds_dropped"))
            if aligned:
                ratio, lo, hi = stats.paired_ratio_ci(a, b)
                rest = f"{ratio:.2f} [{lo:.2f}, {hi:.2f}] 95% over {len(a)} interleaved rounds"
            else:
                rest = f"{stats.median(a) / stats.median(b):.2f} ({len(a)} vs {len(b)} rounds)"
            out.append(f"# peak memory({parallel})/peak memory({PARALLEL[0]}) = {rest}  ({what}: "
                       f"{stats.median(a):.1f} vs {stats.median(b):.1f} MiB, largest rank)")
    return out


def paired_line(s: Sample, other: Sample, num: str, den: str, what: str) -> list[str]:
    """'tokens/s(fsdp)/tokens/s(ddp) = 0.65 [0.60, 0.70]': with rounds the suite interleaves the
    two worlds, so round k of one and round k of the other ran side by side: the ratio is the
    geometric mean of those pairs, with its 95% t interval (``stats.paired_ratio_ci``)."""
    key, unit = rate_of(s.info)
    a, b = round_values(s, key), round_values(other, key)
    if not a or not b or min(a + b) <= 0:
        return []
    what = f"({what}: {stats.median(a):.1f} vs {stats.median(b):.1f} {unit})"
    aligned = not (s.info.get("rounds_dropped") or other.info.get("rounds_dropped"))
    if aligned and len(a) == len(b) and len(a) > 1:
        ratio, lo, hi = stats.paired_ratio_ci(a, b)
        return [f"# {unit}({num})/{unit}({den}) = {ratio:.2f} [{lo:.2f}, {hi:.2f}] 95% over "
                f"{len(a)} interleaved rounds  {what}"]
    return [f"# {unit}({num})/{unit}({den}) = {stats.median(a) / stats.median(b):.2f} "
            f"(no interval: {len(a)} vs {len(b)} rounds; use --rounds 3 or more)  {what}"]


def _by_case(samples: Sequence[Sample], benchmark: str) -> dict[tuple, Sample]:
    return {(s.case.transport, s.case.model, s.case.variant, s.case.batch, s.case.world_size): s
            for s in samples if s.case.benchmark == benchmark and rate_of(s.info)[0] in s.metrics}


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


def _each(value) -> str:
    """The values the models' own defaults take, for a help: '32 or 8'."""
    return " or ".join(dict.fromkeys(str(value(s)) for s in MODELS.values() if value(s)))


#: The options every training benchmark reads; another framework's record lists these very
#: objects, so the registry sees one option, not two of one name.
MODELS_OPT = Opt("models", DEFAULT_MODELS, f"training: comma list of {', '.join(MODELS)}, or 'all'",
                 metavar="LIST", parse=parse_models)
BATCHES_OPT = Opt("batches", DEFAULT_BATCHES, "training: comma list of per-worker batch sizes (images, or "
                  "sequences of a language model), e.g. 16,32,64 [default: each model's own, "
                  f"{_each(lambda s: s.batch)}]",
                  metavar="LIST", parse=parse_batches)
IMAGE_SIZE_OPT = Opt("image-size", None, "training: image height = width in pixels [default: the model's, "
                     f"{_each(lambda s: s.image_size)}]", metavar="N", parse=lambda v: whole_number(v, "image size"),
                     knob="image_size")


def parse_on_off(text: str) -> bool:
    value = str(text).strip().lower()
    if value not in ("on", "off"):
        raise ConfigError(f"yardsticks {text!r} must be on or off")
    return value == "on"


SEQ_LEN_OPT = Opt("seq-len", None, "training: tokens per sequence of a language model [default: the model's, "
                  + ", ".join(f"{MODELS[m].seq_len} for {m}" for m in LM_MODELS) + "]", metavar="N",
                  parse=lambda v: whole_number(v, "sequence length"), knob="seq_len")


YARDSTICKS_OPT = Opt("yardsticks", "on", "training: off skips the loops each epoch is measured beside (rank 0's "
                     "one-process baseline, hence scaling efficiency, and torch's plain DDP loop): a quicker run "
                     "when only the epoch's own numbers matter", metavar="on|off", parse=parse_on_off,
                     knob="yardsticks")
OPTIONS = (MODELS_OPT, BATCHES_OPT, IMAGE_SIZE_OPT, SEQ_LEN_OPT, YARDSTICKS_OPT)
