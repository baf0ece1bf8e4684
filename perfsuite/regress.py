"""Verdicts: a measured sample against its baseline -> regression, improvement, unchanged, new,
missing or invalid. Pure functions over ``model`` records and ``stats``; nothing here reads a
file or starts a process.

How a change is decided (two-sided: improvements are reported like regressions)
----------------------------------------------------------------------------------
A change counts only when it is both **beyond the tolerance** (an effect size the user cares
about) and **statistically significant** (unlikely to be noise), as asv does.

* The unit of replication is the **round**: one world run, summarised by its median over
  iterations (the kernel's p50). On a shared 2-core machine rounds differ far more than
  iterations within a round do (measured here: the p50 of 1 MiB allreduce moved by ~30% between
  worlds while iterations within a world spread by ~2%, because another job sharing a core halves
  a whole world's speed). Iterations of one world are therefore not independent draws of what a
  rerun would see, and a test over them would call every between-world wobble significant.
* The point estimate is the ratio of the medians of the round values: a median, so one contended
  round cannot move it.
* The test is **Mann-Whitney U, two-sided, over round values**. It is rank-based, so a round that
  ran at half speed counts as one rank, not as a huge number; it assumes no distribution (the
  round values here are bimodal); and it is the test asv uses for the same decision. We chose it
  over a bootstrap CI of the median ratio because with the 5-10 rounds a gate can afford, a
  bootstrap's percentile interval is too coarse and under-covers, while U's p-value is exact.
* U over n1 vs n2 values cannot give p below 2/C(n1+n2, n1) (0.33 for 2 vs 2). When the rounds
  cannot reach ``alpha`` (fewer than 4 + 4 at 0.05, 5 + 5 at 0.01), the test falls back to U over
  the raw per-iteration samples, and the verdict says so (``test='mwu-iterations'``): that only
  proves the two runs differ, so the tolerance alone guards against between-run noise. Use
  ``rounds >= 5`` on a shared machine (docs/baselines.md says what that costs).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from . import stats
from .errors import ConfigError
from .model import VERDICT_ORDER, Baseline, Metric, Result, Sample, Tolerance, Verdict

#: Significance level of the two-sided test.
DEFAULT_ALPHA = 0.01
#: Tolerance per metric name; others get ``DEFAULT_TOLERANCE`` (docs/baselines.md says why).
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "busbw_GBps": Tolerance(-0.03, 0.03),
    "latency_us": Tolerance(-0.03, 0.03),
}
DEFAULT_TOLERANCE = Tolerance(-0.05, 0.05)
#: Raw per-iteration samples kept in a baseline (evenly spaced order statistics beyond this).
MAX_BASELINE_SAMPLES = stats.MAX_KEPT_SAMPLES
#: Key in ``Sample.info`` holding per-metric round values of a pooled sample.
ROUNDS_KEY = "round_values"

_SHORT_METRIC = {"busbw_GBps": "busbw", "algbw_GBps": "algbw", "latency_us": "latency"}


def default_tolerance(metric: str) -> Tolerance:
    return DEFAULT_TOLERANCES.get(metric, DEFAULT_TOLERANCE)


def parse_alpha(text: str | float | None) -> float:
    """The gate's significance level: a fraction strictly between 0 and 1 (None: the default).
    A smaller alpha trades missed regressions for fewer false alarms; see detection-power."""
    if text is None or text == "":
        return DEFAULT_ALPHA
    try:
        alpha = float(text)
    except (TypeError, ValueError):
        alpha = float("nan")
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"significance level (alpha) {text!r} must be a fraction between 0 and 1, "
                          "e.g. 0.01 or 0.05")
    return alpha


def parse_tolerance(text: str) -> Tolerance:
    """'0.05' -> (-0.05, +0.05); '-0.10:0.02' -> (-0.10, +0.02). Fractions, not percents."""
    try:
        if ":" in text:
            lo, hi = (float(x) for x in text.split(":", 1))
        else:
            hi = float(text)
            lo = -hi
        return Tolerance(lo, hi)
    except (ValueError, ConfigError):
        raise ConfigError(f"tolerance {text!r} must be a fraction like 0.05 or LOWER:UPPER like "
                          "-0.10:0.05 (lower <= 0 <= upper)") from None


# --- rounds -------------------------------------------------------------------------------------

def round_values(sample: Sample, metric: str) -> list[float]:
    """The per-round values of ``metric`` (one per world run); a plain sample is one round."""
    pooled = sample.info.get(ROUNDS_KEY, {}).get(metric)
    if pooled:
        return [float(x) for x in pooled]
    return [float(sample.metrics[metric].value)]


def pool_rounds(rounds: Sequence[Sample]) -> Sample:
    """Merge samples of one case from several rounds into one sample.

    The pooled value of each metric is the median of the round values; raw samples are
    concatenated; ``info[ROUNDS_KEY]`` keeps the round values for the test. A sample that failed
    validation in any round makes the pooled one invalid.
    """
    if not rounds:
        raise ValueError("pool_rounds needs at least one sample")
    case = rounds[0].case
    for s in rounds:
        if s.case != case:
            raise ValueError(f"pool_rounds got {s.case.name} among rounds of {case.name}")
    if len(rounds) == 1 and ROUNDS_KEY not in rounds[0].info:
        return rounds[0]
    metrics: dict[str, Metric] = {}
    per_round: dict[str, list[float]] = {}
    for name, first in rounds[0].metrics.items():
        values = [v for s in rounds if name in s.metrics for v in round_values(s, name)]
        raw = tuple(x for s in rounds if name in s.metrics for x in s.metrics[name].samples)
        per_round[name] = values
        metrics[name] = replace(first, value=stats.median(values), samples=raw)
    info = dict(rounds[-1].info)
    for key, last in info.items():
        # Numbers the kernel reported (p50, p99, busbw, ...) become their median over the rounds,
        # so tables built from ``info`` agree with the pooled metrics.
        vals = [r.info.get(key) for r in rounds]
        if (key != ROUNDS_KEY and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals)
                and len(set(vals)) > 1):
            info[key] = stats.median(vals)
    info[ROUNDS_KEY] = per_round
    info["rounds"] = len(next(iter(per_round.values()), []))
    return Sample(case, metrics, all(s.valid for s in rounds),
                  tuple(t for s in rounds for t in s.times_s), info)


def pool_by_case(rounds: Iterable[Iterable[Sample]]) -> list[Sample]:
    """Rounds (each a list of samples, one per case) -> one pooled sample per case, in order."""
    by_case: dict[str, list[Sample]] = {}
    for one_round in rounds:
        for s in one_round:
            by_case.setdefault(s.case.name, []).append(s)
    return [pool_rounds(ss) for ss in by_case.values()]


def precise_enough(samples: Iterable[Sample], target: float, confidence: float = 0.95,
                   min_rounds: int = 3) -> bool:
    """Adaptive sampling's stop rule: every metric's median over rounds is known to +-target.

    ``target`` is the relative half-width of the distribution-free CI of the median of the round
    values, e.g. 0.01. Fewer than ``min_rounds`` rounds never counts as precise.
    """
    for s in samples:
        for name in s.metrics:
            values = round_values(s, name)
            if len(values) < min_rounds or stats.relative_ci_halfwidth(values, confidence) > target:
                return False
    return True


@dataclass(frozen=True)
class RoundsPolicy:
    """How many rounds (worlds) to run per world spec and pool: at least ``rounds``; then, while
    the median of some metric is not yet known to +-``precision`` (relative, 95%), more up to
    ``max_rounds``, unless ``budget_s`` seconds have been spent on this world already."""

    rounds: int = 1
    max_rounds: int | None = None  # None: exactly ``rounds`` (no adaptive sampling)
    precision: float = 0.01
    budget_s: float | None = None

    def __post_init__(self):
        if self.rounds < 1:
            raise ConfigError(f"rounds {self.rounds} must be >= 1")
        if self.max_rounds is not None and self.max_rounds < self.rounds:
            raise ConfigError(f"max rounds {self.max_rounds} must be >= rounds ({self.rounds})")
        if not 0.0 < self.precision < 1.0:
            raise ConfigError(f"precision {self.precision!r} must be a fraction like 0.01")
        if self.budget_s is not None and self.budget_s <= 0:
            raise ConfigError(f"round budget {self.budget_s!r} must be a number of seconds > 0")

    def more(self, done: int, elapsed_s: float, pooled: Iterable[Sample]) -> bool:
        """Whether to run another round after ``done`` rounds taking ``elapsed_s`` seconds."""
        if done < self.rounds:
            return True
        if self.max_rounds is None or done >= self.max_rounds:
            return False
        if self.budget_s is not None and elapsed_s >= self.budget_s:
            return False
        return not precise_enough(pooled, self.precision, min_rounds=min(3, self.max_rounds))


def pool_results(results: Sequence[Result]) -> Result:
    """Several rounds of one world as one Result: samples pooled per case (``pool_by_case``),
    wall time summed, ``extra['rounds']`` the number of rounds."""
    if not results:
        raise ValueError("pool_results needs at least one result")
    if len(results) == 1:
        return results[0]
    last = results[-1]
    starts = [r.world_start_s for r in results if r.world_start_s is not None]
    return replace(last, samples=tuple(pool_by_case(r.samples for r in results)),
                   world_start_s=stats.median(starts) if starts else None,
                   wall_s=sum(r.wall_s or 0.0 for r in results),
                   extra={**last.extra, "rounds": len(results)})


# --- baselines from samples ---------------------------------------------------------------------

def baseline_from_sample(sample: Sample, metric: str, recorded: str = "",
                         tolerance: Tolerance | None = None, xfail: str | None = None) -> Baseline:
    """The Baseline of one metric of a (possibly pooled) sample."""
    m = sample.metrics[metric]
    raw = list(m.samples) or round_values(sample, metric)
    summary = stats.summarize(raw)
    rounds = round_values(sample, metric)
    return Baseline(case=sample.case.name, metric=metric, unit=m.unit,
                    higher_is_better=m.higher_is_better, value=stats.median(rounds),
                    rounds=tuple(rounds), samples=tuple(stats.thin(raw, MAX_BASELINE_SAMPLES)),
                    median=summary["median"], iqr=summary["iqr"], mad=summary["mad"], n=int(summary["n"]),
                    tolerance=tolerance, xfail=xfail, recorded=recorded)


# --- verdicts -----------------------------------------------------------------------------------

def significance(new_rounds: Sequence[float], base_rounds: Sequence[float],
                 new_raw: Sequence[float], base_raw: Sequence[float],
                 alpha: float = DEFAULT_ALPHA) -> tuple[float, str]:
    """(p, test name): U over rounds when they can reach ``alpha``, else over raw samples."""
    if stats.mann_whitney_min_p(len(new_rounds), len(base_rounds)) < alpha:
        return stats.mann_whitney_p(base_rounds, new_rounds), "mwu-rounds"
    if new_raw and base_raw:
        return stats.mann_whitney_p(base_raw, new_raw), "mwu-iterations"
    return 1.0, "none"  # neither rounds nor raw samples: nothing can be significant


def verdict(case: str, metric: str, sample: Sample | None, baseline: Baseline | None, *,
            tolerance: Tolerance | None = None, alpha: float = DEFAULT_ALPHA,
            system: str = "") -> Verdict:
    """The verdict of one metric of one case.

    Tolerance precedence: ``tolerance`` argument, then the baseline's own, then the metric default.
    """
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"significance level {alpha!r} must be between 0 and 1, e.g. 0.01")
    xfail = baseline.xfail if baseline else None
    if sample is None or metric not in sample.metrics:
        if baseline is None:
            raise ValueError(f"verdict for {case} {metric}: neither a sample nor a baseline")
        return Verdict(case, metric, "missing", baseline.unit, baseline.higher_is_better,
                       baseline=baseline.value, system=system, xfail=xfail,
                       note=f"{case} {_short(metric)}: baseline on {system or 'this system'} "
                            "but no result (case not run, skipped or failed)")
    m = sample.metrics[metric]
    if not sample.valid:
        return Verdict(case, metric, "invalid", m.unit, m.higher_is_better, value=m.value,
                       baseline=baseline.value if baseline else None, system=system, xfail=xfail,
                       note=f"{case} {_short(metric)}: result failed validation (wrong sum), "
                            "so its timing means nothing")
    if baseline is None:
        return Verdict(case, metric, "new", m.unit, m.higher_is_better, value=m.value,
                       system=system, note=f"{case} {_short(metric)} {_fmt(m.value)} {m.unit}: "
                                           f"new, no baseline on {system or 'this system'}")
    if baseline.unit != m.unit or baseline.higher_is_better != m.higher_is_better:
        raise ConfigError(f"{case} {metric}: baseline is in {baseline.unit!r} "
                          f"({_direction(baseline.higher_is_better)}), the result in {m.unit!r} "
                          f"({_direction(m.higher_is_better)}); update the baseline")
    tol = tolerance or baseline.tolerance or default_tolerance(metric)
    new_rounds = round_values(sample, metric)
    value = stats.median(new_rounds)
    change = value / baseline.value - 1.0 if baseline.value else 0.0
    p, test = significance(new_rounds, baseline.rounds, m.samples, baseline.samples, alpha)
    below, above = change < tol.lower, change > tol.upper
    worse = below if m.higher_is_better else above
    better = above if m.higher_is_better else below
    significant = p < alpha
    status = ("regression" if worse and significant else
              "improvement" if better and significant else "unchanged")
    v = Verdict(case, metric, status, m.unit, m.higher_is_better, value=value,
                baseline=baseline.value, change=change, tolerance=tol, p_value=p, test=test,
                system=system, xfail=xfail)
    return replace(v, note=describe(v, significant, worse or better))


def compare(samples: Iterable[Sample], baselines: Mapping[tuple[str, str], Baseline], *,
            tolerance: Tolerance | None = None, alpha: float = DEFAULT_ALPHA, system: str = "",
            cases: Iterable[str] | None = None) -> list[Verdict]:
    """Every verdict: each metric of each sample, then each baseline with no sample (missing).

    ``baselines`` maps (case name, metric) to Baseline. ``cases``, when given, limits 'missing' to
    the cases that were selected to run (a run of two sizes does not miss the other eleven).
    """
    out: list[Verdict] = []
    seen: set[tuple[str, str]] = set()
    for s in samples:
        for metric in s.metrics:
            key = (s.case.name, metric)
            seen.add(key)
            out.append(verdict(s.case.name, metric, s, baselines.get(key), tolerance=tolerance,
                               alpha=alpha, system=system))
    wanted = set(cases) if cases is not None else None
    for key, b in baselines.items():
        if key not in seen and (wanted is None or key[0] in wanted):
            out.append(verdict(key[0], key[1], None, b, tolerance=tolerance, alpha=alpha,
                               system=system))
    return out


def failing(verdicts: Iterable[Verdict], strict: bool = False) -> list[Verdict]:
    """Verdicts that fail a gate: regressions and invalid results (and improvements if strict),
    except those a baseline's expected-failure reason excuses."""
    bad = ("regression", "invalid", "improvement") if strict else ("regression", "invalid")
    return [v for v in verdicts if v.status in bad and not v.xfail]


