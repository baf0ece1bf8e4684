"""The verdict rules' error rates on synthetic machines, through the code the commands run.

No world starts here: a synthetic machine stands in for the worlds, and everything after it is
the real thing. Stored mode records baselines with ``baselines.merge`` (as ``--baseline-update``
and ``--baseline-add`` do), adds candidate rounds under ``judging.judging_rounds``'s policy (its
looks, its stop rule) and takes the final verdicts with ``regress.compare``, as ``run --compare``
does. A/B mode runs ``ab.run`` over a runner that returns synthetic samples. The unit of
replication is one **run**: a baseline and a later candidate session (stored), or one A/B
comparison (every look of it). A run is a false alarm when any of its verdicts says DIFFERENT
although nothing changed, so the rate counts every look and every case of the run.

The synthetic machine, per round (world) in time order, in log units:

    level + session offset (SD ``session_sd``, drawn once per session, each case its own;
                            scaled per case by a factor of log-SD ``case_spread``)
          + shared offset (SD ``shared_sd``, drawn once per session, one for every case)
          + mode step (``mode_step`` when a two-state spell process is in its slow state;
                       one spell for every case where ``spells_shared``)
          + AR(1) noise (marginal SD ``within_sd``, lag-1 correlation ``lag1``)

and a canary that follows the spell state (x1.65, 5% noise), as a memory canary does when it
sees a spell (``canary_sees``; docs/measurements.md says where one did not). A change multiplies arm B's (or the candidate's) value.
"""
from __future__ import annotations

import datetime
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..store import baselines
from ..verdicts import decision, regress
from ..records import stats
from ..verdicts import judging
from ..records.model import Case, Metric, Sample, Tolerance
from ..verdicts.rounds import DEFAULT_CANARY_SHIFT, pool_by_case
from . import ab, confirm

CASE = Case("allreduce", "mpi", 2, size_bytes=4)
#: Within-session spread, lag-1 correlation and session drift the issue's table spans.
WITHIN = (0.01, 0.02, 0.04, 0.08)
LAG1 = (0.0, 0.3, 0.6)
SESSION = (0.0, 0.02, 0.05, 0.10)
DEFAULT_RUNS = 2000
#: The false-alarm rate every setting must keep (the default alpha).
BOUND = decision.DEFAULT_ALPHA


@dataclass(frozen=True)
class Machine:
    within_sd: float = 0.02
    lag1: float = 0.0
    session_sd: float = 0.0
    mode_step: float = 0.0  # log step of the slow spell (0: one mode)
    switch: float = 0.0  # chance per world that the spell changes
    level_us: float = 1.0
    canary_sees: bool = True  # the canary follows the spell (False: a machine whose canary misses them)
    shared_sd: float = 0.0  # a session's offset common to every case (the machine's state)
    case_spread: float = 0.0  # log-SD of how the cases' own session drift differs between cases
    spells_shared: bool = False  # one spell process for the machine, not one per case

    def label(self) -> str:
        modes = (f", modes x{math.exp(self.mode_step):.1f} switching {self.switch:.0%}"
                 + ("" if self.canary_sees else " unseen") + (" shared" if self.spells_shared else "")
                 if self.mode_step else "")
        shared = f" + shared {self.shared_sd:.0%}" if self.shared_sd else ""
        spread = f" (x{math.exp(self.case_spread):.1f} apart)" if self.case_spread else ""
        return (f"within {self.within_sd:.0%}, lag-1 {self.lag1:.1f}, sessions {self.session_sd:.0%}"
                f"{spread}{shared}{modes}")


class MachineState:
    """What every case of one synthetic machine shares: its session offset and its spell."""

    def __init__(self, m: Machine, rng: np.random.Generator):
        self.m, self.rng = m, rng
        self.slow = bool(m.switch and m.spells_shared) and rng.random() < 0.5
        self.offset = 0.0
        self.session()

    def session(self) -> None:
        # no draw where nothing is shared: the machines without a shared state keep the streams
        # (and so the seeded counts) they had before there was one
        self.offset = self.rng.standard_normal() * self.m.shared_sd if self.m.shared_sd else 0.0

    def tick(self) -> None:
        """One world's time passes: the machine's spell may change."""
        if self.m.spells_shared and self.m.switch and self.rng.random() < self.m.switch:
            self.slow = not self.slow

    def wait(self) -> None:
        """Long enough passes for the spell to forget its state (sittings apart)."""
        if self.m.spells_shared and self.m.switch:
            self.slow = bool(self.rng.random() < 0.5)


