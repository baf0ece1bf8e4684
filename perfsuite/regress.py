"""Verdicts: a measured sample against its baseline, or arm B against arm A -> regression or
improvement (DIFFERENT), same (SAME), unknown (UNKNOWN), new, missing or invalid. Pure
functions over ``model`` records and ``stats``; nothing here reads a file or starts a process.

How a change is decided (two-sided: improvements are reported like regressions)
----------------------------------------------------------------------------------
Every comparison ends with an interval for the change, and the interval against the tolerance
(the effect the user cares about) decides, as Chromium's Pinpoint and equivalence testing do:
entirely beyond the tolerance is DIFFERENT, entirely inside it is SAME, straddling it is
UNKNOWN ("cannot tell yet"). A comparison that could not have seen the tolerance (one round
against one, or every round contended) is UNKNOWN, never "unchanged".

* The unit of replication is the **round**: one world run, summarised by its median over
  iterations (the kernel's p50). Worlds differ far more than iterations within a world do
  (here: 4 B latency moves ~8% between quiet worlds, iterations of one world ~2%), so
  iterations are not independent draws of what a rerun would see.
* **Against a stored baseline** (independent samples): the interval of the shift of log round
  values, new against baseline, from the Mann-Whitney test inverted (Hodges-Lehmann;
  ``stats.shift_ci``): rank-based, so a round that ran at half speed counts as one rank; exact
  for small counts; no distribution assumed. Its estimate is the reported change. Rounds are
  set against rounds of their own machine mode only (``mode_strata``, by the canaries), with
  the counts of every mode summed (``stats.stratified_shift_ci``, van Elteren's way), so a
  baseline split over two modes still lends all its rounds.
* **Arm B against arm A** (``perfsuite ab``; pairs of worlds run next to each other): the
  interval of the median of per-pair log ratios from the sign test (``stats.sign_ci``),
  which needs neither symmetry nor a distribution.
* **Repeated looks**: adaptive sampling judges after every round (or pair) and stops when
  decided. Each look's interval is at confidence 1 - alpha/looks (Bonferroni over the most looks
  the budget allows), so the chance that any look wrongly calls a change DIFFERENT stays below
  alpha however the sampling stops.
* **Tolerance**: the user's, else the baseline's own, else the metric's default widened to
  ``NOISE_FACTOR`` x the baseline's between-round spread: a machine whose quiet worlds differ
  by 8% cannot tell 3% from nothing, and a verdict must not pretend it can.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from . import stats
from .errors import ConfigError
from .model import VERDICT_ORDER, Baseline, Sample, Tolerance, Verdict, timing_of
from .rounds import (DEFAULT_CANARY_SHIFT, ROUNDS_KEY, RoundsPolicy, modal_canary,  # noqa: F401
                     pool_by_case, pool_results, pool_rounds, precise_enough, round_canaries,
                     round_values, same_mode)

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


# --- baselines from samples ---------------------------------------------------------------------

def baseline_from_sample(sample: Sample, metric: str, recorded: str = "",
                         tolerance: Tolerance | None = None, xfail: str | None = None) -> Baseline:
    """The Baseline of one metric of a (possibly pooled) sample."""
    m = sample.metrics[metric]
    raw = list(m.samples) or round_values(sample, metric)
    summary = stats.summarize(raw)
    rounds = round_values(sample, metric)
    canaries = round_canaries(sample)
    canary = (tuple(float(c) for c in canaries)
              if len(canaries) == len(rounds) and all(c is not None for c in canaries) else ())
    return Baseline(case=sample.case.name, metric=metric, unit=m.unit, canary=canary,
                    higher_is_better=m.higher_is_better, value=stats.median(rounds),
                    rounds=tuple(rounds), samples=tuple(stats.thin(raw, MAX_BASELINE_SAMPLES)),
                    median=summary["median"], iqr=summary["iqr"], mad=summary["mad"], n=int(summary["n"]),
                    tolerance=tolerance, xfail=xfail, recorded=recorded,
                    timing=timing_of(sample.info))


# --- verdicts ---------------------------------------------------------------------------------

#: A default tolerance is widened to this many times the baseline's between-round spread, but
#: never past MAX_NOISE_TOLERANCE: beyond it a noisy baseline would call everything SAME.
NOISE_FACTOR = 2.0
MAX_NOISE_TOLERANCE = 0.20


def interval_status(low: float, high: float, tol: Tolerance, higher_is_better: bool) -> str:
    """The verdict of a change known to lie in [low, high] (fractions, value / reference - 1)."""
    if high < tol.lower:
        return "regression" if higher_is_better else "improvement"
    if low > tol.upper:
        return "improvement" if higher_is_better else "regression"
    if tol.lower <= low and high <= tol.upper:
        return "same"
    return "unknown"


def confidence(alpha: float, looks: int = 1) -> float:
    """Each look's confidence so that ``looks`` looks together keep the false-alarm rate <= alpha."""
    return 1.0 - alpha / max(1, looks)


