"""The models' catalogue, framework-neutral: names, kinds, default image size and classes, a
language model's shape (``LmShape``), the input checks, the optimizer settings both frameworks
use for a language model, its FLOPs per token and its synthetic token draw. Plain data and
numpy, so the pytest and CLI side check a model name or a batch without importing a framework;
each framework's builders (``keras_models``, ``gpt_keras``, ``torch_models``, ``gpt_torch``)
import this and never each other.

ResNet-50 and MobileNet are the seed study's models, built with ``weights=None`` so nothing is
downloaded; ``small-cnn`` is small enough for a CPU CI case to finish in seconds. The language
models (``kind="lm"``) are GPT-2's architecture at two sizes: ``gpt-tiny``, small enough for CPU
CI, and ``gpt2-small`` (124 M parameters) for GPUs; their batch is sequences of ``seq_len``
tokens and their "classes" the vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...records.errors import ConfigError


@dataclass(frozen=True)
class LmShape:
    """A GPT-2-style decoder's shape: blocks, attention heads, width, vocabulary."""

    n_layer: int
    n_head: int
    d_model: int
    vocab: int


@dataclass(frozen=True)
class ModelSpec:
    name: str
    summary: str
    image_size: int  # default height = width, pixels (0: not an image model)
    classes: int  # default number of classes of the synthetic labels (a language model: its vocabulary)
    min_image_size: int  # below this the network's downsampling leaves nothing
    kind: str = "image"  # image | lm
    seq_len: int = 0  # a language model's default context, tokens per sequence
    batch: int = 32  # the default per-worker batch (images, or sequences)
    lm: LmShape | None = None

    @property
    def is_lm(self) -> bool:
        return self.kind == "lm"


MODELS: dict[str, ModelSpec] = {
    "small-cnn": ModelSpec("small-cnn", "2 conv + 2 dense layers (~0.3 M parameters), CPU CI", 32, 10, 8),
    "mobilenet": ModelSpec("mobilenet", "Keras MobileNet v1, weights=None (~4.3 M parameters)", 224, 1000, 32),
    "resnet50": ModelSpec("resnet50", "Keras ResNet-50, weights=None (~25.6 M parameters)", 224, 1000, 32),
    # Sized so a CPU CI's step stays in tens of ms at 2 ranks (docs/measurements.md, "Transformer").
    "gpt-tiny": ModelSpec("gpt-tiny", "GPT-2 architecture, 2 blocks x 128 wide, vocab 2048 (0.67 M parameters), CPU CI",
                          0, 2048, 0, kind="lm", seq_len=64, batch=8, lm=LmShape(2, 4, 128, 2048)),
    "gpt2-small": ModelSpec("gpt2-small", "GPT-2 small, 12 blocks x 768 wide, vocab 50257 (124 M parameters), GPUs",
                            0, 50257, 0, kind="lm", seq_len=1024, batch=8, lm=LmShape(12, 12, 768, 50257)),
}
IMAGE_MODELS = tuple(name for name, spec in MODELS.items() if not spec.is_lm)
LM_MODELS = tuple(name for name, spec in MODELS.items() if spec.is_lm)


def model_spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ConfigError(f"model {name!r} is unknown; choose from {', '.join(MODELS)}")
    return MODELS[name]


def check_batch(batch: Any, world_size: int = 1, global_batch: bool = False) -> int:
    """The per-worker batch. With ``global_batch`` the value is split evenly across the workers."""
    s = str(batch).strip()
    if not s.isdigit() or int(s) < 1:
        raise ConfigError(f"batch {batch!r} must be a whole number >= 1 (images per worker per step)")
    b = int(s)
    if global_batch:
        if b % world_size:
            raise ConfigError(f"global batch {b} does not divide evenly over {world_size} workers; "
                              f"use a multiple of {world_size}, e.g. {max(world_size, b - b % world_size)}")
        return b // world_size
    return b


def check_image_size(model: str, size: Any) -> int:
    spec = model_spec(model)
    if spec.is_lm:
        raise ConfigError(f"image size {size!r} does not apply to {model}, a language model; "
                          f"its input is set by the sequence length (--seq-len)")
    s = str(size).strip()
    if not s.isdigit() or int(s) < spec.min_image_size:
        raise ConfigError(f"image size {size!r} for {model} must be a whole number >= {spec.min_image_size}")
    return int(s)


def check_seq_len(model: str, seq_len: Any) -> int:
    """A language model's tokens per sequence: a whole number >= 2 (a next token to predict)."""
    spec = model_spec(model)
    if not spec.is_lm:
        raise ConfigError(f"sequence length {seq_len!r} does not apply to {model}, an image model; "
                          f"choose a language model ({', '.join(LM_MODELS)}) or set --image-size")
    s = str(seq_len).strip()
    if not s.isdigit() or int(s) < 2:
        raise ConfigError(f"sequence length {seq_len!r} for {model} must be a whole number >= 2 "
                          f"(tokens per sequence), e.g. {spec.seq_len}")
    return int(s)


#: The language models' optimizer and its learning rate when none is given, as torch-epoch trains
#: them (``torch_models``): AdamW at what GPT-2-sized models train at, torch's decay and epsilon.
#: An image model trains with SGD at the loop's rate.
LM_LEARNING_RATE = 1e-3
LM_WEIGHT_DECAY = 0.01
LM_EPSILON = 1e-8


def inputs(name: str, image_size: Any = None, classes: Any = None, seq_len: Any = None) -> tuple[ModelSpec, int, int, int]:
    """(spec, image size, classes, seq_len) of the case's model, each input checked (one line
    naming a bad one, on every rank alike, before a framework is imported); None: the model's
    own. An image size means nothing to a language model, nor a sequence length to an image
    model: a run of both kinds gives each its own (the selection refused the value if it fits
    none of the run's models: ``bench.training.check_model_inputs``). One rule for both
    frameworks' ``workload``."""
    spec = model_spec(name)
    if spec.is_lm:
        return spec, 0, int(spec.classes), check_seq_len(name, seq_len) if seq_len is not None else spec.seq_len
    image = check_image_size(name, image_size) if image_size is not None else spec.image_size
    return spec, image, int(classes or spec.classes), 0


def flops_per_token(params: int, position_params: int, shape: LmShape, seq_len: int) -> float:
    """Training FLOPs per token, forward and backward, as torchtitan's ``get_nparams_and_flops``
    and the PaLM paper count them: 6 per weight that multiplies a token (every parameter but
    the position table, which is looked up; the tied token table counts once, as the head's
    matmul) plus 12 * layers * heads * head_dim * seq_len for the attention scores and their
    weighted sum."""
    head_dim = shape.d_model // shape.n_head
    return 6.0 * (params - position_params) + 12.0 * shape.n_layer * shape.n_head * head_dim * seq_len


def zipf_tokens(batch: int, seq_len: int, vocab: int, seed: int):
    """batch x (seq_len + 1) token ids (numpy int64) from a Zipf-like distribution (as words in
    text), so there is something to learn and the loss falls from step to step. One draw for
    both frameworks (``gpt_torch.synthetic_tokens``, ``gpt_keras.synthetic_tokens``), so their
    tokens/s are over the same batch."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, vocab + 1, dtype=np.float64)
    p = 1.0 / ranks
    return rng.choice(vocab, size=(batch, seq_len + 1), p=p / p.sum()).astype(np.int64)
