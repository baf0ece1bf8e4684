"""Detection power of the verdicts, measured here, in the two ways they are used.

One stream of worlds, in time order
-----------------------------------
Worlds run in blocks; each block holds one pair of each kind, in random order: A/A (two clean
worlds), A/+small (a clean world and one with ``PERFSUITE_INJECT_SLOWDOWN=small``, 5% by
default) and A/+large (30%), each pair in random order (A first or B first). Every world runs
the small (latency) and the large (busbw) message, with the canary measured between blocks of
the timed loop, and records contention and CPU pressure. Nothing is edited: a slowdown is a
calibrated spin inside the timed region.

From that one stream (``windows.py``):

* **A/B mode**, as ``perfsuite ab`` judges: the pairs of one kind in time order, split into
  contiguous windows; each window grows to ab's next look until every metric
  is decided or ``max_pairs`` is reached. Windows share no world, so each is one independent
  comparison.
* **Stored-baseline mode**, as ``run --baseline-update`` then ``run --compare`` judge: the first
  ``baseline_rounds`` calm clean worlds are a baseline; candidates are clean worlds (a clean
  rerun) or +large worlds measured at least ``gap_s`` later, judged in time order in contiguous
  windows that grow one round per look up to ``max_rounds``. The next baseline is the next
  unused clean worlds, and so on: no world serves twice.

Before the stream, the injection is checked inside worlds (``kernels/collectives/injection.py``: plain and
spun blocks alternate in one world), for both slowdowns and both sizes.

And ``canary.py``: does the canary explain the worlds' spread (correlation, lag-1
autocorrelation, pair differences raw against canary-adjusted)?
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ..verdicts import decision, rounds
from .. import suite
from ..verdicts import judging, regress
from ..bench.allreduce import allreduce_cases
from ..records.errors import ConfigError, PerfsuiteError
from ..kernels.faults import MAX_SLOWDOWN, SLOWDOWN_ENV
from ..records.model import Metric, Sample, Tolerance, WorldSpec
from . import ab

#: Pair kinds: name -> which slowdown of the config the B world runs with.
KINDS = ("A/A", "A/+small", "A/+large")
CANARY_BLOCKS = 4
#: Seconds of candidates an automatic stream measures after the gap (~20 stored windows here).
CANDIDATE_S = 600.0
#: What a stored world keeps of each sample's info (the raw iterations stay out: 500 worlds).
WORLD_INFO = ("canary_us", "contention", "cpu_pressure", "involuntary_switches", "invalid_ranks",
              "invalid_reason")

#: runner(spec, slowdown) -> the samples of one world; a failed world raises PerfsuiteError.
Runner = Callable[[WorldSpec, float], list[Sample]]


@dataclass(frozen=True)
class DetectionConfig:
    small: int = 4
    large: int = 16 << 20
    transport: str = "mpi"
    world_size: int = 2
    # Each block: one pair of each kind, 6 worlds. 0: blocks
    # until the stream has outlasted the gap by CANDIDATE_S, which is what leaves the stored mode
    # candidates to judge whatever a block costs.
    blocks: int = 0
    small_slowdown: float = 0.05  # what A/B mode is asked to catch
    large_slowdown: float = 0.30  # what the stored-baseline gate is asked to catch
    baseline_rounds: int = regress.BASELINE_ROUNDS  # what --baseline-update records
    gap_s: float = 600.0
    max_pairs: int = ab.DEFAULT_MAX_PAIRS
    max_rounds: int = judging.COMPARE_MAX_ROUNDS  # what run --compare adds up to
    ab_tolerance: Tolerance = ab.DEFAULT_TOLERANCE
    tolerance: Tolerance | None = None  # stored mode; None: the gate's default
    alpha: float = decision.DEFAULT_ALPHA
    max_contention: float | None = rounds.DEFAULT_MAX_CONTENTION
    canary_shift: float | None = rounds.DEFAULT_CANARY_SHIFT
    seed: int = 0

    def __post_init__(self):
        for name in ("small_slowdown", "large_slowdown"):
            s = getattr(self, name)
            if not 0.0 < s <= MAX_SLOWDOWN:
                raise ConfigError(f"{name.replace('_', ' ')} {s!r} must be a fraction in "
                                  f"(0, {MAX_SLOWDOWN:g}], e.g. 0.05")
        if self.small >= self.large:
            raise ConfigError(f"small size {self.small} must be below large size {self.large}")
        if self.gap_s < 0:
            raise ConfigError(f"gap {self.gap_s!r} must be >= 0 seconds")
        if self.max_pairs < 2 or self.max_rounds < 1 or self.baseline_rounds < 2:
            raise ConfigError("max pairs must be >= 2, max rounds >= 1 and baseline rounds >= 2")

    @property
    def stream_s(self) -> float:
        """How long an automatic stream (``blocks`` 0) runs."""
        return self.gap_s + CANDIDATE_S

    def slowdown(self, kind: str) -> float:
        return {"A/A": 0.0, "A/+small": self.small_slowdown, "A/+large": self.large_slowdown}[kind]

    @property
    def metrics(self) -> tuple[tuple[str, str], ...]:
        """(case name, metric) pairs judged: busbw of the large message, latency of the small."""
        small, large = allreduce_cases([self.transport], [self.world_size], [self.small, self.large])
        return ((large.name, "busbw_GBps"), (small.name, "latency_us"))

    def spec(self) -> WorldSpec:
        cases = allreduce_cases([self.transport], [self.world_size], [self.small, self.large])
        return suite.plan(cases, {"copy_bw": False, "canary": CANARY_BLOCKS})[0]


@dataclass
class World:
    index: int
    t: float  # seconds since the stream started, at the world's start
    wall_s: float
    slowdown: float
    kind: str
    pair: int
    role: str  # "a" (clean) or "b"
    samples: list[Sample] = field(default_factory=list)
    failure: str | None = None
    stopped: str | None = None  # the stream stopped at this world: its failure repeats

    def sample(self, case: str) -> Sample | None:
        return next((s for s in self.samples if s.case.name == case), None)

    def value(self, case: str, metric: str) -> float | None:
        s = self.sample(case)
        return s.metrics[metric].value if s is not None and metric in s.metrics else None

    def canary(self, case: str) -> float | None:
        s = self.sample(case)
        c = s.info.get("canary_us") if s is not None else None
        return float(c) if isinstance(c, (int, float)) and c > 0 else None

    @property
    def valid(self) -> bool:
        """Every case's results were right (a world that failed has none to be wrong)."""
        return all(s.valid for s in self.samples)

    def usable(self, max_contention: float | None) -> bool:
        """Validated, measured, and calm in every case."""
        return (self.failure is None and bool(self.samples) and self.valid
                and not any(rounds.is_contended(s, max_contention) for s in self.samples))

    def to_dict(self) -> dict:
        return {"index": self.index, "t": self.t, "wall_s": self.wall_s, "slowdown": self.slowdown,
                "kind": self.kind, "pair": self.pair, "role": self.role, "failure": self.failure, "stopped": self.stopped,
                "cases": {s.case.name: {"valid": s.valid,
                                        "metrics": {k: m.value for k, m in s.metrics.items()},
                                        **{k: s.info.get(k) for k in WORLD_INFO}}
                          for s in self.samples}}


