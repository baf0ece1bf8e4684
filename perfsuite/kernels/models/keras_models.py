"""The catalogue's models in Keras, for the TensorFlow training kernel: the image models built
here (``build_model``, ``synthetic_batch``), the language models' Keras definition in
``gpt_keras``, and ``Workload``, what the TensorFlow loop asks of either kind. The functions take
the already-imported ``tf`` module and run inside a rank only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .catalogue import LM_EPSILON, LM_LEARNING_RATE, LM_WEIGHT_DECAY, ModelSpec, inputs, model_spec


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
            from .gpt_keras import build_gpt

            return build_gpt(tf, self.spec.name, self.seq_len)
        return build_model(tf, self.spec.name, self.image, self.classes)

    def batch(self, tf: Any, batch: int, seed: int):
        if self.spec.is_lm:
            from .gpt_keras import synthetic_tokens

            return synthetic_tokens(tf, batch, self.seq_len, self.classes, seed)
        return synthetic_batch(tf, batch, self.image, self.classes, seed)

    def loss(self, tf: Any):
        if self.spec.is_lm:
            from .gpt_keras import lm_loss

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
            from .gpt_keras import lm_facts

            out.update(lm_facts(model, self.spec.name, self.seq_len, params))
        else:
            out["image_size"] = self.image
        return out


def workload(name: str, image_size: Any = None, classes: Any = None, seq_len: Any = None) -> Workload:
    """The case's model with its inputs checked (``catalogue.inputs``)."""
    return Workload(*inputs(name, image_size, classes, seq_len))


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
