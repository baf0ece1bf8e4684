"""How a perfsuite case appears in asv: benchmark names, parameters, and time-like numbers.

Pure data and rules (no asv import), so a benchmark record in ``perfsuite/bench`` can carry its
layout. Direction (asv issue #1617): asv treats every number as lower-is-better; its
regressions page and step detection flag *upward* steps only. So every metric is recorded
time-like: a lower-is-better metric as is (latency in seconds), a higher-is-better one as its
inverse with the unit saying so (busbw -> ``track_inv_busbw`` in ``s/GB (1/busbw)``; img/s ->
s/img). A 15% busbw drop is then a +17.6% step up, which asv shows as a regression.
"""
from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..records.model import Case, Metric, Sample, round_values

_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "seconds": 1.0}


@dataclass(frozen=True)
class AsvMetric:
    """One asv ``track_*`` method fed by one perfsuite metric, recorded lower-is-better."""

    method: str  # e.g. 'track_inv_busbw'
    metric: str  # the Sample metric it comes from, e.g. 'busbw_GBps'
    unit: str  # what asv shows on the axis, e.g. 'seconds', 's/GB (1/busbw)'
    inverse: bool = False  # record 1/value: the metric is higher-is-better
    scale: float = 1.0  # applied after the inverse (us -> seconds)

    def transform(self, values: Iterable[float]) -> list[float]:
        """Time-like values from the metric's raw values; non-finite or (for inverses)
        non-positive values have no time-like meaning and are left out."""
        out = []
        for v in values:
            if not math.isfinite(v) or (self.inverse and v <= 0):
                continue
            out.append((1.0 / v if self.inverse else v) * self.scale)
        return out

    def untransform(self, value: float) -> float:
        """The metric's own value from a recorded time-like one (``transform`` undone)."""
        v = value / self.scale
        return 1.0 / v if self.inverse else v

    def metric_change(self, ratio: float) -> float:
        """Relative change of the original metric for a recorded ratio new/old (e.g. a +17.6%
        step of 1/busbw is a -15% busbw change)."""
        return (1.0 / ratio - 1.0) if self.inverse else (ratio - 1.0)


def inverse_unit(unit: str) -> str:
    """'GB/s' -> 's/GB', 'img/s' -> 's/img', anything else -> '1/(unit)'."""
    m = re.fullmatch(r"\s*([^/]+?)\s*/\s*s(?:ec)?\s*", unit)
    return f"s/{m.group(1)}" if m else f"1/({unit})"


def generic_metric(metric: Metric) -> AsvMetric:
    """The documented rule for a metric no layout names: lower-is-better as is (time units in
    seconds), higher-is-better as ``track_inv_<name>`` in the inverse unit."""
    name = re.sub(r"[^0-9a-zA-Z_]", "_", metric.name)
    if metric.higher_is_better:
        return AsvMetric(f"track_inv_{name}", metric.name,
                         f"{inverse_unit(metric.unit)} (1/{metric.name})", inverse=True)
    if metric.unit in _TIME_UNITS:
        return AsvMetric(f"track_{name}", metric.name, "seconds", scale=_TIME_UNITS[metric.unit])
    return AsvMetric(f"track_{name}", metric.name, metric.unit)


@dataclass(frozen=True)
class MeasuredAxis:
    """An asv axis known only once a case is measured, read from its ``Sample.info`` (e.g. which
    loop timed it), so numbers measured differently get graph lines of their own."""

    read: Callable[[dict], Any]  # the value from a sample's info
    choices: Callable[[Case], tuple]  # every value a case may take (asv's params before measuring)


#: Whether the case's world named a straggler (``perfsuite.verdicts.stragglers``): a point measured with
#: one rank late is not the machine's level, so it draws a line of its own rather than a step.
STRAGGLER_CHOICES = ("none", "named")


def straggler_of(info: dict) -> str:
    """"named" when the case's world named a straggler (its ``info["straggler"]``, pooled over
    the rounds), else "none": nobody named, or a sample judged by no rule."""
    return "named" if info.get("straggler") else "none"


STRAGGLER = MeasuredAxis(straggler_of, lambda case: STRAGGLER_CHOICES)


@dataclass(frozen=True)
class AxisAdded:
    """A layout version that appended an axis: what version ``old`` stored reads under version
    ``new`` as points at ``value`` on it. An axis of one value appended last keeps the order of
    asv's product of params, so the stored values, samples and stats stay as they are (the
    recorder rewrites their params and version: ``record.migrate``)."""

    old: str
    new: str
    axis: str
    value: Any

    def params(self, params: list[list[str]]) -> list[list[str]]:
        return [*params, [repr(self.value)]]