def measure(cfg: DetectionConfig, runner: Runner, progress: Callable[[str], None] | None = None,
            clock: Callable[[], float] = time.monotonic) -> list[World]:
    """The stream: ``cfg.blocks`` blocks of one pair per kind, kinds and roles in random order
    (``blocks`` 0: until ``cfg.stream_s`` has passed). A world whose results were wrong ends it:
    every world runs the same stack, so the ones after it would be wasted (it is kept, marked)."""
    from .repeats import Repeats

    rng = np.random.default_rng(cfg.seed)
    spec = cfg.spec()
    worlds: list[World] = []
    repeats = Repeats()  # every world runs one stack: one stream, so twice in a row stops it
    t0 = clock()
    pair = 0
    block = 0
    while (block < cfg.blocks) if cfg.blocks else (clock() - t0 < cfg.stream_s):
        for kind in rng.permutation(KINDS):
            roles = ("a", "b") if rng.random() < 0.5 else ("b", "a")
            for role in roles:
                slow = cfg.slowdown(kind) if role == "b" else 0.0
                start = clock()
                w = World(len(worlds), start - t0, 0.0, slow, str(kind), pair, role)
                try:
                    w.samples = runner(spec, slow)
                    repeats.seen("the stream", None)
                except PerfsuiteError as exc:  # a failed world fails its pair, and is reported
                    w.failure = str(exc)
                    w.stopped = repeats.seen("the stream", exc, f"world {len(worlds) + 1}")
                w.wall_s = clock() - start
                worlds.append(w)
                if w.stopped:
                    if progress:
                        progress(f"stopping the stream at world {len(worlds)}: a failure repeats")
                    return worlds
                if not w.valid:
                    if progress:
                        progress(f"world {len(worlds)} returned wrong results: stopping the stream")
                    return worlds
            pair += 1
        block += 1
        if progress:
            of = f"/{cfg.blocks}" if cfg.blocks else ""
            progress(f"block {block}{of}: {len(worlds)} worlds in {clock() - t0:.0f} s")
    return worlds


