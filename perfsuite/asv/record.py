"""Record a run's samples into asv's results directory, through asv's own ``Results`` API, so
``asv publish``, ``asv compare`` and the web page read them like results of ``asv run``.

One of the rooms that write files: every file lands under a lock, written into a temporary
folder by asv and renamed into place, so a reader never sees half of one.

The store sits below the benchmark registry (``perfsuite/bench``): how a case appears in asv is
asked of the ``layout_of`` its caller hands in (``bench.asv_layout``), never looked up here.
What an older version of a layout stored is rewritten to the current one first (``migrate``).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..store import fingerprint as _fingerprint
from ..records.errors import ConfigError, FormatError, PerfsuiteError
from ..store.formats import SuiteRun
from ..records.model import Sample, time_sliced
from .compat import relayout_result
from ..bench.asv_view import AsvLayout, AsvMetric, AxisAdded, LayoutOf, metrics_for, round_samples
from .project import LOCK_TIMEOUT_S, AsvProject, RecordTarget, commit_date_ms, load_project, resolve_commit

LOCK_NAME = ".perfsuite-asv.lock"  # not *.json, so asv's result walker never reads it


class RecordError(PerfsuiteError):
    """asv results could not be written (lock held too long, unreadable results directory)."""


@dataclass
class RecordSummary:
    machine: str
    commit: str
    path: str
    entries: int
    benchmarks: list[str]
    left_out: list[str]  # cases not recorded, with why (wrong result)
    migrated: int = 0  # stored results of older layout versions rewritten (``migrate``)

    def line(self) -> str:
        extra = f"; left out {len(self.left_out)}: {', '.join(self.left_out)}" if self.left_out else ""
        if self.migrated:
            extra += f"; migrated {self.migrated} stored results to the current layouts"
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

    track = TrackBenchmark(layout.name(m), recorded, [recorded, Attrs])
    d = {k: v for k, v in track.__dict__.items()
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


def _read_store(results_dir: str, fp: Mapping[str, Any], machine: str, commit: str, date: int,
                python: str, env_name: str) -> tuple[str, dict[str, Any], Any]:
    """benchmarks.json and this commit's results as they are, or a FormatError saying what to do."""
    from asv import util as asv_util
    from asv.benchmarks import Benchmarks
    from asv.results import Results

    bench_path = Benchmarks.get_benchmark_file_path(results_dir)
    existing: dict[str, Any] = {}
    if os.path.isfile(bench_path):
        try:
            existing = asv_util.load_json(bench_path, api_version=Benchmarks.api_version)
        except asv_util.UserError as exc:
            raise FormatError(f"{bench_path}: {exc}; delete it and record again, or run "
                              "`asv run --bench just-discover` to regenerate it") from None
        existing.pop("version", None)
    results = Results({**machine_info(fp, machine), "python": python}, {}, commit, date,
                      python, env_name, {})
    try:
        results.load_data(results_dir)
    except asv_util.UserError as exc:
        raise FormatError(f"asv results for {commit[:8]} on {machine}: {exc}; move that file "
                          "away to start this commit's results afresh") from None
    return bench_path, existing, results


def check_store(to: RecordTarget) -> None:
    """Read what recording will merge into, so a corrupt asv store stops a run before any world."""
    project = load_project(to.config)
    fp = _fingerprint.collect()
    commit = resolve_commit(project, to.commit)
    _read_store(project.results_dir, fp, to.machine or _fingerprint.system_name(fp), commit,
                commit_date_ms(project, commit), python_param(), to.env_name)


def migrate(project: AsvProject, layouts: Iterable[AsvLayout]) -> int:
    """Rewrite in place what older versions of ``layouts`` stored, following each layout's
    ``migrations``: benchmarks.json and every results file, of every machine and commit,
    ``asv run``'s included. asv reads a stored result only under its benchmark's own version and
    by the product of its params, so without this every older point would drop off its graph.
    Each file is replaced atomically, benchmarks.json last; the caller holds the results lock.
    Returns how many stored results (one per benchmark and file) were migrated."""
    from asv import util as asv_util
    from asv.benchmarks import Benchmarks
    from asv.results import Results, iter_results_paths

    chains = {f"{lay.module}.{lay.suite}": {step.old: step for step in lay.migrations}
              for lay in layouts if lay.migrations}

    def steps(name: str, version: Any) -> list[AxisAdded]:
        """The steps from ``version`` to the current one of the layout of benchmark ``name``."""
        chain, out = chains.get(name.rpartition(".")[0], {}), []
        while version in chain and len(out) < len(chain):
            out.append(chain[version])
            version = chain[version].new
        return out

    if not chains:
        return 0
    migrated = 0
    tmp = tempfile.mkdtemp(prefix=".migrating-",
                           dir=os.path.dirname(project.results_dir.rstrip("/")) or ".")
    try:
        bench_path = Benchmarks.get_benchmark_file_path(project.results_dir)
        try:
            described = asv_util.load_json(bench_path, api_version=Benchmarks.api_version)
        except (OSError, asv_util.UserError):
            described = {}  # none yet; an unreadable one is _read_store's to report
        described.pop("version", None)
        todo = {name: steps(name, d.get("version")) for name, d in described.items()}
        # benchmarks.json is rewritten last, so at the current versions it says every results
        # file was migrated (a run cut short in between migrates the rest next time), and a
        # store with nothing to migrate is not read file by file on every record.
        if not any(todo.values()):
            return 0
        for root, filename, _ in iter_results_paths(project.results_dir):
            path = os.path.join(root, filename)
            try:
                results = Results.load(path)
            except asv_util.UserError:
                continue  # asv's readers skip it too; this commit's own is _read_store's to report
            n = 0
            for key in list(results.get_all_result_keys()):
                chain = steps(key, results.benchmark_version.get(key))
                if chain:
                    params = results.get_result_params(key)
                    for step in chain:
                        params = step.params(params)
                    relayout_result(results, key, params, chain[-1].new)
                    n += 1
            if n:
                results.save(tmp)  # under the last two parts of its path, as Results.load names it
                os.replace(os.path.join(tmp, *path.split(os.sep)[-2:]), path)
                migrated += n
        for name, chain in todo.items():
            d = described[name]
            for step in chain:
                d.update(params=step.params(d.get("params") or []), version=step.new,
                         param_names=[*d.get("param_names", []), step.axis])
        Benchmarks(_Conf(tmp, project.benchmark_dir), list(described.values())).save()
        _replace_from(tmp, project.results_dir, os.path.basename(bench_path))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return migrated


