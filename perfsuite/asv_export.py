"""asv history: record a run's samples into asv's results directory, read the history back.

Everything that lands in asv's results goes through asv's own API (``asv.results.Results``,
``asv.machine.Machine``, ``asv.benchmarks.Benchmarks``), so ``asv publish``, ``asv compare`` and
the web page read it like results of ``asv run``.

Direction (asv issue #1617): asv treats every number as lower-is-better; its regressions page
and step detection flag *upward* steps only. So every metric is recorded time-like:
a lower-is-better metric as is (latency in seconds), a higher-is-better one as its inverse with
the unit saying so (busbw -> ``track_inv_busbw`` in ``s/GB (1/busbw)``; img/s -> s/img). A 15%
busbw drop is then a +17.6% step up, which asv shows as a regression.

One layout per benchmark (``LAYOUTS``) says how a ``Case`` maps to asv ``params`` and which
``track_*`` method holds which metric; the asv benchmark modules in ``benchmarks/asv_bench/``
are built from the same layout and the same case matrix (``suite.select_cases``), so the
``asv run`` path and the recorder path land on the same benchmark names and parameters.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import itertools
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import fingerprint as _fingerprint
from .cases import parse_size
from .errors import ConfigError, FormatError, LaunchError, PerfsuiteError
from .model import Case, Metric, Sample, format_size

DEFAULT_CONFIG = "asv.conf.json"
DEFAULT_ENV_NAME = "perfsuite"  # results file <commit8>-perfsuite.json next to asv run's own
LOCK_NAME = ".perfsuite-asv.lock"  # not *.json, so asv's result walker never reads it
LOCK_TIMEOUT_S = 120.0
#: Per-iteration samples kept per entry; above this, evenly spaced order statistics (min,
#: quantiles, max) are kept, so the median, quartiles and asv's CI are those of all samples
#: while a nightly history stays a few hundred KiB per commit.
MAX_SAMPLES = 200
ENV_PREFIX = "PERFSUITE_ASV_"  # PERFSUITE_ASV_SIZES=4,1MiB narrows what `asv run` measures


class RecordError(PerfsuiteError):
    """asv results could not be written (lock held too long, unreadable results directory)."""


# --- layouts: Case <-> asv benchmark name and params ---------------------------------------

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
class AsvLayout:
    """How one benchmark's cases appear in asv: ``<module>.<suite>.<method>(param, ...)``."""

    benchmark: str
    module: str  # file name in the asv benchmark dir, e.g. 'allreduce'
    suite: str  # class name, e.g. 'Allreduce'
    axes: tuple[str, ...]  # asv param_names
    values: Callable[[Case], tuple]  # a case's python values along the axes
    metrics: tuple[AsvMetric, ...] = ()
    version: str = "1"  # bump when a recorded number changes meaning; asv drops other versions
    sort_keys: dict[str, Callable[[Any], Any]] = field(default_factory=dict)

    def name(self, m: AsvMetric) -> str:
        return f"{self.module}.{self.suite}.{m.method}"

    def param_ids(self, case: Case) -> tuple[str, ...]:
        """asv's parameter ids are ``repr`` of the values (asv_runner ``_unique_param_ids``)."""
        return tuple(repr(v) for v in self.values(case))

    def params(self, cases: Iterable[Case]) -> list[list[Any]]:
        """asv ``params``: per axis, the values the cases take, in matrix order."""
        axes: list[dict[Any, None]] = [{} for _ in self.axes]
        for c in cases:
            for seen, v in zip(axes, self.values(c)):
                seen.setdefault(v, None)
        return [list(seen) for seen in axes]

    def metric(self, method: str) -> AsvMetric | None:
        return next((m for m in self.metrics if m.method == method), None)


def _allreduce_values(case: Case) -> tuple:
    return (case.transport, case.world_size, format_size(case.size_bytes or 0), case.dtype)


