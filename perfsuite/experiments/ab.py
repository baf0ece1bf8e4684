"""``perfsuite ab``: two arms, measured now, interleaved, and compared pair by pair.

An arm is everything that may differ between two ways of running the same cases: the
transport, environment variables, the Python (another venv: another MPI wheel, NCCL, TensorFlow
or perfsuite) and launcher arguments. Worlds run in pairs, adjacent A and B, each pair's order
a fair coin of its own (randomized-interleaved-trial practice: drift and bursts of load fall on
both arms alike). Each case is judged once, on its judged metric's per-pair ratios B/A
(``regress.paired_question``: Wilcoxon's signed-rank interval, Holm over the cases, alpha split
over the looks of ``decision.paired_looks``). With no difference between the arms, the coin
makes each ratio's sign a fair coin too, whatever the machine's drift or its rounds' lag-1
correlation: the signed-rank null is then exact (a randomization test), which it would not be
if one coin ordered two pairs (ABBA). Pairs are added until every case is decided (DIFFERENT or
SAME) or the pairs or the budget are spent.

A pair in which either world was contended is dropped (and counted): it measured the machine.
The A and B columns are the medians of the pairs B/A is taken from, so the three agree.
A pair whose worlds ran in two machine modes (canaries apart by more than ``canary_shift``) is
kept, ranked apart from the pairs of one mode: its ratio carries the mode's step up or down by
the same coin, so it still tells the arms apart. The grouping looks at the size of the
canaries' step only, never its direction, so it cannot favour either arm. The canary's own B/A
is reported: when the arms move it, it does not tell the machine's modes, and the report says
so. A world that fails fails its pair, with the rank's message; the other pairs are kept.

A world whose results were wrong (a sample that did not validate) stops the run at its pair:
an arm that returns wrong sums wastes every pair after it, and its timings are no evidence. The
pair is kept, marked invalid (with the arm, case and ranks), beside the pairs measured before it.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..verdicts import decision, regress, rounds
from ..records import memory, stats
from ..store import fingerprint
from .. import suite
from ..records.errors import ConfigError, PerfsuiteError
from ..launch import containers
from ..launch.containers import Container
from ..launch.launchers import LaunchConfig
from ..records.model import MIRRORS, Case, Sample, Tolerance, Verdict, timing_of
from . import provenance
from .repeats import Repeats, collapse, signature

#: The change an A/B run is asked to resolve: with both arms measured side by side there is no
#: drift to allow for, so the tolerance is what matters, not what the machine wanders by.
DEFAULT_TOLERANCE = Tolerance(-0.02, 0.02)
#: Pairs at most: a few minutes of small worlds, in which the upgrades and regressions of
#: docs/measurements.md's A/B section are decided.
DEFAULT_MAX_PAIRS = 200
#: A pair whose two worlds differ by more than this (log; x2, half the prior span between
#: states, regress.PRIOR_SPAN) straddled a change of state the canary may not see.
STATE_STEP = math.log(2.0)


@dataclass(frozen=True)
class Arm:
    name: str
    transport: str
    env: tuple[tuple[str, str], ...] = ()
    python: str | None = None
    launcher_args: tuple[str, ...] = ()
    ref: str | None = None  # the commit the arm's Python runs, as the user named it ("HEAD~1 (abc1234)")
    #: The arm's stack: its worlds run inside this image (or under this prefix), with the image's
    #: launcher, Python and perfsuite (``launch.containers``).
    container: Container | None = None
    #: What the stack holds, read inside it before the first pair (``containers.probe``).
    stack: dict = field(default_factory=dict, compare=False, hash=False)

    def from_commit(self, env) -> "Arm":
        """This arm, run by ``env`` (a ``launch.envs.CommitEnv``): a commit's environment."""
        return replace(self, python=env.python, ref=env.describe())

    def fields(self) -> tuple:
        return (self.transport, self.env, self.python, self.launcher_args, self.container)

    def launch(self, base: LaunchConfig) -> LaunchConfig:
        cfg = replace(base, env={**base.env, **dict(self.env)},
                      extra_args=base.extra_args + self.launcher_args)
        if self.container is not None and self.container.image:  # the image's launcher and Python
            return replace(cfg, container=self.container, python=self.python or containers.PYTHON, program=None)
        if self.container is not None:  # a prefix: this machine's launcher and Python, run under it
            cfg = replace(cfg, container=self.container)
        if self.python:
            # Another venv has its own MPI: launch with the mpiexec beside its Python. Under
            # srun the cluster's launcher starts every arm: its mpiexec is not asked.
            beside = Path(self.python).parent / "mpiexec"
            own = base.launcher == "mpiexec" and beside.is_file()
            cfg = replace(cfg, python=self.python, program=str(beside) if own else base.program)
        return cfg

    def describe(self) -> str:
        bits = [f"transport {self.transport}"]
        bits += [f"{k}={v}" for k, v in self.env]
        if self.container is not None:
            bits.append(self.container.describe())
            if self.stack:
                bits.append(containers.stack_line(self.stack))
        elif self.ref:
            bits.append(f"commit {self.ref}")
        elif self.python:
            bits.append(f"python {self.python}")
        if self.launcher_args:
            bits.append(f"launcher args {' '.join(self.launcher_args)}")
        return ", ".join(bits)


