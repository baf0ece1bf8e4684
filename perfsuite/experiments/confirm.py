"""``--confirm``: the cases a stored baseline could not decide, or decided from few sittings,
decided now by an interleaved A/B against the commit the baseline was measured at, within a time
budget.

A stored baseline cannot be measured again, and a machine's drift between sessions bounds what
it can decide; the commit that measured it can be. Arm A is that commit (its environment built
as ``perfsuite ab --a-ref`` builds it, ``launch.envs``), arm B this checkout; the cases are
``regress.to_confirm``'s: every UNKNOWN, and every DIFFERENT resting on fewer than
``regress.CONFIRM_SITTINGS`` sittings (drift learned from a few sittings cannot know a machine
that keeps one state for longer than a sitting). One ``ab.run`` per transport over every
benchmark's (each pair runs each world once per arm), in shorter worlds (CONFIRM_MAX_TIME_S of
steps a case), asked the stored verdict's question (the change against the same tolerance, the
widest of the group's). Each such case becomes the A/B's verdict, marked as confirmed and how;
one the A/B could not decide is UNKNOWN, saying what the stored baseline read. A final DIFFERENT
is the A/B's, or a stored one from CONFIRM_SITTINGS sittings or more: each family has its own
alpha, so the run's chance of any wrong DIFFERENT is at most twice alpha, as the family line
says. Where the baseline names no commit, or its commit cannot be built, one line says so and
the verdicts stand.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from .. import bench, suite
from ..kernels import faults
from ..launch import envs
from ..records.errors import PerfsuiteError
from ..records.model import Case, Tolerance, Verdict
from ..verdicts import regress
from . import ab

#: Seconds of A/B pairs a run's confirmation may take, over every group (the build of the
#: baseline's commit, once per commit and kept, is not counted).
DEFAULT_BUDGET_S = 120.0
#: Seconds of timed steps per case in a confirming world (``--max-time``, where not given): the
#: pairs' order, not a long world, takes the machine's drift out, and a first look needs 14 pairs.
CONFIRM_MAX_TIME_S = 0.25


@dataclass(frozen=True)
class ConfirmConfig:
    """How to confirm: the baseline's commit (None: it does not say), the repository and the
    folder of its project, the budget, alpha, and where environments are built."""

    commit: str | None
    repo: str | None = None
    project: str = ""
    budget_s: float = DEFAULT_BUDGET_S
    alpha: float = 0.01
    env_dir: str | None = None


def open_cases(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts --confirm takes (``regress.to_confirm``): UNKNOWN against a stored baseline,
    and DIFFERENT against one of fewer than ``regress.CONFIRM_SITTINGS`` sittings."""
    return regress.to_confirm(verdicts)


def ab_config(group: Sequence[Verdict], chosen: Sequence[Case], a: ab.Arm, b: ab.Arm, *, alpha: float,
              budget_s: float | None = None, max_pairs: int = ab.DEFAULT_MAX_PAIRS) -> ab.ABConfig:
    """The A/B that asks ``group``'s stored question again: its cases, the widest of their
    tolerances, the benchmark's judged metrics where they are one benchmark's."""
    names = sorted({c.benchmark for c in chosen})
    return ab.ABConfig(a, b, tuple(chosen), tuple(chosen), budget_s=budget_s, max_pairs=max_pairs,
                       tolerance=_widest([v.tolerance for v in group]), alpha=alpha,
                       judged=bench.get(names[0]).judged if len(names) == 1 else None)


def settle(verdicts: Sequence[Verdict], todo: Sequence[Verdict], decided: dict[tuple[str, str], Verdict],
           how: str) -> list[Verdict]:
    """``verdicts`` with each of ``todo`` that an A/B judged (``decided``, by case and metric: a
    case's time and its peak memory are two questions) replaced by the A/B's verdict, which keeps
    what the stored one said and ``how`` it was confirmed."""
    out = []
    for v in verdicts:
        got = decided.get((v.case, v.metric)) if v in todo else None
        if got is None:
            out.append(v)
            continue
        mirror = {"mirror": v.mirror} if v.mirror else {}
        out.append(replace(got, case=v.case, metric=v.metric, system=v.system, facts={
            **got.facts, **mirror, "confirmed": how, "stored_status": v.status, "stored_change": v.change,
            "stored_low": v.low, "stored_high": v.high, "stored_reason": v.reason,
            "sittings": v.facts.get("sittings")}))
    return out