LAYOUTS: dict[str, AsvLayout] = {
    "allreduce": AsvLayout(
        "allreduce", "allreduce", "Allreduce", ("transport", "world_size", "size", "dtype"),
        _allreduce_values,
        (AsvMetric("track_latency", "latency_us", "seconds", scale=1e-6),
         AsvMetric("track_inv_busbw", "busbw_GBps", "s/GB (1/busbw)", inverse=True)),
        version="perfsuite-allreduce-1",
        sort_keys={"size": parse_size}),
}


def layout_for(benchmark: str) -> AsvLayout:
    """The registered layout, or the generic one (transport, world size, case id)."""
    if benchmark in LAYOUTS:
        return LAYOUTS[benchmark]
    module = re.sub(r"[^0-9a-zA-Z_]", "_", benchmark)
    return AsvLayout(benchmark, module, module.title().replace("_", ""),
                     ("transport", "world_size", "case"),
                     lambda c: (c.transport, c.world_size, c.id), (), version=f"perfsuite-{module}-1")


def metrics_for(layout: AsvLayout, sample: Sample) -> list[AsvMetric]:
    if layout.metrics:
        return [m for m in layout.metrics if m.metric in sample.metrics]
    return [generic_metric(m) for m in sample.metrics.values()]


def entry_name(name: str, param_ids: Iterable[str]) -> str:
    """asv's name for one parameter combination (as on its regressions page)."""
    ids = list(param_ids)
    return f"{name}({', '.join(ids)})" if ids else name


def thin(values: list[float], cap: int = MAX_SAMPLES) -> list[float]:
    """At most ``cap`` values: all of them, or evenly spaced order statistics incl. min and max."""
    if len(values) <= cap:
        return list(values)
    s = sorted(values)
    n = len(s)
    return [s[round(i * (n - 1) / (cap - 1))] for i in range(cap)]


# --- the project: asv.conf.json ------------------------------------------------------------

@dataclass(frozen=True)
class AsvProject:
    """Paths of an asv project, resolved the way asv does (relative to the conf file)."""

    config_path: str
    root: str
    results_dir: str
    html_dir: str
    benchmark_dir: str
    repo_dir: str
    branches: tuple[str, ...]
    thresholds: dict[str, float]
    conf: Any  # asv.config.Config


def load_project(config_path: str = DEFAULT_CONFIG) -> AsvProject:
    from asv import util as asv_util
    from asv.config import Config

    if not os.path.isfile(config_path):
        raise ConfigError(f"asv config {config_path!r} does not exist; pass --asv-config PATH "
                          f"or run from the repository root (it holds {DEFAULT_CONFIG})")
    try:
        conf = Config.load(config_path)
    except asv_util.UserError as exc:
        raise ConfigError(f"asv config {config_path!r}: {exc}") from None
    root = os.path.dirname(os.path.abspath(config_path))
    repo = str(conf.repo)
    repo_dir = os.path.join(root, repo) if os.path.isdir(os.path.join(root, repo)) else root
    thresholds = {}
    for regex, value in (conf.regressions_thresholds or {}).items():
        try:
            thresholds[regex] = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{config_path}: regressions_thresholds[{regex!r}] = {value!r} "
                              "must be a number such as 0.05") from None
    return AsvProject(os.path.abspath(config_path), root,
                      os.path.join(root, conf.results_dir), os.path.join(root, conf.html_dir),
                      os.path.join(root, conf.benchmark_dir), repo_dir,
                      tuple(b for b in conf.branches if b), thresholds, conf)


def _git(project: AsvProject, *args: str) -> str:
    from .launch.world import run_command  # the one room that starts processes

    return run_command(["git", "-C", project.repo_dir, *args], timeout=30).stdout.strip()


_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def resolve_commit(project: AsvProject, commit: str | None = None) -> str:
    """The full hash of ``commit`` (default HEAD) in the project's repository. A full 40-hex
    hash that git does not know (results measured for another checkout) is taken as is."""
    try:
        return _git(project, "rev-parse", "--verify", f"{commit or 'HEAD'}^{{commit}}")
    except LaunchError as exc:
        if commit and _HEX40.match(commit.lower()):
            return commit.lower()
        what = f"commit {commit!r}" if commit else "HEAD"
        raise ConfigError(f"{what} is not a commit of {project.repo_dir} ({exc}); "
                          "pass --asv-commit with a full 40-hex hash") from None