@dataclass(frozen=True)
class ABConfig:
    a: Arm
    b: Arm
    cases_a: tuple[Case, ...]
    cases_b: tuple[Case, ...]
    max_pairs: int = DEFAULT_MAX_PAIRS
    budget_s: float | None = None
    tolerance: Tolerance = DEFAULT_TOLERANCE
    alpha: float = decision.DEFAULT_ALPHA
    max_contention: float | None = rounds.DEFAULT_MAX_CONTENTION
    canary_shift: float | None = rounds.DEFAULT_CANARY_SHIFT
    seed: int | None = None
    judged: tuple[str, ...] | None = None  # the benchmark's judged metrics (None: regress's rule)
    # Stop at the first look where a case is a DIFFERENT regression: the outcome (exit 1, a bad
    # bisect step) is settled, and the cases still UNKNOWN there stay so.
    stop_on_regression: bool = False
    # The cases only A's tree declares (B's commit removed them): shown, never measured, since
    # B, the code under test, has nothing to set beside them. (Those only B's declares are
    # ``new``: cases_b's tail.)
    missing: tuple[Case, ...] = ()

    def __post_init__(self):
        if self.max_pairs < 2:
            raise ConfigError(f"max pairs {self.max_pairs} must be >= 2")
        if self.budget_s is not None and not self.budget_s > 0:
            raise ConfigError(f"budget {self.budget_s!r} must be a number of seconds > 0")
        if len(self.cases_a) > len(self.cases_b):
            raise ConfigError("the two arms select different numbers of cases")

    @property
    def new(self) -> tuple[Case, ...]:
        """The cases only B's tree declares (the first pull request that adds a benchmark): they
        ride in B's worlds after the compared ones, measured and shown, never compared."""
        return self.cases_b[len(self.cases_a):]

    @property
    def identical(self) -> bool:
        return self.a.fields() == self.b.fields()

    @property
    def looks(self) -> tuple[int, ...]:
        """Pair counts at which the cases are judged (``decision.paired_looks``): a case whose
        benchmark judges its peak memory too asks two questions."""
        per_case = 2 if any(memory.is_memory(m) for m in self.judged or ()) else 1
        return decision.paired_looks(self.max_pairs, self.alpha, per_case * len(self.cases_a))

    @property
    def share(self) -> float:
        """Each look's share of alpha: a stop forced by the budget is one look more."""
        return 1.0 / (len(self.looks) + (1 if self.budget_s is not None else 0))


def key(a: Case, b: Case) -> str:
    """The name of a compared case: A's name, with B's transport when the arms differ in it."""
    return a.name if a.transport == b.transport else f"{a.name} vs {b.transport}"


#: Worlds of B that measure new cases when no case is compared: B's value is their median, and
#: no look can stop the pairs earlier (nothing is judged), so they are few.
NEW_ONLY_PAIRS = 3