def case_line(verdicts: Sequence[Verdict]) -> str:
    """One line for a case with several metric verdicts: the worst one's note."""
    order = {s: i for i, s in enumerate(VERDICT_ORDER)}

    def excess(v: Verdict) -> float:
        if v.change is None or v.tolerance is None:
            return 0.0
        return max(v.tolerance.lower - v.change, v.change - v.tolerance.upper)

    worst = sorted(verdicts, key=lambda v: (order.get(v.status, 9), -excess(v)))
    return worst[0].note if worst else ""


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    """Every verdict as a terminal table, failures first, then a count per status."""
    order = {s: i for i, s in enumerate(VERDICT_ORDER)}
    rows = sorted(verdicts, key=lambda v: (order.get(v.status, 9), v.case, v.metric))
    head = f"{'status':<12}{'case':<34}{'metric':<12}{'value':>10}{'baseline':>10}{'change':>8}{'tol':>6}{'p':>9}  test"
    lines = [head]
    for v in rows:
        status = v.status.upper() if v.is_failure and not v.xfail else v.status
        if v.xfail and v.is_failure:
            status += "(x)"
        tol = ""
        if v.tolerance is not None and v.change is not None:
            tol = f"{(v.tolerance.lower if v.change < 0 else v.tolerance.upper):+.0%}"
        lines.append(f"{status:<12}{v.case:<34}{_short(v.metric):<12}{_fmt(v.value):>10}"
                     f"{_fmt(v.baseline):>10}{'' if v.change is None else format(v.change, '+.1%'):>8}"
                     f"{tol:>6}{'' if v.p_value is None else format(v.p_value, '.2g'):>9}  {v.test}")
    counts = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: order.get(kv[0], 9)))
                 or "no verdicts")
    return "\n".join(lines)


def describe(v: Verdict, significant: bool = True, beyond: bool = True) -> str:
    """'allreduce[mpi-n2-1MiB] busbw 0.92 GB/s vs baseline 1.25 GB/s on sys (-26%, tolerance
    -10%, p=0.001)' plus why an apparent change did not count."""
    tol = v.tolerance
    limit = ""
    if tol is not None and v.change is not None:
        # The bound on the side the value moved to, so the reader compares like with like.
        limit = f"{tol.lower:+.0%}" if v.change < 0 else f"{tol.upper:+.0%}"
    system = f" on {v.system}" if v.system else ""
    p = f"p={v.p_value:.2g}" if v.p_value is not None else "p=n/a"
    line = (f"{v.case} {_short(v.metric)} {_fmt(v.value)} {v.unit} vs baseline "
            f"{_fmt(v.baseline)} {v.unit}{system} ({v.change:+.0%}, tolerance {limit}, {p})")
    if v.status == "unchanged" and beyond and not significant:
        line += f": beyond tolerance but not significant ({v.test})"
    if v.xfail:
        line += f" [expected failure: {v.xfail}]"
    return line


def _short(metric: str) -> str:
    return _SHORT_METRIC.get(metric, metric)


def _direction(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