def commit_date_ms(project: AsvProject, commit: str) -> int:
    """The commit's author date in ms (what asv stores), or now when git does not know it."""
    try:
        return int(_git(project, "log", "-1", "--format=%at", commit)) * 1000
    except (LaunchError, ValueError):
        return int(time.time() * 1000)


def commit_order(project: AsvProject, commits: Iterable[str],
                 dates: Mapping[str, int] | None = None) -> list[str]:
    """Commits in asv's revision order (``git rev-list --all --date-order --reverse``, as
    ``asv publish`` numbers them); commits git does not know go by recorded date."""
    commits = set(commits)
    dates = dates or {}
    try:
        listed = _git(project, "rev-list", "--all", "--date-order", "--reverse").splitlines()
    except LaunchError:
        listed = []
    pos = {c: i for i, c in enumerate(listed) if c in commits}
    known = sorted(pos, key=pos.__getitem__)
    unknown = sorted(commits - set(pos), key=lambda c: (dates.get(c, 0), c))
    return known + unknown


# --- option group (the CLI's --asv*, pytest's --perf-asv*) -------------------------------

@dataclass(frozen=True)
class RecordTarget:
    config: str = DEFAULT_CONFIG
    machine: str | None = None  # None: fingerprint.system_name
    commit: str | None = None  # None: HEAD of the asv repo
    env_name: str = DEFAULT_ENV_NAME
    lock_timeout: float = LOCK_TIMEOUT_S


ASV_OPTIONS = (
    ("asv", "record this run's samples into asv's results (asv.conf.json) for the commit and machine"),
    ("asv-machine", "asv machine name [default: from the fingerprint, e.g. amd-epyc-7b13-2c]"),
    ("asv-commit", "commit the results belong to [default: git rev-parse HEAD]"),
    ("asv-config", f"asv config file [default: {DEFAULT_CONFIG}]"),
)


def add_options(addoption: Callable[..., Any], prefix: str = "") -> None:
    """Add ``--asv``, ``--asv-machine``, ``--asv-commit``, ``--asv-config`` (with ``prefix``)."""
    for name, help in ASV_OPTIONS:
        dest = (prefix + name).replace("-", "_")
        if name == "asv":
            addoption(f"--{prefix}{name}", action="store_true", default=False, dest=dest, help=help)
        else:
            addoption(f"--{prefix}{name}", default=None, dest=dest,
                      metavar=name.split("-")[1].upper(), help=help)


def target(values: Mapping[str, Any], prefix: str = "") -> RecordTarget | None:
    """The checked target from option values (dest names with ``prefix``), None without --asv."""
    p = prefix.replace("-", "_")
    if not values.get(f"{p}asv"):
        for name, _ in ASV_OPTIONS[1:]:
            if values.get(p + name.replace("-", "_")):
                raise ConfigError(f"--{prefix}{name} needs --{prefix}asv (record into asv)")
        return None
    machine = values.get(f"{p}asv_machine")
    if machine is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", machine):
        raise ConfigError(f"asv machine name {machine!r} must be letters, digits, '.', '_' or '-' "
                          "(it names a folder), e.g. dgx-a100")
    return RecordTarget(config=values.get(f"{p}asv_config") or DEFAULT_CONFIG, machine=machine,
                        commit=values.get(f"{p}asv_commit") or None)


def prepare(to: RecordTarget | None) -> RecordTarget | None:
    """Check the target before anything is measured: the config loads and the commit resolves
    (HEAD is read now, so a checkout changing during a long run does not move the results)."""
    if to is None:
        return None
    project = load_project(to.config)
    return RecordTarget(to.config, to.machine, resolve_commit(project, to.commit), to.env_name,
                        to.lock_timeout)


# --- recorder ----------------------------------------------------------------------------

