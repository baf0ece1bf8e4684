"""Rounds: one world run many times, pooled per case, with contended rounds set aside.

A round is the unit of replication (docs/baselines.md says why): one world run, each case
summarised by its kernel's p50. A round whose ranks waited for a CPU (``contention`` above the
policy's threshold, as the kernel measured it around the timed loop) is not evidence of the
code's speed, only of the machine's: it is kept in the results file but left out of the pooled
value, and the policy runs another world in its place, up to a budget. Pure over ``model``
records: nothing here starts a world (``suite.run_rounds`` does).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from ..records import stats
from . import stragglers
from ..records.errors import ConfigError
from ..records.model import ROUNDS_KEY, Metric, Result, Sample, round_values  # noqa: F401

#: Run-queue wait over wall time above which a round is contended: between what a quiet world's
#: timed loop waits and what one sharing a core with another process waits (both measured in
#: docs/measurements.md).
DEFAULT_MAX_CONTENTION = 0.05
#: Extra worlds run, per world, in place of contended rounds.
DEFAULT_RETRIES = 3
#: Two rounds are in the same machine mode when their canaries differ by at most this much: more
#: than a mode's own spread, less than the step between a machine's modes (docs/measurements.md
#: has the canary's modes where they were measured).
DEFAULT_CANARY_SHIFT = 0.15
#: Key in ``Sample.info`` holding the canary of each pooled round (aligned with ROUNDS_KEY).
CANARY_KEY = "round_canary"


def contention_of(sample: Sample) -> float | None:
    """The run-queue wait share the kernel measured for this sample's timed thread (None: not
    measured). A process-wide figure (a training step's thread pools) is recorded but not
    judged: TensorFlow's own threads oversubscribe a small machine by design (54-59% of their
    runnable time waiting in quiet 2-rank worlds here), which says nothing of other load."""
    if sample.info.get("contention_scope", "thread") != "thread":
        return None
    c = sample.info.get("contention")
    return float(c) if isinstance(c, (int, float)) and not isinstance(c, bool) else None


def is_contended(sample: Sample, limit: float | None) -> bool:
    c = contention_of(sample)
    return limit is not None and c is not None and c > limit


def canary_of(sample: Sample) -> float | None:
    """The canary (us) the kernel timed between blocks of this sample's loop, if it did."""
    c = sample.info.get("canary_us")
    return float(c) if isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0 else None


def round_canaries(sample: Sample) -> list[float | None]:
    """The canary of each round behind ``sample`` (a plain sample is one round)."""
    pooled = sample.info.get(CANARY_KEY)
    return list(pooled) if isinstance(pooled, list) else [canary_of(sample)]


def same_mode(a: float | None, b: float | None, limit: float | None) -> bool:
    """Whether two canaries put their rounds in the same machine mode (unknown: assume so)."""
    if limit is None or a is None or b is None:
        return True
    return abs(math.log(a / b)) <= math.log1p(limit)


def modal_canary(canaries: Sequence[float], limit: float) -> float:
    """The canary most of ``canaries`` share a mode with (ties: the first such)."""
    return max(canaries, key=lambda c: sum(same_mode(c, x, limit) for x in canaries))


# --- rounds -------------------------------------------------------------------------------------

def _invalid_ranks(rounds: Sequence[Sample]) -> dict:
    """The ranks whose own result was wrong in any round (as the pooled sample is invalid when
    any round was), where the kernel named them."""
    named = [s.info["invalid_ranks"] for s in rounds if "invalid_ranks" in s.info]
    return {"invalid_ranks": sorted({r for ranks in named for r in ranks})} if named else {}


def pool_rounds(rounds: Sequence[Sample], max_contention: float | None = None) -> Sample:
    """Merge samples of one case from several rounds into one sample.

    The pooled value of each metric is the median of the round values; raw samples are
    concatenated; ``info[ROUNDS_KEY]`` keeps the round values for the test. A sample that failed
    validation in any round makes the pooled one invalid. With ``max_contention``, contended
    rounds are left out (``info['rounds_dropped']`` counts them); when every round was
    contended all are pooled and ``info['contended']`` says so: no verdict may rest on them.
    """
    if not rounds:
        raise ValueError("pool_rounds needs at least one sample")
    case = rounds[0].case
    for s in rounds:
        if s.case != case:
            raise ValueError(f"pool_rounds got {s.case.name} among rounds of {case.name}")
    calm = [s for s in rounds if not is_contended(s, max_contention)]
    if max_contention is not None:
        pooled = pool_rounds(calm or list(rounds))
        waits = [c for s in (calm or rounds) if (c := contention_of(s)) is not None]
        info = {**pooled.info, "rounds_dropped": len(rounds) - len(calm),
                "contended": not calm, "max_contention": max_contention, **_invalid_ranks(rounds)}
        if waits:
            info["contention"] = max(waits) if calm else min(waits)
        return replace(pooled, info=info, valid=all(s.valid for s in rounds))
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
        if (key not in (ROUNDS_KEY, CANARY_KEY) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals)
                and len(set(vals)) > 1):
            info[key] = stats.median(vals)
    info[ROUNDS_KEY] = per_round
    info[CANARY_KEY] = [c for s in rounds for c in round_canaries(s)]
    if any("straggler" in r.info for r in rounds):
        info.update(stragglers.pooled([r.info.get("straggler") for r in rounds]))
    info["rounds"] = len(next(iter(per_round.values()), []))
    info.update(_invalid_ranks(rounds))
    return Sample(case, metrics, all(s.valid for s in rounds),
                  tuple(t for s in rounds for t in s.times_s), info)


