"""Verdicts: a measured case against its baseline, or arm B against arm A -> regression or
improvement (DIFFERENT), same (SAME), unknown (UNKNOWN), new, missing or invalid. Pure
functions over ``model`` records and ``stats``, with what differs per benchmark (its judged
metrics, its metrics' default tolerances) read from its record (``bench``); nothing here reads
a file, starts a process or makes words (``verdict_text`` does).

How a change is decided (two-sided: improvements are reported like regressions)
----------------------------------------------------------------------------------
Every comparison ends with an interval for the change, and the interval against the tolerance
(the effect the user cares about) decides, as Chromium's Pinpoint and equivalence testing do:
entirely beyond the tolerance is DIFFERENT, entirely inside it is SAME, straddling it is
UNKNOWN ("cannot tell yet"). A comparison that could not have seen the tolerance is UNKNOWN.

* **One test per case.** A case's time and its rate are one number seen two ways (busbw =
  bytes x factor / latency; img/s = images / step time): the case is judged once, on its
  judged metric, and the other is shown as the reciprocal change (``model.MIRRORS``).
* **The unit of replication is the round** (one world run, summarised by its median over
  iterations); rounds of one run are one **session**. Worlds of one session are not
  independent of each other (a machine's spells last minutes: lag-1 correlation +0.5 to +0.7
  here), and sessions differ by more than rounds within one do.
* **Against a stored baseline** the change is the shift of log round values, new against
  baseline, estimated within machine modes (``mode_strata``: rounds set against rounds of their
  own mode, by the canaries; van Elteren's summed Mann-Whitney counts, ``stats``), with the
  rounds' own standard error (from the rank interval, widened for the rounds' lag-1
  correlation). What a run cannot show is how far the next run lands with nothing changed:
  - once the machine has recorded two sessions (of any case, in any benchmark of its baseline
    folder), the **drift** between sessions is learned from all of them together (``drift``: a
    session effect shared by the cases plus each case's own, the case's variance moderated
    toward the machine's, its degrees of freedom counted through the sharing), SD tau with a t
    quantile on those degrees of freedom: the candidate's session and the mean of the
    baseline's S sessions each drift, so tau^2 (1 + 1/S) joins the rounds' variance;
  - until then nothing says how far this machine moves between runs, and only a change beyond
    the **prior span** is decided: the interval is widened by +-log(PRIOR_SPAN) (or the
    baseline's own wider spread); never SAME;
  - ``--session-drift F`` states tau instead, taken as known.
* **Across machine modes**, when the candidate ran in a mode none of the baseline's rounds did,
  rounds are compared all against all, with the span: a change beyond anything the modes
  produce is decided, never as SAME.
* **Arm B against arm A** (``perfsuite ab``; adjacent worlds, order randomized in ABBA blocks):
  the log ratios of the pairs, Wilcoxon's signed-rank test inverted (Hodges-Lehmann), summed
  over strata (pairs in one machine mode, pairs straddling two), which randomized order makes
  symmetric under no change; it uses the ratios' sizes, not only their signs.
* **Repeated looks**: a run adds rounds (or pairs) and looks again while a verdict is UNKNOWN.
  Looks happen on a schedule (``stored_looks``, ``paired_looks``) that holds only looks that
  can decide, and alpha is split evenly over them (Bonferroni: valid however sampling stops).
  Rounds stop too once no number of them could decide (``decided``: the interval with the
  candidate's own error gone, only the span or the drift between sessions left, still
  straddles the tolerance): a clean rerun against one session stops at its first look.
* **Many cases**: the run's verdicts are one family. Within a world (all of an A/B run) Holm's
  step-down over its cases; across worlds alpha is split by each world's number of cases, so a
  world's verdicts can be taken as soon as it has run (pytest fails its case then). Together:
  the chance that any verdict of the run wrongly says DIFFERENT is at most alpha.
* **Tolerance**: the user's, else the baseline's own, else the metric's default (its
  benchmark's ``BenchmarkSpec.tolerances``, else ``DEFAULT_TOLERANCE``) widened to
  ``NOISE_FACTOR`` x the baseline's between-round spread.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from .. import bench
from . import drift as _drift
from ..records import memory, stats
from .decision import DEFAULT_ALPHA, DEFAULT_TOLERANCE, Question, band_evidence, judge, normal_evidence, rank_evidence
from ..records.errors import ConfigError
from ..records.model import MIRRORS, Baseline, Sample, Tolerance, Verdict, round_values, timing_of
from .rounds import DEFAULT_CANARY_SHIFT, modal_canary, round_canaries, same_mode

#: Raw per-iteration samples kept in a baseline (evenly spaced order statistics beyond this).
MAX_BASELINE_SAMPLES = stats.MAX_KEPT_SAMPLES

#: A prior, not a measurement of any one machine: how far a case's level may move between two
#: runs of a machine with nothing changed, as a ratio, taken until the machine has recorded a
#: second session (and whenever the candidate ran in a machine mode none of the baseline's
#: rounds did). It must hold on the machines users run, shared cloud VMs included, which flip
#: between states for minutes (the widest measured: x3.4 between sessions, docs/measurements.md,
#: "Session drift"); a dedicated node moves far less, which its second session shows, or
#: ``--session-drift`` states. Too small a prior calls a machine's drift a regression.
PRIOR_SPAN = 4.0
#: Sessions a machine must have recorded before its drift is learned (``drift.learn``).
MIN_SESSIONS = 2
#: A stored DIFFERENT resting on fewer sittings than this is, under --confirm, decided again by an
#: A/B (``to_confirm``). Drift learned from a few sittings assumes the machine's sessions vary
#: smoothly; a machine that sits in one of two states for longer than a sitting breaks that: if
#: each state holds half its time, S sittings all in one state and a run in the other come 2^-S
#: of the time, under alpha's 1% from 7 sittings (docs/measurements.md, "A stored baseline that
#: decides": 4.8% from 4 sittings, 0.25% from 8).
CONFIRM_SITTINGS = 8
#: Fewest rounds a baseline must hold: against fewer no look can bound a change.
MIN_BASELINE_ROUNDS = 5
#: Rounds a baseline is recorded with when no rounds are asked for.
BASELINE_ROUNDS = 10
#: Earlier sessions' levels a baseline keeps when an update replaces its rounds.
MAX_HISTORY = 30
#: Lag-1 correlation of rounds is estimated, but never taken above this (a run of ten rounds
#: cannot tell 0.9 from 1, and the widening would grow without bound).
MAX_LAG1 = 0.8


def to_confirm(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The stored verdicts --confirm decides again by an A/B against the baseline's commit: every
    UNKNOWN, and every DIFFERENT whose baseline holds fewer than CONFIRM_SITTINGS sittings and
    whose drift the user did not state (``--session-drift``); never an expected failure."""
    def shaky(v: Verdict) -> bool:
        return (v.kind == "DIFFERENT" and v.facts.get("drift_from") not in ("assumed", "declared")
                and int(v.facts.get("sittings") or 0) < CONFIRM_SITTINGS)
    return [v for v in verdicts if v.test == "stored" and not v.xfail and (v.status == "unknown" or shaky(v))]


