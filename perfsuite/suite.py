"""The one orchestration: cases -> worlds -> results. The pytest plugin and the CLI both call it,
so the two faces can never disagree about what was measured.
"""
from __future__ import annotations

import datetime as _dt
import json
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import cases as _cases
from . import fingerprint, transports
from .errors import ConfigError, FormatError, LaunchError, PerfsuiteError, RankFailure
from .launch.launchers import LaunchConfig
from .launch.world import run_world
from .model import RESULT_VERSION, RUN_FORMAT, Case, Result, Sample, WorldSpec, check_format

DEFAULT_TIMEOUT_S = 300.0
BENCHMARKS = ("allreduce",)  # kernels that the case matrix knows how to select


@dataclass(frozen=True)
class Selection:
    """What to run, already checked: the user's choice of the case matrix."""

    benchmark: str = "allreduce"
    transports: tuple[str, ...] | None = None  # None = every registered transport of the benchmark
    world_sizes: tuple[int, ...] = _cases.DEFAULT_WORLD_SIZES
    sizes: tuple[int, ...] = ()
    dtypes: tuple[str, ...] = (_cases.DEFAULT_DTYPE,)
    extra: dict[str, Any] = field(default_factory=dict)  # per-benchmark axes (models, batches, ...)


#: benchmark -> function(Selection) -> list[Case]; other kernels register theirs here.
CASE_BUILDERS: dict[str, Callable[[Selection], list[Case]]] = {}


def _allreduce_cases(sel: Selection) -> list[Case]:
    sizes = sel.sizes or _cases.parse_sizes(_cases.DEFAULT_SIZES)
    picked = transports.names("allreduce") if sel.transports is None else sel.transports
    return _cases.allreduce_cases(picked,
                                  sel.world_sizes, sizes, sel.dtypes)


CASE_BUILDERS["allreduce"] = _allreduce_cases


def select_cases(sel: Selection) -> list[Case]:
    if sel.benchmark not in CASE_BUILDERS:
        raise ConfigError(f"benchmark {sel.benchmark!r} is unknown; choose from {', '.join(CASE_BUILDERS)}")
    for t in sel.transports or ():
        transports.spec(t, sel.benchmark)  # names the bad transport
    return CASE_BUILDERS[sel.benchmark](sel)


@dataclass(frozen=True)
class SuiteConfig:
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    timeout: float = DEFAULT_TIMEOUT_S
    options: dict[str, Any] = field(default_factory=dict)  # kernel knobs: iters, warmup, inplace
    workdir: str | None = None
    keep_worlds: bool = False


@dataclass
class WorldOutcome:
    """What became of one world: a result, a failure (with partial samples), or a skip."""

    spec: WorldSpec
    result: Result | None = None
    failure: PerfsuiteError | None = None
    skipped: str | None = None

    def samples(self) -> list[Sample]:
        if self.result is not None:
            return list(self.result.samples)
        if isinstance(self.failure, RankFailure) and self.failure.partial:
            return list(self.failure.partial)
        return []

    def sample_for(self, case: Case) -> Sample | None:
        for s in self.samples():
            if s.case == case:
                return s
        return None


@dataclass
class SuiteRun:
    outcomes: list[WorldOutcome] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    created: str = ""

    @property
    def results(self) -> list[Result]:
        return [o.result for o in self.outcomes if o.result is not None]

    @property
    def failures(self) -> list[WorldOutcome]:
        return [o for o in self.outcomes if o.failure is not None]

    @property
    def skipped(self) -> list[WorldOutcome]:
        return [o for o in self.outcomes if o.skipped is not None]

    def samples(self) -> list[Sample]:
        return [s for o in self.outcomes for s in o.samples()]

    @property
    def ok(self) -> bool:
        """Every world that could run here ran, and every sample validated."""
        return not self.failures and all(s.valid for s in self.samples())

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": RUN_FORMAT, "version": RESULT_VERSION, "created": self.created,
            "fingerprint": self.fingerprint,
            "results": [o.result.to_dict() for o in self.outcomes if o.result is not None],
            "partial": [{"world": o.spec.label, "samples": [s.to_dict() for s in o.samples()]}
                        for o in self.failures if o.samples()],
            "failures": [failure_dict(o) for o in self.failures],
            "skipped": [{"world": o.spec.label, "cases": [c.name for c in o.spec.cases],
                         "reason": o.skipped} for o in self.skipped],
        }


def failure_dict(o: WorldOutcome) -> dict[str, Any]:
    f = o.failure
    d = {"world": o.spec.label, "message": str(f), "type": type(f).__name__}
    if isinstance(f, RankFailure):
        d.update(kind=f.kind, rank=f.rank, stderr_tail=f.stderr_tail)
    return d


