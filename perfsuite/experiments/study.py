"""``perfsuite study``: a plan's points, interleaved over rounds, each world kept as it ends.

Round r runs every point once, in an order drawn from the plan's seed, before round r+1
starts, so a burst of load or a change of machine mode falls on every point alike and a
ratio is taken between neighbours (the study's intervals pair points by round): a DDP and an
FSDP world of one size and precision are two points, interleaved as any two are. The arms of
one MPI-library case run back to back, A then B in one round and B then A in the next, as
``perfsuite ab`` alternates them. A point that cannot run here (a transport without its
library, or an MPI environment whose venv is not there) is skipped with the reason; a world
that fails fails its round only, and so does one whose results were wrong: it is kept with its
result, marked "invalid" (case, ranks), is no evidence in any figure, and runs again on resume.
The study goes on: its other points measure other stacks.
After every world ``keep(records)`` is called, so an interrupted study has every finished
world on disk, and ``run`` given those records continues where they end (running again the
worlds that failed; the last record of a point's round is the one that counts).
"""
from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from .. import bench, suite, transports
from ..store import formats
from ..verdicts import rounds
from ..bench.allreduce import allreduce_cases
from ..bench.training import training_cases
from ..kernels.training.loop import parallel_amp
from ..launch.launchers import LaunchConfig
from .ab import Arm as LaunchArm
from .study_plan import Plan, Point, interpreter, schedule

#: progress(event, point, round, record): 'start' (record None) and 'done'.
Progress = Callable[[str, Point, int, "dict | None"], None]


def order(plan: Plan) -> list[tuple[int, tuple[str, ...]]]:
    """(round, unit) in the order the study runs them: the same for a plan on every run, so a
    resumed study keeps the order it started with."""
    rng = np.random.default_rng(plan.seed)
    units = schedule(plan)
    first = [bool(rng.random() < 0.5) for _ in units]  # which arm of a pair leads in round 0
    out = []
    for r in range(plan.rounds):
        for i in rng.permutation(len(units)):
            unit = units[i]
            out.append((r, unit[::-1] if (first[i] ^ (r % 2 == 1)) else unit))
    return out


def pending(plan: Plan, records: list[dict]) -> list[tuple[int, str]]:
    """(round, point) still to run: not measured (a world that failed is run again), and not a
    point already found unable to run."""
    done = {(r["point"], r["round"]) for r in records if not (r.get("failure") or r.get("invalid"))}
    cannot = {r["point"] for r in records if r.get("skipped")}
    return [(r, k) for r, unit in order(plan) for k in unit if (k, r) not in done and k not in cannot]


def unavailable(plan: Plan, gone: dict[str, str] | None = None) -> dict[str, str]:
    """Each point that cannot run here, with why: its MPI environment cannot (``gone``: arm name
    -> why, as ``study_plan.unavailable_arms`` finds it), or its transport lacks what it needs,
    as ``suite.run_one`` finds it before any world starts."""
    gone = gone or {}
    out = {}
    for key, point in plan.points.items():
        arm = plan.arm_of(point).name
        record = bench.find(point.benchmark)
        if point.arm and arm in gone:
            out[key] = gone[arm]
        elif why := transports.unavailable_reason(point.transport, record.transports if record else point.benchmark):
            out[key] = why
    return out


def worlds(plan: Plan, records: list[dict], cannot: dict[str, str]) -> list[tuple[int, str]]:
    """(round, point) of every world the study starts: what ``pending`` leaves, less the points
    that cannot run here (each recorded once as a skip, no world started). The dry run counts
    these and ``run`` starts these, so the two cannot disagree."""
    return [(r, k) for r, k in pending(plan, records) if k not in cannot]