def split_declared(cfg: ABConfig, at_a: Callable[[Case], bool], at_b: Callable[[Case], bool],
                   what: str = "") -> ABConfig:
    """``cfg`` with each case compared where both arms' trees declare it (``at_a``, ``at_b``);
    one only B's declares is new (measured in B's worlds, shown, never compared), one only A's
    declares is missing (shown, not measured). With nothing to compare, B's worlds run
    NEW_ONLY_PAIRS times at most. One line (ConfigError) where neither declares any case;
    ``what`` says where both arms looked."""
    both_a, both_b, new, missing = [], [], [], []
    for ca, cb in zip(cfg.cases_a, cfg.cases_b):
        in_a, in_b = at_a(ca), at_b(cb)
        if in_a and in_b:
            both_a.append(ca)
            both_b.append(cb)
        elif in_b:
            new.append(cb)
        elif in_a:
            missing.append(ca)
    if not (both_a or new or missing) and cfg.cases_a:
        raise ConfigError(f"neither arm declares any of the {len(cfg.cases_a)} case(s) selected{what}")
    out = replace(cfg, cases_a=tuple(both_a), cases_b=tuple(both_b + new), missing=tuple(missing))
    return out if both_a else replace(out, max_pairs=min(out.max_pairs, NEW_ONLY_PAIRS))


@dataclass
class ABReport:
    config: ABConfig
    verdicts: list[Verdict]
    pairs: int
    failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    # key -> metric -> {"a": [...], "b": [...], "contended": [i...], "invalid": [i...]}: every
    # pair measured, the indices marking those left out of B/A
    values: dict = field(default_factory=dict)
    imports: dict = field(default_factory=dict)  # "a"/"b" -> what its ranks imported (provenance)
    # each sample that did not validate: {"pair", "arm", "case", "ranks", "reason"}
    invalid: list[dict] = field(default_factory=list)
    stopped: str | None = None  # why the pairs stopped early: a failure that repeats (experiments.repeats)

    def to_dict(self) -> dict:
        c = self.config
        arm = lambda x: {"name": x.name, "transport": x.transport, "env": dict(x.env),  # noqa: E731
                         "python": x.python, "launcher_args": list(x.launcher_args),
                         "ref": x.ref, "container": containers.to_dict(x.container), "stack": x.stack or None}
        return {"arms": {"a": arm(c.a), "b": arm(c.b)}, "identical_arms": c.identical,
                "tolerance": c.tolerance.to_dict(), "alpha": c.alpha, "looks": list(c.looks),
                "max_pairs": c.max_pairs, "stop_on_regression": c.stop_on_regression,
                "canary_shift": c.canary_shift, "pairs": self.pairs, "wall_s": self.wall_s,
                "failures": self.failures, "invalid": self.invalid, "stopped": self.stopped,
                "verdicts": [v.to_dict() for v in self.verdicts],
                "new": [x.name for x in c.new], "missing": [x.name for x in c.missing],
                "values": self.values, **provenance.section(self.imports)}


#: runner(arm, cases) -> the samples of one world of that arm (raises PerfsuiteError on failure).
Runner = Callable[[Arm, Sequence[Case]], list[Sample]]


def world_runner(suite_cfg: suite.SuiteConfig) -> Runner:
    one_round = replace(suite_cfg, rounds=rounds.RoundsPolicy(max_contention=None))

    def runner(arm: Arm, cases: Sequence[Case]) -> list[Sample]:
        specs = suite.plan(cases, one_round.options)
        samples: list[Sample] = []
        for spec in specs:
            out = suite.run_one(spec, replace(one_round, launch=arm.launch(one_round.launch)))
            if out.failure is not None:
                raise out.failure
            if out.skipped:
                raise ConfigError(f"arm {arm.name}: {spec.label} cannot run here: {out.skipped}")
            samples += provenance.stamped(out.result)
        return samples

    return runner