def world_runner(suite_cfg: suite.SuiteConfig) -> Runner:
    """A Runner over real worlds (``suite.run_one``), the slowdown injected into every rank."""
    one = replace(suite_cfg, rounds=None)

    def runner(spec: WorldSpec, slowdown: float) -> list[Sample]:
        env = dict(one.launch.env)
        if slowdown:
            env[SLOWDOWN_ENV] = repr(slowdown)
        outcome = suite.run_one(spec, replace(one, launch=replace(one.launch, env=env)))
        if outcome.failure is not None:
            raise outcome.failure
        if outcome.skipped:
            raise ConfigError(f"{spec.label} cannot run here: {outcome.skipped}")
        return list(outcome.result.samples)

    return runner


INJECTION_WORLDS = 3


def check_injection(cfg: DetectionConfig, runner: Runner) -> list[dict]:
    """Asked against measured, inside ``INJECTION_WORLDS`` worlds per slowdown."""
    cases = allreduce_cases([cfg.transport], [cfg.world_size], [cfg.small, cfg.large])
    out: list[dict] = []
    for _ in range(INJECTION_WORLDS):
        for f in (cfg.small_slowdown, cfg.large_slowdown):
            spec = replace(suite.plan(cases, {"fraction": f, "copy_bw": False})[0],
                           kernel="perfsuite.kernels.collectives.injection")
            try:
                samples = runner(spec, 0.0)
            except PerfsuiteError as exc:
                out.append({"asked": f, "failure": str(exc)})
                continue
            out += [{"asked": f, "case": x.case.name, "measured": x.info.get("measured"),
                     "turns": x.info.get("turns")} for x in samples]
    return out


def format_injection(checks: list[dict]) -> list[str]:
    lines = ["# injection, checked inside each world (plain and spun blocks alternate):"]
    keys = sorted({(c["asked"], c["case"]) for c in checks if "case" in c})
    for asked, case in keys:
        got = [c["measured"] for c in checks if c.get("case") == case and c["asked"] == asked]
        lines.append(f"#   asked {asked:+.0%} {case}: measured "
                     + ", ".join(f"{g:+.1%}" for g in got) + f" (median {float(np.median(got)):+.1%})")
    lines += [f"#   FAILED asked {c['asked']:+.0%}: {c['failure']}" for c in checks if "failure" in c]
    return lines


