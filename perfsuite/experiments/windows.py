"""The two verdict modes judged on contiguous windows of one time-ordered stream of worlds
(see ``detection.py``): each window is one independent comparison, judged by the same rule,
looks and confidence the real command uses, and timed by the worlds it needed."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..verdicts import decision, regress, rounds
from ..records import stats
from ..records.model import Metric, Sample

def raw(world, case: str, metric: str) -> float | None:
    return world.value(case, metric)


def canary_adjusted(world, case: str, metric: str) -> float | None:
    """The metric in units of the world's canary: a latency divided by it, a bandwidth times it
    (a slow spell lengthens both the canary and the call). Studied, not used by verdicts."""
    v, c = world.value(case, metric), world.canary(case)
    if v is None or c is None:
        return None
    s = world.sample(case)
    return v * c if s.metrics[metric].higher_is_better else v / c


def same_mode(a, b, case: str, shift: float | None) -> bool:
    return rounds.same_mode(a.canary(case), b.canary(case), shift)


@dataclass
class Window:
    statuses: dict[tuple[str, str], str]
    used: int  # pairs (A/B) or rounds (stored) judged
    dropped: int  # contended pairs or rounds left out
    time_s: float  # worlds' wall time the window needed
    t: float  # when its first world started
    changes: dict[tuple[str, str], tuple[float | None, float | None, float | None]] = field(
        default_factory=dict)


@dataclass
class Row:
    mode: str  # "A/B" or "stored"
    condition: str  # "clean" or "+5%", ...
    slowdown: float
    rounds: str  # "all" or "by mode" (what verdicts do with the canary)
    case: str
    metric: str
    windows: list[Window]
    unfinished: int = 0  # a trailing window the stream ended before it was decided

    def count(self, status: str) -> int:
        return sum(w.statuses[(self.case, self.metric)] == status for w in self.windows)

    @property
    def hits(self) -> int:
        """Slowed: flagged as a regression. Clean: flagged either way (a false alarm)."""
        if self.slowdown:
            return self.count("regression")
        return self.count("regression") + self.count("improvement")

    @property
    def n(self) -> int:
        return len(self.windows)

    def median_time(self) -> float:
        return float(np.median([w.time_s for w in self.windows])) if self.windows else math.nan

    def median_used(self) -> float:
        return float(np.median([w.used for w in self.windows])) if self.windows else math.nan

    def to_dict(self) -> dict:
        lo, hi = stats.rate_ci(self.hits, self.n) if self.n else (math.nan, math.nan)
        return {"mode": self.mode, "condition": self.condition, "slowdown": self.slowdown,
                "rounds": self.rounds, "case": self.case, "metric": self.metric, "windows": self.n,
                "flagged": self.hits, "rate_ci": [lo, hi], "same": self.count("same"),
                "unknown": self.count("unknown"), "median_time_s": self.median_time(),
                "median_used": self.median_used(), "unfinished": self.unfinished,
                "changes": [[w.changes.get((self.case, self.metric)), w.t] for w in self.windows]}


def _pairs(worlds: Sequence, kind: str) -> list[tuple[object, object]]:
    by_pair: dict[int, dict[str, object]] = {}
    for w in worlds:
        if w.kind == kind:
            by_pair.setdefault(w.pair, {})[w.role] = w
    return [(p["a"], p["b"]) for _, p in sorted(by_pair.items()) if "a" in p and "b" in p]


def ab_windows(cfg, worlds: Sequence, kind: str, shift: float | None) -> tuple[list[Window], int]:
    """Windows as ``perfsuite ab`` grows them: its looks, its judge (``ab.judge_logs``), at
    most max_pairs pairs each."""
    from .ab import PairLog, judge_logs

    looks = decision.paired_looks(cfg.max_pairs, cfg.alpha, len(cfg.metrics))
    units = {(case, metric): _unit(worlds, case, metric) for case, metric in cfg.metrics}
    out: list[Window] = []
    logs: dict = {}
    seen = dropped = 0
    time_s, start = 0.0, None
    for a, b in _pairs(worlds, kind):
        seen += 1
        time_s += a.wall_s + b.wall_s
        start = a.t if start is None else start
        calm = a.usable(cfg.max_contention) and b.usable(cfg.max_contention)
        wrong = not (a.valid and b.valid)  # never evidence (a stream measured now stops at one)
        dropped += not calm  # as perfsuite ab drops it: contended
        for case, metric in cfg.metrics:
            va, vb = a.value(case, metric), b.value(case, metric)
            if not (va and vb):
                continue
            unit, hib = units[(case, metric)]
            log = logs.setdefault(case, PairLog(metric, unit, hib))
            log.add(va, vb, (a.canary(case), b.canary(case)), contended=not calm, invalid=wrong)
        if not decision.at_look(seen, looks):
            continue
        verdicts = judge_logs(logs, tolerance=cfg.ab_tolerance, alpha=cfg.alpha,
                              share=1.0 / len(looks), canary_shift=shift)
        by = {(v.case, v.metric): v for v in verdicts}
        if all(decision.decided(v) for v in verdicts) or seen >= cfg.max_pairs:
            out.append(_window(by, seen, dropped, time_s, start))
            logs, seen, dropped, time_s, start = {}, 0, 0, 0.0, None
    return out, int(seen > 0)


def stored_windows(cfg, worlds: Sequence, shift: float | None) -> dict[str, tuple[list[Window], int]]:
    """Baseline first, then candidates >= gap later, as run --baseline-update / --compare."""
    clean = [w for w in worlds if w.slowdown == 0.0 and w.failure is None]
    slowed = [w for w in worlds if w.kind == "A/+large" and w.role == "b" and w.failure is None]
    used: set[int] = set()
    out: dict[str, tuple[list[Window], int]] = {"clean": ([], 0), "slowed": ([], 0)}
    while True:
        base = [w for w in clean if w.index not in used and w.usable(cfg.max_contention)]
        base = base[:cfg.baseline_rounds]
        if len(base) < cfg.baseline_rounds:
            break
        used.update(w.index for w in base)
        ready = base[-1].t + base[-1].wall_s + cfg.gap_s
        baselines = {}
        for case, metric in cfg.metrics:
            pooled = _pool(base, case, metric)
            baselines[(case, metric)] = regress.baseline_from_sample(pooled, metric, session=f"block {base[0].index}")
        finished = 0
        for name, pool in (("clean", clean), ("slowed", slowed)):
            cands = [w for w in pool if w.t >= ready and w.index not in used]
            window = _gate_window(cfg, cands, baselines, shift, used)
            windows, unfinished = out[name]
            if window is None:
                out[name] = (windows, unfinished + int(bool(cands)))
            else:
                windows.append(window)
                finished += 1
        if not finished:
            break
    return out


def _gate_window(cfg, cands, baselines, shift: float | None, used: set[int]) -> Window | None:
    taken, dropped, time_s = [], 0, 0.0
    looks = decision.stored_looks(1, cfg.max_rounds)
    for w in cands:
        used.add(w.index)
        time_s += w.wall_s
        if not w.usable(cfg.max_contention):
            dropped += 1  # the gate re-runs a contended round: its time counts, not its value
            continue
        taken.append(w)
        if not decision.at_look(len(taken), looks):
            continue
        samples = [_pool(taken, case, metric) for case, metric in baselines]
        verdicts = regress.compare(samples, baselines, tolerance=cfg.tolerance, alpha=cfg.alpha,
                                   looks=len(looks), canary_shift=shift,
                                   judged=lambda s: list(s.metrics))
        by = {(v.case, v.metric): v for v in verdicts}
        if all(decision.decided(v) for v in verdicts) or len(taken) >= cfg.max_rounds:
            return _window(by, len(taken), dropped, time_s, taken[0].t)
    return None


def _pool(worlds: Sequence, case: str, metric: str) -> Sample:
    def one(w) -> Sample:  # the judged number and its canary, as one round
        s = w.sample(case)
        m: Metric = s.metrics[metric]
        return replace(s, metrics={metric: replace(m, samples=())}, times_s=(),
                       info={"canary_us": s.info.get("canary_us")})
    return rounds.pool_rounds([one(w) for w in worlds])


def _window(verdicts: dict, used, dropped, time_s, start) -> Window:
    return Window({k: v.status for k, v in verdicts.items()}, used, dropped, time_s, start or 0.0,
                  {k: (v.change, v.low, v.high) for k, v in verdicts.items()})


def _unit(worlds: Sequence, case: str, metric: str) -> tuple[str, bool]:
    for w in worlds:
        s = w.sample(case)
        if s is not None and metric in s.metrics:
            return s.metrics[metric].unit, s.metrics[metric].higher_is_better
    return "", True


def _ways(cfg) -> tuple[tuple[str, float | None], ...]:
    """Rounds compared within one machine mode (what verdicts do), and all of them."""
    if cfg.canary_shift is None:
        return (("all", None),)
    return (("by mode", cfg.canary_shift), ("all", None))


def ab_rows(cfg, worlds: Sequence) -> list[Row]:
    rows = []
    for way, shift in _ways(cfg):
        for kind in ("A/A", "A/+small", "A/+large"):
            slow = cfg.slowdown(kind)
            windows, unfinished = ab_windows(cfg, worlds, kind, shift)
            for case, metric in cfg.metrics:
                rows.append(Row("A/B", _condition(slow), slow, way, case, metric, windows, unfinished))
    return rows


def stored_rows(cfg, worlds: Sequence) -> list[Row]:
    rows = []
    for way, shift in _ways(cfg):
        got = stored_windows(cfg, worlds, shift)
        for name, slow in (("clean", 0.0), ("slowed", cfg.large_slowdown)):
            windows, unfinished = got[name]
            for case, metric in cfg.metrics:
                rows.append(Row("stored", _condition(slow), slow, way, case, metric, windows, unfinished))
    return rows


def _condition(slowdown: float) -> str:
    return "clean" if slowdown == 0.0 else f"+{slowdown:.0%}"
