"""stalls: the Stash breakdown of a training step into compute and four stalls.

Measured by an experiment of five tf-epoch worlds (``perfsuite.stalls.experiment``), not
selected case by case, so the record has no case builder; it names the kernel its worlds run,
the pytest switch that asks for it and the command that runs it outside pytest (``perfsuite run``
refuses the switch, naming that command), and lets the generic table and asv layout show its
``compute_ms`` and ``stall_<name>_ms`` metrics.
"""
from __future__ import annotations

from ..records.model import Opt
from ..bench import BenchmarkSpec, register

OPTIONS = (
    Opt("stalls", None, "pytest only: run the stall breakdown benchmark (benchmarks/test_stalls.py) for "
        "MODEL, e.g. small-cnn; its network run uses --emulated-network; unset: skipped (the CLI's "
        "is `perfsuite stalls --models MODEL`)", metavar="MODEL"),
)

SPEC = register(BenchmarkSpec(
    "stalls", "Stash stall breakdown of a training step: compute, interconnect, prep, fetch, network",
    kernel="perfsuite.kernels.training.tf_epoch", cases=None, transport_set="tf-epoch", options=OPTIONS,
    command="perfsuite stalls --models {value}"))
