"""History verdicts: the steps asv's own step detection finds in a recorded series.

Pure functions over lists of ``Point`` (commit, value, weight), tested with seeded synthetic
series. Values are time-like (lower is better, see ``asv.layout``), so an upward step is a
regression and a downward step an improvement. ``detect_steps`` fits asv's piecewise-constant
(Potts) model; ``detect_regressions`` is what asv's regressions page lists: regressions still
present at the latest commit.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_THRESHOLD = 0.05  # asv's default regressions_thresholds


@dataclass(frozen=True)
class Point:
    commit: str
    value: float | None
    weight: float | None = None  # asv's 2/|CI width| of the median over rounds; None when unknown


@dataclass(frozen=True)
class Step:
    """A change of level between ``before`` (last commit of the old level) and ``after``
    (first commit of the new level); only these commits can have caused it."""

    before: str
    after: str
    value_before: float
    value_after: float
    active: bool = False  # asv's regressions page lists it (not fixed later)

    @property
    def ratio(self) -> float:
        return self.value_after / self.value_before if self.value_before else float("inf")

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    @property
    def kind(self) -> str:
        return "regression" if self.value_after > self.value_before else "improvement"

    @property
    def commits(self) -> str:
        return f"{self.before[:8]}..{self.after[:8]}"


def threshold_for(entry: str, thresholds: Mapping[str, float],
                  default: float = DEFAULT_THRESHOLD) -> float:
    """asv's rule: the largest ``regressions_thresholds`` value whose regex matches the entry."""
    hits = [t for regex, t in thresholds.items() if re.match(regex, entry)]
    return max(hits) if hits else default


def _fit(points: Sequence[Point]) -> tuple[list[Point], list[tuple]]:
    from asv.step_detect import detect_steps

    pts = [p for p in points if p.value is not None and p.value == p.value]
    if len(pts) < 2:
        return pts, []
    return pts, detect_steps([p.value for p in pts], [p.weight for p in pts])


def find_steps(points: Sequence[Point], threshold: float = DEFAULT_THRESHOLD) -> list[Step]:
    """Every level change asv's ``detect_steps`` fits that exceeds the threshold: larger than
    ``threshold`` times the old level and than either level's mean deviation (asv's test)."""
    from asv.step_detect import detect_regressions

    pts, steps = _fit(points)
    if not steps:
        return []
    _, _, jumps = detect_regressions(steps, threshold)
    # asv's jumps are (last index of the good level, first index of the worse one, ...)
    active = {(a, b) for a, b, _, _ in (jumps or []) if b is not None}
    out = []
    for (_, r1, v1, _, e1), (l2, _, v2, _, e2) in zip(steps, steps[1:]):
        is_active = (r1 - 1, l2) in active
        if is_active or abs(v2 - v1) > max(e1, e2, threshold * abs(v1)):
            out.append(Step(pts[r1 - 1].commit, pts[l2].commit, v1, v2, is_active))
    return out


@dataclass
class Finding:
    machine: str
    entry: str
    unit: str
    steps: list[Step]
    metric: Any = None  # asv.layout.AsvMetric: to say the change in the original metric's terms


@dataclass
class HistoryReport:
    findings: list[Finding] = field(default_factory=list)
    series: int = 0
    commits: list[str] = field(default_factory=list)
    since: str | None = None

    def regressions(self) -> list[tuple[Finding, Step]]:
        return [(f, s) for f in self.findings for s in f.steps if s.kind == "regression"]

    def improvements(self) -> list[tuple[Finding, Step]]:
        return [(f, s) for f in self.findings for s in f.steps if s.kind == "improvement"]

    def new_regressions(self) -> list[tuple[Finding, Step]]:
        """Active regressions that start after ``since`` (every active one without ``since``)."""
        start = self.commits.index(self.since) + 1 if self.since in self.commits else 0
        later = set(self.commits[start:])
        return [(f, s) for f, s in self.regressions() if s.active and s.after in later]


def analyse(series: Iterable[Any], order: list[str], thresholds: Mapping[str, float] | None = None,
            since: str | None = None) -> HistoryReport:
    """Findings for every series (objects with machine, entry, unit, metric, points)."""
    report = HistoryReport(commits=list(order), since=since)
    for s in series:
        report.series += 1
        steps = find_steps(s.points, threshold_for(s.entry, thresholds or {}))
        if steps:
            report.findings.append(Finding(s.machine, s.entry, s.unit, steps, s.metric))
    return report


def resolve_since(order: Sequence[str], since: str | None) -> str | None:
    """A full hash from a prefix among the recorded commits; ValueError names the choices."""
    if since is None:
        return None
    hits = [c for c in order if c.startswith(since.lower())]
    if len(hits) != 1:
        what = "matches no recorded commit" if not hits else "matches several recorded commits"
        raise ValueError(f"--since {since!r} {what}; give a longer prefix of one "
                         f"of the {len(order)} recorded commits (latest {order[-1][:8] if order else '-'})")
    return hits[0]


def _describe_step(f: Finding, s: Step) -> str:
    tail = ""
    if f.metric is not None and getattr(f.metric, "inverse", False):
        tail = f" ({f.metric.metric} {100 * f.metric.metric_change(s.ratio):+.1f}%)"
    flag = ""
    if s.kind == "regression":
        flag = "  [active]" if s.active else "  [fixed later]"
    return (f"  {s.kind.upper() if s.kind == 'regression' else s.kind:<11} {100 * s.change:+7.1f}%{tail}"
            f"  commits {s.commits}  {s.value_before:.4g} -> {s.value_after:.4g} {f.unit}{flag}")


def format_report(report: HistoryReport) -> str:
    """Plain text: one block per series with steps, then the counts."""
    lines = [f"# history: {report.series} series over {len(report.commits)} commits"]
    for f in report.findings:
        lines.append(f"{f.entry} on {f.machine}:")
        lines.extend(_describe_step(f, s) for s in f.steps)
    regs, imps, new = report.regressions(), report.improvements(), report.new_regressions()
    active = sum(1 for _, s in regs if s.active)
    since = f" since {report.since[:8]}" if report.since else ""
    lines.append(f"# {len(regs)} regressions ({active} active, {len(new)} new{since}), "
                 f"{len(imps)} improvements, {report.series - len(report.findings)} series without steps")
    return "\n".join(lines)
