"""How bytes move. A registry of transports, each able to say why it cannot run here.

The registry is importable on the pytest side without starting MPI or importing TensorFlow or
CuPy: ``unavailable_reason`` only looks for modules and devices. The transport classes themselves
live in one module each and are imported inside the ranks (``load``).
"""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ConfigError

TF1_ONLY = ("exists only in TensorFlow 1 (tf.contrib / the grpc+verbs, grpc+mpi and grpc+gdr "
            "server protocols were removed in TensorFlow 2)")


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def need_mpi4py() -> str | None:
    return None if has_module("mpi4py") else "mpi4py is not installed (pip install mpi4py mpich)"


@dataclass(frozen=True)
class TransportSpec:
    """What the registry knows of a transport before anything heavy is imported."""

    name: str
    summary: str
    benchmarks: tuple[str, ...]  # which kernels it serves: "allreduce", "tf-epoch"
    module: str | None = None  # "perfsuite.transports.mpi:MpiAllreduce" (None: never runs in TF 2)
    device: str = "host"  # host | gpu
    check: Callable[[], str | None] = field(default=need_mpi4py, compare=False)

    def unavailable_reason(self) -> str | None:
        if self.module is None:
            return TF1_ONLY
        return self.check()


REGISTRY: dict[str, TransportSpec] = {}


def register(spec: TransportSpec) -> TransportSpec:
    REGISTRY[spec.name] = spec
    return spec


def names(benchmark: str = "allreduce") -> list[str]:
    return [n for n, s in REGISTRY.items() if benchmark in s.benchmarks]


def spec(name: str, benchmark: str = "allreduce") -> TransportSpec:
    s = REGISTRY.get(name)
    if s is None or benchmark not in s.benchmarks:
        raise ConfigError(f"transport {name!r} is unknown for {benchmark}; "
                          f"choose from {', '.join(names(benchmark))}")
    return s


def unavailable_reason(name: str, benchmark: str = "allreduce") -> str | None:
    """None when the transport can run here, else the reason it is skipped."""
    return spec(name, benchmark).unavailable_reason()


def load(name: str, benchmark: str = "allreduce"):
    """Import and return the transport class (inside a rank)."""
    s = spec(name, benchmark)
    if s.module is None:
        raise ConfigError(f"transport {name!r} {TF1_ONLY}")
    mod, _, attr = s.module.partition(":")
    return getattr(importlib.import_module(mod), attr)


register(TransportSpec("mpi", "mpi4py Allreduce on host (numpy) buffers", ("allreduce",),
                       "perfsuite.transports.mpi:MpiAllreduce"))
register(TransportSpec("ring", "Baidu ring allreduce: reduce-scatter + allgather over MPI Sendrecv",
                       ("allreduce",), "perfsuite.transports.ring:RingAllreduce"))
for _proto in ("verbs", "mpi", "gdr"):
    register(TransportSpec(f"grpc+{_proto}", f"TF 1 gRPC+{_proto} server protocol",
                           ("allreduce", "tf-epoch"), None))
