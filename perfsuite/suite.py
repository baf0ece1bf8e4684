"""The one orchestration: cases -> worlds -> rounds -> results. The pytest plugin, the CLI, asv's
``setup_cache`` and every experiment call it, so no two of them can disagree about what was
measured or how a world was run.
"""
from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from . import bench, fingerprint, regress, transports
from .bench import Selection
from .errors import ConfigError, LaunchError, RankFailure, Unavailable
from .formats import SuiteRun, WorldOutcome
from .launch.environment import free_ports, prepared
from .launch.launchers import LaunchConfig
from .launch.world import run_world
from .model import Case, Result, WorldSpec

DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class SuiteConfig:
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    timeout: float = DEFAULT_TIMEOUT_S
    options: dict[str, Any] = field(default_factory=dict)  # kernel knobs: iters, warmup, inplace
    workdir: str | None = None
    keep_worlds: bool = False
    network: Any = None  # launch.netns.Shaping: every world on emulated nodes
    disk: Any = None  # (launch.diskio.DiskThrottle, data folder, tag): worlds behind a slow disk
    rounds: regress.RoundsPolicy | None = None  # repeat each world and pool the rounds


def select_cases(sel: Selection) -> list[Case]:
    spec = bench.get(sel.benchmark)
    if spec.cases is None:
        raise ConfigError(f"benchmark {sel.benchmark!r} is not selected case by case; it is measured "
                          f"by its own experiment (e.g. perfsuite {sel.benchmark}); selectable: "
                          f"{', '.join(bench.names())}")
    for t in sel.transports or ():
        transports.spec(t, spec.transports)  # names the bad transport
    if sel.transports is None:
        sel = replace(sel, transports=tuple(transports.names(spec.transports)))
    return spec.cases(sel)


def plan(cases: Iterable[Case], options: dict[str, Any] | None = None) -> list[WorldSpec]:
    return bench.plan(cases, options)


def run_one(spec: WorldSpec, cfg: SuiteConfig) -> WorldOutcome:
    """Run one world in its environment unless it cannot run here; never raises for a rank's
    fault (a failure is part of the outcome, with what was measured before it)."""
    record = bench.find(spec.benchmark)
    reason = _transport(spec).unavailable_reason()
    if reason:
        return WorldOutcome(spec, skipped=reason)
    try:
        with prepared(spec.world_size, cfg.launch, network=cfg.network, disk=cfg.disk,
                      wire_bytes=record.wire_bytes if record else (lambda s: 0)) as env:
            result = env.check(run_rounds(spec, replace(cfg, launch=env.launch)))
    except Unavailable as exc:
        return WorldOutcome(spec, skipped=str(exc))
    except (RankFailure, LaunchError) as exc:
        return WorldOutcome(spec, failure=exc)
    if result.extra.get("unavailable"):  # found out inside the world (worker.py): a skip
        return WorldOutcome(spec, skipped=str(result.extra["unavailable"]))
    return WorldOutcome(spec, result=result)


def _transport(spec: WorldSpec) -> transports.TransportSpec:
    record = bench.find(spec.benchmark)
    return transports.spec(spec.transport, record.transports if record else spec.benchmark)


def run_rounds(spec: WorldSpec, cfg: SuiteConfig) -> Result:
    """Run the world as many rounds as ``cfg.rounds`` asks (noise handling on shared machines),
    each case's samples pooled over the rounds; one round when no policy is set."""
    policy = cfg.rounds or regress.RoundsPolicy()
    needs_ports = _transport(spec).needs_ports
    spec = replace(spec, options={**cfg.options, **spec.options})
    results: list[Result] = []
    t0 = time.monotonic()
    while not results or policy.more(len(results), time.monotonic() - t0,
                                     regress.pool_results(results).samples):
        world = spec
        if needs_ports and "ports" not in spec.options:
            world = replace(spec, options={**spec.options, "ports": free_ports(spec.world_size)})
        try:
            result = run_world(world, cfg.launch, cfg.timeout, cfg.workdir, keep=cfg.keep_worlds)
        except RankFailure as exc:
            if results:  # a later round failed: keep every case the finished rounds measured
                exc.partial = list(regress.pool_results(results).samples)
                exc.args = (f"{exc} (round {len(results) + 1}; the {len(results)} finished "
                            f"round(s) are kept)",)
            raise
        results.append(result)
        if result.extra.get("unavailable"):  # the ranks found they cannot run: once is enough
            return result
    return regress.pool_results(results)


def run(cases: Sequence[Case], cfg: SuiteConfig,
        on_world: Callable[[str, WorldSpec, WorldOutcome | None], None] | None = None) -> SuiteRun:
    """Run every world the cases need, one after another; a failed world never stops the rest.

    ``on_world(event, spec, outcome)`` is told 'start' and 'done' (progress bars, live tables).
    """
    run_ = SuiteRun(fingerprint=fingerprint.collect(),
                    created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    for spec in plan(cases, cfg.options):
        if on_world:
            on_world("start", spec, None)
        outcome = run_one(spec, cfg)
        run_.outcomes.append(outcome)
        if on_world:
            on_world("done", spec, outcome)
    return run_