@dataclass
class DetectionReport:
    config: DetectionConfig
    worlds: list[World]
    wall_s: float
    canary: dict = field(default_factory=dict)
    injection: list = field(default_factory=list)
    ab_rows: list = field(default_factory=list)
    stored_rows: list = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        return [f"world {w.index + 1} ({w.kind} {w.role}): {w.failure}" for w in self.worlds if w.failure]

    @property
    def stopped(self) -> str | None:
        return next((w.stopped for w in self.worlds if w.stopped), None)

    def invalid_lines(self) -> list[str]:
        """One line per case of a world whose results were wrong: its arm (the pair's role),
        case, ranks and world."""
        from ..reading import verdict_text as vt

        return [vt.invalid_sample(s, w.role.upper(), at=f"world {w.index + 1} ({w.kind} pair)")
                for w in self.worlds for s in w.samples if not s.valid]

    def to_dict(self) -> dict:
        c = self.config
        return {"config": {"small": c.small, "large": c.large, "transport": c.transport,
                           "world_size": c.world_size, "blocks": len(self.worlds) // 6,
                           "small_slowdown": c.small_slowdown, "large_slowdown": c.large_slowdown,
                           "baseline_rounds": c.baseline_rounds, "gap_s": c.gap_s,
                           "max_pairs": c.max_pairs, "max_rounds": c.max_rounds, "alpha": c.alpha,
                           "max_contention": c.max_contention, "canary_shift": c.canary_shift},
                "wall_s": self.wall_s, "canary": self.canary, "injection": self.injection,
                "ab": [r.to_dict() for r in self.ab_rows],
                "stored": [r.to_dict() for r in self.stored_rows],
                "worlds": [w.to_dict() for w in self.worlds]}


#: The judged numbers a stored world keeps, with their units and directions.
_METRICS = {"latency_us": ("us", False), "busbw_GBps": ("GB/s", True)}


def from_dict(d: dict, **overrides) -> tuple[DetectionConfig, list[World]]:
    """A stream written by ``--json``, as its config (``overrides`` replacing fields such as
    max_pairs or gap_s) and its worlds, to judge again with the current rules."""
    c = d["config"]
    keep = {k: c[k] for k in ("small", "large", "transport", "world_size", "small_slowdown",
                             "large_slowdown", "gap_s", "max_pairs", "max_rounds", "alpha",
                             "max_contention", "canary_shift") if k in c}
    cfg = DetectionConfig(**{**keep, "blocks": int(c.get("blocks", 0)), **overrides})
    cases = {x.name: x for x in cfg.spec().cases}
    worlds = []
    for w in d["worlds"]:
        samples = []
        for name, e in (w.get("cases") or {}).items():
            metrics = {k: Metric(k, float(v), *_METRICS.get(k, ("", True))) for k, v in e["metrics"].items()}
            samples.append(Sample(cases[name], metrics, bool(e.get("valid", True)),
                                  info={k: e.get(k) for k in WORLD_INFO if e.get(k) is not None}))
        worlds.append(World(int(w["index"]), float(w["t"]), float(w["wall_s"]), float(w["slowdown"]),
                            str(w["kind"]), int(w["pair"]), str(w["role"]), samples, w.get("failure"),
                            w.get("stopped")))
    return cfg, worlds


def judge(cfg: DetectionConfig, worlds: list[World], wall_s: float, injection: list | None = None
          ) -> DetectionReport:
    """The stream judged both ways the suite judges, and the canary study."""
    from . import canary, windows

    rep = DetectionReport(cfg, worlds, wall_s, injection=injection or [])
    rep.canary = canary.study(cfg, worlds)
    rep.ab_rows = windows.ab_rows(cfg, worlds)
    rep.stored_rows = windows.stored_rows(cfg, worlds)
    return rep


def run(cfg: DetectionConfig, runner: Runner, progress: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic) -> DetectionReport:
    injection = check_injection(cfg, runner)
    t0 = clock()
    worlds = measure(cfg, runner, progress, clock)
    return judge(cfg, worlds, clock() - t0, injection)


def pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1%}"


TARGETS = {("A/B", "slowed"): ("flagged a regression", 0.95, ">="),
           ("A/B", "clean"): ("flagged either way", 0.01, "<="),
           ("stored", "slowed"): ("flagged a regression", 0.95, ">="),
           ("stored", "clean"): ("flagged either way", 0.01, "<=")}