@dataclass
class PairLog:
    """One case's pairs so far: the judged metric's ratio B/A of each calm pair with both
    worlds' canaries, every value of each arm (``a``, ``b``: every pair, in order), and which
    pairs were left out of B/A: dropped as contended, or invalid."""

    metric: str
    unit: str
    higher_is_better: bool
    mirror: str | None = None
    ratios: list[float] = field(default_factory=list)
    canaries: list[tuple[float | None, float | None]] = field(default_factory=list)
    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    dropped: int = 0
    judged: list[int] = field(default_factory=list)  # indices in a, b of the pairs in ratios
    contended: list[int] = field(default_factory=list)
    invalid: list[int] = field(default_factory=list)
    new: bool = False  # a case only B's tree declares: B's values alone, never judged

    def _kept(self, i: int, contended: bool, invalid: bool) -> bool:
        """Marks value ``i`` invalid, contended, or judged; whether it is evidence."""
        if invalid:
            self.invalid.append(i)
        elif contended:
            self.dropped += 1
            self.contended.append(i)
        else:
            self.judged.append(i)
        return not (invalid or contended)

    def add_b(self, b: float, *, contended: bool = False, invalid: bool = False) -> None:
        """One B world's value of a new case: no A beside it, so no ratio."""
        self.b.append(b)
        self._kept(len(self.b) - 1, contended, invalid)

    def add(self, a: float, b: float, canaries: tuple[float | None, float | None] = (None, None), *,
            contended: bool = False, invalid: bool = False) -> None:
        """One pair's values; only a valid, calm pair is evidence (a ratio)."""
        self.a.append(a)
        self.b.append(b)
        if self._kept(len(self.a) - 1, contended, invalid):
            self.ratios.append(b / a)
            self.canaries.append(canaries)

    def medians(self) -> tuple[float | None, float | None]:
        """A's and B's medians over the pairs B/A is taken from (None: no such pair)."""
        if not self.judged:
            return None, None
        return (stats.median([self.a[i] for i in self.judged]),
                stats.median([self.b[i] for i in self.judged]))


def run(cfg: ABConfig, runner: Runner, progress: Callable[[str], None] | None = None) -> ABReport:
    rng = np.random.default_rng(cfg.seed)
    t0 = time.monotonic()
    names = [key(a, b) for a, b in zip(cfg.cases_a, cfg.cases_b)]
    logs: dict[str, PairLog] = {}
    failures: list[str] = []
    pairs = 0
    verdicts: list[Verdict] = []
    imports: dict = {}
    invalid: list[dict] = []
    looks = cfg.looks
    repeats, stopped = Repeats(), None
    while pairs < cfg.max_pairs and stopped is None:
        got = {}
        for side in ("ab" if rng.random() < 0.5 else "ba"):  # each pair's own coin
            arm, cases = (cfg.a, cfg.cases_a) if side == "a" else (cfg.b, cfg.cases_b)
            try:
                got[side] = {s.case: s for s in runner(arm, cases)}
                repeats.seen(f"arm {arm.name}", None)
            except ConfigError:
                raise
            except PerfsuiteError as exc:  # a failed world fails its pair only, unless it repeats
                failures.append(f"pair {pairs + 1}, arm {arm.name}: {exc}")
                stopped = repeats.seen(f"arm {arm.name}", exc, f"pair {pairs + 1}")
                if stopped:
                    break
        pairs += 1
        if stopped:
            if progress:
                progress(f"stopping after pair {pairs}: a failure repeats (below)")
            break
        wrong = _invalid(cfg, got, pairs)
        if len(got) == 2:
            # Wrong sums are said as such, not refused for what code the arms ran (still recorded).
            imports = imports or (provenance.recorded(got) if wrong else provenance.check_arms(cfg.a, cfg.b, got))
            _add_pair(cfg, names, got, logs)
        if wrong:  # an arm that returns wrong sums: every pair after this one would be wasted
            invalid += wrong
            if progress:
                progress(f"pair {pairs} returned wrong results: stopping")
            break
        over = cfg.budget_s is not None and time.monotonic() - t0 >= cfg.budget_s
        if not (decision.at_look(pairs, looks) or over):
            continue
        verdicts = judge_logs(logs, tolerance=cfg.tolerance, alpha=cfg.alpha, share=cfg.share,
                              canary_shift=cfg.canary_shift)
        if progress:
            from ..reading import verdict_text as vt

            progress(f"{pairs} pairs: " + ", ".join(f"{v.case} {vt.short(v.metric)} {v.kind}" for v in verdicts))
        if (verdicts and all(decision.decided(v) for v in verdicts)) or over:
            break
        if cfg.stop_on_regression and any(v.is_failure for v in verdicts):
            if progress:
                progress("a regression is decided: stopping (--stop-on-regression)")
            break
    return ABReport(cfg, verdicts, pairs, failures, time.monotonic() - t0, _values(logs), imports, invalid,
                    stopped)