#: ``judged_metrics``'s default: the declared judged metrics of the case's benchmark.
DECLARED: object = object()


def judged_metrics(sample: Sample, declared: Sequence[str] | None | object = DECLARED) -> list[str]:
    """The metrics of ``sample`` that get a verdict: the benchmark's declared ones, else every
    metric but the mirror of one that is judged (busbw beside latency)."""
    if declared is DECLARED:
        declared = bench.declared_judged(sample.case.name)
    if declared is not None:
        return [m for m in declared if m in sample.metrics]
    names = list(sample.metrics)
    primary = bench.primary_metrics()
    skip = {MIRRORS[m] for m in names if m in primary and MIRRORS.get(m) in sample.metrics}
    return [m for m in names if m not in skip]


# --- baselines from samples ---------------------------------------------------------------------

def session_levels(b: Baseline) -> list[float]:
    """The level (median of rounds) of each of the baseline's sessions, then its history."""
    return [stats.median(v) for v in b.session_rounds().values()] + list(b.history)


def baseline_from_sample(sample: Sample, metric: str, recorded: str = "",
                         tolerance: Tolerance | None = None, xfail: str | None = None, *,
                         session: str = "", previous: Baseline | None = None,
                         add: bool = False) -> Baseline:
    """The Baseline of one metric of a (possibly pooled) sample, as one session ``session``.
    With ``add``, the session joins ``previous``'s rounds; otherwise it replaces them, and
    ``previous``'s session levels become history (the drift between sessions outlives the
    rounds: it is what a later verdict must allow for)."""
    m = sample.metrics[metric]
    raw = list(m.samples) or round_values(sample, metric)
    rounds = round_values(sample, metric)
    canaries = round_canaries(sample)
    canary = (tuple(float(c) for c in canaries)
              if len(canaries) == len(rounds) and all(c is not None for c in canaries) else ())
    sessions = (session or recorded,) * len(rounds)
    history: tuple[float, ...] = ()
    if previous is not None and add:
        keep_canary = bool(canary) and len(previous.canary) == len(previous.rounds)
        canary = previous.canary + canary if keep_canary else ()
        old_sessions = (previous.sessions if len(previous.sessions) == len(previous.rounds)
                        else (previous.recorded,) * len(previous.rounds))
        rounds, sessions = list(previous.rounds) + rounds, tuple(old_sessions) + sessions
        raw = list(previous.samples) + raw
        history = previous.history
    elif previous is not None:
        history = tuple(session_levels(previous))[-MAX_HISTORY:]
    summary = stats.summarize(raw)
    return Baseline(case=sample.case.name, metric=metric, unit=m.unit, canary=canary,
                    higher_is_better=m.higher_is_better, value=stats.median(rounds),
                    rounds=tuple(rounds), samples=tuple(stats.thin(raw, MAX_BASELINE_SAMPLES)),
                    median=summary["median"], iqr=summary["iqr"], mad=summary["mad"], n=int(summary["n"]),
                    tolerance=tolerance, xfail=xfail, recorded=recorded,
                    timing=timing_of(sample.info), sessions=sessions, history=history)