class Stream:
    """One synthetic case's rounds in time order; ``session()`` starts a new session.
    ``shared``: the machine state it shares with the other cases (None: its own)."""

    def __init__(self, m: Machine, rng: np.random.Generator, shared: MachineState | None = None):
        self.m, self.rng = m, rng
        self.shared = shared
        self.scale = math.exp(m.case_spread * rng.standard_normal()) if m.case_spread else 1.0
        self.noise = rng.standard_normal() * m.within_sd
        self.slow = bool(m.switch) and rng.random() < 0.5
        self.offset = 0.0
        self.session()

    def session(self) -> None:
        self.offset = self.rng.standard_normal() * self.m.session_sd * self.scale
        self.noise = self.rng.standard_normal() * self.m.within_sd  # a new session forgets the last

    def world(self, change: float = 0.0) -> tuple[float, float]:
        """(latency in us, canary in us) of the next world."""
        m = self.m
        shared = self.shared
        if shared is not None and m.spells_shared:
            self.slow = shared.slow
        elif m.switch and self.rng.random() < m.switch:
            self.slow = not self.slow
        self.noise = m.lag1 * self.noise + math.sqrt(1 - m.lag1 ** 2) * m.within_sd * self.rng.standard_normal()
        step = m.mode_step if self.slow else 0.0
        common = shared.offset if shared is not None else 0.0
        value = m.level_us * math.exp(self.offset + common + step + self.noise) * (1.0 + change)
        seen = self.slow and m.canary_sees
        canary = 100.0 * (1.65 if seen else 1.0) * math.exp(0.05 * self.rng.standard_normal())
        return value, canary


def _sample(value: float, canary: float, case: Case = CASE) -> Sample:
    """One world's sample as the allreduce kernel reports it: latency and its busbw mirror."""
    size = case.size_bytes or 4
    return Sample(case, {"latency_us": Metric("latency_us", value, "us", False),
                         "busbw_GBps": Metric("busbw_GBps", size / value / 1e3, "GB/s", True)},
                  info={"canary_us": canary, "contention": 0.0})


def cases(n: int) -> list[Case]:
    return [replace(CASE, size_bytes=4 << i) for i in range(n)]


# --- stored mode --------------------------------------------------------------------------------

@dataclass
class StoredRun:
    verdicts: list
    rounds: int