def failure_lines(failures: list[str], stopped: str | None, when: str) -> list[str]:
    """One line per distinct failure; the one that stopped the run (the last) says so instead."""
    def what(line: str) -> str:  # the failure, without where it happened ("pair 3, arm A: ")
        return signature(line.split(": ", 1)[-1])

    last = what(failures[-1]) if stopped and failures else None
    lines = [f"# FAILED {f}" for f in collapse([f for f in failures if what(f) != last])]
    return lines + ([f"# FAILED, stopped {when}: {stopped}"] if stopped else [])


def _log_key(name: str, metric: str) -> str | tuple[str, str]:
    """A case's log of its first judged metric is keyed by its name, each further one (peak
    memory) by (name, metric)."""
    return (name, metric) if memory.is_memory(metric) else name


def _values(logs: dict) -> dict:
    out: dict = {}
    for key, log in logs.items():
        name = key[0] if isinstance(key, tuple) else key
        out.setdefault(name, {})[log.metric] = {"a": log.a, "b": log.b, "contended": log.contended,
                                                "invalid": log.invalid}
    return out


def _invalid(cfg: ABConfig, got: dict, pair: int) -> list[dict]:
    """The samples of this pair's worlds that did not validate, as records."""
    out = []
    for side in sorted(got):
        arm = cfg.a if side == "a" else cfg.b
        out += [{"pair": pair, "arm": arm.name, "case": s.case.name, "ranks": s.info.get("invalid_ranks"),
                 "reason": s.info.get("invalid_reason")} for s in got[side].values() if not s.valid]
    return out


def invalid_lines(rep: ABReport) -> list[str]:
    """One line per sample that did not validate: the arm, the case, the ranks, the pair."""
    from ..reading import verdict_text as vt

    return [vt.invalid(x["case"], x.get("ranks"), x["arm"], at=f"pair {x['pair']}", why=x.get("reason"))
            for x in rep.invalid]


def _add_pair(cfg: ABConfig, names, got, logs: dict[str, PairLog]) -> None:
    for name, ca, cb in zip(names, cfg.cases_a, cfg.cases_b):
        sa, sb = got["a"].get(ca), got["b"].get(cb)
        if sa is None or sb is None:
            continue
        # A pair with a wrong result is kept, marked, and never judged: the run stops at it.
        wrong = not (sa.valid and sb.valid)
        if not wrong:
            _check_comparable(cfg, name, ca, cb, sa, sb)
        judged = [m for m in regress.judged_metrics(sa, cfg.judged) if m in sb.metrics
                  and sa.metrics[m].value > 0 and sb.metrics[m].value > 0]  # a ratio needs two positive values
        # The case's time (or rate), and its peak memory where measured: one question each.
        for metric in judged[:1] + [m for m in judged[1:] if memory.is_memory(m)]:
            ma, mb = sa.metrics[metric], sb.metrics[metric]
            mirror = MIRRORS.get(metric)
            log = logs.setdefault(_log_key(name, metric), PairLog(metric, ma.unit, ma.higher_is_better,
                                                                  mirror if mirror in sa.metrics else None))
            # A contended world measured the machine, not its arm: the pair is no evidence of
            # its time. Memory is no machine state's: a contended pair still weighs it.
            busy = (not memory.is_memory(metric)
                    and (rounds.is_contended(sa, cfg.max_contention) or rounds.is_contended(sb, cfg.max_contention)))
            log.add(ma.value, mb.value, (rounds.canary_of(sa), rounds.canary_of(sb)), invalid=wrong, contended=busy)
    for cb in cfg.new:
        sb = got["b"].get(cb)
        judged = [m for m in regress.judged_metrics(sb, cfg.judged) if sb.metrics[m].value > 0] if sb else []
        if not judged:
            continue
        mb = sb.metrics[judged[0]]
        logs.setdefault(cb.name, PairLog(judged[0], mb.unit, mb.higher_is_better, new=True)).add_b(
            mb.value, invalid=not sb.valid, contended=rounds.is_contended(sb, cfg.max_contention))