# --- stored verdicts -------------------------------------------------------------------------

#: A default tolerance is widened to this many times the baseline's between-round spread, but
#: never past MAX_NOISE_TOLERANCE: beyond it a noisy baseline would call everything SAME.
NOISE_FACTOR = 2.0
MAX_NOISE_TOLERANCE = 0.20


def default_tolerance(metric: str, case: str | None = None) -> Tolerance:
    """The tolerance of ``metric`` when neither the user nor the baseline gives one: what the
    benchmark of ``case`` (a case name) declares for it, else memory's own for peak memory, else
    ``DEFAULT_TOLERANCE``."""
    return (bench.default_tolerance(metric, case)
            or (memory.TOLERANCE if memory.is_memory(metric) else DEFAULT_TOLERANCE))


def noise_tolerance(metric: str, base_rounds: Sequence[float], case: str | None = None) -> Tolerance:
    """The metric's default tolerance, widened to what the baseline's own rounds can resolve."""
    tol = default_tolerance(metric, case)
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
                ) -> tuple[Strata, int, dict | None]:
    """The rounds of both sides grouped by machine mode (their canaries within ``limit`` of the
    mode's), as (candidate rounds, baseline rounds) per mode the candidate ran in; how many
    candidate rounds ran in a mode no baseline round did; and, when no verdict can be had
    within modes, the facts of why (None when one can). Without canaries on both sides, or
    with ``limit`` None: one stratum."""
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
    n_new = sum(len(n) for n, _ in strata)
    # Too few rounds on either side share a mode (a candidate that ran mostly in a mode no
    # baseline round did: the machine changed state between them) cannot bound a change within
    # modes however large it is: every round is then set against every round, with the span.
    # One stray round in another mode is left out, as before: the rest decide.
    if n_base < MIN_MODE_ROUNDS or (n_new < MIN_MODE_ROUNDS and other > n_new):
        n_base = sum(1 for c in baseline.canary if same_mode(c, first, limit))
        return strata, other, {"canary_us": first, "base_in_mode": n_base,
                               "base_rounds": len(baseline.rounds), "limit": limit,
                               "base_canary_us": stats.median(baseline.canary)}
    return strata, other, None


