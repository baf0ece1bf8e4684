"""The one orchestration: cases -> worlds -> rounds -> results. The pytest plugin, the CLI, asv's
``setup_cache`` and every experiment call it, so no two of them can disagree about what was
measured or how a world was run.
"""
from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from . import bench, transports
from .verdicts import stragglers
from .store import fingerprint
from .bench import Selection
from .records.errors import ConfigError, LaunchError, PerfsuiteError, PortInUse, RankFailure, Unavailable
from .store.formats import SuiteRun, WorldOutcome
from .launch.native import mpi as native, nccl as native_nccl
from .launch.environment import free_ports, prepared
from .launch.launchers import LaunchConfig
from .launch.world import run_world
from .records.model import Case, Result, WorldSpec
from .verdicts.rounds import RoundsPolicy, pool_results

DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class SuiteConfig:
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    timeout: float = DEFAULT_TIMEOUT_S
    start_timeout: float | None = None  # seconds for a world's ranks to check in (None: world.start_timeout)
    options: dict[str, Any] = field(default_factory=dict)  # kernel knobs: iters, warmup, inplace
    workdir: str | None = None
    keep_worlds: bool = False
    network: Any = None  # launch.netns.Shaping: every world on emulated nodes
    disk: Any = None  # (launch.diskio.DiskThrottle, data folder, tag): worlds behind a slow disk
    rounds: RoundsPolicy | None = None  # repeat each world and pool the rounds


def select_cases(sel: Selection) -> list[Case]:
    spec = bench.get(sel.benchmark)
    if spec.cases is None:
        raise ConfigError(f"benchmark {sel.benchmark!r} is not selected case by case; it is measured "
                          f"by its own experiment (e.g. perfsuite {sel.benchmark}); selectable: "
                          f"{', '.join(bench.names())}")
    for t in sel.transports or ():
        transports.spec(t, spec.transports)  # names the bad transport
    if sel.transports is None:
        sel = replace(sel, transports=tuple(transports.default_names(spec.transports)))
    cases = spec.cases(sel)
    if not cases:  # nothing selected is never a pass: run, ab and bisect all come through here
        raise bench.NothingSelected(bench.nothing_selected(sel))
    return cases


def plan(cases: Iterable[Case], options: dict[str, Any] | None = None) -> list[WorldSpec]:
    return bench.plan(cases, options)


#: A world whose gRPC (or other) port was taken between choosing and binding it, before it
#: measured anything, is started again with fresh ports this many times.
PORT_RETRIES = 2


#: Host buffers of a message's size each rank holds (send, receive, the validation copy).
HOST_BUFFERS = 3


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def preflight(specs: Sequence[WorldSpec], cfg: SuiteConfig) -> None:
    """Refuse, before the first world starts, what no world of this run could survive: a
    scratch folder that cannot be written, a launcher that was named but is not one, a world
    too big for this host, a message too big for its memory. Each is one ConfigError line."""
    from .store import formats
    from .launch import launchers, world

    if cfg.workdir:
        formats.check_output_dir(cfg.workdir, "workdir")
    if cfg.launch.program is not None:
        world.resolve(cfg.launch, named=True)
    available, cores = fingerprint.memory_bytes("MemAvailable"), _cores()
    for spec in specs:
        if _transport(spec).native and cfg.launch.container is None:
            native_options({**cfg.options, **spec.options}, cfg.launch.python)
        launchers.check_fits(cfg.launch, spec.world_size, cores)
        here = launchers.local_ranks(cfg.launch, spec.world_size)
        biggest = max((c.size_bytes or 0 for c in spec.cases), default=0)
        need = (here or 1) * HOST_BUFFERS * biggest
        if available and biggest and need > available:
            fits = available // ((here or 1) * HOST_BUFFERS)
            from .records.model import format_size

            raise ConfigError(f"size {format_size(biggest)} needs about {need / 2**30:.1f} GiB on this host "
                              f"({here or 1} rank(s) x {HOST_BUFFERS} buffers) and {available / 2**30:.1f} GiB "
                              f"is available; choose sizes up to {format_size(1 << (fits.bit_length() - 1))}")


