"""The one orchestration: cases -> worlds -> results. The pytest plugin and the CLI both call it,
so the two faces can never disagree about what was measured.
"""
from __future__ import annotations

import datetime as _dt
import json
import socket
import time
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
BENCHMARKS = ("allreduce", "tf-epoch")  # kernels that the case matrix knows how to select


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


def _tf_epoch_cases(sel: Selection) -> list[Case]:
    picked = transports.names("tf-epoch") if sel.transports is None else sel.transports
    return _cases.tf_cases(picked, sel.world_sizes, sel.extra.get("models", _cases.DEFAULT_MODELS),
                           sel.extra.get("batches", _cases.DEFAULT_BATCHES))


CASE_BUILDERS["tf-epoch"] = _tf_epoch_cases


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
    network: Any = None  # launch.netns.Shaping: run every world on emulated nodes (issue 6)
    rounds: Any = None  # regress.RoundsPolicy: repeat each world and pool the rounds (issue 3)


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
        d.update(kind=f.kind, rank=f.rank, stderr_tail=f.stderr_tail, logs=f.logs)
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
    if cfg.network is not None:
        return run_emulated(spec, cfg)
    options = {**cfg.options, **spec.options}
    if getattr(tspec, "needs_ports", False) and "ports" not in options:
        options["ports"] = free_ports(spec.world_size)
    spec = WorldSpec(spec.benchmark, spec.transport, spec.world_size, spec.cases, options)
    try:
        result = run_rounds(spec, cfg)
    except (RankFailure, LaunchError) as exc:
        return WorldOutcome(spec, failure=exc)
    if result.extra.get("unavailable"):  # found out inside the world (worker.py): a skip
        return WorldOutcome(spec, skipped=str(result.extra["unavailable"]))
    return WorldOutcome(spec, result=result)


def run_rounds(spec: WorldSpec, cfg: SuiteConfig) -> Result:
    """Run the world as many rounds as ``cfg.rounds`` asks (noise handling on shared machines),
    each case's samples pooled over the rounds; one round when no policy is set."""
    from . import regress

    policy = cfg.rounds or regress.RoundsPolicy()
    results: list[Result] = []
    t0 = time.monotonic()
    while not results or policy.more(len(results), time.monotonic() - t0,
                                     regress.pool_results(results).samples):
        try:
            result = run_world(spec, cfg.launch, cfg.timeout, cfg.workdir, keep=cfg.keep_worlds)
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
    if outcome.skipped:
        raise LaunchError(f"the suite's mpi loop cannot run here: {outcome.skipped}")
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
        def rows(out: str) -> dict:
            return {d["size_bytes"]: d for d in (json.loads(x) for x in out.splitlines() if x.startswith("{"))}

        c_rows = {}
        if rep.skipped is None:
            c_rows = rows(run_program([binary, *args], world_size, cfg.launch, cfg.timeout))
        # The same loop in plain Python: what the mpi4py binding costs, apart from the harness.
        plain = importlib.resources.files("perfsuite.kernels").joinpath("c/plain_loop.py")
        py_rows = rows(run_program([cfg.launch.python, str(plain), *args], world_size, cfg.launch, cfg.timeout))
    factor = busbw_factor(world_size)
    for sample in result.samples:
        size = sample.case.size_bytes or 0
        row = {"size_bytes": size, "suite_p50_us": sample.info["p50_us"],
               "suite_busbw_GBps": sample.info["busbw_GBps"]}
        if size in py_rows:
            row["plain_p50_us"] = py_rows[size]["p50_us"]
        c = c_rows.get(size)
        if c:
            c_busbw = size * factor / (c["p50_us"] * 1e-6) / 1e9
            row.update(c_p50_us=c["p50_us"], overhead_us=sample.info["p50_us"] - c["p50_us"],
                       c_busbw_GBps=c_busbw, busbw_ratio=sample.info["busbw_GBps"] / c_busbw)
        rep.rows.append(row)
        if size == 64 << 20:
            rep.busbw_64MiB_GBps = sample.info["busbw_GBps"]
    return rep


# --- emulated nodes and the stall breakdown (issue 6) -------------------------------------------

