"""``perfsuite ab``: two arms, measured now, interleaved, and compared pair by pair.

An arm is everything that may differ between two ways of running the same cases: the
transport, environment variables, the Python (another venv: another MPI wheel, NCCL, TensorFlow
or perfsuite) and launcher arguments. Worlds alternate in randomized ABBA blocks (duet and
randomized-interleaved-trial practice: drift and bursts of load fall on both arms alike), each
adjacent A and B make a pair, and each case's metric is judged on the per-pair ratios B/A
(``regress.paired_verdict``: sign-test interval at the confidence that holds over every look).
Blocks are added until every metric is decided (DIFFERENT or SAME) or the budget is spent.
A pair in which either world was contended, or whose worlds ran in different machine modes
(their canaries differ by more than ``canary_shift``), is dropped (and counted); a world that
fails fails its pair, with the rank's message, and the other pairs are kept.
"""
from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .. import regress, rounds, stats, suite
from ..errors import ConfigError, PerfsuiteError
from ..launch.launchers import LaunchConfig
from ..model import Case, Sample, Tolerance, Verdict, timing_of
from . import provenance

#: The change an A/B run is asked to resolve: with both arms measured side by side there is no
#: drift to allow for, so the tolerance is what matters, not what the machine wanders by.
DEFAULT_TOLERANCE = Tolerance(-0.02, 0.02)
DEFAULT_MAX_PAIRS = 40


@dataclass(frozen=True)
class Arm:
    name: str
    transport: str
    env: tuple[tuple[str, str], ...] = ()
    python: str | None = None
    launcher_args: tuple[str, ...] = ()

    def fields(self) -> tuple:
        return (self.transport, self.env, self.python, self.launcher_args)

    def launch(self, base: LaunchConfig) -> LaunchConfig:
        cfg = replace(base, env={**base.env, **dict(self.env)},
                      extra_args=base.extra_args + self.launcher_args)
        if self.python:
            # Another venv has its own MPI: launch with the mpiexec beside its Python.
            beside = Path(self.python).parent / "mpiexec"
            cfg = replace(cfg, python=self.python,
                          program=str(beside) if beside.is_file() else base.program)
        return cfg

    def describe(self) -> str:
        bits = [f"transport {self.transport}"]
        bits += [f"{k}={v}" for k, v in self.env]
        if self.python:
            bits.append(f"python {self.python}")
        if self.launcher_args:
            bits.append(f"launcher args {' '.join(self.launcher_args)}")
        return ", ".join(bits)


