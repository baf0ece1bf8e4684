"""The benchmark registry: one record per benchmark, everything else looks benchmarks up here.

nccl-tests keeps one small file per collective (``src/all_reduce.cu``) filling one
``struct testColl``; the harness owns timing, statistics and checking. Here a benchmark is one
file under ``perfsuite/bench/`` that registers a ``BenchmarkSpec``: how its cases are built from
the user's selection, which kernel the ranks run, how its results are tabled and laid out in
asv, which options it adds, and how many bytes its collectives must put on a wire.

A benchmark outside perfsuite registers the same way from its own module, named in
``PERFSUITE_BENCHMARKS`` (comma list of importable modules or ``.py`` files), on the command
line (``--benchmarks path/to/file.py``) or in the ``perfsuite.benchmarks`` entry-point group;
see docs/design.md. A user's step declared with ``perfsuite.benchmark`` (``userbench``) becomes
a record here, with the user kernel (``kernels/user/step.py``).
"""
from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from ..records import memory, userbench
from .asv_view import AsvLayout, generic_layout
from ..records.errors import ConfigError
from ..records.model import Case, Opt, Result, Sample, Tolerance, WorldSpec, time_sliced
from .. import transports as transport_registry

BUILTIN = ("perfsuite.bench.allreduce", "perfsuite.bench.collectives", "perfsuite.bench.tf_epoch", "perfsuite.bench.torch_epoch",
           "perfsuite.stalls.benchmark", "perfsuite.bench.p2p",
           "perfsuite.bench.replay")
ENV = "PERFSUITE_BENCHMARKS"
ENTRY_POINTS = "perfsuite.benchmarks"