def native_options(options: dict[str, Any], python: str | None = None) -> dict[str, Any]:
    """The native loop's facts for a world's ranks (built on first use with the mpicc of
    ``python``, the ranks' interpreter), unless the mpi4py loop was asked for; with
    ``host_timing native`` a loop that cannot be had is bad input."""
    timing = options.get("host_timing", "auto")
    if timing == "python":
        return {}
    built = native.build(python=python)
    if built.why and timing == "native":
        raise ConfigError(f"host timing native: {built.why}; use --host-timing auto to fall back "
                          "to the mpi4py loop")
    return built.job_options()


def run_one(spec: WorldSpec, cfg: SuiteConfig) -> WorldOutcome:
    """Run one world, as many rounds as ``cfg.rounds`` asks, in its environment, unless it cannot
    run here; never raises for a rank's fault (a failure is part of the outcome, with what was
    measured before it)."""
    rounds = Rounds(spec, cfg)
    while rounds.wants_more():
        rounds.step()
    return rounds.outcome()


def _transport(spec: WorldSpec) -> transports.TransportSpec:
    record = bench.find(spec.benchmark)
    return transports.spec(spec.transport, record.transports if record else spec.benchmark)


class Rounds:
    """One world spec's rounds, one ``step`` (one world) at a time, so that ``run`` can
    interleave the rounds of several worlds (a burst of load then hits every one alike)."""

    def __init__(self, spec: WorldSpec, cfg: SuiteConfig):
        self.given = spec
        self.spec = replace(spec, options={**cfg.options, **spec.options})
        self.cfg = cfg
        self.policy = cfg.rounds or RoundsPolicy()
        self.results: list[Result] = []
        self.spent_s = 0.0
        self.skipped: str | None = None
        self.failure: PerfsuiteError | None = None
        reason = _transport(spec).unavailable_reason()
        if reason:
            self.skipped = reason
        elif _transport(spec).native and "native_loop" not in self.spec.options:
            native = native_options(self.spec.options, cfg.launch.python) if cfg.launch.container is None else \
                {"native_loop": {"why": "the world runs inside a container, where the native loop built here is not"}}
            self.spec = replace(self.spec, options={**self.spec.options, **native})
        elif _transport(spec).device_native and native_nccl.OPTION not in self.spec.options:
            # The native NCCL loop, built on the launching side where a GPU world will run.
            self.spec = replace(self.spec, options={**self.spec.options,
                                                    **native_nccl.job_options(self.spec.options, cfg.launch.python)})

    def pooled(self) -> Result:
        return pool_results(self.results, self.policy.max_contention)

    def wants_more(self) -> bool:
        if self.skipped or self.failure:
            return False
        if not self.results:
            return True
        if self.results[-1].extra.get("unavailable"):  # the ranks found they cannot run: once is enough
            return False
        return self.policy.more(len(self.results), self.spent_s, self.pooled().samples)

    def step(self) -> None:
        """Run one more world; a failure ends the rounds, keeping what finished rounds measured."""
        t0 = time.monotonic()
        try:
            self.results.append(stragglers.annotate(self._world()))
            if self.policy.seen is not None:
                self.policy.seen(self.results[-1])
        except Unavailable as exc:
            self.skipped = str(exc)
        except (RankFailure, LaunchError) as exc:
            if self.results and isinstance(exc, RankFailure):
                exc.partial = list(self.pooled().samples)
                exc.args = (f"{exc} (round {len(self.results) + 1}; the {len(self.results)} "
                            "finished round(s) are kept)",)
            self.failure = exc
        self.spent_s += time.monotonic() - t0

    def _world(self) -> Result:
        record = bench.find(self.spec.benchmark)
        needs_ports = _transport(self.spec).needs_ports
        for attempt in range(PORT_RETRIES + 1):
            world = self.spec
            if needs_ports and "ports" not in self.spec.options:
                world = replace(world, options={**world.options, "ports": free_ports(world.world_size)})
            try:
                with prepared(world.world_size, self.cfg.launch, network=self.cfg.network,
                              disk=self.cfg.disk,
                              wire_bytes=record.wire_bytes if record else (lambda s: 0)) as env:
                    result = run_world(world, env.launch, self.cfg.timeout, self.cfg.workdir,
                                       keep=self.cfg.keep_worlds, start=self.cfg.start_timeout)
                    return env.check(result)
            except RankFailure as exc:
                if (PortInUse.__name__ in str(exc) and not exc.partial and world is not self.spec
                        and attempt < PORT_RETRIES):
                    continue  # taken by someone else before the world bound it: fresh ports
                raise
        raise AssertionError("unreachable")

    def outcome(self) -> WorldOutcome:
        if self.skipped:
            return WorldOutcome(self.given, skipped=self.skipped)
        if self.failure is not None:
            return WorldOutcome(self.given, failure=self.failure)
        result = self.pooled()
        if result.extra.get("unavailable"):  # found out inside the world (worker.py): a skip
            return WorldOutcome(self.given, skipped=str(result.extra["unavailable"]))
        return WorldOutcome(self.given, result=result)