def pool_by_case(rounds: Iterable[Iterable[Sample]], max_contention: float | None = None
                 ) -> list[Sample]:
    """Rounds (each a list of samples, one per case) -> one pooled sample per case, in order."""
    by_case: dict[str, list[Sample]] = {}
    for one_round in rounds:
        for s in one_round:
            by_case.setdefault(s.case.name, []).append(s)
    return [pool_rounds(ss, max_contention) for ss in by_case.values()]


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
    """How many rounds (worlds) to run per world spec and pool: at least ``rounds`` that were
    not contended (re-running up to ``retries`` extra worlds in place of contended ones); then,
    while ``decided`` says the pooled samples cannot yet be judged (or, without it, while the
    median of some metric is not known to +-``precision``), more up to ``max_rounds``, unless
    ``budget_s`` seconds have been spent on this world already."""

    rounds: int = 1
    max_rounds: int | None = None  # None: exactly ``rounds`` (no adaptive sampling)
    precision: float = 0.01
    budget_s: float | None = None
    max_contention: float | None = DEFAULT_MAX_CONTENTION
    retries: int = DEFAULT_RETRIES
    decided: Callable[[list[Sample]], bool] | None = None
    # Told each world's result as it finishes: the gate names the run's system from the first
    # one's rank 0 where the measuring nodes are not this host.
    seen: Callable[[Result], None] | None = None

    def __post_init__(self):
        if self.rounds < 1:
            raise ConfigError(f"rounds {self.rounds} must be >= 1")
        if self.max_rounds is not None and self.max_rounds < self.rounds:
            raise ConfigError(f"max rounds {self.max_rounds} must be >= rounds ({self.rounds})")
        if not 0.0 < self.precision < 1.0:
            raise ConfigError(f"precision {self.precision!r} must be a fraction like 0.01")
        if self.budget_s is not None and self.budget_s <= 0:
            raise ConfigError(f"round budget {self.budget_s!r} must be a number of seconds > 0")
        if self.max_contention is not None and not 0.0 < self.max_contention <= 1.0:
            raise ConfigError(f"contention limit {self.max_contention!r} must be a fraction in "
                              "(0, 1], e.g. 0.05 (5% of the timed loop waiting for a CPU)")
        if self.retries < 0:
            raise ConfigError(f"contention retries {self.retries!r} must be a whole number >= 0")

    def more(self, done: int, elapsed_s: float, pooled: Iterable[Sample]) -> bool:
        """Whether to run another round after ``done`` rounds taking ``elapsed_s`` seconds."""
        pooled = list(pooled)
        if done < self.rounds:
            return True
        if self.budget_s is not None and elapsed_s >= self.budget_s:
            return False
        cap = max(self.max_rounds or self.rounds, self.rounds)
        calm = min((done - int(s.info.get("rounds_dropped", 0)) for s in pooled), default=done)
        dropped = done - calm
        if calm < self.rounds and done - self.rounds < self.retries:
            return True  # a contended round is re-run, up to the retries
        if done >= cap + min(dropped, self.retries) or self.max_rounds is None:
            return False
        if self.decided is not None:
            return not self.decided(pooled)
        return not precise_enough(pooled, self.precision, min_rounds=min(3, self.max_rounds))


def pool_results(results: Sequence[Result], max_contention: float | None = None) -> Result:
    """Several rounds of one world as one Result: samples pooled per case (``pool_by_case``),
    wall time summed, ``extra['rounds']`` the number of rounds."""
    if not results:
        raise ValueError("pool_results needs at least one result")
    if len(results) == 1 and max_contention is None:
        return results[0]
    last = results[-1]
    starts = [r.world_start_s for r in results if r.world_start_s is not None]
    return replace(last, samples=tuple(pool_by_case((r.samples for r in results), max_contention)),
                   world_start_s=stats.median(starts) if starts else None,
                   wall_s=sum(r.wall_s or 0.0 for r in results),
                   extra={**last.extra, "rounds": len(results)})
