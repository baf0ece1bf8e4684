"""torch-epoch: short PyTorch training epochs per transport, model, parallelism (DDP, FSDP2),
precision (float32, bf16) and per-worker batch, measured and tabled as tf-epoch is
(``training``), so a TensorFlow and a PyTorch img/s of the same model, batch and world size
compare. Only PyTorch's facts are said here: its version and import time in the heading, DDP's
bucket size, FSDP's prefetch, each world's rate against a plain loop run in the same world
(``kernels/plain/torch_ddp``), each collective's time and exposed time per step, and MFU where
the GPU's peak is known."""
from __future__ import annotations

from collections.abc import Sequence

from ..records.errors import ConfigError
from ..kernels.training.loop import AMP, PARALLEL, rate_of
from ..records.model import Case, Opt, Result, Sample, parse_names, whole_number
from ..kernels.training.torch_epoch import DEFAULT_PROFILE_STEPS
from ..transports.torch.train import DEFAULT_FSDP_PREFETCH, FSDP_PREFETCH
from . import BenchmarkSpec, Selection, register
from .training import (DEFAULT_BATCHES, DEFAULT_MODELS, JUDGED, OPTIONS as TRAINING_OPTIONS, SHORT_NAMES,
                       axis_lines, check_model_inputs, loss_line, ratio_lines, ratio_pairs, sharding_lines, training_cases,
                       training_table, wire_bytes)

#: What a GPU user asks first: NCCL's img/s over gloo's.
RATIOS = ratio_pairs("torch-gloo", "torch-nccl")


def torch_cases(transports: Sequence[str], world_sizes: Sequence[int],
                models: str | Sequence[str] = DEFAULT_MODELS,
                batches: str | Sequence[int] | None = DEFAULT_BATCHES,
                parallel: Sequence[str] = PARALLEL[:1], amp: Sequence[str] = AMP[:1]) -> list[Case]:
    return training_cases("torch-epoch", transports, world_sizes, models, batches, parallel, amp)


def cases(sel: Selection) -> list[Case]:
    v = sel.values
    check_model_inputs(v.get("models") or DEFAULT_MODELS, v.get("image_size"), v.get("seq_len"))
    return [c for t in sel.transports or ()
            for c in torch_cases((t,), sel.world_sizes_of(t), v.get("models") or DEFAULT_MODELS,
                                 v.get("batches") or DEFAULT_BATCHES, v.get("parallel") or PARALLEL[:1],
                                 v.get("amp") or AMP[:1])]


def table(result: Result) -> str:
    """``training.training_table`` headed with torch's version; per case its rate against the
    plain loop of the same world, its checks, each collective's time and exposed time per step,
    and MFU where the device's peak is known."""
    lines = [training_table(result, "torch", "torch", "torch_import_s")]
    for s in result.samples:
        i = s.info
        key, unit = rate_of(i)
        what = "-".join([i["model"], *([s.case.variant] if s.case.variant else [])]) + f" batch {i['batch']}"
        loop = "FSDP" if i.get("parallel") == "fsdp" else "DDP"
        if i.get("vs_plain_loop") is not None:
            lines.append(f"# {what}: {i[key]:.1f} {unit} = {i['vs_plain_loop']:.3f} x a plain {loop} loop's "
                         f"{i['plain_loop_per_s']:.1f} {unit} in the same world "
                         f"({i.get('architecture', '?')}, {i.get('compute_threads', '?')} thread(s) per rank)")
        checked = loss_line(i, what, "shards consistent" if i.get("parallel") == "fsdp" else "replicas identical")
        if checked:
            lines.append(checked)
        table = i.get("collectives_per_step")
        if table:
            parts = [f"{name} {row['ms']:.2f} ms ({row['exposed_ms']:.2f} exposed, {row['calls']:g} calls)"
                     for name, row in table.items()]
            lines.append(f"# {what}: per step {'; '.join(parts)} (median rank, {loop}, profiled after the epoch)")
        elif i.get("collectives_why"):
            lines.append(f"# {what}: collectives not broken down: {i['collectives_why']}")
        if i.get("mfu") is not None:
            lines.append(f"# {what}: MFU {i['mfu']:.1%} of {i['peak_flops'] / 1e12:.0f} TFLOP/s x "
                         f"{i['world_size']} ({i.get('device_name')}, {i.get('amp')}; "
                         f"{i['flops_per_token'] / 1e6:.1f} MFLOP per token)")
    return "\n".join(lines)


def comparisons(samples: Sequence[Sample]) -> list[str]:
    """NCCL's rate over gloo's, and each case's rate with its interval and over its DDP or
    float32 twin, paired by round."""
    return (ratio_lines(samples, "torch-epoch", RATIOS) + axis_lines(samples, "torch-epoch")
            + sharding_lines(samples, "torch-epoch"))


def parse_parallel(text: str | Sequence[str]) -> tuple[str, ...]:
    return parse_names(text, PARALLEL, "parallelism")


def parse_amp(text: str | Sequence[str]) -> tuple[str, ...]:
    return parse_names(text, AMP, "precision (amp)")


def parse_prefetch(text: str) -> str:
    value = str(text).strip().lower()
    if value not in FSDP_PREFETCH:
        raise ConfigError(f"FSDP prefetch {text!r} is unknown; choose from {', '.join(FSDP_PREFETCH)}")
    return value


def parse_bucket_cap(text: str) -> float:
    try:
        value = float(str(text).strip())
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"bucket size {text!r} must be a number of megabytes > 0, e.g. 25 (DDP's default)")
    return value


OPTIONS = TRAINING_OPTIONS + (
    Opt("bucket-cap-mb", None, "torch-epoch: DDP's gradient bucket size in MB [default: DDP's own, 25]",
        metavar="MB", parse=parse_bucket_cap, knob="bucket_cap_mb"),
    Opt("parallel", "ddp", "torch-epoch: comma list of data parallelism, ddp (DistributedDataParallel) and "
        "fsdp (FSDP2 fully_shard per transformer block), or 'all'", metavar="LIST", parse=parse_parallel),
    Opt("amp", "off", "torch-epoch: comma list of precisions, off (float32) and bf16 (autocast; FSDP's "
        "mixed-precision policy), or 'all'", metavar="LIST", parse=parse_amp),
    Opt("fsdp-prefetch", None, "torch-epoch: FSDP2's explicit prefetch of the next block, on, off, or default "
        f"(FSDP2's own) [default: {DEFAULT_FSDP_PREFETCH}]", metavar="on|off|default", parse=parse_prefetch, knob="fsdp_prefetch"),
    Opt("profile-steps", None, "torch-epoch: steps run under torch.profiler after the timed epoch, for each "
        f"collective's time and exposed time; 0: none [default: {DEFAULT_PROFILE_STEPS}]", metavar="N",
        parse=lambda v: whole_number(v, "profiled steps", low=0), knob="profile_steps"),
)

SPEC = register(BenchmarkSpec(
    "torch-epoch", "short PyTorch training epochs, DDP or FSDP, float32 or bf16: images/s or tokens/s, "
    "step times, scaling efficiency, exposed collectives, MFU, peak memory and model state per rank",
    kernel="perfsuite.kernels.training.torch_epoch", cases=cases, options=OPTIONS, table=table,
    wire_bytes=wire_bytes, comparisons=comparisons, judged=JUDGED,
    short_names=SHORT_NAMES))