def _within_mode(strata: Strata) -> list[float]:
    """Baseline rounds over their mode's median: the spread a verdict across strata sees. A
    mode with one baseline round says nothing of the spread (its ratio is 1 by construction,
    which would narrow the tolerance), so it is left out."""
    return [v / stats.median(b) for _, b in strata if len(b) > 1 for v in b]


def lag1(series: Iterable[Sequence[float]]) -> float:
    """The lag-1 correlation of log values about their own series' median, pooled over series
    (sessions, in time order), within [0, MAX_LAG1]; 0 with fewer than 4 neighbours."""
    num = den = 0.0
    pairs = 0
    for s in series:
        x = np.asarray(_log(s))
        if x.size < 2:
            continue
        dev = x - np.median(x)
        num += float(np.sum(dev[1:] * dev[:-1]))
        den += float(np.sum(dev * dev))
        pairs += x.size - 1
    if pairs < 4 or den <= 0:
        return 0.0
    return min(MAX_LAG1, max(0.0, num / den))


def machine_drift(baselines: Mapping[tuple[str, str], Baseline]) -> _drift.MachineDrift | None:
    """The drift between sessions of the machine whose baselines (every benchmark of its
    folder) these are, or None while it has recorded fewer than MIN_SESSIONS sessions. Memory is left
    out: its drift is declared (``records.memory``), and its near-constant levels would pull the
    machine's drift of time toward none."""
    timed = {k: b for k, b in baselines.items() if not memory.is_memory(k[1])}
    learned = _drift.learn(_drift.judged_series(timed, bench.primary_metrics()))
    return learned if learned is not None and learned.sessions >= MIN_SESSIONS else None


def session_drift(baseline: Baseline, assumed: float | None = None, history: Sequence[float] = (),
                  machine: _drift.MachineDrift | None = None
                  ) -> tuple[float, float | None, str, int] | None:
    """(SD of the drift between sessions in log units, its degrees of freedom (None: taken as
    known), where it came from, how many baseline sessions average into the reference), or
    None while the machine's drift is not learned. ``assumed``: the user's figure (a fraction
    > 0), taken as known. ``machine``: what the machine's recorded sessions show
    (``machine_drift``), moderated by this case's own levels: its sessions, the ones updates
    replaced, and ``history``, its levels in earlier runs kept elsewhere (asv), one per run;
    never less than half the widest step the case was seen to make, in the baseline's rounds or
    between its levels (``source`` "seen" then)."""
    by_session = baseline.session_rounds()
    if assumed is not None:
        if not assumed > 0:
            raise ConfigError(f"session drift {assumed!r} must be a fraction > 0, e.g. 0.02: no two "
                              "sessions of a machine run at exactly one speed")
        return math.log1p(assumed), None, "assumed", len(by_session)
    levels = _drift.case_levels(baseline, history)
    source = "machine+asv" if history else "machine"
    if machine is None and history and len(levels) >= MIN_SESSIONS:
        # The machine's baselines hold one sitting, but the case's asv history holds earlier
        # runs of it on this machine, one level each: its drift is learned from those alone.
        machine, source = _drift.learn({(baseline.case, baseline.metric): list(enumerate(levels))}), "asv"
    if machine is None:
        return None
    raw = session_levels(baseline) + [x for x in history if x > 0]
    sd, df = machine.for_case(levels)
    # A machine that has been seen to step between states (a spell, in the baseline's rounds or
    # between its sessions) may land a whole session on the far side of that step: half the
    # widest gap between the case's values (sorted, each side holding a share of them: noise
    # leaves none wide, two states one as wide as their step) is the least its drift is taken
    # to be. Normally distributed drift would not show it.
    seen = max(_widest_gap(baseline.rounds), _widest_gap(raw)) / 2
    if seen > sd:
        sd, source = seen, "seen"
    return sd, df, source, len(by_session)


def span_of(baseline: Baseline, history: Sequence[float] = ()) -> float:
    """The widest step (log) between two levels of the case that the machine may make with
    nothing changed, while its drift is not learned: PRIOR_SPAN, or wider where the baseline's
    own rounds or session levels spread further."""
    levels = session_levels(baseline) + [x for x in history if x > 0]
    return max(math.log(PRIOR_SPAN), _log_range(baseline.rounds), _log_range(levels))


