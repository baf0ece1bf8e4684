"""The tf-epoch models in PyTorch, from the same catalogue (``tf_models.MODELS``): ``small-cnn``
layer for layer as Keras builds it, MobileNet v2 and ResNet-50 from torchvision (random weights,
nothing downloaded). Keras' MobileNet is v1, which torchvision lacks: the two frameworks'
``mobilenet`` differ in architecture (each result names its own), while small-cnn and resnet50
are the same networks. Imported inside a rank only (it imports torch)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .tf_models import model_spec

ARCHITECTURES = {"small-cnn": "2 conv + 2 dense layers, as tf-epoch's",
                 "mobilenet": "torchvision mobilenet_v2",
                 "resnet50": "torchvision resnet50"}


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
