"""Models and synthetic data for the TensorFlow training kernel.

The catalogue (names, default image size, classes) is plain data so the pytest/CLI side can check
a model name or a batch size without importing TensorFlow; ``build_model`` and ``synthetic_batch``
take the already-imported ``tf`` module and run inside a rank only.

ResNet-50 and MobileNet are the seed study's models, built with ``weights=None`` so nothing is
downloaded; ``small-cnn`` is small enough for a CPU CI case to finish in seconds. The language
models (``kind="lm"``) are GPT-2's architecture at two sizes (``gpt``): ``gpt-tiny``, whose step
takes tens of milliseconds on two CPU cores, and ``gpt2-small`` (124 M parameters) for GPUs;
their batch is sequences of ``seq_len`` tokens and their "classes" the vocabulary. The image
models are built here; the language models' Keras definition is ``tf_gpt`` (a definition of its
own, as ``gpt`` is torch's), and ``Workload`` is what the TensorFlow loop asks of either kind.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..records.errors import ConfigError


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
    # Sized by measurement (docs/measurements.md, "Transformer"): a step of tens of ms at 2 ranks
    # on the 2-core CI machine.
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


@dataclass(frozen=True)
class Workload:
    """One model's training, as the TensorFlow loop sees it (``image`` for an image model,
    ``seq_len`` for a language model; ``classes`` its labels or vocabulary): a fresh model, a
    batch, the loss, the optimizer and the facts a result names. TensorFlow is passed in."""

    spec: ModelSpec
    image: int
    classes: int
    seq_len: int = 0

    def model(self, tf: Any):
        if self.spec.is_lm:
            from .tf_gpt import build_gpt

            return build_gpt(tf, self.spec.name, self.seq_len)
        return build_model(tf, self.spec.name, self.image, self.classes)

    def batch(self, tf: Any, batch: int, seed: int):
        if self.spec.is_lm:
            from .tf_gpt import synthetic_tokens

            return synthetic_tokens(tf, batch, self.seq_len, self.classes, seed)
        return synthetic_batch(tf, batch, self.image, self.classes, seed)

    def loss(self, tf: Any):
        if self.spec.is_lm:
            from .tf_gpt import lm_loss

            return lm_loss(tf)
        return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def optimizer(self, tf: Any, learning_rate: float | None, default_rate: float):
        if self.spec.is_lm:
            return tf.keras.optimizers.AdamW(learning_rate=learning_rate or LM_LEARNING_RATE,
                                             weight_decay=LM_WEIGHT_DECAY, epsilon=LM_EPSILON)
        return tf.keras.optimizers.SGD(learning_rate=learning_rate or default_rate)

    def facts(self, model: Any) -> dict[str, Any]:
        """The result's facts of the model; a language model's FLOPs per token (for MFU)."""
        params = int(sum(int(np.prod(v.shape)) for v in model.trainable_variables))
        out: dict[str, Any] = {"params": params, "classes": self.classes}
        if self.spec.is_lm:
            from .tf_gpt import lm_facts

            out.update(lm_facts(model, self.spec.name, self.seq_len, params))
        else:
            out["image_size"] = self.image
        return out


def workload(name: str, image_size: Any = None, classes: Any = None, seq_len: Any = None) -> Workload:
    """The case's model with its input size checked (one line naming a bad one, on every rank
    alike, before TensorFlow is imported); None: the model's own. An image size means nothing to
    a language model, nor a sequence length to an image model: a run of both kinds gives each
    its own (the selection refused the value if it fits none of the run's models:
    ``bench.training.check_model_inputs``)."""
    spec = model_spec(name)
    if spec.is_lm:
        return Workload(spec, 0, int(spec.classes),
                        check_seq_len(name, seq_len) if seq_len is not None else spec.seq_len)
    image = check_image_size(name, image_size) if image_size is not None else spec.image_size
    return Workload(spec, image, int(classes or spec.classes))


def build_model(tf: Any, name: str, image_size: int, classes: int):
    """A fresh, randomly initialised Keras model (tf.keras: Keras 3, or tf_keras when legacy)."""
    spec = model_spec(name)
    keras = tf.keras
    shape = (image_size, image_size, 3)
    if spec.name == "small-cnn":
        # Every layer named, as keras.applications name theirs: auto names count the layers built
        # so far in the process, and Horovod matches collectives across ranks by tensor name, so
        # rank 0 building one extra model (the plain baseline) made every name differ and hung.
        layers = keras.layers
        return keras.Sequential([
            keras.Input(shape),
            layers.Conv2D(32, 3, activation="relu", name="conv1"),
            layers.MaxPooling2D(name="pool1"),
            layers.Conv2D(64, 3, activation="relu", name="conv2"),
            layers.MaxPooling2D(name="pool2"),
            layers.Flatten(name="flatten"),
            layers.Dense(128, activation="relu", name="fc1"),
            layers.Dense(classes, name="logits"),
        ], name="small_cnn")
    if spec.name == "mobilenet":
        return keras.applications.MobileNet(weights=None, input_shape=shape, classes=classes,
                                            classifier_activation=None)
    return keras.applications.ResNet50(weights=None, input_shape=shape, classes=classes,
                                       classifier_activation=None)


def synthetic_batch(tf: Any, batch: int, image_size: int, classes: int, seed: int):
    """One in-memory batch (images in [0, 1), integer labels), reused every step like Horovod's
    synthetic benchmark: the step then measures compute and communication, not input."""
    # numpy, not tf.random.Generator: a generator is a variable, and variables made outside a
    # strategy's scope are best avoided in a MultiWorkerMirroredStrategy program.
    rng = np.random.default_rng(seed)
    x = rng.random((batch, image_size, image_size, 3), dtype=np.float32)
    y = rng.integers(0, classes, size=batch, dtype=np.int32)
    return tf.constant(x), tf.constant(y)