def _within_se(test: stats.RankTest) -> float:
    """The standard error the rank interval implies (its 95% interval over 2 x 1.96)."""
    lo, hi = test.interval(0.95)
    return (hi - lo) / (2 * 1.959964) if math.isfinite(lo) and math.isfinite(hi) else math.inf


def stored_question(case: str, metric: str, sample: Sample | None, baseline: Baseline | None, *,
                    tolerance: Tolerance | None = None, system: str = "", share: float = 1.0,
                    canary_shift: float | None = DEFAULT_CANARY_SHIFT,
                    session_sd: float | None = None, history: Sequence[float] = (),
                    machine: _drift.MachineDrift | None = None) -> Question:
    """The question of one judged metric of one case against its stored baseline.
    ``session_sd``: the drift between sessions to assume (None: ``session_drift``'s rule);
    ``history``: the case's levels in earlier runs kept outside the baseline (asv);
    ``machine``: the machine's drift learned from all its baselines (``machine_drift``)."""
    xfail = baseline.xfail if baseline else None
    mirror = MIRRORS.get(metric) if sample is not None and MIRRORS.get(metric) in sample.metrics else None
    facts = {"mirror": mirror} if mirror else {}
    if sample is None or metric not in sample.metrics:
        if baseline is None:
            raise ValueError(f"verdict for {case} {metric}: neither a sample nor a baseline")
        return Question(Verdict(case, metric, "missing", baseline.unit, baseline.higher_is_better,
                                baseline=baseline.value, system=system, xfail=xfail, reason="missing"))
    m = sample.metrics[metric]
    group = sample.case.world_key
    if not sample.valid:
        return Question(Verdict(case, metric, "invalid", m.unit, m.higher_is_better, value=m.value,
                                baseline=baseline.value if baseline else None, system=system,
                                xfail=xfail, reason="invalid", facts=facts), group=group)
    if baseline is None:
        return Question(Verdict(case, metric, "new", m.unit, m.higher_is_better, value=m.value,
                                system=system, reason="new", facts=facts), group=group)
    if baseline.unit != m.unit or baseline.higher_is_better != m.higher_is_better:
        raise ConfigError(f"{case} {metric}: baseline is in {baseline.unit!r} "
                          f"({_direction(baseline.higher_is_better)}), the result in {m.unit!r} "
                          f"({_direction(m.higher_is_better)}); update the baseline")
    base = Verdict(case, metric, "unknown", m.unit, m.higher_is_better, value=m.value,
                   baseline=baseline.value, system=system, xfail=xfail, test="stored", facts=facts)
    steady = memory.is_memory(metric)  # no machine state moves it: no contention, modes or loops
    if steady:  # the user's --session-drift states the machine's speed, not its code's memory
        session_sd = memory.DRIFT
    timing = timing_of(sample.info)
    if not steady and baseline.timing and timing and baseline.timing != timing:
        # The native loop and the mpi4py loop differ by a Python call's cost: the change is the loop's.
        return Question(replace(base, reason="timing",
                                facts={**facts, "baseline_timing": baseline.timing, "timing": timing}),
                        group=group)
    rounds_here = len(round_values(sample, metric))
    if sample.info.get("contended") and not steady:
        return Question(replace(base, reason="contended", rounds=rounds_here, facts={
            **facts, "contention": float(sample.info.get("contention") or 0)}), group=group)
    strata, other_mode, across = mode_strata(sample, metric, baseline, None if steady else canary_shift)
    # The user's --tolerance is their time's: memory keeps its own unless its baseline states one.
    tol = (None if steady else tolerance) or baseline.tolerance or noise_tolerance(metric, _within_mode(strata), case)
    drift = session_drift(baseline, session_sd, history, machine)
    if steady and drift is not None:
        drift = (*drift[:2], "declared", drift[3])
    span = span_of(baseline, history)
    dropped = int(sample.info.get("rounds_dropped", 0))
    if across is not None:  # no baseline round in the candidate's modes: all against all
        strata, other_mode = [(round_values(sample, metric), list(baseline.rounds))], 0
    new_rounds = [v for n, _ in strata for v in n]
    # Value and reference from the candidate's main mode, so that they show the change; the
    # change and its interval from every mode the two sides share.
    main_new, main_base = strata[0]
    test = stats.stratified_shift_test([(_log(n), _log(b)) for n, b in strata])
    rho = lag1([round_values(sample, metric), *baseline.session_rounds().values()])
    widen = math.sqrt((1 + rho) / (1 - rho))
    within = _within_se(test) * widen
    by_session = baseline.session_rounds()
    facts = {**facts, "lag1": rho, "sessions": len(by_session),
             "sittings": len(set(_drift.sittings(by_session).values())), "confirm_sittings": CONFIRM_SITTINGS,
             "span": math.exp(span)}
    if across is not None or drift is None:
        # Beyond the span is beyond anything the machine does on its own: judged from the
        # candidate's own level against the window the baseline's rounds pin (band_evidence),
        # so a baseline that caught both of the machine's states bounds where a clean run lands.
        cand = _log(new_rounds)
        level = stats.stratified_signed_rank_test([cand])
        base_logs = _log([v for _, b in strata for v in b])
        by_span = band_evidence(test.estimate, level.estimate, _within_se(level) * widen,
                                (min(base_logs), max(base_logs)), span)
        # In another mode, more rounds may find the machine back in one the baseline ran in,
        # where other evidence may decide: not futile however the span reads.
        evidence, facts["drift_from"] = by_span if across is None else replace(by_span, limit=None), "span"
        reason = "other-mode" if across is not None else "span"
        facts.update(across or {})
    else:
        sd, df, source, n_sessions = drift
        # The sessions' term stays however many rounds are added (``floor``): the rounds' goes.
        between = sd * math.sqrt(1 + 1 / n_sessions)
        evidence = normal_evidence(test.estimate, math.hypot(within, between), df, floor=between)
        reason = ""
        facts.update({"drift": math.expm1(sd), "drift_from": source, **({"df": df} if df else {})})
        if machine is not None and source not in ("assumed", "declared"):
            facts.update({"machine_sessions": machine.sessions, "machine_cases": machine.cases})
    v = replace(base, tolerance=tol, rounds=len(new_rounds), dropped=dropped + other_mode,
                value=stats.median(main_new), baseline=stats.median(main_base), reason=reason,
                facts=facts)
    return Question(v, evidence, share, group)