def record(samples: Iterable[Sample], to: RecordTarget, layout_of: LayoutOf,
           fp: Mapping[str, Any] | None = None, started_at: _dt.datetime | None = None) -> RecordSummary:
    """Merge ``samples`` into asv's results for ``to.commit`` on ``to.machine``, each laid out
    as ``layout_of(benchmark)`` says.

    Each case is recorded as its round values (``round_samples``), its value their median.
    Under the results lock: migrate what older versions of these layouts stored (``migrate``),
    read what is there (benchmarks.json and this commit's results file, which other runners may
    have written), widen params to cover old and new cases, add the new rounds with asv's
    ``Results.add_result(..., append_samples=True)`` (a case measured in two runs of one commit
    pools its rounds; cases measured only before are kept), write every file atomically.
    """
    from asv import util as asv_util
    from asv.benchmarks import Benchmarks
    from asv.machine import Machine
    from asv.results import get_filename
    from asv.runner import BenchmarkResult

    project = load_project(to.config)
    fp = dict(fp) if fp else _fingerprint.collect()
    machine = to.machine or _fingerprint.system_name(fp)
    commit = resolve_commit(project, to.commit)
    date = commit_date_ms(project, commit)
    python = python_param()

    # name -> (layout, metric, {param ids: round values}); invalid results carry no timing meaning
    grouped: dict[str, tuple[AsvLayout, AsvMetric, dict[tuple[str, ...], list[float]]]] = {}
    left_out: list[str] = []
    for s in samples:
        if not s.valid:
            left_out.append(f"{s.case.name} (wrong result)")
            continue
        if time_sliced(s.info):
            # Ranks that took turns on one GPU: asv's graph would show it as a point of the GPUs
            # the case names (its parameters have no axis for sharing), so it is left out.
            left_out.append(f"{s.case.name} ({time_sliced(s.info)})")
            continue
        if s.info.get("contended"):
            # Every round waited for a CPU (rounds.pool_rounds kept them all only so the sample
            # is not empty). Verdicts say UNKNOWN on such a sample; asv has no way to mark a
            # point, and its regressions page and `perfsuite history` decide from every stored
            # point, so a recorded one would be a verdict resting on contended rounds. Left out
            # (the run file keeps it), and said in the summary line like a wrong result.
            left_out.append(f"{s.case.name} (machine contended in every round)")
            continue
        layout = layout_of(s.case.benchmark)
        for m in metrics_for(layout, s):
            values = round_samples(s, m)
            if not values:
                continue
            _, _, per = grouped.setdefault(layout.name(m), (layout, m, {}))
            per.setdefault(layout.param_ids(s.case, s.info), []).extend(values)

    with results_lock(project.results_dir, to.lock_timeout):
        migrated = migrate(project, [layout for layout, _, _ in grouped.values()])
        bench_path, existing, results = _read_store(project.results_dir, fp, machine, commit, date,
                                                    python, to.env_name)
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
            # What Machine.save writes (its fields, under asv's api_version), without building
            # a Machine, whose only public constructor also writes ~/.asv-machine.json.
            asv_util.write_json(os.path.join(tmp, machine, "machine.json"), machine_info(fp, machine),
                                Machine.api_version)
            _replace_from(tmp, project.results_dir, os.path.join(machine, "machine.json"))
            results.save(tmp)
            path = _replace_from(tmp, project.results_dir, get_filename(machine, commit, to.env_name))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    entries = sum(len(per) for _, _, per in grouped.values())
    return RecordSummary(machine, commit, os.path.relpath(path), entries, sorted(grouped), left_out, migrated)


@dataclass
class _Conf:
    """The two fields asv's Benchmarks needs of a Config (results_dir points at a temp dir)."""

    results_dir: str
    benchmark_dir: str


def record_run(run: SuiteRun, to: RecordTarget, layout_of: LayoutOf) -> RecordSummary:
    """Record a ``SuiteRun`` (every world's samples, partial ones of failed worlds included)."""
    return record(run.samples(), to, layout_of, run.machine)


# --- pytest: record the session at its end -------------------------------------------------

class SessionRecorder:
    """Registered by the plugin under ``--perf-asv``; records every world's samples when the
    session ends (hooks are found by name, so this room never imports pytest)."""

    def __init__(self, to: RecordTarget, run: Callable[[], SuiteRun], layout_of: LayoutOf):
        self.to = to
        self.run = run
        self.layout_of = layout_of
        self.summary: RecordSummary | None = None
        self.error: str | None = None

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        run = self.run()
        if not run.samples():
            return
        try:
            self.summary = record_run(run, self.to, self.layout_of)
        except PerfsuiteError as exc:
            self.error = str(exc)
            session.exitstatus = session.exitstatus or 1  # a lost history is a failed run

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.summary is not None:
            terminalreporter.write_line(self.summary.line())
        elif self.error is not None:
            terminalreporter.write_line(f"# asv: NOT recorded: {self.error}", red=True)