def world_config(plan: Plan, point: Point, base: suite.SuiteConfig) -> suite.SuiteConfig:
    arm = plan.arm_of(point)
    launch: LaunchConfig = LaunchArm(arm.name, point.transport, arm.env, arm.python or None,
                                     arm.launcher_args).launch(base.launch)
    network = None
    if point.network != "none":
        from ..launch.netns import parse_shaping

        network = parse_shaping(point.network)
    options = {**base.options}
    if point.benchmark != "allreduce":
        # A language model's input is its sequence, an image model's its pixels.
        options.update(iters=plan.steps, warmup=plan.warmup,
                       **({"seq_len": point.seq_len} if point.seq_len else {"image_size": point.image_size}))
        if not plan.yardsticks:
            options["yardsticks"] = False
    else:
        options.update(iters=plan.allreduce_iters, warmup=max(2, plan.allreduce_iters // 10))
    # One world per round, never re-run: the study's rounds are its replication, and a world
    # with more ranks than cores is contended by its own ranks, which no re-run cures. Its
    # contention is kept with it and the analysis says which rounds it rests on.
    return replace(base, launch=launch, network=network, options=options,
                   rounds=rounds.RoundsPolicy(retries=0))


def cases_of(point: Point) -> list:
    if point.benchmark != "allreduce":
        parallel, amp = parallel_amp(point.variant)
        return training_cases(point.benchmark, [point.transport], [point.world_size], [point.model],
                              list(point.batches), [parallel], [amp])
    return allreduce_cases([point.transport], [point.world_size], list(point.sizes))


def preflight(plan: Plan, base: suite.SuiteConfig) -> None:
    """What no world of the study could survive (a launcher that is not one, a world too big
    for the hosts), refused as ``perfsuite run`` refuses it: one line, before the first world."""
    for point in plan.points.values():
        cfg = world_config(plan, point, base)
        suite.preflight(suite.plan(cases_of(point), cfg.options), cfg)


def run_point(plan: Plan, point: Point, rnd: int, base: suite.SuiteConfig) -> dict:
    cfg = world_config(plan, point, base)
    (spec,) = suite.plan(cases_of(point), cfg.options)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    out = suite.run_one(spec, cfg)
    rec: dict[str, Any] = {"point": point.key, "round": rnd, "started": started,
                           "wall_s": round(time.monotonic() - t0, 2),
                           "python": interpreter(plan.arm_of(point))}
    if out.skipped:
        rec["skipped"] = out.skipped
    elif out.failure is not None:
        rec["failure"] = str(out.failure)
        if suite.launcher_broken(out.failure):
            rec["start_failed"] = True
    else:
        rec["result"] = formats.dump_result(out.result)
        wrong = [{"case": s.case.name, "ranks": s.info.get("invalid_ranks"), "reason": s.info.get("invalid_reason")}
                 for s in out.result.samples if not s.valid]
        if wrong:
            rec["invalid"] = wrong
    return rec


def invalid_lines(plan: Plan, rec: dict) -> list[str]:
    """One line per case of a world whose results were wrong: its MPI environment (where the
    point names one), case, ranks and round."""
    from ..reading import verdict_text as vt

    point = plan.points.get(rec["point"])
    arm = plan.arm_of(point).name if point is not None and point.arm else None
    return [vt.invalid(x["case"], x.get("ranks"), arm, at=f"round {rec['round'] + 1}", why=x.get("reason"))
            for x in rec.get("invalid") or ()]


def skip(plan: Plan, point: Point, why: str) -> dict:
    """The record of a point that cannot run here: a skip with the reason, no world started."""
    return {"point": point.key, "round": 0, "wall_s": 0.0, "python": interpreter(plan.arm_of(point)),
            "skipped": why}


def arm_skip(plan: Plan, point: Point, why: str) -> dict:
    """The record of a point whose MPI environment cannot run here: a skip with the reason, and
    the arm's name, so a resumed study runs the point once that venv has been made."""
    return {**skip(plan, point, why), "arm_unavailable": plan.arm_of(point).name}


def run(plan: Plan, base: suite.SuiteConfig, records: list[dict], keep: Callable[[list[dict]], None],
        progress: Progress | None = None, cannot: dict[str, str] | None = None) -> list[dict]:
    """Run what ``records`` lacks; ``records`` grows world by world and ``keep`` is told each
    time. ``cannot`` (default ``unavailable(plan)``): points recorded as skips, no world started.
    Ctrl-C (or SIGTERM through ``interrupts``) propagates after the running world is killed;
    every world before it is already kept."""
    cannot = unavailable(plan) if cannot is None else cannot
    skipped = {r["point"] for r in records if r.get("skipped")}
    new = [skip(plan, plan.points[k], why) for k, why in cannot.items() if k not in skipped]
    if new:
        records.extend(new)
        keep(records)
    from .repeats import Repeats

    repeats, stopped, broken = Repeats(), set(), {}  # points that failed the same way twice; arms whose launch cannot start
    for rnd, key in worlds(plan, records, cannot):
        if any(r["point"] == key and r.get("skipped") for r in records):
            continue  # found unable to run in an earlier round of this run
        point = plan.points[key]
        arm = plan.arm_of(point).name
        if key in stopped or arm in broken:
            continue
        if progress:
            progress("start", point, rnd, None)
        rec = run_point(plan, point, rnd, base)
        records.append(rec)
        keep(records)
        if progress:
            progress("done", point, rnd, rec)
        why = repeats.seen(key, rec.get("failure"), f"round {rnd + 1}")
        if why is None and rec.get("start_failed"):  # its ranks never started: nor would any of this arm's
            broken[arm] = why = f"{key}'s ranks never started (round {rnd + 1}): no more worlds of MPI environment {arm}"
        if why:
            stopped.add(key)
            if progress:
                progress("stopped", point, rnd, {"why": why})
    return records
