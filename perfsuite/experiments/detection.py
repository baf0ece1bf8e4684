"""Detection power of the gate, measured here: how often an injected slowdown is flagged (hit
rate) and how often a clean rerun is flagged (false-alarm rate).

Experiment
----------
Worlds are run in interleaved cycles, one per condition per cycle (clean, +5%, +10%, +20%, ...),
so a burst of load from a neighbour hits every condition alike. A slowdown is injected with
``PERFSUITE_INJECT_SLOWDOWN`` (the kernel spins inside the timed region; no number is edited).
Each world is one round. Then each *comparison* draws ``rounds`` clean worlds as the baseline and
``rounds`` other worlds as the candidate (clean worlds disjoint from the baseline for the false
alarm, slowed worlds for the hit rate), pools them as the suite pools rounds, and asks
``regress.verdict`` exactly as the gate does. Many comparisons are drawn from the measured worlds
(they share worlds, so the rates' error bars are wider than their count suggests; the table
also gives the number of worlds behind them).

Metrics: busbw of the large message, latency of the small one.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .. import regress, stats, suite
from ..bench.allreduce import allreduce_cases
from ..errors import ConfigError, PerfsuiteError
from ..kernels.faults import SLOWDOWN_ENV
from ..model import Sample, Tolerance, WorldSpec

TARGET_HIT = 0.95
TARGET_FALSE_ALARM = 0.01
#: 5, 10 and 20% (what a regression suite is asked to catch), then larger ones so that on a
#: noisy machine the table can still name the smallest slowdown that meets the target.
DEFAULT_SLOWDOWNS = (0.05, 0.10, 0.20, 0.50, 1.00)
DEFAULT_WORLDS = 12  # per condition: 6 conditions x 12 worlds of 2-4 s fits the 10 min budget
DEFAULT_COMPARISONS = 400

#: runner(spec, slowdown) -> the samples of one world run with that injected slowdown; a world
#: that failed raises PerfsuiteError, whose message the report keeps.
Runner = Callable[[WorldSpec, float], list[Sample]]


@dataclass(frozen=True)
class DetectionConfig:
    small: int = 4
    large: int = 16 << 20
    transport: str = "mpi"
    world_size: int = 2
    worlds: int = DEFAULT_WORLDS  # measured worlds per condition
    rounds: int = 6  # rounds pooled on each side: 6 + 6 lets U at 0.01 tolerate 2 swapped pairs
    slowdowns: tuple[float, ...] = DEFAULT_SLOWDOWNS
    comparisons: int = DEFAULT_COMPARISONS
    tolerance: Tolerance | None = None  # None: each metric's default
    alpha: float = regress.DEFAULT_ALPHA
    seed: int = 0
    options: dict = field(default_factory=lambda: {"copy_bw": False})

    def __post_init__(self):
        if self.rounds < 1:
            raise ConfigError(f"rounds {self.rounds} must be >= 1")
        if self.worlds < 2 * self.rounds:
            raise ConfigError(f"worlds per condition ({self.worlds}) must be at least twice the "
                              f"rounds per side ({self.rounds}): a clean rerun needs worlds the "
                              f"baseline did not use; use --worlds {2 * self.rounds} or more")
        if not self.slowdowns or any(not 0.0 < s <= 10.0 for s in self.slowdowns):
            raise ConfigError(f"slowdowns {self.slowdowns} must be fractions in (0, 10], e.g. 0.05,0.1")
        if self.small >= self.large:
            raise ConfigError(f"small size {self.small} must be below large size {self.large}")

    @property
    def metrics(self) -> tuple[tuple[str, str], ...]:
        """(case name, metric) pairs the experiment judges."""
        small, large = allreduce_cases([self.transport], [self.world_size], [self.small, self.large])
        return ((large.name, "busbw_GBps"), (small.name, "latency_us"))

    def spec(self) -> WorldSpec:
        cases = allreduce_cases([self.transport], [self.world_size], [self.small, self.large])
        return suite.plan(cases, self.options)[0]


@dataclass
class Row:
    case: str
    metric: str
    slowdown: float  # 0.0 = clean rerun
    flagged: int
    comparisons: int
    measured: float = math.nan  # median of this condition's round values vs clean, minus 1

    @property
    def rate(self) -> float:
        return self.flagged / self.comparisons if self.comparisons else math.nan


@dataclass
class DetectionReport:
    config: DetectionConfig
    rows: list[Row]
    noise: dict[tuple[str, str], dict[str, float]]  # per metric: within/between-round spread
    worlds_run: int
    wall_s: float
    failures: list[str] = field(default_factory=list)

    def row(self, case: str, metric: str, slowdown: float) -> Row | None:
        for r in self.rows:
            if (r.case, r.metric, r.slowdown) == (case, metric, slowdown):
                return r
        return None

    def smallest_detected(self, case: str, metric: str) -> float | None:
        """Smallest measured slowdown meeting both targets for this metric, or None."""
        clean = self.row(case, metric, 0.0)
        if clean is None or clean.rate > TARGET_FALSE_ALARM:
            return None
        for s in sorted(self.config.slowdowns):
            r = self.row(case, metric, s)
            if r is not None and r.rate >= TARGET_HIT:
                return s
        return None


def measure(cfg: DetectionConfig, runner: Runner, progress: Callable[[str], None] | None = None,
            failures: list[str] | None = None) -> dict[float, list[list[Sample]]]:
    """Run ``cfg.worlds`` worlds per condition, interleaved; return condition -> rounds. Why a
    world failed or did not validate goes into ``failures``."""
    conditions = (0.0, *cfg.slowdowns)
    pool: dict[float, list[list[Sample]]] = {c: [] for c in conditions}
    spec = cfg.spec()
    for cycle in range(cfg.worlds):
        for c in conditions:
            try:
                samples = runner(spec, c)
            except PerfsuiteError as exc:
                if failures is not None:
                    failures.append(f"cycle {cycle + 1}, slowdown {c:g}: {exc}")
                continue
            bad = [s.case.name for s in samples if not s.valid]
            if bad and failures is not None:
                failures.append(f"cycle {cycle + 1}, slowdown {c:g}: wrong result in {', '.join(bad)}")
            if samples and not bad:
                pool[c].append(samples)
        if progress:
            progress(f"cycle {cycle + 1}/{cfg.worlds} done")
    return pool


def evaluate(cfg: DetectionConfig, pool: dict[float, list[list[Sample]]]) -> tuple[list[Row], dict]:
    """Hit and false-alarm rates from measured rounds (pure: no world is started here)."""
    rng = np.random.default_rng(cfg.seed)
    clean = pool.get(0.0, [])
    if len(clean) < 2 * cfg.rounds:
        raise PerfsuiteError(f"only {len(clean)} clean worlds succeeded; need {2 * cfg.rounds} "
                             f"for {cfg.rounds} rounds per side")
    rows: list[Row] = []
    for case, metric in cfg.metrics:
        for cond in (0.0, *cfg.slowdowns):
            flagged = n = 0
            if cond and len(pool.get(cond, [])) < cfg.rounds:
                continue
            for _ in range(cfg.comparisons):
                order = rng.permutation(len(clean))
                base_idx = order[:cfg.rounds]
                if cond == 0.0:
                    cand = [clean[i] for i in order[cfg.rounds:2 * cfg.rounds]]
                else:
                    src = pool[cond]
                    cand = [src[i] for i in rng.choice(len(src), cfg.rounds, replace=False)]
                base = _pooled(case, [clean[i] for i in base_idx])
                new = _pooled(case, cand)
                if base is None or new is None:
                    continue
                b = regress.baseline_from_sample(base, metric)
                v = regress.verdict(case, metric, new, b, tolerance=cfg.tolerance, alpha=cfg.alpha)
                n += 1
                # A clean rerun is a false alarm when flagged either way; a slowdown is a hit
                # only when flagged as a regression.
                flagged += (v.status in ("regression", "improvement")) if cond == 0.0 else (v.status == "regression")
            rows.append(Row(case, metric, cond, flagged, n, _shift(case, metric, pool.get(cond, []), clean)))
    return rows, noise_figures(cfg, clean)


def noise_figures(cfg: DetectionConfig, clean: list[list[Sample]]) -> dict:
    """Per judged metric: within-round spread (robust CV of iterations, median over rounds),
    between-round spread (robust CV of round values) and the slowdown it allows to detect."""
    out = {}
    for case, metric in cfg.metrics:
        within, values = [], []
        for one in clean:
            for s in one:
                if s.case.name == case and metric in s.metrics:
                    m = s.metrics[metric]
                    values.append(m.value)
                    if m.samples:
                        within.append(stats.relative_spread(m.samples))
        if not values:
            continue
        between = stats.relative_spread(values) if len(values) > 2 else math.nan
        # The ratio of two medians of `rounds` values has a spread of about
        # sqrt(2 * pi / 2 / rounds) * between (a median's efficiency is 2/pi of a mean's);
        # telling +d from 0 at 95%/1% two-sided needs d >= (1.645 + 2.576) * that.
        ratio_sd = between * math.sqrt(math.pi / cfg.rounds)
        out[(case, metric)] = {"within": float(np.median(within)) if within else math.nan,
                               "between": between, "ratio_sd": ratio_sd,
                               "detectable": (1.645 + 2.576) * ratio_sd,
                               "max": float(np.max(values)), "min": float(np.min(values))}
    return out


def _shift(case: str, metric: str, rounds: list[list[Sample]], clean: list[list[Sample]]) -> float:
    """How much the injected slowdown really moved the metric (median of rounds vs clean)."""
    def med(rs):
        vals = [s.metrics[metric].value for one in rs for s in one if s.case.name == case and metric in s.metrics]
        return stats.median(vals) if vals else math.nan
    base = med(clean)
    return med(rounds) / base - 1.0 if base else math.nan


def _pooled(case: str, rounds: Sequence[list[Sample]]) -> Sample | None:
    picked = [s for one in rounds for s in one if s.case.name == case]
    return regress.pool_rounds(picked) if picked else None


def run(cfg: DetectionConfig, runner: Runner,
        progress: Callable[[str], None] | None = None) -> DetectionReport:
    t0 = time.monotonic()
    why: list[str] = []
    pool = measure(cfg, runner, progress, why)
    rows, noise = evaluate(cfg, pool)
    expected = cfg.worlds * (1 + len(cfg.slowdowns))
    got = sum(len(v) for v in pool.values())
    failures = ([f"{expected - got} of {expected} worlds failed or did not validate", *why]
                if got < expected else [])
    return DetectionReport(cfg, rows, noise, got, time.monotonic() - t0, failures)


def world_runner(suite_cfg: suite.SuiteConfig) -> Runner:
    """A Runner over real worlds (``suite.run_one``), the slowdown injected into every rank."""

    def runner(spec: WorldSpec, slowdown: float) -> list[Sample]:
        env = dict(suite_cfg.launch.env)
        if slowdown:
            env[SLOWDOWN_ENV] = repr(slowdown)
        outcome = suite.run_one(spec, replace(suite_cfg, launch=replace(suite_cfg.launch, env=env)))
        if outcome.failure is not None:
            raise outcome.failure
        if outcome.skipped:
            raise PerfsuiteError(f"{spec.label} cannot run here: {outcome.skipped}")
        return list(outcome.result.samples)

    return runner


def format_report(rep: DetectionReport) -> str:
    """The table `perfsuite detection-power` prints, and what limits detection here."""
    cfg = rep.config
    tol = (f"{cfg.tolerance.lower:+.0%}/{cfg.tolerance.upper:+.0%}" if cfg.tolerance
           else "metric defaults")
    lines = [f"# detection power: {cfg.transport} allreduce, world size {cfg.world_size}, "
             f"{cfg.rounds} rounds per side, tolerance {tol}, alpha {cfg.alpha:g}",
             f"# {rep.worlds_run} worlds in {rep.wall_s:.0f} s ({cfg.worlds} per condition, "
             f"interleaved); {cfg.comparisons} comparisons per row drawn from them",
             f"# target: slowdown flagged in >= {TARGET_HIT:.0%}, clean rerun flagged in "
             f"<= {TARGET_FALSE_ALARM:.0%}",
             f"{'case':<28}{'metric':<12}{'slowdown':>9}{'measured':>9}{'flagged':>10}{'rate':>8}  95% CI"]
    for r in rep.rows:
        lo, hi = stats.rate_ci(r.flagged, r.comparisons) if r.comparisons else (math.nan, math.nan)
        what = "clean" if r.slowdown == 0.0 else f"+{r.slowdown:.0%}"
        lines.append(f"{r.case:<28}{r.metric:<12}{what:>9}{r.measured:>+9.1%}{r.flagged:>6}/{r.comparisons:<4}"
                     f"{r.rate:>7.1%}  [{lo:.1%}, {hi:.1%}]")
    lines.append("# noise (robust CV): within = iterations of one world, between = worlds")
    for (case, metric), nz in rep.noise.items():
        lines.append(f"#   {case} {metric}: within {nz['within']:.1%}, between {nz['between']:.1%}, "
                     f"round values {nz['min']:.4g}..{nz['max']:.4g}; with {cfg.rounds} rounds a "
                     f"slowdown of ~{nz['detectable']:.0%} is the least these figures can separate")
    for case, metric in cfg.metrics:
        best = rep.smallest_detected(case, metric)
        clean = rep.row(case, metric, 0.0)
        if best is not None:
            lines.append(f"{case} {metric}: smallest slowdown meeting the target: +{best:.0%}")
        elif clean is not None and clean.rate > TARGET_FALSE_ALARM:
            lines.append(f"{case} {metric}: no slowdown meets the target: clean reruns are flagged "
                         f"in {clean.rate:.1%} (> {TARGET_FALSE_ALARM:.0%}); widen the tolerance or "
                         "pool more rounds")
        else:
            lines.append(f"{case} {metric}: none of the tested slowdowns "
                         f"({', '.join(f'+{s:.0%}' for s in cfg.slowdowns)}) is flagged in "
                         f">= {TARGET_HIT:.0%}; test larger ones or pool more rounds")
    lines += [f"# {f}" for f in rep.failures]
    return "\n".join(lines)
