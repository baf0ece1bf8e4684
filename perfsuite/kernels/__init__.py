"""Rank-local measurement kernels, looked up by benchmark name.

A kernel is a module with ``run(ctx) -> dict``: it measures every case of its world, calls
``ctx.emit(sample_dict)`` once per finished case (rank 0 streams these so nothing is lost when
a later case fails), and returns extra facts for the result. Modules are imported lazily so an
allreduce world never imports TensorFlow.
"""
from __future__ import annotations

import importlib

from ..errors import ConfigError

KERNELS = {
    "allreduce": "perfsuite.kernels.allreduce",
    "tf-epoch": "perfsuite.kernels.tf_epoch",
}


def load(benchmark: str):
    if benchmark not in KERNELS:
        raise ConfigError(f"benchmark {benchmark!r} is unknown; choose from {', '.join(KERNELS)}")
    return importlib.import_module(KERNELS[benchmark])
