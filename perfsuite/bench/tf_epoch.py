"""tf-epoch: short TensorFlow training epochs per transport, model and per-worker batch: images/s,
or tokens/s for a language model (GPT-2 in Keras, ``kernels/models/gpt_keras.py``).

The kernel (``perfsuite.kernels.training.tf_epoch``) times every step on every rank; this record says how
cases are chosen (one world per transport, world size and model sweeps its batches), how a
world is tabled, which cross-transport ratios the seed study reads (img/s of a No-gRPC design
over gRPC), and how many gradient bytes a step must put on the wires between emulated nodes;
what any training benchmark shares of that lives in ``training``, and only TensorFlow's facts
(its version and import time in the heading, the fusion threshold) are said here.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..records.model import Case, Opt, Result, Sample, format_size, parse_size
from ..transports.tf.train import DEFAULT_FUSION_THRESHOLD
from . import BenchmarkSpec, Selection, register
from .training import (DEFAULT_BATCHES, DEFAULT_MODELS, JUDGED, OPTIONS as TRAINING_OPTIONS,  # noqa: F401
                       SHORT_NAMES, check_model_inputs, loss_line, parse_batches, parse_models, ratio_comparisons,
                       ratio_lines, ratio_pairs, training_cases, training_table, wire_bytes)

#: The seed study's headline: a No-gRPC design's images/s over gRPC's.
RATIOS = ratio_pairs("grpc", "mpi", "horovod")


def parse_fusion_threshold(text: str) -> int:
    text = str(text).strip()
    return 0 if text == "0" else parse_size(text, "fusion threshold")


def tf_cases(transports: Sequence[str], world_sizes: Sequence[int],
             models: str | Sequence[str] = DEFAULT_MODELS,
             batches: str | Sequence[int] = DEFAULT_BATCHES) -> list[Case]:
    """transport x world size x model x per-worker batch (``training.training_cases``)."""
    return training_cases("tf-epoch", transports, world_sizes, models, batches)


def cases(sel: Selection) -> list[Case]:
    v = sel.values
    check_model_inputs(v.get("models") or DEFAULT_MODELS, v.get("image_size"), v.get("seq_len"))
    return [c for t in sel.transports or ()
            for c in tf_cases((t,), sel.world_sizes_of(t), v.get("models") or DEFAULT_MODELS,
                              v.get("batches") or DEFAULT_BATCHES)]


def table(result: Result) -> str:
    """``training.training_table`` headed with the TensorFlow version and its import time; per
    case its loss checks (a language model's sample is valid only if its loss is finite and fell)."""
    lines = [training_table(result, "TF", "tensorflow", "tf_import_s")]
    for s in result.samples:
        checked = loss_line(s.info, f"{s.info.get('model', s.case.model)} batch {s.info.get('batch', s.case.batch)}")
        if checked:
            lines.append(checked)
    return "\n".join(lines)


def transport_ratios(samples: Sequence[Sample], pairs: Sequence[tuple[str, str]] = RATIOS) -> list[str]:
    """The ratio lines of tf-epoch's samples (``training.ratio_lines``)."""
    return ratio_lines(samples, "tf-epoch", pairs)


OPTIONS = TRAINING_OPTIONS + (
    Opt("fusion-threshold", None, "tf-epoch mpi/horovod: tensor fusion buffer in bytes, 0 = one allreduce "
        f"per tensor [default: {format_size(DEFAULT_FUSION_THRESHOLD)}, Horovod's]", metavar="SIZE", parse=parse_fusion_threshold, knob="fusion_threshold"),
)

SPEC = register(BenchmarkSpec(
    "tf-epoch", "short TensorFlow training epochs: images/s or tokens/s, step times, scaling efficiency",
    kernel="perfsuite.kernels.training.tf_epoch", cases=cases, options=OPTIONS, table=table,
    wire_bytes=wire_bytes, comparisons=ratio_comparisons("tf-epoch", RATIOS), judged=JUDGED,
    short_names=SHORT_NAMES))