def stored_run(m: Machine, rng: np.random.Generator, *, change: float = 0.0, n_cases: int = 1,
               sessions: int = 1, baseline_rounds: int = regress.BASELINE_ROUNDS,
               alpha: float = decision.DEFAULT_ALPHA, tolerance: Tolerance | None = None,
               canary_shift: float | None = DEFAULT_CANARY_SHIFT,
               session_sd: float | None = None, apart: bool = True,
               confirm_pairs: int = 0) -> StoredRun:
    """A baseline recorded as ``sessions`` sessions of ``baseline_rounds`` rounds (the first by
    --baseline-update, the others by --baseline-add), then a candidate session judged as
    ``run --compare`` judges it: rounds added under the compare policy, at its looks.
    ``apart``: the sessions and the candidate are sittings apart (an hour: each named by a start
    time an hour after the last, a shared spell forgets its state between them), else back to
    back (minutes: one sitting, the spell going on). ``confirm_pairs`` > 0: then ``--confirm``, as
    ``experiments.confirm`` runs it: the cases it takes (``confirm.open_cases``) judged again by
    an A/B of at most that many pairs on the machine as it is now, arm B with the change, and
    settled into the verdicts (``confirm.settle``).
    ``StoredRun.rounds`` counts the candidate's rounds and the A/B's worlds."""
    cs = cases(n_cases)
    machine = MachineState(m, rng)
    streams = [Stream(m, rng, machine) for _ in cs]  # each case its own noise, the machine's state shared

    def world(change: float = 0.0) -> list[Sample]:
        machine.tick()
        return [_sample(*s.world(change), c) for s, c in zip(streams, cs)]

    stored: dict = {}
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    step = datetime.timedelta(hours=1) if apart else datetime.timedelta(minutes=1)
    for k in range(sessions):
        if k:
            machine.session()
            if apart:
                machine.wait()
            for s in streams:
                s.session()
        rounds = [world() for _ in range(baseline_rounds)]
        pooled = pool_by_case(rounds)
        old = baselines.BaselineSet("sim", "allreduce", stored) if stored else None
        merged, _ = baselines.merge(old, pooled, "sim", "allreduce", session=(start + k * step).isoformat(),
                                    add=k > 0)
        stored = merged.entries
    machine.session()
    if apart:
        machine.wait()
    for s in streams:
        s.session()
    family = judging.family(cs, stored)
    policy, looks = judging.judging_rounds(None, update=False, rounds_given=False, baselines=stored,
                                         tolerance=tolerance, alpha=alpha, canary_shift=canary_shift,
                                         family=family, session_sd=session_sd)
    taken: list[list[Sample]] = []
    pooled: list[Sample] = []
    while policy.more(len(taken), 0.0, pooled):
        taken.append(world(change))
        pooled = pool_by_case(taken, policy.max_contention)
    verdicts = regress.compare(pooled, stored, tolerance=tolerance, alpha=alpha, looks=looks,
                               canary_shift=canary_shift, family=family,
                               session_sd=session_sd)
    todo = confirm.open_cases(verdicts) if confirm_pairs else []
    if not todo:
        return StoredRun(verdicts, len(taken))
    index = {c.name: i for i, c in enumerate(cs)}
    chosen = [cs[index[v.case]] for v in todo]

    def runner(arm: ab.Arm, selected: Sequence[Case]) -> list[Sample]:
        machine.tick()
        return [_sample(*streams[index[c.name]].world(change if arm.name == "B" else 0.0), c) for c in selected]

    cfg = confirm.ab_config(todo, chosen, ab.Arm("A", "mpi"), ab.Arm("B", "mpi", env=(("X", "1"),)),
                            alpha=alpha, max_pairs=confirm_pairs)
    rep = ab.run(replace(cfg, canary_shift=canary_shift, seed=int(rng.integers(1 << 31))), runner)
    decided = {(v.case, v.metric): v for v in rep.verdicts}
    return StoredRun(confirm.settle(verdicts, todo, decided, "sim"), len(taken) + 2 * rep.pairs)


# --- A/B mode -----------------------------------------------------------------------------------

def ab_run(m: Machine, rng: np.random.Generator, *, change: float = 0.0, n_cases: int = 1,
           max_pairs: int = ab.DEFAULT_MAX_PAIRS, alpha: float = decision.DEFAULT_ALPHA,
           tolerance: Tolerance = ab.DEFAULT_TOLERANCE,
           canary_shift: float | None = DEFAULT_CANARY_SHIFT,
           config: Callable[[ab.ABConfig], ab.ABConfig] = lambda c: c) -> ab.ABReport:
    """One ``perfsuite ab`` run over the synthetic machine: arm B's worlds ``change`` slower."""
    cs = tuple(cases(n_cases))
    # each case its own noise (the worst case for a family: independent tests), one canary
    streams = [Stream(m, rng) for _ in cs]

    def runner(arm: ab.Arm, selected: Sequence[Case]) -> list[Sample]:
        worlds = [s.world(change if arm.name == "B" else 0.0) for s in streams]
        return [_sample(value, worlds[0][1], c) for (value, _), c in zip(worlds, selected)]

    cfg = ab.ABConfig(ab.Arm("A", "mpi"), ab.Arm("B", "mpi", env=(("X", "1"),)), cs, cs,
                      max_pairs=max_pairs, alpha=alpha, tolerance=tolerance,
                      canary_shift=canary_shift, seed=int(rng.integers(1 << 31)),
                      judged=("latency_us",))
    return ab.run(config(cfg), runner)


# --- rates ------------------------------------------------------------------------------------------