@dataclass
class RecordSummary:
    machine: str
    commit: str
    path: str
    entries: int
    benchmarks: list[str]
    left_out: list[str]  # cases not recorded, with why (wrong result)

    def line(self) -> str:
        extra = f"; left out {len(self.left_out)}: {', '.join(self.left_out)}" if self.left_out else ""
        return (f"# asv: recorded {self.entries} entries of {len(self.benchmarks)} benchmarks for "
                f"commit {self.commit[:8]} on machine {self.machine} in {self.path}{extra}")


@contextlib.contextmanager
def results_lock(results_dir: str, timeout: float = LOCK_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Iterator[None]:
    """Hold ``<results_dir>/.perfsuite-asv.lock`` (flock) for one read-merge-write, so two
    recorders at once (two CI jobs on one shared results folder) take turns."""
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = clock() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if clock() >= deadline:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                    raise RecordError(f"asv results {results_dir} stayed locked for {timeout:g} s "
                                      f"by {holder}; wait for that recorder, or remove {path} "
                                      "if no recorder is running") from None
                sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {_dt.datetime.now().isoformat(timespec='seconds')}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def machine_info(fp: Mapping[str, Any], name: str) -> dict[str, str]:
    """asv's machine.json fields: the ones ``asv run --machine NAME`` would use (its own
    ~/.asv-machine.json entry) when asv knows the machine, else from the fingerprint. The
    graph line of a benchmark is keyed by these fields, so a recorded run and an ``asv run``
    land on one line only when they agree."""
    from asv.machine import MachineCollection
    from asv.util import UserError

    try:
        known = MachineCollection.load(name)
    except (UserError, OSError, ValueError):
        known = None
    # asv hands back its only entry for the host's own name even when that entry is named
    # otherwise; only an entry for this very name describes this machine.
    if known and known.get("machine") == name:
        return {str(k): str(v) for k, v in known.items() if k != "version"}
    return {"machine": name, "os": str(fp.get("os", "")), "arch": str(fp.get("machine", "")),
            "cpu": str(fp.get("cpu_model", "")), "num_cpu": str(fp.get("cpu_count", "")),
            "ram": str(fp.get("memory_bytes", "") or "")}


def python_param() -> str:
    """What ``asv run --environment existing:same`` records as ``python`` from this interpreter:
    the absolute path of the executable (not the version), so the two share graph lines."""
    return os.path.abspath(sys.executable)


def describe(layout: AsvLayout, m: AsvMetric, params: list[list[str]]) -> dict[str, Any]:
    """The benchmarks.json entry for one track method, made by asv_runner's own TrackBenchmark
    (the same fields ``asv run`` discovery writes for benchmarks/asv_bench)."""
    from asv_runner.benchmarks.track import TrackBenchmark

    def recorded(*params: Any) -> None:
        """Measured by perfsuite (perfsuite run --asv / pytest --perf-asv)."""

    recorded.unit = m.unit  # type: ignore[attr-defined]
    recorded.pretty_source = (  # type: ignore[attr-defined]
        f"# recorded by perfsuite from metric {m.metric!r}"
        f"{' (inverted: asv reads lower as better)' if m.inverse else ''};\n"
        f"# measured by benchmarks/asv_bench/{layout.module}.py under `asv run`")

    class Attrs:
        version = layout.version
        param_names = list(layout.axes)
        timeout = 60.0

    bench = TrackBenchmark(layout.name(m), recorded, [recorded, Attrs])
    d = {k: v for k, v in bench.__dict__.items()
         if isinstance(v, (str, int, float, list, dict, bool)) and not k.startswith("_")}
    d["params"] = [list(p) for p in params]
    d["param_names"] = list(layout.axes)  # asv_runner trims names to the (empty) params given
    return d


def _merge_axis(old: list[str], new: Iterable[str], key: Callable[[Any], Any] | None) -> list[str]:
    out = list(dict.fromkeys([*old, *new]))
    if key is None:
        return out

    def sort_key(ident: str) -> tuple:
        try:
            import ast
            return (0, key(ast.literal_eval(ident)), ident)
        except (ValueError, SyntaxError, ConfigError):
            return (1, 0, ident)

    return sorted(out, key=sort_key)


def _replace_from(tmp: str, results_dir: str, rel: str) -> str:
    dest = os.path.join(results_dir, rel)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.replace(os.path.join(tmp, rel), dest)  # readers never see half a file
    return dest


def record(samples: Iterable[Sample], to: RecordTarget, fp: Mapping[str, Any] | None = None,
           started_at: _dt.datetime | None = None) -> RecordSummary:
    """Merge ``samples`` into asv's results for ``to.commit`` on ``to.machine``.

    Under the results lock: read what is there (benchmarks.json and this commit's results file,
    which other runners may have written), widen params to cover old and new cases, add the
    new samples with asv's ``Results.add_result(..., append_samples=True)`` (a case measured
    twice pools its samples; cases measured only before are kept), write every file atomically.
    """
    from asv import util as asv_util
    from asv.benchmarks import Benchmarks
    from asv.machine import Machine
    from asv.results import Results, get_filename
    from asv.runner import BenchmarkResult

    project = load_project(to.config)
    fp = dict(fp) if fp else _fingerprint.collect()
    machine = to.machine or _fingerprint.system_name(fp)
    commit = resolve_commit(project, to.commit)
    date = commit_date_ms(project, commit)
    python = python_param()

    # name -> (layout, metric, {param ids: samples}); invalid results carry no timing meaning
    grouped: dict[str, tuple[AsvLayout, AsvMetric, dict[tuple[str, ...], list[float]]]] = {}
    left_out: list[str] = []
    for s in samples:
        if not s.valid:
            left_out.append(f"{s.case.name} (wrong result)")
            continue
        layout = layout_for(s.case.benchmark)
        for m in metrics_for(layout, s):
            metric = s.metrics[m.metric]
            values = thin(m.transform(metric.samples or (metric.value,)))
            if not values:
                continue
            _, _, per = grouped.setdefault(layout.name(m), (layout, m, {}))
            per.setdefault(layout.param_ids(s.case), []).extend(values)

    with results_lock(project.results_dir, to.lock_timeout):
        bench_path = Benchmarks.get_benchmark_file_path(project.results_dir)
        existing: dict[str, Any] = {}
        if os.path.isfile(bench_path):
            try:
                existing = asv_util.load_json(bench_path, api_version=Benchmarks.api_version)
            except asv_util.UserError as exc:
                raise FormatError(f"{bench_path}: {exc}; delete it and record again, or run "
                                  "`asv run --bench just-discover` to regenerate it") from None
            existing.pop("version", None)

        results = Results({**machine_info(fp, machine), "python": python}, {}, commit, date,
                          python, to.env_name, {})
        try:
            results.load_data(project.results_dir)
        except asv_util.UserError as exc:
            raise FormatError(f"asv results for {commit[:8]} on {machine}: {exc}; move that file "
                              "away to start this commit's results afresh") from None
        stored = set(results.get_all_result_keys())

        descriptions = dict(existing)
        for name, (layout, m, per) in grouped.items():
            old = existing.get(name)
            if old is None or old.get("version") != layout.version:
                old = describe(layout, m, [[] for _ in layout.axes])
            old_params = [list(p) for p in old.get("params", [])] or [[] for _ in layout.axes]
            stored_params = results.get_result_params(name) if name in stored else []
            new_params = []
            for i, axis in enumerate(layout.axes):
                ids = [k[i] for k in per]
                if stored_params and len(stored_params) == len(layout.axes):
                    ids = [*stored_params[i], *ids]
                new_params.append(_merge_axis(old_params[i], ids, layout.sort_keys.get(axis)))
            descriptions[name] = {**old, "params": new_params, "param_names": list(layout.axes)}

        tmp = tempfile.mkdtemp(prefix=".recording-", dir=os.path.dirname(project.results_dir.rstrip("/")) or ".")
        try:
            started = started_at or _dt.datetime.now(_dt.timezone.utc)
            for name, (layout, m, per) in grouped.items():
                desc = descriptions[name]
                combos = {c: j for j, c in enumerate(itertools.product(*desc["params"]))}
                n = len(combos)
                value: list[float | None] = [None] * n
                sample_lists: list[list[float] | None] = [None] * n
                number: list[int | None] = [None] * n
                for ids, vals in per.items():
                    j = combos[ids]
                    value[j], sample_lists[j], number[j] = statistics.median(vals), vals, 1
                results.add_result(desc, BenchmarkResult(value, sample_lists, number, 0, "", None),
                                   started_at=started, record_samples=True, append_samples=True,
                                   selected_idx={combos[ids] for ids in per})
            conf = _Conf(tmp, project.benchmark_dir)
            Benchmarks(conf, list(descriptions.values())).save()
            _replace_from(tmp, project.results_dir, os.path.basename(bench_path))
            mach = Machine()
            mach.__dict__.update(machine_info(fp, machine))
            mach.save(tmp)
            _replace_from(tmp, project.results_dir, os.path.join(machine, "machine.json"))
            results.save(tmp)
            path = _replace_from(tmp, project.results_dir, get_filename(machine, commit, to.env_name))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    entries = sum(len(per) for _, _, per in grouped.values())
    return RecordSummary(machine, commit, os.path.relpath(path), entries, sorted(grouped), left_out)


@dataclass
class _Conf:
    """The two fields asv's Benchmarks needs of a Config (results_dir points at a temp dir)."""

    results_dir: str
    benchmark_dir: str


def record_run(run: Any, to: RecordTarget) -> RecordSummary:
    """Record a ``SuiteRun`` (every world's samples, partial ones of failed worlds included)."""
    fp = next((r.fingerprint for r in run.results if r.fingerprint), None) or run.fingerprint
    return record(run.samples(), to, fp)


# --- reading the history back ------------------------------------------------------------

@dataclass
class Series:
    """One line of asv's graphs: one benchmark entry on one machine, in commit order."""

    machine: str
    entry: str  # asv's entry name, e.g. "allreduce.Allreduce.track_inv_busbw('mpi', 2, '1MiB', 'float32')"
    name: str
    unit: str
    metric: AsvMetric | None
    points: list[Any]  # history.Point


def metric_of(name: str) -> AsvMetric | None:
    """The AsvMetric behind an asv benchmark name, from the layouts (or the generic rule)."""
    module, _, rest = name.partition(".")
    suite, _, method = rest.rpartition(".")
    for layout in LAYOUTS.values():
        if layout.module == module and layout.suite == suite:
            return layout.metric(method)
    if method.startswith("track_inv_"):
        return AsvMetric(method, method[len("track_inv_"):], "", inverse=True)
    return None


def read_history(project: AsvProject, machine: str | None = None,
                 pattern: str | None = None) -> tuple[list[Series], list[str]]:
    """Every recorded series (asv's stored median and its CI weight per commit) and the commit
    order. Results of one commit from several files (asv run and perfsuite, several env
    names) are averaged, as asv's graphs do."""
    from asv import util as asv_util
    from asv._stats import get_weight
    from asv.benchmarks import Benchmarks
    from asv.results import iter_results

    from .history import Point

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
                    (float(v), get_weight(st)))
                names[(m, entry)] = key
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
        series.append(Series(m, entry, name, benchmarks[name].get("unit", ""), metric_of(name), pts))
    return series, order


