"""What a study costs: a first guess of each world's seconds, printed before the first world
starts (``perfsuite study --dry-run``) and replaced, as worlds finish, by what each point's
worlds took (``progress.StudyProgress``). Pure: fitted constants and arithmetic.
"""
from __future__ import annotations

import os

from ..kernels.models.catalogue import model_spec
from ..kernels.training.loop import parallel_amp
from .study_plan import Point

#: Seconds of one world's fixed part (start, TensorFlow import, model build) and of one batch's
#: steps plus its one-worker yardstick, for small-cnn at 32 px and batch 32, ranks within the
#: cores; fitted to seed-tf's worlds (docs/measurements.md, 2026-11-25, has the worlds they were
#: fitted to). Only a first guess: the time left is taken from the worlds timed.
TF_WORLD_S, TF_BATCH_S, ALLREDUCE_WORLD_S = 6.5, 0.9, 2.0
#: Relative cost of a step, per model at its reference image size of 32 px.
MODEL_COST = {"small-cnn": 1.0, "mobilenet": 13.0, "resnet50": 50.0}

#: A language model's world (torch-epoch): its fixed part (start, torch import, model build, the
#: checks), and one step of gpt-tiny (64 tokens x 8 sequences) at one rank with the cores to
#: itself. A world steps (steps + warm-up) times, three times over with the yardsticks (rank 0's
#: one-process run, the epoch, the plain loop beside it), then PROFILED steps under the
#: profiler. Relative to that step: FSDP's, and a step at 2+ ranks within the cores (a thread
#: each, and the exchange); with more ranks than cores every step crowds. Fitted to
#: studies/transformer.toml's worlds (docs/study.md, "The shipped plans", has the steps they
#: were fitted to). Only a first guess: the time left is taken from the worlds timed.
TORCH_WORLD_S, TORCH_LM_STEP_S, PROFILED = 4.0, 0.025, 4
PARALLEL_COST = {"ddp": 1.0, "fsdp": 1.6}
SPREAD_COST = 1.5
CROWDED_COST = 3.3
#: The tokens and parameters of gpt-tiny's step at its own batch and sequence (the unit above).
LM_TOKENS_REF, LM_PARAMS_REF = 8 * 64, 12 * 2 * 128 ** 2 + 2048 * 128


def lm_params(model: str) -> int:
    """A GPT's weights, roughly: 12 d^2 per block (attention 4 d^2, MLP 8 d^2) and the token table."""
    s = model_spec(model).lm
    return 12 * s.n_layer * s.d_model ** 2 + s.vocab * s.d_model if s else LM_PARAMS_REF


def expected_world_s(p: Point, steps: int, warmup: int, cores: int | None = None, yardsticks: bool = True) -> float:
    cores = cores or len(os.sched_getaffinity(0))
    crowd = max(1.0, p.world_size / max(cores, 1))  # ranks beyond the cores take turns
    if p.benchmark == "allreduce":
        return ALLREDUCE_WORLD_S * crowd
    if p.seq_len:  # a language model: a step's cost scales with weights x tokens
        par = parallel_amp(p.variant)[0]
        step = TORCH_LM_STEP_S * PARALLEL_COST.get(par, 1.0) * lm_params(p.model) / LM_PARAMS_REF
        if p.world_size > cores:
            step *= SPREAD_COST * CROWDED_COST
        elif p.world_size > 1:
            step *= SPREAD_COST
        tokens = sum(b * p.seq_len / LM_TOKENS_REF for b in p.batches)
        return TORCH_WORLD_S * crowd + step * tokens * ((3 if yardsticks else 1) * (steps + warmup) + PROFILED)
    step = MODEL_COST.get(p.model, 1.0) * (p.image_size / 32) ** 2
    batch = sum(TF_BATCH_S * step * (b / 32) * (steps + warmup) / 12 for b in p.batches)
    return (TF_WORLD_S + (2 if yardsticks else 1) * batch) * crowd  # the steps and the one-worker yardstick