@dataclass
class Rate:
    mode: str
    machine: Machine
    condition: str
    runs: int
    hits: int = 0  # DIFFERENT (any case) for no change; a regression (every case) for a change
    same: int = 0
    used: list[float] = field(default_factory=list)  # rounds or pairs per run

    @property
    def rate(self) -> float:
        return self.hits / self.runs if self.runs else math.nan

    def interval(self) -> tuple[float, float]:
        return stats.rate_ci(self.hits, self.runs)

    def to_dict(self) -> dict:
        lo, hi = self.interval()
        return {"mode": self.mode, "machine": self.machine.__dict__, "condition": self.condition,
                "runs": self.runs, "flagged": self.hits, "rate": self.rate, "rate_ci": [lo, hi],
                "same": self.same, "median_used": float(np.median(self.used)) if self.used else None}


#: A rate's runs are drawn from this many independent seeded streams (numpy's
#: ``SeedSequence.spawn``), so its count is the same whether one process computes it or several.
STREAMS = 8


def rate(mode: str, m: Machine, runs: int, *, change: float = 0.0, seed: int = 0,
         workers: int = 1, **kw) -> Rate:
    """How often ``runs`` seeded runs of ``mode`` ("stored" or "A/B") on machine ``m`` said
    DIFFERENT (no change) or caught the regression (a change). ``workers`` > 1 shares the
    streams among that many fresh processes (a forkserver's: none inherits this process's
    threads, nor anything a test patched, so a deliberately broken rule runs with 1)."""
    seeds = np.random.SeedSequence(seed).spawn(STREAMS)
    jobs = [(mode, m, runs // STREAMS + (i < runs % STREAMS), change, seeds[i], kw) for i in range(STREAMS)]
    jobs = [j for j in jobs if j[2]]
    if workers > 1 and len(jobs) > 1:
        from ..launch.pool import process_map

        parts = process_map(_stream, jobs, min(workers, len(jobs)))
    else:
        parts = [_stream(j) for j in jobs]
    out = Rate(mode, m, "clean" if not change else f"{change:+.0%}", runs)
    for part in parts:
        out.hits += part.hits
        out.same += part.same
        out.used += part.used
    return out


def _stream(job: tuple) -> Rate:
    """One stream's runs (a process pool's unit of work)."""
    mode, m, runs, change, seed, kw = job
    rng = np.random.default_rng(seed)
    out = Rate(mode, m, "clean" if not change else f"{change:+.0%}", runs)
    for _ in range(runs):
        if mode == "stored":
            r = stored_run(m, rng, change=change, **kw)
            verdicts, used = r.verdicts, r.rounds
        else:
            rep = ab_run(m, rng, change=change, **kw)
            verdicts, used = rep.verdicts, rep.pairs
        kinds = [v.kind for v in verdicts]
        if change:
            out.hits += all(v.status == "regression" for v in verdicts)
        else:
            out.hits += "DIFFERENT" in kinds
        out.same += bool(kinds) and all(k == "SAME" for k in kinds)
        out.used.append(used)
    return out


def cores() -> int:
    """The cores this process may use (how many workers a rate can have)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def grid(within: Iterable[float] = WITHIN, lag1: Iterable[float] = LAG1,
         session: Iterable[float] = SESSION) -> list[Machine]:
    return [Machine(w, r, s) for w in within for r in lag1 for s in session]


def table(rates: Sequence[Rate], bound: float = 0.01) -> str:
    lines = [f"{'mode':<7}{'machine':<58}{'cond':>6}{'runs':>6}{'flagged':>8}{'rate':>8}  "
             f"{'95% CI':<16}{'same':>6}{'used':>6}"]
    for r in rates:
        lo, hi = r.interval()
        used = float(np.median(r.used)) if r.used else math.nan
        lines.append(f"{r.mode:<7}{r.machine.label():<58}{r.condition:>6}{r.runs:>6}{r.hits:>8}"
                     f"{r.rate:>8.2%}  [{lo:.2%}, {hi:.2%}]{r.same:>6}{used:>6.0f}")
    clean = [r for r in rates if r.condition == "clean"]
    if clean:
        worst = max(clean, key=lambda r: r.rate)
        lines.append(f"# clean runs: worst false-alarm rate {worst.rate:.2%} ({worst.mode}, "
                     f"{worst.machine.label()}); bound {bound:.0%}: "
                     + ("met in every setting" if all(r.rate <= bound for r in clean) else "NOT met"))
    lines.append("# a run is one comparison with every look it took; flagged: DIFFERENT in any case "
                 "(clean), or a regression in every case (a change); used: median rounds (stored) "
                 "or pairs (A/B) per run")
    return "\n".join(lines)