@dataclass(frozen=True)
class Selection:
    """What to run, already checked: the user's choice of the case matrix of one benchmark."""

    benchmark: str = "allreduce"
    transports: tuple[str, ...] | None = None  # None = its default ones (transports.default_names)
    world_sizes: tuple[int, ...] = (2,)
    values: dict[str, Any] = field(default_factory=dict)  # the benchmark's own options, parsed
    #: Transports whose default world sizes were fitted to this node's GPUs, and the lines
    #: that say so (options.selection): a user's own --world-sizes is never changed.
    fitted: dict[str, tuple[int, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: The user named the world sizes (else a user benchmark keeps its own declared ones).
    world_sizes_given: bool = False

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
    #: The report's table of one world (Markdown and HTML): its header and rows of cells.
    #: None: one column per metric.
    report_rows: Callable[[Result], tuple[tuple[str, ...], list[tuple[str, ...]]]] | None = None
    #: Other text layouts of a world's table, by name (allreduce: "omb", OSU's), so numbers diff
    #: against another tool's output: ``tables.txt`` holds each after the table, and
    #: ``perfsuite report --print NAME`` prints it.
    layouts: Mapping[str, Callable[[Result], str]] = field(default_factory=dict, compare=False)
    #: Its cases sweep message sizes: the report draws their latency and busbw against size.
    plots_by_size: bool = False
    #: Default tolerance per metric, where the metric's noise is not the generic 5%: the user's
    #: and the baseline's own tolerance still come first.
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict, compare=False)
    #: Short names of its metrics in verdict text ("busbw_GBps" -> "busbw"); one name per metric
    #: across benchmarks.
    short_names: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: Kernel options every world of it carries (a user benchmark: where its ranks find the step).
    world_options: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def transports(self) -> str:
        return self.transport_set or self.name


REGISTRY: dict[str, BenchmarkSpec] = {}
_loaded = False
#: Entry-point modules that could not be imported: entry point name -> the one line that says
#: where and why. An entry point is installed in the venv, not asked for by this command, so its
#: failure fails only what names its benchmarks (``unknown``), never the rest.
BROKEN: dict[str, str] = {}


class NothingSelected(ConfigError):
    """A selection that holds no case: bad input (nothing measured is never a pass), which a
    pytest session that runs several benchmarks on one --transports list skips instead."""


_builtins: set[str] = set()  # the benchmarks BUILTIN's modules register


def register(spec: BenchmarkSpec) -> BenchmarkSpec:
    """Add (or replace) a benchmark. Options and metric names are shared by name between
    benchmarks (one ``--models`` serves every training benchmark), so a name that means
    something else in another benchmark is refused here, where the second one is declared."""
    for other in REGISTRY.values():
        if other.name != spec.name:
            _check_shared(other, spec)
    REGISTRY[spec.name] = spec
    # Whether perfsuite's own modules (BUILTIN) declared it: its kernel is then every version's.
    if sys._getframe(1).f_globals.get("__name__") in BUILTIN:
        _builtins.add(spec.name)
    else:
        _builtins.discard(spec.name)
    return spec


def same_meaning(a: Opt, b: Opt) -> bool:
    """Two declarations of one option that parse, default and reach the kernel alike (the
    same ``Opt`` object, or an equal one with the same parser)."""
    return a is b or (a == b and a.parse is b.parse)


def _check_shared(first: BenchmarkSpec, second: BenchmarkSpec) -> None:
    mine = {o.name: o for o in first.options}
    for o in second.options:
        if o.name in mine and not same_meaning(mine[o.name], o):
            theirs = mine[o.name]
            differ = [what for what, x, y in (("default", theirs.default, o.default),
                                              ("parse", theirs.parse, o.parse), ("knob", theirs.knob, o.knob),
                                              ("help", theirs.help, o.help), ("kind", theirs.kind, o.kind),
                                              ("metavar", theirs.metavar, o.metavar))
                      if x is not y and x != y]
            raise ConfigError(f"benchmarks {first.name!r} and {second.name!r} both declare option "
                              f"{o.name!r} with a different {', '.join(differ)}; one option name "
                              "has one meaning: share the Opt object, or name the option apart")
    for metric, word in second.short_names.items():
        if first.short_names.get(metric, word) != word:
            raise ConfigError(f"benchmarks {first.name!r} and {second.name!r} name metric {metric!r} "
                              f"{first.short_names[metric]!r} and {word!r}; a metric has one short name")


def _load() -> None:
    """Import the built-in benchmarks, then the ones named in PERFSUITE_BENCHMARKS and the
    entry-point group; each registers itself on import. Then (every time: a pytest module may
    declare one after the registry loaded) the user benchmarks declared so far.

    A PERFSUITE_BENCHMARKS module that does not import is one line that stops the command (the
    user named it for this shell, as an option); an entry-point module is only installed in the
    environment, so its failure is kept in ``BROKEN`` and said by what names its benchmarks."""
    global _loaded
    if not _loaded:
        for module in BUILTIN:
            importlib.import_module(module)
        for source in (m.strip() for m in os.environ.get(ENV, "").split(",")):
            if source:
                import_source(source, ENV)
        BROKEN.clear()
        for ep in metadata.entry_points(group=ENTRY_POINTS):
            try:
                ep.load()
            except Exception as exc:  # the user's module, whatever it raises: kept, said where it matters
                BROKEN[ep.name] = (f"the {ENTRY_POINTS} entry point {ep.name!r} ({ep.value}) cannot be "
                                   f"imported: {import_failure(exc)}")
        _loaded = True
    for declared in list(userbench.DECLARED.values()):
        if declared.name not in _users or _users[declared.name] is not declared:
            register_declared(declared)


_users: dict[str, userbench.UserBenchmark] = {}  # the declarations registered, by name


def register_declared(declared: userbench.UserBenchmark) -> BenchmarkSpec:
    """The record of a user benchmark: its cases from its own axes (``--world-sizes`` and
    ``--transports`` given by the user narrow or replace them), the user kernel, its step time."""
    if declared.name in REGISTRY and declared.name not in _users:
        raise ConfigError(f"user benchmark {declared.name!r} ({declared.module}.{declared.qualname}) takes the "
                          f"name of a built-in benchmark; name it apart: @perfsuite.benchmark(name=...)")

    def cases(sel: Selection) -> list[Case]:
        sizes = sel.world_sizes if sel.world_sizes_given else declared.world_sizes
        picked = [t for t in (declared.transports if sel.transports is None else sel.transports)
                  if t in declared.transports]
        return [Case(declared.name, t, n, variant=declared.variant(v))
                for t in picked for n in sizes for v in declared.combinations()]

    _users[declared.name] = declared
    return register(BenchmarkSpec(
        declared.name, declared.summary, kernel="perfsuite.kernels.user.step", cases=cases, table=user_table,
        transport_set=userbench.TRANSPORT_SET, judged=(userbench.METRIC, memory.METRIC),
        short_names={userbench.METRIC: "step", memory.METRIC: memory.SHORT_NAME},
        world_options={"user_benchmark": {**declared.source(), "name": declared.name}}))


def user_table(result: Result) -> str:
    """A user benchmark's world: each case's step time (median and p99 of the slowest rank per
    step), how many steps, its peak memory (the largest rank's, and which), and each rank's own
    median (who is slow, at a glance)."""
    facts = (result.extra or {}).get("transport_facts") or {}
    params = ["-".join(f"{k}={v}" for k, v in (s.info.get("params") or {}).items()) or "-" for s in result.samples]
    wide = max([24] + [len(p) for p in params])  # a long combination widens the column, never shifts a row
    lines = [heading(result, f"step {facts.get('user_benchmark', '')}", f"on {facts.get('device', 'cpu')}"),
             f"#{'params':>{wide - 1}} {'step p50':>11} {'p99':>11} {'iters':>7} {'peak MiB':>12}"
             "  per rank (median, us)"]
    for s, combination in zip(result.samples, params):
        i, step = s.info, s.metrics.get(userbench.METRIC)
        ranks = " ".join(f"{v:.4g}" for v in i.get("rank_median_us") or [])
        lines.append(f"{combination:>{wide}} {step.value if step else float('nan'):>8.4g} us "
                     f"{i.get('p99_us', float('nan')):>8.4g} us {int(i.get('iters') or 0):>7} "
                     f"{memory.column(i):>12}  {ranks}")
    return "\n".join(lines)


def import_source(source: str, where: str = "--benchmarks") -> list[str]:
    """Import a module of benchmarks, named by its dotted name or its ``.py`` file; returns the
    benchmarks it registered or declared. One line where it cannot be imported: a module or file
    that is not there, or one that raises (a syntax error, an import of its own) at FILE:LINE."""
    before = set(REGISTRY) | set(userbench.DECLARED)
    try:
        if source.endswith(".py"):
            if not os.path.isfile(source):
                raise ImportError(f"no file {source}")
            userbench.import_file(source)
        else:
            importlib.import_module(source)
    except Exception as exc:  # the user's module: whatever it raises is one line, not a traceback
        failure = import_failure(exc)
        if failure == str(exc):  # nothing of the user's ran: the module or file is not there
            raise ConfigError(f"{where} names {source!r}, which cannot be imported ({exc}); name importable "
                              "modules or .py files, comma separated") from None
        raise ConfigError(f"{where} names {source!r}, which cannot be imported: {failure}") from None
    if _loaded:
        _load()
    return sorted((set(REGISTRY) | set(userbench.DECLARED)) - before)


#: Frames that are not the user's: perfsuite's own and importlib's machinery.
_MACHINERY = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
              os.path.dirname(os.path.abspath(importlib.__file__)) + os.sep, "<frozen ")


