"""How an interval becomes a decision, for every comparison perfsuite makes: evidence that can
be read at any level (``Evidence``), looks that can decide (``stored_looks``,
``paired_looks``), and the family of a run's questions judged together (``judge``: Holm's
step-down within a group, alpha shared across groups by their size, each look spending its
share). Pure over ``model`` records and ``stats``; ``regress`` builds the questions.

A question's interval against its tolerance decides, as Chromium's Pinpoint and equivalence
testing do: entirely beyond the tolerance is DIFFERENT, entirely inside it is SAME, straddling
it is UNKNOWN. Each question states its evidence as p-values of "beyond" and "within" the
tolerance, so the family's adjustment and the interval shown can never disagree: the interval
is drawn at the level that decided.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace


from ..records import stats
from ..records.stats import LazyModule
from ..records.errors import ConfigError
from ..records.model import Tolerance, Verdict

_special = LazyModule("scipy.special")

#: Significance level: the chance that any verdict of one run wrongly says DIFFERENT.
DEFAULT_ALPHA = 0.01
#: The tolerance of a metric no benchmark declares one for (``regress.default_tolerance`` is the
#: one lookup: the user's, the baseline's, the benchmark's, then this; docs/baselines.md says why).
DEFAULT_TOLERANCE = Tolerance(-0.05, 0.05)


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


#: Fewest candidate rounds of a first look.
MIN_CANDIDATE_ROUNDS = 3
# --- evidence: what a comparison knows of one change ----------------------------------------

@dataclass(frozen=True)
class Evidence:
    """One change in log units: its estimate, and its interval and p-values at any level, so
    that a family adjustment can read it at the level it grants. ``p_beyond(lo, hi)``: the
    smallest 1 - confidence at which the interval lies wholly outside [lo, hi];
    ``p_within``: wholly inside. ``limit``: the same evidence once the candidate's own rounds
    are without number (their standard error 0), what no further round can narrow; None where
    more rounds narrow it without bound (rank evidence), so that more rounds can always decide."""

    estimate: float
    interval: Callable[[float], tuple[float, float]]
    p_beyond: Callable[[float, float], float]
    p_within: Callable[[float, float], float]
    limit: Evidence | None = None


def rank_evidence(test: stats.RankTest) -> Evidence:
    return Evidence(test.estimate, test.interval, test.p_beyond, test.p_within)


class _Normal:
    """Student's t on ``df`` degrees of freedom (None: the normal): its ``sf`` and ``ppf`` as
    scipy.stats computes them, without a frozen distribution's checks, which cost ~50 us a call
    and verdicts make thousands of calls in a simulation."""

    def __init__(self, df: float | None = None):
        self.df = df

    def sf(self, z: float) -> float:
        return float(_special.stdtr(self.df, -z) if self.df else _special.ndtr(-z))

    def ppf(self, p: float) -> float:
        return float(_special.stdtrit(self.df, p) if self.df else _special.ndtri(p))


def _z(x: float, se: float) -> float:
    """x in standard errors; a known value (se 0) is infinitely many of them either way."""
    return x / se if se > 0 else (math.copysign(math.inf, x) if x else 0.0)


def normal_evidence(est: float, se: float, df: float | None = None, span: float = 0.0,
                    floor: float | None = None) -> Evidence:
    """A change known to within ``se`` (t on ``df`` degrees of freedom, normal when None),
    and, when ``span`` > 0, only up to a level shift of +-span as well: such a change can be
    shown beyond a tolerance, never within it. ``floor``: the part of ``se`` that no number of
    further rounds removes (the drift between sessions); None: more rounds remove all of it."""
    dist = _Normal(df)

    def interval(confidence: float) -> tuple[float, float]:
        if not math.isfinite(se):
            return -math.inf, math.inf
        q = float(dist.ppf(0.5 + confidence / 2.0)) * se if se > 0 else 0.0
        return est - span - q, est + span + q

    def sf(x: float) -> float:
        return float(dist.sf(_z(x, se)))

    def beyond(lo: float, hi: float) -> float:
        if not math.isfinite(se):
            return 1.0
        return min(1.0, 2.0 * min(sf(est - span - hi), sf(lo - est - span)))

    def within(lo: float, hi: float) -> float:
        if span > 0 or not math.isfinite(se):
            return 1.0
        return min(1.0, 2.0 * max(sf(est - lo), sf(hi - est)))

    limit = normal_evidence(est, floor, df, span) if floor is not None else None
    return Evidence(est, interval, beyond, within, limit)


def band_evidence(estimate: float, level: float, se: float, band: tuple[float, float],
                  span: float) -> Evidence:
    """A candidate whose level (log, known to within ``se``) is judged against what a machine
    that moves by at most ``span`` (log) between runs could show with nothing changed: every
    level it produces lies in one window of that width, which holds the baseline's own rounds
    (log ``band`` = lowest, highest), so an unchanged candidate lies within
    [band high - span, band low + span]. The interval is how far beyond that window the
    candidate lies, at each side; it covers 0 under no change, and never shows sameness.
    ``estimate`` is the change shown (the shift against the baseline's rounds). Its limit (the
    candidate's level known exactly) is [level - band low - span, level - band high + span]."""
    return replace(_band(estimate, level, se, band, span), limit=_band(estimate, level, 0.0, band, span))


def _band(estimate: float, level: float, se: float, band: tuple[float, float], span: float) -> Evidence:
    lo_b, hi_b = band
    dist = _Normal()

    def interval(confidence: float) -> tuple[float, float]:
        if not math.isfinite(se):
            return -math.inf, math.inf
        q = float(dist.ppf(0.5 + confidence / 2.0)) * se if se > 0 else 0.0
        return level - q - lo_b - span, level + q - hi_b + span

    def beyond(lo: float, hi: float) -> float:
        if not math.isfinite(se):
            return 1.0
        up = _z(level - lo_b - span - hi, se)
        down = _z(lo - level + hi_b - span, se)
        return min(1.0, 2.0 * min(float(dist.sf(up)), float(dist.sf(down))))

    return Evidence(estimate, interval, beyond, lambda lo, hi: 1.0)


#: Where ``either`` stops looking for the level at which two intervals part: an interval at
#: 1 - 5e-16 confidence reaches 8 standard errors; two that do not meet even there never do.
_FIRST_LEVEL = 1e-15


def either(a: Evidence, b: Evidence) -> Evidence:
    """Two intervals of one change, each valid under its own assumption, read as one: each at
    half the level (Bonferroni), their intersection where they meet, so that either may
    decide. Where they do not (one assumption failed, and the data cannot say which), their
    hull, which holds the change if either does, and decides only what both would.

    So that the intervals nest (each confidence's inside the next higher one's) and the
    p-values are one inversion of them (the smallest level at which the interval shown lies
    beyond, or within), the levels at which the two still meet also hold the hull of the level
    where they part. Two that meet at every level are simply their intersection: so have a
    stored verdict's span band and drift interval in every run simulated (experiments/validity)."""
    memo: dict[str, object] = {}

    def halves(level: float) -> tuple[tuple[float, float], tuple[float, float]]:
        confidence = 1.0 - level / 2.0
        return a.interval(confidence), b.interval(confidence)

    def meet(level: float) -> bool:
        (lo1, hi1), (lo2, hi2) = halves(level)
        return max(lo1, lo2) <= min(hi1, hi2)

    def parting() -> float:
        """The highest level at which the two intervals still meet (1: at every level; 0: at
        none), and their hull there."""
        if "level" not in memo:
            if meet(1.0):
                level = 1.0
            elif not meet(_FIRST_LEVEL):
                level = 0.0
            else:  # they meet below ``low`` and part above ``high``: bisect in log level
                low, high = math.log(_FIRST_LEVEL), 0.0
                for _ in range(60):
                    mid = (low + high) / 2.0
                    low, high = (mid, high) if meet(math.exp(mid)) else (low, mid)
                level = math.exp(low)
            memo["level"] = level
            if 0.0 < level < 1.0:
                (lo1, hi1), (lo2, hi2) = halves(level)
                memo["hull"] = (min(lo1, lo2), max(hi1, hi2))
        return memo["level"]  # type: ignore[return-value]

    def interval(confidence: float) -> tuple[float, float]:
        level = 1.0 - confidence
        (lo1, hi1), (lo2, hi2) = halves(level)
        parted = parting()
        if level > parted:
            return min(lo1, lo2), max(hi1, hi2)
        lo, hi = max(lo1, lo2), min(hi1, hi2)
        if "hull" in memo:
            hull_lo, hull_hi = memo["hull"]  # type: ignore[misc]
            lo, hi = min(lo, hull_lo), max(hi, hull_hi)
        return lo, hi

    def side(pa: float, pb: float) -> float:
        """The smallest level at which the interval shown lies past a point, given the levels
        at which each of the two does (each at half the level): either of them where they
        still meet and both did at the parting, else both."""
        pa, pb = min(1.0, 2.0 * pa), min(1.0, 2.0 * pb)
        return min(pa, pb) if max(pa, pb) <= parting() else max(pa, pb)

    def above(ev: Evidence, x: float) -> float:  # the lowest end above x
        return ev.p_beyond(-math.inf, x)

    def below(ev: Evidence, x: float) -> float:  # the highest end below x
        return ev.p_beyond(x, math.inf)

    def beyond(lo: float, hi: float) -> float:
        return min(side(above(a, hi), above(b, hi)), side(below(a, lo), below(b, lo)))

    def within(lo: float, hi: float) -> float:
        return max(side(above(a, lo), above(b, lo)), side(below(a, hi), below(b, hi)))

    limit = either(a.limit, b.limit) if a.limit is not None and b.limit is not None else None
    return Evidence(a.estimate, interval, beyond, within, limit)


# --- looks -----------------------------------------------------------------------------------

#: Each look of a growing comparison comes after about this much more data than the last.
LOOK_GROWTH = 1.25


def _grid(first: int, cap: int, step: int = 1, growth: float = LOOK_GROWTH) -> list[int]:
    out, n = [], first
    while n < cap:
        out.append(n)
        n = max(n + step, step * math.ceil(n * growth / step))
    return out + [cap]


def stored_looks(first: int, cap: int | None) -> tuple[int, ...]:
    """Candidate round counts at which a stored verdict may be taken, when rounds are added
    up to ``cap`` (None: ``first`` rounds, one look). None below MIN_CANDIDATE_ROUNDS: against
    a baseline's rounds the session drift leaves one or two rounds unable to decide."""
    if cap is None or cap <= first:
        return (max(first, cap or first),)
    # Rounds are few and a look costs alpha: half again as many rounds each time (3, 5, 8, 12).
    return (tuple(_grid(max(first, MIN_CANDIDATE_ROUNDS), cap, growth=1.5))
            if cap >= MIN_CANDIDATE_ROUNDS else (cap,))


def paired_looks(max_pairs: int, alpha: float = DEFAULT_ALPHA, cases: int = 1) -> tuple[int, ...]:
    """Pair counts at which an A/B verdict may be taken: even ones, about 25% more pairs each
    time, and ``max_pairs`` itself last, so that a run that goes on to its last pair judges it at
    a look alpha was budgeted for (an odd cap replaces the even look below it); keeping only
    looks where n pairs can reach their level at all (the signed-rank test's smallest two-sided
    p is 2^(1-n)), so no alpha is spent on a look that cannot decide."""
    grid = _grid(2, max(2, max_pairs - max_pairs % 2), step=2)
    grid[-1] = max(grid[-1], max_pairs)
    looks = grid
    for _ in range(len(grid)):
        level = alpha / (len(looks) * max(1, cases))
        keep = [n for n in grid if 2.0 ** (1 - n) <= level] or grid[-1:]
        if keep == looks:
            break
        looks = keep
    return tuple(looks)


def at_look(n: int, looks: Sequence[int]) -> bool:
    """Whether a comparison holding ``n`` rounds or pairs is at one of its looks (or past all)."""
    return n in looks or n >= looks[-1]


def interval_status(low: float, high: float, tol: Tolerance, higher_is_better: bool) -> str:
    """The verdict of a change known to lie in [low, high] (fractions, value / reference - 1)."""
    if high < tol.lower:
        return "regression" if higher_is_better else "improvement"
    if low > tol.upper:
        return "improvement" if higher_is_better else "regression"
    if tol.lower <= low and high <= tol.upper:
        return "same"
    return "unknown"


@dataclass(frozen=True)
class Question:
    """A comparison waiting for its verdict: ``verdict`` holds everything but the decision;
    ``evidence`` None when there is nothing to decide (new, missing, invalid, contended...).
    ``share``: the part of the family's alpha this comparison's look may spend (1 / looks)."""

    verdict: Verdict
    evidence: Evidence | None = None
    share: float = 1.0
    group: object = None  # the questions of one group (world) are judged together (Holm)


# --- the family: every question of a run judged together --------------------------------------

def _change(log_shift: float) -> float:
    if log_shift > 700.0:  # a t quantile on one degree of freedom at a family's level: no bound
        return math.inf
    if log_shift == -math.inf:
        return -1.0
    return math.exp(log_shift) - 1.0


def _holm(ps: Sequence[float], alpha: float) -> list[tuple[float, bool]]:
    """Holm's step-down: for each p, the level it was judged at and whether it was rejected."""
    m = len(ps)
    out: list[tuple[float, bool]] = [(alpha / max(1, m), False)] * m
    stopped = None
    for r, i in enumerate(sorted(range(m), key=lambda i: ps[i])):
        level = alpha / (m - r)
        if stopped is None and ps[i] <= level:
            out[i] = (level, True)
        else:
            stopped = stopped if stopped is not None else level
            out[i] = (stopped, False)
    return out


def judge(questions: Sequence[Question], alpha: float = DEFAULT_ALPHA,
          family: int | None = None) -> list[Verdict]:
    """Every question's verdict, the open ones as one family of at most ``family`` (default:
    these) at ``alpha``: each group (world) gets alpha x its share of the family, and Holm's
    step-down within it, for DIFFERENT and, among the rest, for SAME; each look spends its
    ``share`` of what its question is granted. Intervals are shown at the level that decided."""
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"significance level {alpha!r} must be between 0 and 1, e.g. 0.01")
    open_ = [i for i, q in enumerate(questions) if q.evidence is not None]
    size = max(family or 0, len(open_), 1)
    groups: dict[object, list[int]] = {}
    for i in open_:
        groups.setdefault(questions[i].group, []).append(i)
    out = [q.verdict for q in questions]
    for members in groups.values():
        share_alpha = alpha * len(members) / size
        bounds = []
        for i in members:
            q = questions[i]
            tol = q.verdict.tolerance or DEFAULT_TOLERANCE  # regress gives every open question its own
            bounds.append((math.log1p(tol.lower), math.log1p(tol.upper)))
        p_diff = [min(1.0, questions[i].evidence.p_beyond(*b) / questions[i].share)
                  for i, b in zip(members, bounds)]
        diff = _holm(p_diff, share_alpha)
        rest = [k for k, (_, hit) in enumerate(diff) if not hit]
        p_same = [min(1.0, questions[members[k]].evidence.p_within(*bounds[k]) / questions[members[k]].share)
                  for k in rest]
        same = dict(zip(rest, _holm(p_same, share_alpha)))
        for k, i in enumerate(members):
            level, hit = diff[k]
            if not hit:
                same_level, same_hit = same[k]
                level = same_level if same_hit else min(level, same_level)
            out[i] = _decide(questions[i], level, p_diff[k], size, alpha, share_alpha)
    return out