#: A step between two states is seen where each holds at least this share of the values (and
#: two of them): one slow round (a page fault, a neighbour's burst) is no state.
STATE_SHARE = 0.10


def _widest_gap(values: Sequence[float]) -> float:
    """The widest gap (log) between two neighbours of ``values`` sorted with at least
    STATE_SHARE of them (and two) on each side: a step between two states the values show."""
    x = np.sort(np.asarray(_log(values)))
    least = max(2, math.ceil(STATE_SHARE * x.size))
    gaps = np.diff(x)[least - 1:x.size - least]
    return float(np.max(gaps)) if gaps.size else 0.0


def _log_range(values: Sequence[float]) -> float:
    return float(np.ptp(_log(values))) if len(values) > 1 else 0.0


def paired_question(case: str, metric: str, strata: Sequence[Sequence[float]], *, unit: str,
                    higher_is_better: bool, tolerance: Tolerance, share: float = 1.0,
                    dropped: int = 0, a: float | None = None, b: float | None = None,
                    system: str = "", facts: Mapping | None = None) -> Question:
    """The question of arm B against arm A from per-pair ratios B/A of one metric, grouped in
    strata (pairs of one machine mode, pairs across two)."""
    ratios = [r for s in strata for r in s]
    v = Verdict(case, metric, "unknown", unit, higher_is_better, value=b, baseline=a,
                tolerance=tolerance, test="paired", system=system, rounds=len(ratios),
                dropped=dropped, reason="no-pairs", facts=dict(facts or {}))
    if not ratios:
        return Question(v)
    return Question(v, rank_evidence(stats.stratified_signed_rank_test([_log(s) for s in strata])), share)


