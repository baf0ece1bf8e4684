"""Read the asv history back: every recorded series (asv's stored median and its CI weight
per commit) in asv's commit order, for ``perfsuite history``'s step detection.

asv's samples of a case are its round values (``layout.round_samples``), so the stored median is
the median over rounds and the CI behind a point's weight is that of the rounds: a commit
measured in one round has no finite CI, and its point gets the median weight (asv's rule).

The store sits below the benchmark registry: the layouts that name a series' metric come from
the caller (``bench.all_specs()``'s, ``bench.asv_layout``), never looked up here."""
from __future__ import annotations

import itertools
import os
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..records.errors import ConfigError, FormatError
from ..verdicts.history import Point
from ..records.model import Sample
from .compat import ci_weight
from ..bench.asv_view import AsvLayout, AsvMetric, LayoutOf, entry_name, metrics_for
from .project import AsvProject, commit_order


@dataclass
class Series:
    """One line of asv's graphs: one benchmark entry on one machine, in commit order."""

    machine: str
    entry: str  # asv's entry name, e.g. "allreduce.Allreduce.track_inv_busbw('mpi', 2, '1MiB', 'float32')"
    name: str
    unit: str
    metric: AsvMetric | None
    points: list[Any]  # history.Point


def metric_of(name: str, layouts: Iterable[AsvLayout] = ()) -> AsvMetric | None:
    """The AsvMetric behind an asv benchmark name, from ``layouts`` (the registered benchmarks'
    own) or the generic rule."""
    module, _, rest = name.partition(".")
    suite, _, method = rest.rpartition(".")
    for layout in layouts:
        if layout.module == module and layout.suite == suite:
            return layout.metric(method)
    if method.startswith("track_inv_"):
        return AsvMetric(method, method[len("track_inv_"):], "", inverse=True)
    return None


def read_history(project: AsvProject, layouts: Iterable[AsvLayout] = (), machine: str | None = None,
                 pattern: str | None = None) -> tuple[list[Series], list[str]]:
    """Every recorded series (asv's stored median over rounds and its CI weight per commit) and
    the commit order. Results of one commit from several files (asv run and perfsuite, several env
    names) are averaged, as asv's graphs do. ``layouts`` name each series' metric (``metric_of``)."""
    from asv import util as asv_util
    from asv.benchmarks import Benchmarks
    from asv.results import iter_results

    bench_path = Benchmarks.get_benchmark_file_path(project.results_dir)
    if not os.path.isfile(bench_path):
        raise ConfigError(f"no asv history in {project.results_dir} (no benchmarks.json); record "
                          "with perfsuite run --asv or asv run first")
    try:
        benchmarks = asv_util.load_json(bench_path, api_version=Benchmarks.api_version)
    except asv_util.UserError as exc:
        raise FormatError(f"{bench_path}: {exc}") from None
    benchmarks.pop("version", None)
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as exc:
        raise ConfigError(f"benchmark pattern {pattern!r} is not a regular expression: {exc}") from None

    data: dict[tuple[str, str], dict[str, list[tuple[float, float | None]]]] = {}
    names: dict[tuple[str, str], str] = {}
    dates: dict[str, int] = {}
    for res in iter_results(project.results_dir):
        m = res.params.get("machine", "")
        if machine and m != machine:
            continue
        dates.setdefault(res.commit_hash, res.date or 0)
        for key in sorted(res.get_result_keys(benchmarks)):
            params = benchmarks[key]["params"]
            values = res.get_result_value(key, params)
            stats = res.get_result_stats(key, params)
            combos = itertools.product(*params) if params else [()]
            for ids, v, st in zip(combos, values, stats):
                entry = entry_name(key, ids)
                if v is None or v != v or (regex and not regex.search(entry)):
                    continue
                data.setdefault((m, entry), {}).setdefault(res.commit_hash, []).append(
                    (float(v), ci_weight(st)))
                names[(m, entry)] = key
    layouts = list(layouts)
    order = commit_order(project, dates, dates)
    rank = {c: i for i, c in enumerate(order)}
    series = []
    for (m, entry), per_commit in sorted(data.items()):
        pts = []
        for c in sorted(per_commit, key=rank.__getitem__):
            vals = per_commit[c]
            ws = [w for _, w in vals if w is not None]
            pts.append(Point(c, statistics.fmean(v for v, _ in vals),
                             statistics.fmean(ws) if ws else None))
        name = names[(m, entry)]
        series.append(Series(m, entry, name, benchmarks[name].get("unit", ""),
                             metric_of(name, layouts), pts))
    return series, order


def drift_history(to: Any, layout_of: LayoutOf, fp: dict | None = None) -> Callable[[Sample, str], list[float]]:
    """``(sample, metric) -> [level per recorded commit]`` of this machine's asv history (the
    record target ``to``: its config and machine; ``layout_of`` names each case's asv entry), in
    the metric's own units, for verdicts to measure how a case's level moves from run to run.
    asv's value per commit is the median over that commit's rounds. Commits that changed the code
    are among them, so the spread can only err high. No history: no levels."""
    from ..store import fingerprint
    from .project import load_project

    try:
        project = load_project(to.config)
        machine = to.machine or fingerprint.system_name(fp or fingerprint.collect())
        series, _ = read_history(project, (), machine)  # entries by name: no metric needed
    except (ConfigError, FormatError):
        return lambda sample, metric: []
    by_entry = {s.entry: [p.value for p in s.points if p.value > 0] for s in series}

    def levels(sample: Sample, metric: str) -> list[float]:
        entry, m = entries_of(sample, layout_of).get(metric, (None, None))
        return [m.untransform(v) for v in by_entry.get(entry, [])] if entry else []

    return levels


def entries_of(sample: Sample, layout_of: LayoutOf) -> dict[str, tuple[str, AsvMetric]]:
    """metric name -> (asv's entry name of this sample's case, its AsvMetric), for each metric
    its layout (``layout_of(benchmark)``) records."""
    layout = layout_of(sample.case.benchmark)
    ids = layout.param_ids(sample.case, sample.info)
    return {m.metric: (entry_name(layout.name(m), ids), m) for m in metrics_for(layout, sample)}
