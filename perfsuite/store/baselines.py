"""Baselines: versioned JSON data under ``baselines/<system>/<benchmark>.json``.

``<system>`` names a kind of machine (``fingerprint.system_name``, or one the user picks, like
ReFrame's system:partition). Each file holds, per case and metric, what ``model.Baseline`` holds:
unit, direction, round values, a bounded set of raw samples and their summary, and optionally a
tolerance and an expected-failure reason. A file may also set per-metric default tolerances::

    {"format": "perfsuite-baseline", "version": 1, "system": "...", "benchmark": "allreduce",
     "tolerances": {"latency_us": {"lower": -0.05, "upper": 0.05}},
     "cases": {"allreduce[mpi-n2-1MiB]": {"busbw_GBps": {"unit": "GB/s", ...,
                                                         "xfail": "known slow on this system"}}}}

One of the rooms that write files. Nothing is written unless asked (``update``), and then
through ``formats.atomic_write``, so a crash never leaves half a baseline. Hand-edited
tolerances and xfail reasons survive an update.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import fingerprint as _fingerprint
from . import formats
from ..verdicts import drift, regress
from ..records.errors import BaselineFormatError, ConfigError
from ..records.model import Baseline, Sample, Tolerance, round_values, time_sliced, timing_of

_SYSTEM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
_NUMBER_LIST = re.compile(r"\[\s*(-?[0-9][-0-9.eE+,\s]*?)\s*\]")
SIGNIFICANT_DIGITS = 7  # stored numbers: far finer than any timing noise, files stay small
_HOW_TO_REFRESH = formats.REFRESH_BASELINE


def system_for(fp: Mapping[str, Any] | None = None, name: str | None = None) -> str:
    """The system name baselines are filed under: ``name`` if given (checked), else the
    fingerprint's (``fp`` or this machine's)."""
    if name:
        if not _SYSTEM_RE.match(name) or ".." in name:
            raise ConfigError(f"system name {name!r} is not allowed; use letters, digits and "
                              "._:- (e.g. 'ci-2core' or 'cluster:gpu'), no slashes")
        return name
    return _fingerprint.system_name(dict(fp) if fp is not None else _fingerprint.collect())


def path_for(root: str | os.PathLike, system: str, benchmark: str) -> Path:
    return Path(root) / system_for(name=system) / f"{benchmark}.json"


@dataclass
class BaselineSet:
    """The baselines of one benchmark on one system (one file)."""

    system: str
    benchmark: str
    entries: dict[tuple[str, str], Baseline] = field(default_factory=dict)
    tolerances: dict[str, Tolerance] = field(default_factory=dict)  # per-metric defaults
    fingerprint: dict[str, Any] = field(default_factory=dict)
    updated: str = ""
    recorded_at: dict[str, dict[str, str]] = field(default_factory=dict)  # session -> its commit

    def effective(self) -> dict[tuple[str, str], Baseline]:
        """Entries with the file's per-metric tolerance filled in where an entry has none."""
        return {k: (b if b.tolerance or k[1] not in self.tolerances
                    else replace(b, tolerance=self.tolerances[k[1]]))
                for k, b in self.entries.items()}

    def to_dict(self) -> dict[str, Any]:
        cases: dict[str, dict[str, Any]] = {}
        for (case, metric), b in sorted(self.entries.items()):
            cases.setdefault(case, {})[metric] = b.to_dict()
        return formats.stamp(formats.BASELINE, {
            "system": self.system, "benchmark": self.benchmark, "updated": self.updated,
            "tolerances": {m: t.to_dict() for m, t in sorted(self.tolerances.items())},
            "fingerprint": self.fingerprint, "recorded_at": self.recorded_at, "cases": cases})


