"""The benchmark registry: one record per benchmark, everything else looks benchmarks up here.

nccl-tests keeps one small file per collective (``src/all_reduce.cu``) filling one
``struct testColl``; the harness owns timing, statistics and checking. Here a benchmark is one
file under ``perfsuite/bench/`` that registers a ``BenchmarkSpec``: how its cases are built from
the user's selection, which kernel the ranks run, how its results are tabled and laid out in
asv, which options it adds, and how many bytes its collectives must put on a wire.

A benchmark outside perfsuite registers the same way from its own module, named in
``PERFSUITE_BENCHMARKS`` (comma list of importable modules) or in the ``perfsuite.benchmarks``
entry-point group; see docs/design.md.
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from ..asv.layout import AsvLayout, generic_layout
from ..errors import ConfigError
from ..model import Case, Opt, Result, Sample, WorldSpec, time_sliced

BUILTIN = ("perfsuite.bench.allreduce", "perfsuite.bench.tf_epoch", "perfsuite.bench.stalls")
ENV = "PERFSUITE_BENCHMARKS"
ENTRY_POINTS = "perfsuite.benchmarks"


@dataclass(frozen=True)
class Selection:
    """What to run, already checked: the user's choice of the case matrix of one benchmark."""

    benchmark: str = "allreduce"
    transports: tuple[str, ...] | None = None  # None = every transport the benchmark runs over
    world_sizes: tuple[int, ...] = (2,)
    values: dict[str, Any] = field(default_factory=dict)  # the benchmark's own options, parsed
    #: Transports whose default world sizes were fitted to this node's GPUs, and the lines
    #: that say so (options.selection): a user's own --world-sizes is never changed.
    fitted: dict[str, tuple[int, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def world_sizes_of(self, transport: str) -> tuple[int, ...]:
        return self.fitted.get(transport, self.world_sizes)


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark, whole. ``cases`` is None for a benchmark that is measured by an
    experiment of its own (the stall breakdown) rather than selected and run world by world."""

    name: str
    summary: str
    kernel: str  # module whose run(ctx) every rank calls
    cases: Callable[[Selection], list[Case]] | None
    transport_set: str = ""  # whose registered transports it runs over ("" = its own name)
    options: tuple[Opt, ...] = ()
    table: Callable[[Result], str] | None = None  # None: one line per case, metric by metric
    asv: AsvLayout | None = None  # None: the generic layout (transport, world size, case id)
    wire_bytes: Callable[[Sample], int] = field(default=lambda sample: 0, compare=False)
    comparisons: Callable[[Sequence[Sample]], list[str]] | None = None  # lines across worlds
    #: The metrics a verdict judges, each one test (their mirrors shown beside them); None:
    #: every metric but the mirror of a judged one. Others are recorded, not judged.
    judged: tuple[str, ...] | None = None
    #: A benchmark measured by its own experiment: the command line that runs it outside pytest,
    #: ``{value}`` standing for its option's value. ``perfsuite run`` refuses its option with it.
    command: str = ""

    @property
    def transports(self) -> str:
        return self.transport_set or self.name


REGISTRY: dict[str, BenchmarkSpec] = {}
_loaded = False


def register(spec: BenchmarkSpec) -> BenchmarkSpec:
    REGISTRY[spec.name] = spec
    return spec


def _load() -> None:
    """Import the built-in benchmarks, then the ones named in PERFSUITE_BENCHMARKS and the
    entry-point group; each registers itself on import."""
    global _loaded
    if _loaded:
        return
    for module in BUILTIN:
        importlib.import_module(module)
    for module in (m.strip() for m in os.environ.get(ENV, "").split(",")):
        if module:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ConfigError(f"{ENV} names {module!r}, which cannot be imported ({exc}); "
                                  "name importable modules, comma separated") from None
    for ep in metadata.entry_points(group=ENTRY_POINTS):
        ep.load()
    _loaded = True


def all_specs() -> list[BenchmarkSpec]:
    _load()
    return list(REGISTRY.values())


def names(runnable: bool = True) -> list[str]:
    """Benchmarks a user can select for ``run`` (or every registered one)."""
    return [s.name for s in all_specs() if s.cases is not None or not runnable]


def get(name: str) -> BenchmarkSpec:
    _load()
    if name not in REGISTRY:
        raise ConfigError(f"benchmark {name!r} is unknown; choose from {', '.join(names())}")
    return REGISTRY[name]


def find(name: str) -> BenchmarkSpec | None:
    _load()
    return REGISTRY.get(name)


def options() -> list[Opt]:
    """Every benchmark's own options, each once, in registration order."""
    seen: dict[str, Opt] = {}
    for s in all_specs():
        for o in s.options:
            seen.setdefault(o.name, o)
    return list(seen.values())


def asv_layout(benchmark: str) -> AsvLayout:
    spec = find(benchmark)
    return spec.asv if spec is not None and spec.asv is not None else generic_layout(benchmark)


def asv_layouts() -> list[AsvLayout]:
    """The layouts the registered benchmarks declare (for the asv store to name a series' metric)."""
    return [s.asv for s in all_specs() if s.asv is not None]


def declared_judged(case_name: str) -> tuple[str, ...] | None:
    """The judged metrics of the benchmark a case name ('allreduce[mpi-n2-4B]') belongs to."""
    spec = find(case_name.split("[", 1)[0])
    return spec.judged if spec is not None else None


def heading(result: Result, *facts: str, late: str = "") -> str:
    """'# allreduce  transport=mpi  world_size=2  <facts>  world start 0.18 s<late>': the first
    line of a world's table."""
    sliced = time_sliced(result.extra or {})
    head = "  ".join([f"# {result.benchmark}", f"transport={result.transport}",
                      f"world_size={result.world_size}", *([sliced] if sliced else []), *facts])
    if result.world_start_s is not None:
        head += f"  world start {result.world_start_s:.2f} s"
    return head + late


def table(result: Result) -> str:
    """The benchmark's own table of one world, or one line per case."""
    spec = find(result.benchmark)
    if spec is not None and spec.table is not None:
        return spec.table(result)
    return "\n".join(f"{s.case.name}: " + ", ".join(f"{m.name}={m.value:.4g} {m.unit}"
                                                      for m in s.metrics.values())
                     for s in result.samples)


def comparisons(samples: Sequence[Sample]) -> list[str]:
    """Every benchmark's lines that compare its worlds (e.g. img/s of mpi over grpc)."""
    return [line for s in all_specs() if s.comparisons is not None for line in s.comparisons(samples)]


def plan(cases: Iterable[Case], options: dict | None = None) -> list[WorldSpec]:
    """One world per (benchmark, transport, world size, ...): it runs that world's whole sweep,
    with the kernel its benchmark registered."""
    worlds: dict[tuple, list[Case]] = {}
    for c in cases:
        worlds.setdefault(c.world_key, []).append(c)
    out = []
    for cs in worlds.values():
        spec = find(cs[0].benchmark)
        out.append(WorldSpec(cs[0].benchmark, cs[0].transport, cs[0].world_size, tuple(cs),
                             dict(options or {}), kernel=spec.kernel if spec else ""))
    return out