@dataclass(frozen=True)
class AsvLayout:
    """How one benchmark's cases appear in asv: ``<module>.<suite>.<method>(param, ...)``."""

    benchmark: str
    module: str  # file name in the asv benchmark dir, e.g. 'allreduce'
    suite: str  # class name, e.g. 'Allreduce'
    axes: tuple[str, ...]  # asv param_names: the case's axes, then the measured ones
    values: Callable[[Case], tuple]  # a case's python values along its own axes
    metrics: tuple[AsvMetric, ...] = ()
    version: str = "1"  # bump when a recorded number changes meaning; asv drops other versions
    sort_keys: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    measured: tuple[MeasuredAxis, ...] = ()  # the last len(measured) axes
    migrations: tuple[AxisAdded, ...] = ()  # how older versions' results read under this one

    def name(self, m: AsvMetric) -> str:
        return f"{self.module}.{self.suite}.{m.method}"

    def param_ids(self, case: Case, info: dict | None = None) -> tuple[str, ...]:
        """asv's parameter ids are ``repr`` of the values (asv_runner ``_unique_param_ids``);
        the measured axes' values come from the sample's ``info``."""
        got = (*self.values(case), *(a.read(info or {}) for a in self.measured))
        return tuple(repr(v) for v in got)

    def all_ids(self, case: Case) -> list[tuple[str, ...]]:
        """Every id ``case`` may be recorded under (one per choice of the measured axes)."""
        own = tuple(repr(v) for v in self.values(case))
        return [own + tuple(repr(v) for v in rest)
                for rest in itertools.product(*(a.choices(case) for a in self.measured))]

    def params(self, cases: Iterable[Case]) -> list[list[Any]]:
        """asv ``params``: per axis, the values the cases take, in matrix order."""
        axes: list[dict[Any, None]] = [{} for _ in self.axes]
        for c in cases:
            own = self.values(c)
            for seen, v in zip(axes, own):
                seen.setdefault(v, None)
            for seen, a in zip(axes[len(own):], self.measured):
                for v in a.choices(c):
                    seen.setdefault(v, None)
        return [list(seen) for seen in axes]

    def metric(self, method: str) -> AsvMetric | None:
        return next((m for m in self.metrics if m.method == method), None)


#: How a benchmark's cases appear in asv, by benchmark name: the registry's ``bench.asv_layout``,
#: handed to the store by its callers (the store sits below the registry).
LayoutOf = Callable[[str], AsvLayout]


def generic_layout(benchmark: str) -> AsvLayout:
    """The layout of a benchmark that registers none: transport, world size, case id, and
    whether its world named a straggler."""
    module = re.sub(r"[^0-9a-zA-Z_]", "_", benchmark)
    # Version 2: asv's samples are one value per round, no longer per-iteration times. Version 3
    # adds the straggler axis; version 2's points read as "none" on it.
    version = f"perfsuite-{module}-3"
    return AsvLayout(benchmark, module, module.title().replace("_", ""),
                     ("transport", "world_size", "case", "straggler"),
                     lambda c: (c.transport, c.world_size, c.id), (), version=version,
                     measured=(STRAGGLER,),
                     migrations=(AxisAdded(f"perfsuite-{module}-2", version, "straggler", "none"),))


def metrics_for(layout: AsvLayout, sample: Sample) -> list[AsvMetric]:
    if layout.metrics:
        return [m for m in layout.metrics if m.metric in sample.metrics]
    return [generic_metric(m) for m in sample.metrics.values()]


def round_samples(sample: Sample, m: AsvMetric) -> list[float]:
    """asv's samples of one case: one time-like value per round (world run), not per iteration.

    asv treats its samples as replicates (its median's CI, ``asv compare``'s test). The calls of
    one world share that world's placement, clocks and neighbours, so they are not: their CI
    says nothing of how the next world lands. The round is the unit of replication, as in
    verdicts (``regress``); contended rounds the rounds policy set aside are not among them."""
    return m.transform(round_values(sample, m.metric))


def entry_name(name: str, param_ids: Iterable[str]) -> str:
    """asv's name for one parameter combination (as on its regressions page)."""
    ids = list(param_ids)
    return f"{name}({', '.join(ids)})" if ids else name