def from_dict(d: Any, source: str) -> BaselineSet:
    """Check a parsed baseline file; every problem is one line saying what to do."""
    d = formats.check_format(d, formats.BASELINE, source, BaselineFormatError)
    try:
        tolerances = {m: Tolerance.from_dict(t) for m, t in (d.get("tolerances") or {}).items()}
        entries = {}
        for case, metrics in d["cases"].items():
            for metric, e in metrics.items():
                b = Baseline.from_dict(case, metric, e)
                if not b.rounds:
                    raise ValueError(f"{case} {metric} has no round values")
                entries[(case, metric)] = b
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise BaselineFormatError(f"{source}: malformed baseline ({what}); fix the entry by hand "
                                  f"or move the file away and {_HOW_TO_REFRESH}") from None
    return BaselineSet(system=str(d.get("system", "")), benchmark=str(d.get("benchmark", "")),
                       entries=entries, tolerances=tolerances,
                       fingerprint=dict(d.get("fingerprint") or {}), updated=str(d.get("updated", "")),
                       recorded_at={str(k): dict(v) for k, v in (d.get("recorded_at") or {}).items()
                                    if isinstance(v, dict)})


def load(root: str | os.PathLike, system: str, benchmark: str) -> BaselineSet | None:
    """The baselines of ``benchmark`` on ``system``, or None when none were recorded."""
    path = path_for(root, system, benchmark)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineFormatError(f"{path}: cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise BaselineFormatError(f"{path}: not a text file; move it away and {_HOW_TO_REFRESH}") from None
    try:
        d = json.loads(text)
    except ValueError as exc:
        raise BaselineFormatError(f"{path}: not valid JSON ({exc}); fix it or move it away and "
                                  f"{_HOW_TO_REFRESH}") from None
    return from_dict(d, str(path))


def load_all(root: str | os.PathLike, system: str) -> dict[tuple[str, str], Baseline]:
    """Every baseline of ``system`` (all benchmarks), keyed (case name, metric)."""
    folder = Path(root) / system_for(name=system)
    out: dict[tuple[str, str], Baseline] = {}
    if not folder.is_dir():
        return out
    for f in sorted(folder.glob("*.json")):
        bs = load(root, system, f.stem)
        if bs is not None:
            out.update(bs.effective())
    return out


def recorded_at(root: str | os.PathLike, system: str) -> list[tuple[str, dict[str, str]]]:
    """(session, the commit that measured it) of every session of ``system`` that says, oldest
    first (sessions are named by when they started)."""
    folder = Path(root) / system_for(name=system)
    found: dict[str, dict[str, str]] = {}
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        bs = load(root, system, f.stem)
        if bs is not None:
            found.update(bs.recorded_at)
    return sorted(found.items())


def drift_line(stored: Mapping[tuple[str, str], Baseline], system: str) -> str:
    """What ``system``'s recorded sessions say of how far its levels move between runs."""
    learned = regress.machine_drift(stored)
    if learned is None:
        held = max((len(drift.case_levels(b)) for b in stored.values()), default=0)
        gap = int(drift.SITTING_GAP.total_seconds() // 60)
        return (f"# {system}: drift between runs not learned yet: {held} sitting(s) recorded (sessions {gap} "
                f"minutes or more apart), it is learned from {regress.MIN_SESSIONS}; until then only a change "
                f"beyond x{regress.PRIOR_SPAN:g}, the prior, is decided (--baseline-add in a later sitting "
                "records one, --session-drift states the drift, --confirm decides by A/B)")
    return f"# {system}: {learned.describe()}"


def systems(root: str | os.PathLike) -> list[str]:
    base = Path(root)
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def too_few_rounds(samples: Iterable[Sample], source: str, measured_now: bool = False) -> str | None:
    """One line when some sample holds fewer rounds than a baseline needs to decide anything,
    saying how to record one that can; None when every sample has enough. ``measured_now``:
    the samples are this run's, whose contended rounds were left out."""
    short = [(s.case.name, len(round_values(s, next(iter(s.metrics)))))
             for s in samples if s.valid and s.metrics]
    short = [(c, n) for c, n in short if n < regress.MIN_BASELINE_ROUNDS]
    if not short:
        return None
    case, n = short[0]
    more = f" (and {len(short) - 1} more case(s))" if len(short) > 1 else ""
    head = (f"{source} holds {n} round(s) of {case}{more}; a baseline needs at least "
            f"{regress.MIN_BASELINE_ROUNDS} rounds to decide anything: ")
    if measured_now:
        return head + ("contended rounds are left out, so record it when the machine is quieter, "
                       "or ask for more --rounds")
    return head + (f"record one with `perfsuite run ... --baseline-update` ({regress.BASELINE_ROUNDS} "
                   f"rounds), or run with --rounds {regress.BASELINE_ROUNDS} --json FILE and update "
                   "from that file; --baseline-add adds a run's rounds to an existing baseline")


def merge(old: BaselineSet | None, samples: Iterable[Sample], system: str, benchmark: str,
          fp: Mapping[str, Any] | None = None, recorded: str = "", session: str = "",
          add: bool = False, at: Mapping[str, str] | None = None) -> tuple[BaselineSet, list[str]]:
    """The baseline set after recording ``samples`` of ``benchmark`` as one measurement
    ``session`` (pure: writes nothing), and one line per change. With ``add`` the session
    joins each entry's rounds, else it replaces them (their levels kept as history). Invalid
    samples are never recorded; hand-set tolerances and xfail reasons of an existing entry are
    kept. ``at``: the commit that measured the session (``recorded_at``)."""
    recorded = recorded or _now()
    kept_at = dict(old.recorded_at) if old and add else {}
    if at:
        kept_at[session or recorded] = dict(at)
    new = BaselineSet(system, benchmark, dict(old.entries) if old else {},
                      dict(old.tolerances) if old else {}, dict(fp or (old.fingerprint if old else {})),
                      recorded, kept_at)
    changes: list[str] = []
    for s in samples:
        if s.case.benchmark != benchmark:
            continue
        if not s.valid:
            changes.append(f"{s.case.name}: not recorded, the result failed validation")
            continue
        if time_sliced(s.info):
            changes.append(f"{s.case.name}: not recorded, {time_sliced(s.info)}: its ranks took turns "
                           "on one GPU, so it is no baseline for GPUs of their own")
            continue
        for metric in s.metrics:
            prev = new.entries.get((s.case.name, metric))
            joins = add and prev is not None and prev.timing == timing_of(s.info) and prev.unit == s.metrics[metric].unit
            b = regress.baseline_from_sample(s, metric, recorded,
                                             tolerance=prev.tolerance if prev else None,
                                             xfail=prev.xfail if prev else None,
                                             session=session or recorded, previous=prev, add=joins)
            new.entries[(s.case.name, metric)] = b
            held = f"{len(b.session_rounds())} session(s), {len(b.rounds)} round(s)"
            if prev is None:
                changes.append(f"{s.case.name} {metric}: new {b.value:.4g} {b.unit} ({held})")
            else:
                rel = b.value / prev.value - 1.0 if prev.value else 0.0
                how = "session added" if joins else "replaced"
                changes.append(f"{s.case.name} {metric}: {prev.value:.4g} -> {b.value:.4g} "
                               f"{b.unit} ({rel:+.1%}; {how}: {held})")
    return new, changes


def update(root: str | os.PathLike, system: str, samples: Iterable[Sample],
           fp: Mapping[str, Any] | None = None, session: str = "", add: bool = False,
           source: str = "this run", measured_now: bool = False,
           at: Mapping[str, str] | None = None) -> list[str]:
    """Record ``samples`` as the baselines of their benchmarks on ``system``; atomic per file.
    ``add``: as one more session of the stored ones (``merge``); ``at``: the commit that measured
    it. Refused, before any file is
    written, when a sample holds too few rounds for a baseline that could decide (and, with
    ``add``, the stored rounds do not make up for them).

    Only called when the user asked (``--perf-baseline-update``, ``perfsuite baseline update``).
    Returns one line per change, each file's path first.
    """
    samples = list(samples)
    by_bench: dict[str, list[Sample]] = {}
    for s in samples:
        by_bench.setdefault(s.case.benchmark, []).append(s)
    loaded = {bench: load(root, system, bench) for bench in by_bench}
    kept = [s for s in samples if not time_sliced(s.info)]  # merge says why the others are not
    if add:
        short = [s for s in kept if s.valid and s.metrics and not _enough_with(loaded.get(s.case.benchmark), s)]
    else:
        short = kept
    why = too_few_rounds(short, source, measured_now)
    if why:
        raise ConfigError(why)
    lines: list[str] = []
    for bench, ss in by_bench.items():
        merged, changes = merge(loaded[bench], ss, system, bench, fp, session=session, add=add, at=at)
        path = path_for(root, system, bench)
        save(merged, path)
        lines.append(f"{path}: {len(changes)} change(s)")
        lines += [f"  {c}" for c in changes]
    return lines


def _enough_with(old: BaselineSet | None, s: Sample) -> bool:
    metric = next(iter(s.metrics))
    prev = old.entries.get((s.case.name, metric)) if old else None
    held = len(prev.rounds) if prev else 0
    return held + len(round_values(s, metric)) >= regress.MIN_BASELINE_ROUNDS


def save(bs: BaselineSet, path: str | os.PathLike) -> None:
    formats.atomic_write(path, _dumps(bs.to_dict()))


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return float(f"{x:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x


def _dumps(d: dict[str, Any]) -> str:
    """Indented for readable diffs, but lists of numbers on one line (samples stay compact)."""
    text = json.dumps(_round(d), indent=1, sort_keys=False)
    return _NUMBER_LIST.sub(lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text) + "\n"


def show(root: str | os.PathLike, system: str | None = None) -> str:
    """A table of the stored baselines of one system (or of every system under ``root``)."""
    names = [system_for(name=system)] if system else systems(root)
    if not names:
        # A command that records enough rounds: `baseline update` refuses run --json's one round.
        where = "" if str(root) == "baselines" else f" --baseline-dir {shlex.quote(str(root))}"
        return (f"no baselines under {root}/ (record this machine's with `perfsuite run --baseline-update{where}`: "
                f"{regress.BASELINE_ROUNDS} rounds, the {regress.MIN_BASELINE_ROUNDS} or more a baseline needs)")
    lines: list[str] = []
    for sysname in names:
        folder = Path(root) / sysname
        files = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if not files:
            lines.append(f"{sysname}: no baselines under {folder}/")
            continue
        stored: dict[tuple[str, str], Baseline] = {}
        for f in files:
            bs = load(root, sysname, f.stem)
            if bs is None:
                continue
            stored.update(bs.effective())
            at = sorted(bs.recorded_at.items())
            commit = f"  commit={at[-1][1].get('commit', '?')[:10]}" if at else ""
            lines.append(f"# {f}  system={bs.system}  updated={bs.updated}{commit}")
            lines.append(f"{'case':<34}{'metric':<12}{'value':>12} {'unit':<6}{'rounds':>7}"
                         f"{'sessions':>9}{'IQR/med':>9}{'tolerance':>14}  xfail")
            for (case, metric), b in sorted(bs.effective().items()):
                tol = b.tolerance or regress.default_tolerance(metric)
                spread = b.iqr / abs(b.median) if b.iqr is not None and b.median else float("nan")
                sessions = f"{len(b.session_rounds())}" + (f"+{len(b.history)}" if b.history else "")
                lines.append(f"{case:<34}{metric:<12}{b.value:>12.4g} {b.unit:<6}{len(b.rounds):>7}"
                             f"{sessions:>9}{spread:>9.1%}{tol.lower:>+7.0%}/{tol.upper:<+6.0%}  {b.xfail or ''}")
        if stored:
            lines.append(drift_line(stored, sysname))
    return "\n".join(lines)