# --- the asv benchmark modules (benchmarks/asv_bench/*.py) ---------------------------------

def env_values(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Option values for ``asv run`` from ``PERFSUITE_ASV_<OPTION>`` (e.g. PERFSUITE_ASV_SIZES),
    so the asv benchmarks measure the matrix the nightly perfsuite run measures."""
    from .options import OPTIONS

    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for o in OPTIONS:
        raw = environ.get(ENV_PREFIX + o.dest.upper())
        if raw is None or raw == "":
            continue
        if o.kind == "flag":
            out[o.dest] = raw.strip().lower() in ("1", "yes", "true", "on")
        elif o.kind == "list":
            out[o.dest] = [x for x in raw.split(";") if x.strip()]
        else:
            out[o.dest] = raw
    return out


def bench_cases(benchmark: str, environ: Mapping[str, str] | None = None) -> list[Case]:
    """The asv benchmark's cases: the same ``suite.select_cases`` the pytest suite uses."""
    from . import options, suite

    return suite.select_cases(options.selection(env_values(environ), benchmark))


def bench_timeout(cases: list[Case], environ: Mapping[str, str] | None = None) -> float:
    """setup_cache's bound: every world's own timeout plus slack, so a world's timeout (which
    kills its whole process group) always fires before asv kills setup_cache."""
    from . import options, suite

    cfg = options.suite_config(env_values(environ))
    return len(suite.plan(cases, cfg.options)) * (cfg.timeout + 30.0)


def measure(cases: list[Case], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run every world of ``cases`` once (``suite.run_one``) and return what the track methods
    read, keyed by ``(method, param ids)``: picklable, as asv's setup_cache needs."""
    from . import options, suite

    cfg = options.suite_config(env_values(environ))
    cache: dict[str, Any] = {"values": {}, "skipped": {}, "failed": {}}
    for spec in suite.plan(cases, cfg.options):
        outcome = suite.run_one(spec, cfg)
        for case in spec.cases:
            layout = layout_for(case.benchmark)
            ids = layout.param_ids(case)
            sample = outcome.sample_for(case)
            if outcome.skipped:
                cache["skipped"][ids] = f"{case.transport}: {outcome.skipped}"
            elif sample is None:
                cache["failed"][ids] = f"{case.name}: {outcome.failure or 'no result'}"
            elif not sample.valid:
                cache["failed"][ids] = f"{case.name}: wrong result (validation failed)"
            else:
                for m in metrics_for(layout, sample):
                    vals = m.transform(sample.metrics[m.metric].samples
                                       or (sample.metrics[m.metric].value,))
                    if vals:
                        cache["values"][(m.method, ids)] = statistics.median(vals)
    return cache


def check_case(cache: Mapping[str, Any], benchmark: str, *values: Any) -> None:
    """For asv's ``setup``: a skipped transport raises NotImplementedError (asv: skipped)."""
    ids = tuple(repr(v) for v in values)
    if ids in cache["skipped"]:
        raise NotImplementedError(cache["skipped"][ids])


def tracked(cache: Mapping[str, Any], method: str, *values: Any) -> float:
    """The recorded number of one case; a failed world raises (asv records a failure)."""
    ids = tuple(repr(v) for v in values)
    if ids in cache["failed"]:
        raise RuntimeError(cache["failed"][ids])
    if (method, ids) not in cache["values"]:
        raise NotImplementedError(f"{method}{ids}: not in the measured matrix")
    return cache["values"][(method, ids)]


# --- pytest: record the session at its end -------------------------------------------------

class SessionRecorder:
    """Registered by the plugin under ``--perf-asv``; records every world's samples when the
    session ends (hooks are found by name, so this room never imports pytest)."""

    def __init__(self, to: RecordTarget, outcomes: Callable[[], Iterable[Any]]):
        self.to = to
        self.outcomes = outcomes
        self.summary: RecordSummary | None = None
        self.error: str | None = None

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        outcomes = list(self.outcomes())
        samples = [s for o in outcomes for s in o.samples()]
        if not samples:
            return
        fp = next((o.result.fingerprint for o in outcomes
                   if o.result is not None and o.result.fingerprint), None)
        try:
            self.summary = record(samples, self.to, fp)
        except PerfsuiteError as exc:
            self.error = str(exc)
            session.exitstatus = session.exitstatus or 1  # a lost history is a failed run

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.summary is not None:
            terminalreporter.write_line(self.summary.line())
        elif self.error is not None:
            terminalreporter.write_line(f"# asv: NOT recorded: {self.error}", red=True)


# --- an asv site that works without internet ------------------------------------------------

#: asv's index.html loads jQuery, flot, bootstrap, ... from CDNs. On an air-gapped cluster (and
#: in this suite's own browser test) those are copied from Debian packages instead:
#: apt-get install libjs-jquery libghc-js-flot-data libjs-jquery-stupidtable node-blueimp-md5 libjs-bootstrap
#: (flot and blueimp-md5 are the very versions asv names; jQuery 3.6, bootstrap 3.4 and
#: stupidtable 1.1 are API-compatible newer releases of the ones it names).
OFFLINE_JS: dict[str, tuple[str | None, str]] = {
    "jquery-3.3.1.min.js": ("/usr/share/javascript/jquery/jquery.min.js", "libjs-jquery"),
    "jquery.flot.min.js": ("/usr/share/haskell-js-flot/jquery.flot.min.js", "libghc-js-flot-data"),
    "jquery.flot.time.min.js": ("/usr/share/haskell-js-flot/jquery.flot.time.min.js", "libghc-js-flot-data"),
    "jquery.flot.selection.min.js": ("/usr/share/haskell-js-flot/jquery.flot.selection.min.js", "libghc-js-flot-data"),
    "jquery.flot.categories.min.js": ("/usr/share/haskell-js-flot/jquery.flot.categories.min.js", "libghc-js-flot-data"),
    "stupidtable.min.js": ("/usr/share/javascript/jquery-stupidtable/stupidtable.min.js", "libjs-jquery-stupidtable"),
    "md5.min.js": ("/usr/share/javascript/blueimp-md5/md5.min.js", "node-blueimp-md5"),
    "bootstrap.min.js": ("/usr/share/javascript/bootstrap/js/bootstrap.min.js", "libjs-bootstrap"),
    "bootstrap.min.css": ("/usr/share/javascript/bootstrap/css/bootstrap.min.css", "libjs-bootstrap"),
    # No distribution packages flot-orderbars; it only places bars of a bar graph side by side,
    # so the offline site leaves it out (bars overlap) rather than fail to load.
    "jquery.flot.orderBars.js": (None, ""),
}
_CDN_TAG = re.compile(r"""<(script|link)\b[^>]*?(?:src|href)="(https?://[^"]+)"[^>]*>(?:\s*</script>)?""")


def make_offline(html_dir: str, table: Mapping[str, tuple[str | None, str]] = OFFLINE_JS) -> list[str]:
    """Rewrite the published ``index.html`` to load its CDN scripts and styles from
    ``vendor/`` copies of local files; returns the CDN names replaced or left out."""
    index = os.path.join(html_dir, "index.html")
    if not os.path.isfile(index):
        raise ConfigError(f"{index} does not exist; run `asv publish` first")
    with open(index, encoding="utf-8") as f:
        html = f.read()
    tags = _CDN_TAG.findall(html)
    unknown = sorted({url for _, url in tags if url.rsplit("/", 1)[-1] not in table})
    if unknown:
        raise ConfigError(f"{index} loads {', '.join(unknown)}, which has no local copy known to "
                          "perfsuite (a newer asv?); add it to asv_export.OFFLINE_JS")
    missing = sorted({pkg for _, url in tags
                      for src, pkg in [table[url.rsplit("/", 1)[-1]]] if src and not os.path.isfile(src)})
    if missing:
        raise ConfigError("the offline asv site needs local JavaScript: apt-get install -y "
                          + " ".join(missing))
    vendor = os.path.join(html_dir, "vendor")
    os.makedirs(vendor, exist_ok=True)
    done = []

    def local(m: re.Match) -> str:
        kind, url = m.group(1), m.group(2)
        name = url.rsplit("/", 1)[-1]
        src, _ = table[name]
        done.append(name)
        if src is None:
            return f"<!-- {name}: not packaged, left out offline -->"
        copy = os.path.basename(src)  # named as what it is (jquery.min.js is 3.6, not 3.3.1)
        shutil.copyfile(src, os.path.join(vendor, copy))
        if kind == "link":
            return f'<link rel="stylesheet" href="vendor/{copy}">'
        return f'<script src="vendor/{copy}"></script>'

    html = _CDN_TAG.sub(local, html)
    tmp = index + f".tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(html)
    os.replace(tmp, index)
    return done