def confirm(verdicts: list[Verdict], cases: Sequence[Case], suite_cfg: suite.SuiteConfig, cfg: ConfirmConfig,
            progress: Callable[[str], None] | None = None) -> tuple[list[Verdict], list[str]]:
    """``verdicts`` with each open one (``open_cases``) decided by an A/B against the baseline's
    commit where it could be, and the lines to print (what was run, what stopped it)."""
    say = progress or (lambda m: None)
    todo = open_cases(verdicts)
    if not todo:
        return verdicts, []
    if not cfg.commit or not cfg.repo:
        return verdicts, [f"# --confirm: {len(todo)} case(s) to confirm left as they are: the baseline does not say "
                          "which commit measured it (recorded by an older perfsuite, or outside a git "
                          "repository); record it again (--baseline-update) to confirm against it"]
    try:
        env = envs.build(cfg.repo, cfg.commit, extras=None, env_dir=cfg.env_dir, progress=say, project=cfg.project)
    except PerfsuiteError as exc:
        return verdicts, [f"# --confirm: the baseline's commit {cfg.commit[:10]} cannot be built, so {len(todo)} "
                          f"case(s) to confirm stay as they are: {exc}"]
    by_name = {c.name: c for c in cases}
    # One A/B per transport over every benchmark's open cases: each pair runs every world once
    # per arm, so the budget is not split between benchmarks.
    groups: dict[str, list[Verdict]] = {}
    for v in todo:
        c = by_name.get(v.case)
        if c is not None:
            groups.setdefault(c.transport, []).append(v)
    decided: dict[str, Verdict] = {}
    lines: list[str] = []
    started = time.monotonic()
    # Shorter worlds, more pairs: the arms are set side by side, so a world need not be long.
    options = {**suite_cfg.options, "max_time": suite_cfg.options.get("max_time") or CONFIRM_MAX_TIME_S}
    runner = ab.world_runner(replace(suite_cfg, rounds=None, options=options))
    # An injected slowdown (the gate's own check) stands for a change of this checkout: the
    # baseline's commit runs without it.
    clean = ((faults.SLOWDOWN_ENV, "0"),) if os.environ.get(faults.SLOWDOWN_ENV) else ()
    for i, (transport, group) in enumerate(groups.items()):
        left = cfg.budget_s - (time.monotonic() - started)
        if left <= 1.0:
            lines.append(f"# --confirm: budget spent; {len(group)} case(s) on {transport} left as the store read them")
            continue
        chosen = tuple(by_name[v.case] for v in group)
        names = sorted({c.benchmark for c in chosen})
        a = ab.Arm("A", transport, env=clean).from_commit(env)
        ab_cfg = ab_config(group, chosen, a, ab.Arm("B", transport), alpha=cfg.alpha,
                           budget_s=left / (len(groups) - i))
        say(f"confirming {len(chosen)} case(s) on {transport} against commit {cfg.commit[:10]} ...")
        rep = ab.run(ab_cfg, runner, progress=say)
        lines.append(f"# --confirm: {', '.join(names)} on {transport}: arm A = commit {cfg.commit[:10]} (the baseline's), "
                     f"arm B = this checkout; {rep.pairs} pair(s) in {rep.wall_s:.0f} s"
                     + (f"; stopped: {rep.stopped}" if rep.stopped else "")
                     + (f"; {len(rep.failures)} failed world(s): {rep.failures[0]}" if rep.failures else ""))
        for got in rep.verdicts:
            decided[got.case, got.metric] = got
    return settle(verdicts, todo, decided, f"ab --a-ref {cfg.commit[:10]}"), lines


def _widest(tolerances: Sequence[Tolerance | None]) -> Tolerance:
    got = [t for t in tolerances if t is not None]
    if not got:
        return ab.DEFAULT_TOLERANCE
    return Tolerance(min(t.lower for t in got), max(t.upper for t in got))


def confirmer(cases: Sequence[Case], suite_cfg: suite.SuiteConfig, *, budget_s: float, alpha: float,
              where: str = ".", progress: Callable[[str], None] | None = None
              ) -> Callable[[list[Verdict], dict], tuple[list[Verdict], list[str]]]:
    """What a face hands the gate for --confirm: (verdicts, the baseline's ``recorded_at`` of its
    latest session) -> (verdicts, lines), running this run's ``cases`` with ``suite_cfg``'s launch."""
    def run(verdicts: list[Verdict], at: dict) -> tuple[list[Verdict], list[str]]:
        repo = at.get("repo")
        try:
            project = envs.project_dir(repo, where=where) if repo else ""
        except PerfsuiteError:
            project = ""
        cfg = ConfirmConfig(at.get("commit"), repo, project, budget_s, alpha)
        return confirm(verdicts, cases, suite_cfg, cfg, progress)

    return run