def format_report(rep: DetectionReport) -> str:
    from . import canary
    from ..records import stats
    from ..reading import verdict_text as vt

    cfg = rep.config
    usable = sum(w.usable(cfg.max_contention) for w in rep.worlds)
    lines = [f"# detection power: {cfg.transport} allreduce, world size {cfg.world_size}; "
             f"{len(rep.worlds)} worlds in {rep.wall_s:.0f} s, {usable} calm and valid "
             f"(contention <= {cfg.max_contention if cfg.max_contention is not None else 'off'})",
             f"# one stream: {len(rep.worlds) // 6} blocks of one A/A, one A/+{cfg.small_slowdown:.0%} and one "
             f"A/+{cfg.large_slowdown:.0%} pair, in random order",
             *format_injection(rep.injection),
             *canary.format_study(rep.canary, cfg),
             f"# A/B mode (as perfsuite ab): windows of up to {cfg.max_pairs} pairs, looks at "
             f"{', '.join(map(str, decision.paired_looks(cfg.max_pairs, cfg.alpha, len(cfg.metrics))))}"
             f" pairs, tolerance {vt.tolerance(cfg.ab_tolerance)}, alpha {cfg.alpha:g}",
             f"# stored mode (as run --compare): {cfg.baseline_rounds}-round baselines, candidates "
             f">= {cfg.gap_s:.0f} s later, looks at "
             f"{', '.join(map(str, decision.stored_looks(1, cfg.max_rounds)))} rounds, tolerance "
             + (vt.tolerance(cfg.tolerance) if cfg.tolerance else "the gate's default"),
             "# a window is one independent comparison (no world serves two); flagged = a "
             "regression for a slowdown, either way for a clean one",
             f"{'mode':<7}{'cond':>6} {'rounds':<8}{'case':<28}{'metric':<11}{'windows':>8}"
             f"{'flagged':>8}{'rate':>8}  {'95% CI':<16}{'same':>5}{'unkn':>5}{'used':>6}{'time':>7}"]
    for r in (*rep.ab_rows, *rep.stored_rows):
        lo, hi = stats.rate_ci(r.hits, r.n) if r.n else (math.nan, math.nan)
        rate = r.hits / r.n if r.n else math.nan
        lines.append(f"{r.mode:<7}{r.condition:>6} {r.rounds:<8}{r.case:<28}{_short(r.metric):<11}"
                     f"{r.n:>8}{r.hits:>8}{pct(rate):>8}  {'[' + pct(lo) + ', ' + pct(hi) + ']':<16}"
                     f"{r.count('same'):>5}{r.count('unknown'):>5}{_num(r.median_used(), ''):>6}"
                     f"{_num(r.median_time(), 's'):>7}")
    lines.append("# rounds: 'by mode' is what verdicts do with the canary (limit "
                 f"{cfg.canary_shift if cfg.canary_shift is not None else 'off'}): stored rounds set only "
                 "against rounds of their mode, A/B pairs of one mode ranked apart from pairs across two; "
                 "'all' ignores the canary; used: median pairs (A/B) or rounds (stored) per window; time: "
                 "median worlds' wall time per verdict; unfinished windows are not counted")
    for (mode, cond), (what, target, op) in TARGETS.items():
        lines.append(f"# target {mode} {cond}: {what} {op} {target:.0%}")
    if not any(r.n for r in rep.stored_rows):
        lines.append(f"# stored mode judged nothing: no calm clean world ran {cfg.gap_s:.0f} s after "
                     "a baseline; run more --blocks or give a shorter --gap")
    from .ab import failure_lines

    lines += failure_lines(rep.failures, rep.stopped, f"after {len(rep.worlds)} world(s)")
    lines += rep.invalid_lines()
    return "\n".join(lines)


def _num(x: float, unit: str) -> str:
    return "-" if math.isnan(x) else f"{x:.0f}{unit}"


def _short(metric: str) -> str:
    from ..reading.verdict_text import short
    return short(metric)