def wire_bytes_min(sample: Sample) -> int:
    """The least bytes a sample's collectives must have put on the emulated wires (all ranks on
    their own node): allreduce calls x size x 2(n-1); a training step allreduces every gradient."""
    from .launch.netns import allreduce_wire_bytes

    i, n = sample.info, sample.case.world_size
    if sample.case.benchmark == "allreduce":
        return allreduce_wire_bytes(sample.case.size_bytes or 0, n,
                                    int(i.get("iters", 0)) + int(i.get("warmup", 0)))
    if i.get("params") and i.get("allreduce_share") is not None:  # gradients exchanged via MPI
        return allreduce_wire_bytes(4 * int(i["params"]), n, int(i.get("steps", 0)) + int(i.get("warmup", 0)))
    return 0


def run_emulated(spec: WorldSpec, cfg: SuiteConfig) -> WorldOutcome:
    """Run one world with one rank per emulated node (``launch/netns.py``): namespaces made,
    ranks placed by Hydra, and removed afterwards whatever happens. Proof that the traffic
    crossed: the shaped links' byte counters must grow by at least the bytes the world's
    collectives sent, or every sample of the world is marked invalid with the numbers."""
    from dataclasses import replace as _replace

    from .launch import netns
    from .launch.world import default_program, run_command

    reason = netns.unavailable_reason()
    if reason:
        return WorldOutcome(spec, skipped=reason)
    if spec.world_size < 2:
        return WorldOutcome(spec, skipped="an emulated network needs a world of >= 2 ranks")
    net = cfg.network.network(spec.world_size)
    with netns.NetnsSession(net, run_command) as session:
        launch = session.launch_config(cfg.launch, spec.world_size,
                                       cfg.launch.program or default_program("mpiexec"))
        before = session.sent_bytes()
        outcome = run_one(spec, _replace(cfg, launch=launch, network=None))
        sent = sum(session.sent_bytes()) - sum(before)
    if outcome.result is None:
        return outcome
    need = sum(wire_bytes_min(s) for s in outcome.result.samples)
    crossed = sent >= need
    samples = tuple(Sample(s.case, s.metrics, s.valid and crossed, s.times_s,
                           {**s.info, "emulated_network": net.rate, "wire_bytes_sent": sent,
                            "wire_bytes_min": need,
                            **({} if crossed else {"invalid_reason": (
                                f"the emulated links sent {sent} bytes, fewer than the {need} the "
                                "collectives must send: traffic did not cross the emulated network")})})
                    for s in outcome.result.samples)
    extra = {**outcome.result.extra, "emulated_network": {"rate": net.rate, "nodes": net.nodes,
             "wire_bytes_sent": sent, "wire_bytes_min": need, "crossed": crossed}}
    return WorldOutcome(outcome.spec, result=_replace(outcome.result, samples=samples, extra=extra))


DROP_CACHES = ["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"]


@dataclass(frozen=True)
class StallConfig:
    """A breakdown to measure: the model and transport, N workers, the emulated network."""

    model: str
    transport: str = "mpi"
    world_size: int = 2
    batch: int = 16
    network: Any = None  # launch.netns.Shaping for T4; None: no network stall
    data_dir: str | None = None  # JPEG dataset (perfsuite.dataset); None: no prep/fetch stall
    prep_threads: int = 2
    options: dict[str, Any] = field(default_factory=dict)  # iters, warmup, image_size, ...
    disk: Any = None  # launch.diskio.DiskThrottle for the file runs (T2, T3); None: the real disk