def import_failure(exc: BaseException) -> str:
    """'FILE:LINE: Kind: message' for an exception raised while a user's module was imported:
    where the parser stopped (a syntax error), else the deepest line of the user's own code on
    the way (the import that failed, the decorator that refused). Just the message where none of
    the user's code ran (the module itself is missing)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
    own = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_MACHINERY)]
    if not own:
        return str(exc)
    return f"{own[-1].filename}:{own[-1].lineno}: {type(exc).__name__}: {exc}"


def unknown(name: str) -> ConfigError:
    """The one line for a benchmark name nothing registered: the ones to choose from, and any
    entry-point module that did not import (the benchmark may be one of its)."""
    why = "".join(f"; {line}" for line in BROKEN.values())
    return ConfigError(f"benchmark {name!r} is unknown; choose from {', '.join(names())}{why}")


def nothing_selected(sel: Selection) -> str:
    """Why ``sel`` holds no case: the transports asked for, and those the benchmark declares
    (a user benchmark's ``@perfsuite.benchmark(transports=...)``) or runs over."""
    spec = REGISTRY[sel.benchmark]
    asked = ", ".join(sel.transports or ()) or "none"
    declared = _users.get(sel.benchmark)
    if declared is not None:
        runs = declared.transports
        what = f"it declares {', '.join(runs)} (@perfsuite.benchmark(transports=...))"
    else:
        runs = tuple(transport_registry.default_names(spec.transports))
        what = f"it runs over {', '.join(runs)}"
    return (f"{sel.benchmark} has no case on the transports {asked}: {what}; "
            f"name one of them, e.g. --transports {runs[0] if runs else 'mpi'}")


def default_transport(name: str) -> str:
    """The one transport a command that takes one (``ab``, ``bisect``) runs when none is named:
    the first a user benchmark declares, else mpi."""
    _load()
    declared = _users.get(name)
    return declared.transports[0] if declared is not None else "mpi"


def is_source(item: str) -> bool:
    """A ``--benchmarks`` item that names a module of benchmarks (a ``.py`` file, or a dotted
    module name) rather than a benchmark."""
    return item.endswith(".py") or ("." in item and find(item) is None)


def selected(items: Iterable[str]) -> list[str]:
    """``--benchmarks`` items as benchmark names: a name as it is, a module or ``.py`` file as
    the benchmarks it declares (imported now, so the ranks import the same)."""
    out = []
    for item in items:
        if not is_source(item):
            if find(item) is None:
                raise unknown(item)
            out.append(item)
            continue
        new = import_source(item)
        path = os.path.abspath(item) if item.endswith(".py") else None
        own = [d.name for d in userbench.DECLARED.values()
               if (path and d.file == path) or d.module == item]
        found = list(dict.fromkeys(new + own))
        if not found:
            raise ConfigError(f"--benchmarks {item!r} declares no benchmark; decorate a step with "
                              "@perfsuite.benchmark (or register a BenchmarkSpec) there")
        out += found
    return list(dict.fromkeys(out))


def all_specs() -> list[BenchmarkSpec]:
    _load()
    return list(REGISTRY.values())


def names(runnable: bool = True) -> list[str]:
    """Benchmarks a user can select for ``run`` (or every registered one)."""
    return [s.name for s in all_specs() if s.cases is not None or not runnable]


def get(name: str) -> BenchmarkSpec:
    _load()
    if name not in REGISTRY:
        raise unknown(name)
    return REGISTRY[name]


def find(name: str) -> BenchmarkSpec | None:
    _load()
    return REGISTRY.get(name)


def options() -> list[Opt]:
    """Every benchmark's own options, each once, in registration order (``register`` has
    refused two of one name that differ)."""
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


def primary_metrics() -> tuple[str, ...]:
    """The metrics some benchmark judges (``judged``): of a mirrored pair such as latency and
    busbw, the one that a benchmark which does not declare its judged metrics is judged on."""
    return tuple(dict.fromkeys(m for s in all_specs() for m in s.judged or ()))


def default_tolerance(metric: str, case_name: str | None = None) -> Tolerance | None:
    """The default tolerance the benchmark of ``case_name`` ('allreduce[mpi-n2-4B]') declares
    for ``metric``; without a case (or for one of an unknown benchmark) the first any benchmark
    declares. None: no benchmark says, the generic default applies."""
    spec = find(case_name.split("[", 1)[0]) if case_name else None
    if spec is not None:
        return spec.tolerances.get(metric)
    return next((s.tolerances[metric] for s in all_specs() if metric in s.tolerances), None)


def short_names() -> dict[str, str]:
    """Every benchmark's short metric names, as verdict text shows them."""
    return {metric: word for s in all_specs() for metric, word in s.short_names.items()}


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
    """The benchmark's own table of one world (or one line per case)."""
    spec = find(result.benchmark)
    if spec is not None and spec.table is not None:
        return spec.table(result)
    return "\n".join(f"{s.case.name}: " + ", ".join(f"{m.name}={m.value:.4g} {m.unit}" for m in s.metrics.values())
                     for s in result.samples)


def report_rows(result: Result) -> tuple[tuple[str, ...], list[tuple[str, ...]]] | None:
    """The benchmark's own report table of one world (header, rows), or None."""
    spec = find(result.benchmark)
    return spec.report_rows(result) if spec is not None and spec.report_rows is not None else None


def layout_names() -> list[str]:
    """Every other text layout a registered benchmark offers ("omb"), each once."""
    return list(dict.fromkeys(name for s in all_specs() for name in s.layouts))


def layouts(result: Result) -> list[Callable[[Result], str]]:
    """The other text layouts of this world's benchmark, in its order."""
    spec = find(result.benchmark)
    return list(spec.layouts.values()) if spec is not None else []


def layout(result: Result, name: str) -> str:
    """The world's table in its benchmark's layout ``name``, or its usual table where the
    benchmark has no such layout."""
    spec = find(result.benchmark)
    if spec is not None and name in spec.layouts:
        return spec.layouts[name](result)
    return table(result)


def plots_by_size(benchmark: str) -> bool:
    spec = find(benchmark)
    return spec is not None and spec.plots_by_size


def sized_benchmarks() -> list[str]:
    """The benchmarks whose cases sweep message sizes."""
    return [s.name for s in all_specs() if s.plots_by_size]


def comparisons(samples: Sequence[Sample]) -> list[str]:
    """Every benchmark's lines that compare its worlds (e.g. img/s of mpi over grpc)."""
    return [line for s in all_specs() if s.comparisons is not None for line in s.comparisons(samples)]


def plan(cases: Iterable[Case], options: dict | None = None) -> list[WorldSpec]:
    """One world per (benchmark, transport, world size, ...): it runs that world's whole sweep,
    with the kernel its benchmark registered. A built-in benchmark's world names no kernel: the
    ranks run their own registry's, so an arm of another perfsuite version (``ab --a-ref``, an
    image, a venv) finds its kernel wherever that version keeps it."""
    worlds: dict[tuple, list[Case]] = {}
    for c in cases:
        worlds.setdefault(c.world_key, []).append(c)
    out = []
    for cs in worlds.values():
        spec = find(cs[0].benchmark)
        own = dict(spec.world_options) if spec else {}
        out.append(WorldSpec(cs[0].benchmark, cs[0].transport, cs[0].world_size, tuple(cs),
                             {**(options or {}), **own}, kernel=spec.kernel if spec and not _builtin(spec) else ""))
    return out


def _builtin(spec: BenchmarkSpec) -> bool:
    """A benchmark perfsuite registers itself (``BUILTIN``), whose kernel every version's
    registry names."""
    return spec.name in _builtins and REGISTRY.get(spec.name) is spec