def _decide(q: Question, level: float, p: float, family: int, alpha: float, most: float) -> Verdict:
    """``q``'s verdict at ``level``; ``most``: the highest level its group may grant it at any
    look (all of the group's alpha), against which an UNKNOWN is ``futile`` when even its
    evidence's limit could not decide there."""
    v, ev = q.verdict, q.evidence
    conf = 1.0 - level * q.share
    lo, hi = ev.interval(conf)
    tol = v.tolerance or DEFAULT_TOLERANCE
    status = _status(v, lo, hi, tol)
    if v.reason in ("other-mode", "span"):
        reason = ("across-modes" if v.reason == "other-mode" else "beyond-span") if status != "unknown" else v.reason
    elif status != "unknown":
        reason = "decided"
    else:
        reason = "unbounded" if not math.isfinite(hi) or not math.isfinite(lo) else "straddles"
    facts = {**v.facts, "family": family, "alpha": alpha, "looks": round(1 / q.share)}
    if status == "unknown" and ev.limit is not None:
        if _status(v, *ev.limit.interval(1.0 - most * q.share), tol) == "unknown":
            facts["futile"] = True
    return replace(v, status=status, change=_change(ev.estimate), low=_change(lo),
                   high=_change(hi), tolerance=tol, p_value=p, reason=reason, confidence=conf,
                   facts=facts)


def _status(v: Verdict, lo: float, hi: float, tol: Tolerance) -> str:
    """The status of ``v``'s change known to lie in [lo, hi] (log)."""
    status = interval_status(_change(lo), _change(hi), tol, v.higher_is_better)
    if v.reason in ("other-mode", "span") and status == "same":  # a span-widened interval never shows sameness
        return "unknown"
    return status


def decided(v: Verdict) -> bool:
    """Whether more rounds are spent in vain on this verdict: it is decided (DIFFERENT or
    SAME), or it is UNKNOWN where no number of further rounds could decide it (``futile``:
    its evidence's limit straddles the tolerance even at the most alpha it may be granted), or
    it holds no evidence that rounds could bring (``timing``: baseline and run timed by two
    loops, whose ~0.5 us a call is no change of the code's)."""
    return v.status != "unknown" or bool(v.facts.get("futile")) or v.reason == "timing"