def _check_comparable(cfg: ABConfig, name: str, ca: Case, cb: Case, sa: Sample, sb: Sample) -> None:
    # The same transport timed by two loops would read the loops' ~0.5 us as the arms' change;
    # across transports the loop is part of what is compared (the ring's is its algorithm).
    if ca.transport == cb.transport and _loop(sa.info) != _loop(sb.info):
        raise ConfigError(f"{name}: arm {cfg.a.name} was timed by {_loop(sa.info)}, arm {cfg.b.name} "
                          f"by {_loop(sb.info)}; A/B compares one timing (the loops differ by "
                          "~0.5 us a call): pass --host-timing python (or native) for both")
    # Peak memory measured by one arm only (an arm whose perfsuite predates it: an image, another
    # Python) leaves that question unasked; any other metric of one arm means another kernel.
    only = sorted(m for m in set(sa.metrics) ^ set(sb.metrics) if not memory.is_memory(m))
    if only:
        raise ConfigError(f"{name}: metric(s) {', '.join(only)} measured by one arm only; "
                          "A/B compares what both arms measure (same benchmark, same kernel)")


def _loop(info: dict) -> str:
    """The timing of a sample; on the host, samples of perfsuite versions before the native loop
    (no timing, or "per-call") were timed by the Python loop."""
    timing = timing_of(info)
    if info.get("clock", "host") == "host" and timing in ("", "per-call"):
        return "python"
    return timing


def mode_strata(log: PairLog, shift: float | None, alpha: float) -> tuple[list[list[float]], dict]:
    """The pairs' ratios as strata (one machine mode, two modes) and the canary's facts: its
    own B/A with its interval, whether the arms move it, how many pairs straddle two modes.
    Without a canary on every pair, or with ``shift`` None, one stratum. A pair straddles two
    modes when its canaries differ by more than ``shift`` or its own two worlds by more than
    STATE_STEP (a change of state the canary missed). Only sizes group a pair, never signs,
    which the pair's coin set: so under no change every ratio's sign stays a fair coin within
    its group, and the test stays exact, whatever the canary says. (Grouping on a signed B/A
    would not: tests/test_validity.py shows it.)"""
    cans = log.canaries
    if not cans or any(a is None or b is None for a, b in cans):
        return [log.ratios], {}
    test = stats.stratified_signed_rank_test([[math.log(b / a) for a, b in cans]])
    lo, hi = test.interval(1.0 - alpha)
    facts = {"canary_ba": math.exp(test.estimate), "canary_low": math.exp(lo), "canary_high": math.exp(hi)}
    if lo > 0 or hi < 0:  # the arms themselves move it: it does not tell the machine's modes
        facts["canary_moved"] = True
    if shift is None:
        return [log.ratios], facts
    two_modes = [not rounds.same_mode(a, b, shift) or abs(math.log(r)) > STATE_STEP
                 for r, (a, b) in zip(log.ratios, cans)]
    one = [r for r, across in zip(log.ratios, two_modes) if not across]
    two = [r for r, across in zip(log.ratios, two_modes) if across]
    return [one, two], {**facts, "straddling": len(two)}


def judge_logs(logs: dict[str, PairLog], *, tolerance: Tolerance, alpha: float, share: float,
               canary_shift: float | None) -> list[Verdict]:
    """Every case's verdict from its pairs so far: one family (Holm over the cases), each look
    spending ``share`` of alpha. ``detection-power`` judges its windows through this too."""
    questions = []
    for key, log in logs.items():
        if log.new:  # nothing at A to compare with
            continue
        name = key[0] if isinstance(key, tuple) else key
        steady = memory.is_memory(log.metric)  # no machine mode moves memory: one stratum, its own tolerance
        strata, facts = ([log.ratios], {}) if steady else mode_strata(log, canary_shift, alpha)
        if log.mirror:
            facts["mirror"] = log.mirror
        a, b = log.medians()  # of the pairs B/A comes from, not of the dropped ones
        questions.append(regress.paired_question(
            name, log.metric, strata, unit=log.unit, higher_is_better=log.higher_is_better,
            tolerance=memory.TOLERANCE if steady else tolerance, share=share, dropped=log.dropped, a=a, b=b, facts=facts))
    return decision.judge(questions, alpha)