def load_run(path: str) -> SuiteRun:
    """Read a results file written by ``report.write_run_json`` (``perfsuite run --json``)."""
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read results file {path!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise FormatError(f"{path}: not JSON ({exc}); pass a file written by perfsuite run --json") from None
    check_format(d, RUN_FORMAT, path)
    run = SuiteRun(fingerprint=d.get("fingerprint", {}), created=d.get("created", ""))
    for r in d.get("results", []):
        res = Result.from_dict(r, source=path)
        cs = tuple(s.case for s in res.samples)
        run.outcomes.append(WorldOutcome(WorldSpec(res.benchmark, res.transport, res.world_size, cs), res))
    for p in d.get("partial", []):
        samples = tuple(Sample.from_dict(s) for s in p["samples"])
        c0 = samples[0].case
        spec = WorldSpec(c0.benchmark, c0.transport, c0.world_size, tuple(s.case for s in samples))
        failure = RankFailure(p["world"] + ": failed (see failures)", case=p["world"], partial=list(samples))
        run.outcomes.append(WorldOutcome(spec, failure=failure))
    return run


def plan(cases: Iterable[Case], options: dict[str, Any] | None = None) -> list[WorldSpec]:
    return _cases.group_worlds(cases, options)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free TCP ports on ``host`` (held open together so they differ, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run_one(spec: WorldSpec, cfg: SuiteConfig) -> WorldOutcome:
    """Run one world unless its transport cannot run here; never raises for a rank's fault."""
    tspec = transports.spec(spec.transport, spec.benchmark)
    reason = tspec.unavailable_reason()
    if reason:
        return WorldOutcome(spec, skipped=reason)
    options = {**cfg.options, **spec.options}
    if getattr(tspec, "needs_ports", False) and "ports" not in options:
        options["ports"] = free_ports(spec.world_size)
    spec = WorldSpec(spec.benchmark, spec.transport, spec.world_size, spec.cases, options)
    try:
        result = run_world(spec, cfg.launch, cfg.timeout, cfg.workdir, keep=cfg.keep_worlds)
    except (RankFailure, LaunchError) as exc:
        return WorldOutcome(spec, failure=exc)
    if result.extra.get("unavailable"):  # found out inside the world (worker.py): a skip
        return WorldOutcome(spec, skipped=str(result.extra["unavailable"]))
    return WorldOutcome(spec, result=result)


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


# --- harness overhead: the same loop in C -------------------------------------------------------

OVERHEAD_SIZES = (4, 1 << 20, 64 << 20)


@dataclass
class OverheadReport:
    world_size: int
    rows: list[dict[str, Any]] = field(default_factory=list)  # size, C and suite p50, busbw ratio
    skipped: str | None = None  # why the C loop could not run
    world_start_s: float | None = None
    host_copy_GBps: float | None = None
    busbw_64MiB_GBps: float | None = None


def overhead(cfg: SuiteConfig, world_size: int = 2, sizes: Sequence[int] = OVERHEAD_SIZES) -> OverheadReport:
    """Time perfsuite's mpi loop and a C MPI_Allreduce loop (built with the MPI's mpicc) over the
    same sizes and iteration counts in one run, so their difference is the harness's cost."""
    import importlib.resources
    import tempfile

    from .kernels.allreduce import busbw_factor, default_iters
    from .launch.world import build_c_program, run_program

    rep = OverheadReport(world_size)
    cases = _cases.allreduce_cases(["mpi"], [world_size], list(sizes))
    outcome = run_one(plan(cases, {**cfg.options, "copy_bw": True})[0], cfg)
    if outcome.failure is not None:
        raise outcome.failure
    result = outcome.result
    rep.world_start_s, rep.host_copy_GBps = result.world_start_s, result.extra.get("host_copy_GBps")
    with tempfile.TemporaryDirectory(prefix="perfsuite-c-") as tmp:
        src = importlib.resources.files("perfsuite.kernels").joinpath("c/allreduce_loop.c")
        binary = f"{tmp}/allreduce_loop"
        try:
            build_c_program(str(src), binary)
        except LaunchError as exc:
            rep.skipped = f"no C reference: {exc}"
        args = []
        for s in sizes:
            iters, warmup = default_iters(s)
            iters = int(cfg.options.get("iters") or iters)
            warmup = int(cfg.options.get("warmup", warmup))
            args.append(f"{s}:{iters}:{warmup}")
        c_rows = {}
        if rep.skipped is None:
            out = run_program([binary, *args], world_size, cfg.launch, cfg.timeout)
            c_rows = {d["size_bytes"]: d for d in (json.loads(x) for x in out.splitlines() if x.startswith("{"))}
    factor = busbw_factor(world_size)
    for sample in result.samples:
        size = sample.case.size_bytes or 0
        row = {"size_bytes": size, "suite_p50_us": sample.info["p50_us"],
               "suite_busbw_GBps": sample.info["busbw_GBps"]}
        c = c_rows.get(size)
        if c:
            c_busbw = size * factor / (c["p50_us"] * 1e-6) / 1e9
            row.update(c_p50_us=c["p50_us"], overhead_us=sample.info["p50_us"] - c["p50_us"],
                       c_busbw_GBps=c_busbw, busbw_ratio=sample.info["busbw_GBps"] / c_busbw)
        rep.rows.append(row)
        if size == 64 << 20:
            rep.busbw_64MiB_GBps = sample.info["busbw_GBps"]
    return rep