def noise_tolerance(metric: str, base_rounds: Sequence[float]) -> Tolerance:
    """The metric's default tolerance, widened to what the baseline's own rounds can resolve."""
    tol = default_tolerance(metric)
    if len(base_rounds) < 3:
        return tol
    spread = min(NOISE_FACTOR * stats.relative_spread(base_rounds), MAX_NOISE_TOLERANCE)
    return Tolerance(min(tol.lower, -spread), max(tol.upper, spread))


def _log(values: Sequence[float]) -> list[float]:
    return [math.log(max(v, 1e-300)) for v in values]


#: Fewest baseline rounds, in the candidate's machine modes, that a verdict may rest on.
MIN_MODE_ROUNDS = 3

Strata = list[tuple[list[float], list[float]]]


def mode_strata(sample: Sample, metric: str, baseline: Baseline, limit: float | None
                ) -> tuple[Strata, int, str | None]:
    """The rounds of both sides grouped by machine mode (their canaries within ``limit`` of the
    mode's), as (candidate rounds, baseline rounds) per mode the candidate ran in; how many
    candidate rounds ran in a mode no baseline round did; and why no verdict can be had (None
    when one can). Without canaries on both sides, or with ``limit`` None: one stratum."""
    new, base = round_values(sample, metric), list(baseline.rounds)
    canaries = round_canaries(sample)
    if (limit is None or not baseline.canary or len(canaries) != len(new)
            or any(c is None for c in canaries)):
        return [(new, base)], 0, None
    left_new, left_base = list(zip(new, canaries)), list(zip(base, baseline.canary))
    strata: Strata = []
    other = 0
    first = None
    while left_new:  # the candidate's commonest mode first, then the next among what is left
        ref = modal_canary([c for _, c in left_new], limit)
        first = first or ref
        got_new = [v for v, c in left_new if same_mode(c, ref, limit)]
        got_base = [v for v, c in left_base if same_mode(c, ref, limit)]
        left_new = [(v, c) for v, c in left_new if not same_mode(c, ref, limit)]
        left_base = [(v, c) for v, c in left_base if not same_mode(c, ref, limit)]
        if got_base:
            strata.append((got_new, got_base))
        else:
            other += len(got_new)
    n_base = sum(len(b) for _, b in strata)
    if n_base < MIN_MODE_ROUNDS:
        return strata, other, (f"machine in another mode than the baseline: canary {first:.0f} us "
                               f"now, {n_base} of {len(baseline.rounds)} baseline rounds within "
                               f"+-{limit:.0%} of the candidate's rounds (median "
                               f"{stats.median(baseline.canary):.0f} us); no verdict across modes")
    return strata, other, None


def _within_mode(strata: Strata) -> list[float]:
    """Baseline rounds over their mode's median: the spread a verdict across strata sees. A
    mode with one baseline round says nothing of the spread (its ratio is 1 by construction,
    which would narrow the tolerance), so it is left out."""
    return [v / stats.median(b) for _, b in strata if len(b) > 1 for v in b]