def one_armed_rows(rep: ABReport, wide: int) -> list[str]:
    """The table's rows of the cases one arm's tree declares: a new one with B's median over its
    calm, valid worlds (and how many), a missing one with nothing measured."""
    from ..reading import verdict_text as vt

    rows = []
    for case in rep.config.new:
        for metric, entry in (rep.values.get(case.name) or {}).items():
            left_out = set(entry.get("contended") or ()) | set(entry.get("invalid") or ())
            kept = [x for i, x in enumerate(entry["b"]) if i not in left_out]
            b = stats.median(kept) if kept else None
            rows.append(f"{case.name:<{wide}}{vt.short(metric):<16}{'-':>10}{vt.number(b):>10}{'':>30}"
                        f"{len(entry['b']):>7}{len(entry['b']) - len(kept):>6}  new (only B's tree declares it: "
                        "measured, not compared)")
        if case.name not in rep.values:
            rows.append(f"{case.name:<{wide}}{'':<16}{'-':>10}{'-':>10}{'':>30}{0:>7}{0:>6}  new (not measured: "
                        "no B world finished)")
    rows += [f"{case.name:<{wide}}{'':<16}{'-':>10}{'-':>10}{'':>30}{0:>7}{0:>6}  missing (only A's tree "
             "declares it: not measured)" for case in rep.config.missing]
    return rows


def format_report(rep: ABReport) -> str:
    from ..reading import verdict_text as vt

    c = rep.config
    lines = []
    for side, arm in (("a", c.a), ("b", c.b)):
        loaded = rep.imports.get(side) or {}
        code = loaded.get("perfsuite") or {}
        where = f"; perfsuite {code.get('version')} from {code['file']}" if code.get("file") else ""
        # a user benchmark's own package (worker.user_packages): the code two commits differ in
        where += "".join(f"; {name} {e.get('version')} from {e['file']}" for name, e in loaded.items()
                         if name not in fingerprint.IMPORTED_PACKAGES + ("mpi",) and (e or {}).get("file"))
        lines.append(f"# {arm.name}: {arm.describe()}{where}")
    if c.identical:
        lines.append("# the arms are identical: this is an A/A calibration run (expect SAME or UNKNOWN)")
    own = ("" if not any(memory.is_memory(v.metric) for v in rep.verdicts)
           else f" ({vt.short(memory.METRIC)}: its own, {vt.tolerance(memory.TOLERANCE)})")
    lines.append(f"# {rep.pairs} pairs, each in random order, {rep.wall_s:.0f} s; tolerance "
                 f"{vt.tolerance(c.tolerance)}{own}; looks at {', '.join(map(str, c.looks))} pairs")
    wide = max([36] + [len(v.case) + 2 for v in rep.verdicts]  # a long case name keeps its gap
               + [len(x.name) + 2 for x in c.new + c.missing])
    head = (f"{'case':<{wide}}{'metric':<16}{'A':>10}{'B':>10}{'B/A':>8}{'interval':>22}{'pairs':>7}"
            f"{'drop':>6}  verdict")
    lines.append(head)
    for v in sorted(rep.verdicts, key=lambda v: (v.case, v.metric)):
        metric = vt.short(v.metric) + (f"|{vt.short(v.mirror)}" if v.mirror else "")
        lines.append(f"{v.case:<{wide}}{metric:<16}{vt.number(v.baseline):>10}{vt.number(v.value):>10}"
                     f"{vt.ratio(v.change):>8}{vt.interval(v, as_ratio=True):>22}{v.rounds:>7}"
                     f"{v.dropped:>6}  {v.kind}" + (f" ({v.status})" if v.kind == "DIFFERENT" else ""))
    lines += one_armed_rows(rep, wide)
    lines += [f"# {vt.canary(v)}" for v in sorted(rep.verdicts, key=lambda v: v.case) if vt.canary(v)]
    if fam := vt.family(rep.verdicts):
        lines.append(fam)
    lines += failure_lines(rep.failures, rep.stopped, f"after {rep.pairs} pair(s)")
    lines += invalid_lines(rep)
    return "\n".join(lines)
