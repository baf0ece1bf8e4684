"""The tf-epoch models in PyTorch, from the same catalogue (``catalogue.MODELS``): ``small-cnn``
layer for layer as Keras builds it, MobileNet v2 and ResNet-50 from torchvision (random weights,
nothing downloaded), and the GPT language models (``gpt_torch``). Keras' MobileNet is v1, which
torchvision lacks: the two frameworks' ``mobilenet`` differ in architecture (each result names
its own), while small-cnn and resnet50 are the same networks. Imported inside a rank only.

``Workload`` is what the training loop needs of a model, whatever its kind: a fresh model, a
batch, the loss, the optimizer, and the facts a result names (sequence length, FLOPs per token).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .catalogue import LM_EPSILON, LM_LEARNING_RATE, LM_WEIGHT_DECAY, ModelSpec, flops_per_token, inputs, model_spec
from .gpt_torch import build_gpt, lm_loss, synthetic_tokens

ARCHITECTURES = {"small-cnn": "2 conv + 2 dense layers, as tf-epoch's",
                 "mobilenet": "torchvision mobilenet_v2",
                 "resnet50": "torchvision resnet50",
                 "gpt-tiny": "GPT-2 decoder, 2 blocks x 128, 4 heads, vocab 2048, tied head",
                 "gpt2-small": "GPT-2 small decoder, 12 blocks x 768, 12 heads, vocab 50257, tied head"}

@dataclass(frozen=True)
class Workload:
    """One model's training, as the loop sees it (``image`` for an image model, ``seq_len`` for a
    language model; ``classes`` its labels or vocabulary)."""

    spec: ModelSpec
    image: int
    classes: int
    seq_len: int = 0

    def model(self, torch: Any):
        return (build_gpt(torch, self.spec.name, self.seq_len) if self.spec.is_lm
                else build_model(torch, self.spec.name, self.image, self.classes))

    def batch(self, torch: Any, batch: int, seed: int, device: Any = None):
        if self.spec.is_lm:
            return synthetic_tokens(torch, batch, self.seq_len, self.classes, seed, device)
        return synthetic_batch(torch, batch, self.image, self.classes, seed, device)

    def loss(self, torch: Any):
        return lm_loss(torch) if self.spec.is_lm else torch.nn.CrossEntropyLoss()

    def optimizer(self, torch: Any, params: Any, learning_rate: float | None, default_rate: float):
        if self.spec.is_lm:
            return torch.optim.AdamW(params, lr=learning_rate or LM_LEARNING_RATE, weight_decay=LM_WEIGHT_DECAY,
                                     eps=LM_EPSILON)
        return torch.optim.SGD(params, lr=learning_rate or default_rate)

    def facts(self, model: Any) -> dict[str, Any]:
        """What the result names of the model; for a language model its FLOPs per token (MFU)."""
        params = int(sum(p.numel() for p in model.parameters()))
        out: dict[str, Any] = {"params": params, "architecture": ARCHITECTURES[self.spec.name],
                               "classes": self.classes}
        if self.spec.is_lm:
            out.update(seq_len=self.seq_len, vocab=self.classes,
                       flops_per_token=flops_per_token(params, model.position_params(), self.spec.lm,
                                                       self.seq_len))
        else:
            out["image_size"] = self.image
        return out


def workload(name: str, image_size: int | None = None, classes: int | None = None,
             seq_len: int | None = None) -> Workload:
    """The model with its inputs checked, as tf-epoch's (``catalogue.inputs``: one rule)."""
    return Workload(*inputs(name, image_size, classes, seq_len))


def build_model(torch: Any, name: str, image_size: int, classes: int):
    """A fresh, randomly initialised model (NCHW input of ``image_size`` pixels)."""
    spec = model_spec(name)
    nn = torch.nn
    if spec.name == "small-cnn":
        side = ((image_size - 2) // 2 - 2) // 2  # two valid 3x3 convolutions, two 2x2 pools
        return nn.Sequential(
            nn.Conv2d(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * side * side, 128), nn.ReLU(), nn.Linear(128, classes))
    import torchvision

    if spec.name == "mobilenet":
        return torchvision.models.mobilenet_v2(weights=None, num_classes=classes)
    return torchvision.models.resnet50(weights=None, num_classes=classes)


def synthetic_batch(torch: Any, batch: int, image_size: int, classes: int, seed: int, device: Any = None):
    """One in-memory batch reused every step (images in [0, 1), integer labels), drawn as the
    TensorFlow kernel draws its own (numpy, then laid out NCHW)."""
    rng = np.random.default_rng(seed)
    x = rng.random((batch, image_size, image_size, 3), dtype=np.float32).transpose(0, 3, 1, 2).copy()
    y = rng.integers(0, classes, size=batch).astype(np.int64)
    return torch.from_numpy(x).to(device or "cpu"), torch.from_numpy(y).to(device or "cpu")
