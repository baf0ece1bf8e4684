"""torch-epoch: short PyTorch DistributedDataParallel epochs per transport, model and per-worker
batch, measured and tabled as tf-epoch is (``training``), so a TensorFlow and a PyTorch img/s of
the same model, batch and world size compare. Only PyTorch's facts are said here: its version
and import time in the heading, DDP's bucket size, and each world's img/s against a plain DDP
loop run in the same world (``kernels/plain/torch_ddp``)."""
from __future__ import annotations

from collections.abc import Sequence

from ..model import Case, Opt, Result
from . import BenchmarkSpec, Selection, register
from .training import (DEFAULT_BATCHES, DEFAULT_MODELS, JUDGED, OPTIONS as TRAINING_OPTIONS, SHORT_NAMES,
                       ratio_comparisons, ratio_pairs, training_cases, training_table, wire_bytes)

#: What a GPU user asks first: NCCL's img/s over gloo's.
RATIOS = ratio_pairs("torch-gloo", "torch-nccl")


def torch_cases(transports: Sequence[str], world_sizes: Sequence[int],
                models: str | Sequence[str] = DEFAULT_MODELS,
                batches: str | Sequence[int] = DEFAULT_BATCHES) -> list[Case]:
    return training_cases("torch-epoch", transports, world_sizes, models, batches)


def cases(sel: Selection) -> list[Case]:
    v = sel.values
    return [c for t in sel.transports or ()
            for c in torch_cases((t,), sel.world_sizes_of(t), v.get("models") or DEFAULT_MODELS,
                                 v.get("batches") or DEFAULT_BATCHES)]


def table(result: Result) -> str:
    """``training.training_table`` headed with torch's version, and each case's img/s against
    the plain DDP loop of the same world."""
    lines = [training_table(result, "torch", "torch", "torch_import_s")]
    for s in result.samples:
        i = s.info
        if i.get("vs_plain_ddp") is not None:
            lines.append(f"# {i['model']} batch {i['batch']}: {i['img_per_s']:.1f} img/s = {i['vs_plain_ddp']:.3f} x "
                         f"a plain DDP loop's {i['plain_ddp_img_per_s']:.1f} img/s in the same world "
                         f"({i.get('architecture', '?')}, {i.get('compute_threads', '?')} thread(s) per rank)")
    return "\n".join(lines)


def parse_bucket_cap(text: str) -> float:
    from ..errors import ConfigError

    try:
        value = float(str(text).strip())
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"bucket size {text!r} must be a number of megabytes > 0, e.g. 25 (DDP's default)")
    return value


OPTIONS = TRAINING_OPTIONS + (
    Opt("bucket-cap-mb", None, "torch-epoch: DDP's gradient bucket size in MB (default 25, DDP's own)",
        metavar="MB", parse=parse_bucket_cap, knob="bucket_cap_mb"),
)

SPEC = register(BenchmarkSpec(
    "torch-epoch", "short PyTorch DDP training epochs: images/s, step times, scaling efficiency",
    kernel="perfsuite.kernels.torch_epoch", cases=cases, options=OPTIONS, table=table,
    wire_bytes=wire_bytes, comparisons=ratio_comparisons("torch-epoch", RATIOS), judged=JUDGED,
    short_names=SHORT_NAMES))