@dataclass
class StallRunOutcome:
    breakdown: Any  # stalls.Breakdown
    sample: Sample
    outcomes: dict[str, WorldOutcome] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def run_stalls(sc: StallConfig, cfg: SuiteConfig,
               on_run: Callable[[str, Any, WorldOutcome | None], None] | None = None) -> StallRunOutcome:
    """The five epochs of the Stash breakdown (stalls.plan), each a real tf-epoch world, then
    the pure decomposition. A run that cannot happen here (not root: no cold cache, no
    emulated network) is skipped with its reason and so are the stalls that need it."""
    import os as _os
    from dataclasses import replace as _replace

    from . import stalls
    from .launch import netns
    from .launch.world import run_command

    is_root = hasattr(_os, "geteuid") and _os.geteuid() == 0
    cores = _os.cpu_count() or 1
    # One worker gets the same cores in every run (the CPU stand-in for one GPU per worker).
    tf_threads = max(1, cores // sc.world_size)
    base = {"baseline": False, "tf_threads": tf_threads, "prep_threads": sc.prep_threads,
            **cfg.options, **sc.options}
    skipped: dict[str, str] = {}
    outcomes: dict[str, WorldOutcome] = {}
    times: dict[str, list[float]] = {}
    info: dict[str, Any] = {"tf_threads": tf_threads, "prep_threads": sc.prep_threads,
                            "emulated_disk": sc.disk.label if sc.disk is not None else None}
    for run in stalls.plan(sc.world_size, data=sc.data_dir is not None, network=sc.network is not None):
        if run.across_nodes:
            reason = netns.unavailable_reason(is_root)
            if reason:
                skipped[run.key] = reason
                continue
        if run.cache == "cold" and not is_root:
            skipped[run.key] = "not root (only root can drop the page cache for a cold run)"
            continue
        if sc.disk is not None and run.data == "files":
            from .launch.diskio import unavailable_reason as disk_reason

            if disk_reason(is_root):
                raise LaunchError(f"--emulated-disk {sc.disk.label}: {disk_reason(is_root)}")
        options = dict(base)
        if run.data == "files":
            options.update(data="files", data_dir=sc.data_dir)
        if run.cache == "warm":
            from .dataset import warm

            warm(sc.data_dir)
        if run.cache == "cold" and sc.disk is None:
            run_command(DROP_CACHES, timeout=120)
        elif run.cache == "cold":
            from .dataset import evict

            # On an emulated slow disk only the dataset goes cold: dropping every cache would
            # make the throttled ranks read TensorFlow's libraries through it too, and the
            # fetch stall would measure imports instead of the dataset.
            evict(sc.data_dir)
        # T0 runs the same transport on one rank, so T1 - T0 is only what N workers add.
        case = Case("tf-epoch", sc.transport, run.world_size,
                    model=sc.model, batch=sc.batch)
        spec = WorldSpec("tf-epoch", case.transport, run.world_size, (case,), options)
        run_cfg = _replace(cfg, network=sc.network if run.across_nodes else None)
        if on_run:
            on_run("start", run, None)
        if sc.disk is not None and run.data == "files":
            # Both file runs read through the same throttled disk; the warm one never reaches it.
            from .launch.diskio import DiskThrottleSession

            with DiskThrottleSession(sc.disk, sc.data_dir, run_command, tag=run.key) as cgroup:
                outcome = run_one(spec, _replace(run_cfg, launch=_replace(run_cfg.launch, cgroup=cgroup)))
        else:
            outcome = run_one(spec, run_cfg)
        outcomes[run.key] = outcome
        if on_run:
            on_run("done", run, outcome)
        sample = outcome.sample_for(case)
        if outcome.skipped or sample is None or not sample.valid:
            why = outcome.skipped or (str(outcome.failure) if outcome.failure else
                                      sample.info.get("invalid_reason", "invalid sample") if sample
                                      else "no sample")
            skipped[run.key] = f"{run.key} did not measure: {why}"
            continue
        times[run.key] = [t * 1e3 for t in sample.times_s]
        info[f"{run.key}_info"] = {k: sample.info.get(k) for k in (
            "step_ms_p50", "params", "data", "prep_threads", "input_wait_ms_mean",
            "wire_bytes_sent", "wire_bytes_min", "emulated_network", "image_size", "steps")}
    if "T0" not in times:
        raise LaunchError(f"the stall breakdown needs T0 (1 worker, synthetic): {skipped.get('T0', 'not measured')}")
    bd = stalls.decompose(times, skipped)
    params = (info.get("T0_info") or {}).get("params")
    if sc.network is not None and params:
        info["gradient_bytes"] = 4 * int(params)
        info["network_stall_bound_ms"] = stalls.expected_network_stall_ms(
            4 * int(params), sc.world_size, sc.network.rate_bps)
    case = stalls.stall_case(sc.transport, sc.world_size, sc.model, sc.batch,
                             sc.network.label if sc.network is not None else None)
    info["skipped"] = skipped
    return StallRunOutcome(bd, stalls.to_sample(case, bd, info), outcomes, skipped)