def verdict(case: str, metric: str, sample: Sample | None, baseline: Baseline | None, *,
            tolerance: Tolerance | None = None, alpha: float = DEFAULT_ALPHA,
            system: str = "", looks: int = 1,
            canary_shift: float | None = DEFAULT_CANARY_SHIFT) -> Verdict:
    """The verdict of one metric of one case against its stored baseline.

    Tolerance precedence: ``tolerance`` argument, then the baseline's own, then the metric
    default widened by the baseline's noise (``noise_tolerance``). ``looks``: how many times
    this comparison may be judged while rounds are added (see the module notes).
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
    timing = timing_of(sample.info)
    if baseline.timing and timing and baseline.timing != timing:
        # The native loop and the mpi4py loop differ by ~0.5 us a call here: the change is the loop's.
        return Verdict(case, metric, "unknown", m.unit, m.higher_is_better, value=m.value,
                       baseline=baseline.value, system=system, xfail=xfail,
                       note=f"{case} {_short(metric)}: the baseline was timed by {baseline.timing}, "
                            f"this run by {timing}; no verdict across timings (re-record the "
                            f"baseline, or time this run by {baseline.timing}: --host-timing / "
                            "--device-timing)")
    # Rounds are compared within machine modes: across modes the change is the machine's.
    strata, other_mode, across = mode_strata(sample, metric, baseline, canary_shift)
    new_rounds = [v for n, _ in strata for v in n]
    base_rounds = [v for _, b in strata for v in b]
    tol = tolerance or baseline.tolerance or noise_tolerance(metric, _within_mode(strata))
    dropped = int(sample.info.get("rounds_dropped", 0)) + other_mode
    if across is not None:
        v = Verdict(case, metric, "unknown", m.unit, m.higher_is_better, value=m.value,
                    baseline=baseline.value, tolerance=tol, test="mwu-shift", system=system,
                    xfail=xfail, rounds=len(new_rounds), dropped=dropped,
                    note=f"{case} {_short(metric)}: {across}")
        return _contended(v, sample) or v
    # Value and reference from the candidate's main mode, so that they show the change; the
    # change and its interval from every mode the two sides share.
    main_new, main_base = strata[0]
    est, lo, hi = stats.stratified_shift_ci([(_log(n), _log(b)) for n, b in strata],
                                            confidence(alpha, looks))
    p = stats.stratified_mann_whitney_p(strata)
    v = Verdict(case, metric, interval_status(_change(lo), _change(hi), tol, m.higher_is_better),
                m.unit, m.higher_is_better, value=stats.median(main_new),
                baseline=stats.median(main_base),
                change=_change(est), low=_change(lo), high=_change(hi), tolerance=tol, p_value=p,
                test="mwu-shift", system=system, xfail=xfail, rounds=len(new_rounds),
                dropped=dropped)
    return _contended(v, sample) or replace(v, note=describe(v))


def _contended(v: Verdict, sample: Sample) -> Verdict | None:
    """UNKNOWN, "machine contended", when every round of ``sample`` was."""
    if not sample.info.get("contended"):
        return None
    return replace(v, status="unknown", note=f"{v.case} {_short(v.metric)}: machine contended "
                   f"({float(sample.info.get('contention') or 0):.0%} run-queue wait in the least "
                   f"contended of {len(round_values(sample, v.metric))} round(s)); no verdict "
                   "rests on contended rounds")


def paired_verdict(case: str, metric: str, ratios: Sequence[float], *, unit: str,
                   higher_is_better: bool, tolerance: Tolerance, alpha: float = DEFAULT_ALPHA,
                   looks: int = 1, dropped: int = 0, a: float | None = None,
                   b: float | None = None, system: str = "") -> Verdict:
    """The verdict of arm B against arm A from per-pair ratios B/A of one metric."""
    if not ratios:
        return Verdict(case, metric, "unknown", unit, higher_is_better, tolerance=tolerance,
                       test="sign-pairs", system=system, dropped=dropped,
                       note=f"{case} {_short(metric)}: no pair to judge ({dropped} dropped: "
                            "contended or in another machine mode)")
    est, lo, hi = stats.sign_ci(_log(ratios), confidence(alpha, looks))
    v = Verdict(case, metric, interval_status(_change(lo), _change(hi), tolerance, higher_is_better),
                unit, higher_is_better, value=b, baseline=a, change=_change(est), low=_change(lo),
                high=_change(hi), tolerance=tolerance, test="sign-pairs", system=system,
                rounds=len(ratios), dropped=dropped)
    return replace(v, note=describe(v))


def _change(log_shift: float) -> float:
    if log_shift == math.inf:
        return math.inf
    if log_shift == -math.inf:
        return -1.0
    return math.exp(log_shift) - 1.0


def decided(v: Verdict) -> bool:
    """Whether more rounds could change this verdict (UNKNOWN is the only undecided one)."""
    return v.status != "unknown"


def compare(samples: Iterable[Sample], baselines: Mapping[tuple[str, str], Baseline], *,
            tolerance: Tolerance | None = None, alpha: float = DEFAULT_ALPHA, system: str = "",
            cases: Iterable[str] | None = None, looks: int = 1,
            canary_shift: float | None = DEFAULT_CANARY_SHIFT) -> list[Verdict]:
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
                               alpha=alpha, system=system, looks=looks, canary_shift=canary_shift))
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
    head = (f"{'status':<12}{'case':<34}{'metric':<12}{'value':>10}{'ref':>10}{'change':>8}"
            f"{'interval':>18}{'tol':>11}{'rounds':>8}")
    lines = [head]
    for v in rows:
        status = v.status.upper() if v.is_failure and not v.xfail else v.status
        if v.xfail and v.is_failure:
            status += "(x)"
        tol = _tol(v.tolerance)
        interval = f"[{_pct(v.low)}, {_pct(v.high)}]" if v.low is not None else ""
        rounds = f"{v.rounds}" + (f"-{v.dropped}" if v.dropped else "") if v.rounds else ""
        lines.append(f"{status:<12}{v.case:<34}{_short(v.metric):<12}{_fmt(v.value):>10}"
                     f"{_fmt(v.baseline):>10}{'' if v.change is None else _pct(v.change):>8}"
                     f"{interval:>18}{tol:>11}{rounds:>8}")
    counts = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: order.get(kv[0], 9)))
                 or "no verdicts")
    if any(v.dropped for v in verdicts):
        lines.append("# rounds N-D: N rounds judged, D more left out as contended or in another "
                     "machine mode")
    if any(v.status == "unknown" and v.test == "mwu-shift" for v in verdicts):
        # A stored baseline cannot be measured again; the arms of an A/B run can, side by side.
        lines.append("# unknown against a stored baseline: to decide, measure both sides now, "
                     "interleaved: perfsuite ab --a-python OLD_VENV/bin/python (or --a-env/--b-env)")
    return "\n".join(lines)


def describe(v: Verdict) -> str:
    """'allreduce[mpi-n2-1MiB] busbw 0.92 GB/s vs 1.25 GB/s on sys: -26% [-31%, -20%],
    tolerance +-10%: regression' (what was decided and from how much)."""
    limit = _tol(v.tolerance) or "n/a"
    system = f" on {v.system}" if v.system else ""
    ref = "baseline" if v.test != "sign-pairs" else "A"
    unit = f" {v.unit}" if v.unit else ""
    line = (f"{v.case} {_short(v.metric)} {_fmt(v.value)}{unit} vs {ref} {_fmt(v.baseline)}{unit}"
            f"{system}: {_pct(v.change)} [{_pct(v.low)}, {_pct(v.high)}], tolerance {limit}, "
            f"{v.rounds} {'pair' if v.test == 'sign-pairs' else 'round'}{'' if v.rounds == 1 else 's'}")
    if v.dropped:
        line += f" ({v.dropped} dropped: contended or in another machine mode)"
    line += f": {v.status}"
    if v.status == "unknown":
        line += (" (the interval is unbounded: too few rounds to judge)" if v.high == math.inf
                 else " (the interval straddles the tolerance)")
    if v.xfail:
        line += f" [expected failure: {v.xfail}]"
    return line


def _tol(tol: Tolerance | None) -> str:
    """'+-3%' for a symmetric tolerance, '-75%/+300%' otherwise."""
    if tol is None:
        return ""
    return f"+-{tol.upper:.0%}" if -tol.lower == tol.upper else f"{tol.lower:+.0%}/{tol.upper:+.0%}"


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x == math.inf:
        return "+inf"
    return f"{x:+.1%}"


def _short(metric: str) -> str:
    return _SHORT_METRIC.get(metric, metric)


def _direction(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