def run(cases: Sequence[Case], cfg: SuiteConfig,
        on_world: Callable[[str, WorldSpec, WorldOutcome | None], None] | None = None) -> SuiteRun:
    """Run every world the cases need; a failed world never stops the rest. With several rounds
    the worlds' rounds are interleaved (round 1 of each world, then round 2, ...), so drift and
    bursts of load are shared by every world and cross-world ratios are taken from neighbours.

    ``on_world(event, spec, outcome)`` is told 'start' and 'done' (progress bars, live tables);
    a world that cannot run here is told 'done' only, before any world starts.
    """
    run_ = SuiteRun(fingerprint=fingerprint.collect(),
                    created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    specs = plan(cases, cfg.options)
    preflight(specs, cfg)
    pending = [Rounds(spec, cfg) for spec in specs]
    started: set[int] = set()
    current = None
    try:
        for r in [r for r in pending if r.skipped]:  # settled now: progress counts only the rest
            pending.remove(r)
            run_.outcomes.append(r.outcome())
            if on_world:
                on_world("done", r.given, run_.outcomes[-1])
        while pending:
            for r in list(pending):
                current = r
                if id(r) not in started and on_world:
                    on_world("start", r.given, None)
                started.add(id(r))
                if r.wants_more():
                    r.step()
                if not r.wants_more():
                    pending.remove(r)
                    outcome = r.outcome()
                    run_.outcomes.append(outcome)
                    if on_world:
                        on_world("done", r.given, outcome)
                if launcher_broken(r.failure):  # every later world would fail the same way
                    for other in [o for o in pending if fails_alike(r.given, o.given)]:
                        run_.outcomes.append(other.outcome() if other.results else WorldOutcome(
                            other.given, skipped=f"not started: the launcher did not start {r.given.label}'s ranks"))
                        if on_world:
                            on_world("done", other.given, run_.outcomes[-1])
                        pending.remove(other)
                    break
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM through interrupts.handled
        run_.interrupted = getattr(exc, "name", "SIGINT")
        run_.outcomes += [_stopped(r, run_.interrupted, getattr(exc, "partial", []), r is current)
                          for r in pending]
    order = {spec.label: i for i, spec in enumerate(specs)}
    run_.outcomes.sort(key=lambda o: order.get(o.spec.label, len(order)))
    return run_


def launcher_broken(failure: BaseException | None) -> bool:
    """A failure that every later world of the same launch would repeat: its ranks never started
    (the launcher, its proxy or the ranks' Python cannot start), or the launcher is missing."""
    return isinstance(failure, LaunchError) or getattr(failure, "kind", None) == "start"


def fails_alike(failed: WorldSpec, other: WorldSpec) -> bool:
    """Whether ``other`` would meet the start failure of ``failed`` under the same launcher:
    any world does when a host world's ranks could not start; only device worlds do when a
    device world's could not (its ranks place themselves on a GPU before MPI_Init)."""
    return _transport(failed).device != "gpu" or _transport(other).device == "gpu"


def _stopped(r: Rounds, signal_name: str, partial: list, running: bool) -> WorldOutcome:
    """What an interrupted run keeps of a world: its finished rounds; else, for the world that
    was running, the cases it had finished (``partial``); else a line saying it did not run."""
    if r.results or r.skipped or r.failure:
        return r.outcome()
    if running:
        return WorldOutcome(r.given, failure=RankFailure(
            f"{r.given.label}: interrupted by {signal_name} ({len(partial)} of {len(r.given.cases)} "
            "cases measured before it)", case=r.given.label, partial=list(partial), kind="interrupted"))
    return WorldOutcome(r.given, skipped=f"not run: interrupted by {signal_name}")