def check_python(path: str, modules: Sequence[str] = ("mpi4py", "perfsuite")) -> None:
    """One line, before anything runs, when an arm's Python cannot run a rank: it is not a
    program, or one of ``modules`` cannot be found there (found, not imported: TensorFlow
    takes seconds to import)."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ConfigError(f"python {path!r} is not an executable file; give the python of a venv "
                          f"that has {', '.join(modules)} installed")
    find = ("import importlib.util, sys; missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]; "
            "print(' '.join(missing)); sys.exit(1 if missing else 0)")
    # -P as the ranks start (launchers.worker_argv): without it the current directory, a
    # checkout, would lend its perfsuite to a venv that has none.
    probe = subprocess.run([path, "-P", "-c", find, *modules], capture_output=True, text=True, timeout=60)
    if "-P" in probe.stderr and probe.returncode == 2:
        raise ConfigError(f"python {path!r} is older than 3.11 (it has no -P, which keeps the current "
                          "directory off the ranks' sys.path); give the python of a 3.11+ venv")
    if probe.returncode != 0:
        missing = probe.stdout.strip() or (probe.stderr.strip().splitlines() or ["?"])[-1]
        raise ConfigError(f"python {path!r} cannot run a rank (no module {missing}); install "
                          f"{', '.join(modules)} into that venv")


@dataclass(frozen=True)
class ABConfig:
    a: Arm
    b: Arm
    cases_a: tuple[Case, ...]
    cases_b: tuple[Case, ...]
    max_pairs: int = DEFAULT_MAX_PAIRS
    budget_s: float | None = None
    tolerance: Tolerance = DEFAULT_TOLERANCE
    alpha: float = regress.DEFAULT_ALPHA
    max_contention: float | None = rounds.DEFAULT_MAX_CONTENTION
    canary_shift: float | None = rounds.DEFAULT_CANARY_SHIFT
    seed: int | None = None

    def __post_init__(self):
        if self.max_pairs < 2:
            raise ConfigError(f"max pairs {self.max_pairs} must be >= 2 (one ABBA block)")
        if self.budget_s is not None and not self.budget_s > 0:
            raise ConfigError(f"budget {self.budget_s!r} must be a number of seconds > 0")
        if len(self.cases_a) != len(self.cases_b):
            raise ConfigError("the two arms select different numbers of cases")

    @property
    def identical(self) -> bool:
        return self.a.fields() == self.b.fields()

    @property
    def looks(self) -> int:
        return math.ceil(self.max_pairs / 2)  # a look after every ABBA block


def key(a: Case, b: Case) -> str:
    """The name of a compared case: A's name, with B's transport when the arms differ in it."""
    return a.name if a.transport == b.transport else f"{a.name} vs {b.transport}"


@dataclass
class ABReport:
    config: ABConfig
    verdicts: list[Verdict]
    pairs: int
    failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    values: dict = field(default_factory=dict)  # key -> metric -> {"a": [...], "b": [...]}
    imports: dict = field(default_factory=dict)  # "a"/"b" -> what its ranks imported (provenance)

    def to_dict(self) -> dict:
        c = self.config
        arm = lambda x: {"name": x.name, "transport": x.transport, "env": dict(x.env),  # noqa: E731
                         "python": x.python, "launcher_args": list(x.launcher_args)}
        return {"arms": {"a": arm(c.a), "b": arm(c.b)}, "identical_arms": c.identical,
                "tolerance": c.tolerance.to_dict(), "alpha": c.alpha, "looks": c.looks,
                "max_pairs": c.max_pairs, "canary_shift": c.canary_shift, "pairs": self.pairs, "wall_s": self.wall_s,
                "failures": self.failures, "verdicts": [v.to_dict() for v in self.verdicts],
                "values": self.values, **provenance.section(self.imports)}


#: runner(arm, cases) -> the samples of one world of that arm (raises PerfsuiteError on failure).
Runner = Callable[[Arm, Sequence[Case]], list[Sample]]


def world_runner(suite_cfg: suite.SuiteConfig) -> Runner:
    one_round = replace(suite_cfg, rounds=regress.RoundsPolicy(max_contention=None))

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


def run(cfg: ABConfig, runner: Runner, progress: Callable[[str], None] | None = None) -> ABReport:
    rng = np.random.default_rng(cfg.seed)
    t0 = time.monotonic()
    names = [key(a, b) for a, b in zip(cfg.cases_a, cfg.cases_b)]
    ratios: dict[tuple[str, str], list[float]] = {}
    dropped: dict[tuple[str, str], int] = {}
    values: dict[str, dict[str, dict[str, list[float]]]] = {}
    meta: dict[tuple[str, str], tuple[str, bool]] = {}
    failures: list[str] = []
    pairs = 0
    verdicts: list[Verdict] = []
    imports: dict = {}
    while pairs < cfg.max_pairs:
        first = "ab" if rng.random() < 0.5 else "ba"
        for order in (first, first[::-1]):  # ABBA or BAAB
            got = {}
            for side in order:
                arm, cases = (cfg.a, cfg.cases_a) if side == "a" else (cfg.b, cfg.cases_b)
                try:
                    got[side] = {s.case: s for s in runner(arm, cases)}
                except ConfigError:
                    raise
                except PerfsuiteError as exc:  # a failed world fails its pair only
                    failures.append(f"pair {pairs + 1}, arm {arm.name}: {exc}")
            pairs += 1
            if len(got) == 2:
                imports = imports or provenance.check_arms(cfg.a, cfg.b, got)
                _add_pair(cfg, names, got, ratios, dropped, values, meta)
        verdicts = _judge(cfg, ratios, dropped, values, meta)
        if progress:
            progress(f"{pairs} pairs: " + ", ".join(f"{v.case} {v.metric} {v.status}" for v in verdicts))
        if verdicts and all(regress.decided(v) for v in verdicts):
            break
        if cfg.budget_s is not None and time.monotonic() - t0 >= cfg.budget_s:
            break
    return ABReport(cfg, verdicts, pairs, failures, time.monotonic() - t0, values, imports)


def _add_pair(cfg, names, got, ratios, dropped, values, meta) -> None:
    for name, ca, cb in zip(names, cfg.cases_a, cfg.cases_b):
        sa, sb = got["a"].get(ca), got["b"].get(cb)
        if sa is None or sb is None:
            continue
        if not (sa.valid and sb.valid):
            continue
        # A pair is evidence when neither world was contended and both ran in one machine mode.
        calm = not (rounds.is_contended(sa, cfg.max_contention) or
                    rounds.is_contended(sb, cfg.max_contention)) and rounds.same_mode(
            rounds.canary_of(sa), rounds.canary_of(sb), cfg.canary_shift)
        # The same transport timed by two loops would read the loops' ~0.5 us as the arms' change;
        # across transports the loop is part of what is compared (the ring's is its algorithm).
        if ca.transport == cb.transport and _loop(sa.info) != _loop(sb.info):
            raise ConfigError(f"{name}: arm {cfg.a.name} was timed by {_loop(sa.info)}, arm {cfg.b.name} "
                              f"by {_loop(sb.info)}; A/B compares one timing (the loops differ by "
                              "~0.5 us a call): pass --host-timing python (or native) for both")
        if set(sa.metrics) != set(sb.metrics):
            only = sorted(set(sa.metrics) ^ set(sb.metrics))
            raise ConfigError(f"{name}: metric(s) {', '.join(only)} measured by one arm only; "
                              "A/B compares what both arms measure (same benchmark, same kernel)")
        for metric, ma in sa.metrics.items():
            mb = sb.metrics[metric]
            if ma.value <= 0 or mb.value <= 0:
                continue  # a ratio needs two positive values (busbw of a 1-rank world is 0)
            k = (name, metric)
            meta[k] = (ma.unit, ma.higher_is_better)
            v = values.setdefault(name, {}).setdefault(metric, {"a": [], "b": []})
            v["a"].append(ma.value)
            v["b"].append(mb.value)
            if calm:
                ratios.setdefault(k, []).append(mb.value / ma.value)
            else:
                dropped[k] = dropped.get(k, 0) + 1


def _loop(info: dict) -> str:
    """The timing of a sample; on the host, samples of perfsuite versions before the native loop
    (no timing, or "per-call") were timed by the Python loop."""
    timing = timing_of(info)
    if info.get("clock", "host") == "host" and timing in ("", "per-call"):
        return "python"
    return timing


def _judge(cfg, ratios, dropped, values, meta) -> list[Verdict]:
    out = []
    for k, (unit, hib) in meta.items():
        name, metric = k
        v = values[name][metric]
        out.append(regress.paired_verdict(
            name, metric, ratios.get(k, []), unit=unit, higher_is_better=hib,
            tolerance=cfg.tolerance, alpha=cfg.alpha, looks=cfg.looks, dropped=dropped.get(k, 0),
            a=stats.median(v["a"]), b=stats.median(v["b"])))
    return out


def format_report(rep: ABReport) -> str:
    c = rep.config
    lines = [f"# A: {c.a.describe()}", f"# B: {c.b.describe()}"]
    if c.identical:
        lines.append("# the arms are identical: this is an A/A calibration run (expect SAME or UNKNOWN)")
    lines.append(f"# {rep.pairs} pairs in randomized ABBA blocks, {rep.wall_s:.0f} s; tolerance "
                 f"{c.tolerance.lower:+.0%}/{c.tolerance.upper:+.0%}; intervals at "
                 f"{regress.confidence(c.alpha, c.looks):.4%} (alpha {c.alpha:g} over {c.looks} looks)")
    head = f"{'case':<36}{'metric':<14}{'A':>10}{'B':>10}{'B/A':>8}{'interval':>20}{'pairs':>7}{'drop':>6}  verdict"
    lines.append(head)
    for v in sorted(rep.verdicts, key=lambda v: (v.case, v.metric)):
        ratio = "n/a" if v.change is None else f"{1 + v.change:.3f}"
        lo = "n/a" if v.low is None else f"{1 + v.low:.3f}"
        hi = "n/a" if v.high is None else ("inf" if v.high == math.inf else f"{1 + v.high:.3f}")
        lines.append(f"{v.case:<36}{v.metric:<14}{_fmt(v.baseline):>10}{_fmt(v.value):>10}"
                     f"{ratio:>8}{'[' + lo + ', ' + hi + ']':>20}{v.rounds:>7}{v.dropped:>6}  "
                     f"{v.kind}" + (f" ({v.status})" if v.kind == "DIFFERENT" else ""))
    lines += [f"# FAILED {f}" for f in rep.failures]
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"