def verdict(case: str, metric: str, sample: Sample | None, baseline: Baseline | None, *,
            tolerance: Tolerance | None = None, alpha: float = DEFAULT_ALPHA,
            system: str = "", looks: int = 1,
            canary_shift: float | None = DEFAULT_CANARY_SHIFT,
            session_sd: float | None = None) -> Verdict:
    """The verdict of one metric of one case against its stored baseline, alone in its family;
    ``looks``: how many looks its alpha is split over."""
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"significance level {alpha!r} must be between 0 and 1, e.g. 0.01")
    machine = machine_drift({(case, metric): baseline}) if baseline is not None and session_sd is None else None
    q = stored_question(case, metric, sample, baseline, tolerance=tolerance, system=system,
                        share=1.0 / max(1, looks), canary_shift=canary_shift, session_sd=session_sd,
                        machine=machine)
    return judge([q], alpha)[0]


def compare(samples: Iterable[Sample], baselines: Mapping[tuple[str, str], Baseline], *,
            tolerance: Tolerance | None = None, alpha: float = DEFAULT_ALPHA, system: str = "",
            cases: Iterable[str] | None = None, looks: int = 1, family: int | None = None,
            canary_shift: float | None = DEFAULT_CANARY_SHIFT,
            judged: Callable[[Sample], Sequence[str]] = judged_metrics,
            session_sd: float | None = None,
            history: Callable[[Sample, str], Sequence[float]] | None = None,
            learn_from: Mapping[tuple[str, str], Baseline] | None = None) -> list[Verdict]:
    """Every verdict: one per judged metric of each sample (``judged``: one per case for the
    built-in benchmarks), then one per judged baseline with no sample (missing). The open ones
    are one family of ``family`` questions (default: these), grouped by world (``judge``).

    ``baselines`` maps (case name, metric) to Baseline. ``cases``, when given, limits 'missing' to
    the cases that were selected to run (a run of two sizes does not miss the other eleven).
    ``learn_from``: the machine's baselines its drift is learned from, when ``baselines`` holds
    only the judged few (default: ``baselines``).
    """
    questions: list[Question] = []
    seen: set[str] = set()
    share = 1.0 / max(1, looks)
    machine = machine_drift(baselines if learn_from is None else learn_from) if session_sd is None else None
    for s in samples:
        seen.add(s.case.name)
        for metric in judged(s):
            questions.append(stored_question(s.case.name, metric, s, baselines.get((s.case.name, metric)),
                                             tolerance=tolerance, system=system, share=share,
                                             canary_shift=canary_shift, session_sd=session_sd,
                                             history=history(s, metric) if history else (), machine=machine))
    wanted = set(cases) if cases is not None else None
    primary = bench.primary_metrics()
    for (case, metric), b in baselines.items():
        if case in seen or (wanted is not None and case not in wanted):
            continue
        if any(MIRRORS.get(metric) == m for c, m in baselines if c == case and m in primary):
            continue  # the case is missing once, under its judged metric
        questions.append(stored_question(case, metric, None, b, system=system))
    return judge(questions, alpha, family)


def family_size(cases: Iterable[str], baselines: Mapping[tuple[str, str], Baseline],
                declared: Callable[[str], Sequence[str] | None] = bench.declared_judged) -> int:
    """How many stored verdicts a run of ``cases`` can take (the family alpha is shared over):
    each case's judged metrics that have a baseline. ``declared(case name)``: the benchmark's
    judged metrics (None: every metric but the mirror of a judged one)."""
    stored: dict[str, set[str]] = {}
    for case, metric in baselines:
        stored.setdefault(case, set()).add(metric)
    total = 0
    primary = bench.primary_metrics()
    for case in set(cases):
        have = stored.get(case, set())
        names = declared(case)
        if names is None:
            skip = {MIRRORS[m] for m in have if m in primary}
            total += len(have - skip)
        else:
            total += len(have & set(names))
    return total


def failing(verdicts: Iterable[Verdict], improvements: bool = False) -> list[Verdict]:
    """Verdicts that fail a gate: regressions and invalid results (and improvements, under
    --fail-on-improvement), except those a baseline's expected-failure reason excuses."""
    bad = ("regression", "invalid", "improvement") if improvements else ("regression", "invalid")
    return [v for v in verdicts if v.status in bad and not v.xfail]


def _direction(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"
