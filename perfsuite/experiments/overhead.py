"""What the harness adds to a collective: the ``mpi`` transport timed by its native C loop and
by the kernel's mpi4py loop, beside a plain C program running the same barrier-separated loop of
the same MPI call (launch/native/c/collective_loop.c, built with the MPI's own ``mpicc``: the native
loop's buffers and call, out of place, float32, op sum, the case's root), over the same sizes and
iteration counts, for each collective asked for (``--benchmarks``, default allreduce). The loops
run in rounds: each round visits every collective (in an order rotated between rounds) and runs
one world of each loop for it (in a rotated order), so a drift of the machine hits every loop
alike; each figure is the median over rounds of a world's p50 (the slowest rank per iteration);
deltas and ratios against C are the median over rounds of the same round's pair. A world whose
results were wrong stops the command (``RankFailure``, exit 4): its timings are no loop's
overhead, and the rounds after it would be wasted.

This module holds a second yardstick too, below: a transport's harness against a plain loop of
its framework's own call (``plain_overhead``, torch-gloo), which shares the report's targets and
the command but not the C program."""
from __future__ import annotations

import importlib.resources
import json
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import collectives, suite
from ..bench.allreduce import allreduce_cases
from ..records.errors import LaunchError, RankFailure
from ..kernels.collectives.allreduce import default_iters
from ..launch.commands import build_c_program
from ..launch.world import run_program
from ..records.model import Result, timing_of

SIZES = (4, 1 << 20, 64 << 20)
LOOPS = ("c", "native", "python")
ROUNDS = 5
BENCHMARKS = ("allreduce",)
#: The MPI call each collective's loops make (launch/native/c/native_loop.c, collective_loop.c).
MPI_CALLS = {"allreduce": "MPI_Allreduce", "all_gather": "MPI_Allgather",
             "reduce_scatter": "MPI_Reduce_scatter_block", "alltoall": "MPI_Alltoall",
             "broadcast": "MPI_Bcast", "reduce": "MPI_Reduce"}
C_SOURCE = "c/collective_loop.c"  # in perfsuite.launch.native
#: The floor the native loop is held to against the C program (issue targets, printed as met or not).
TARGET_4B_US, TARGET_1MIB_RATIO, TARGET_64MIB_BUSBW = 0.2, 1.02, 0.98


@dataclass
class OverheadReport:
    world_size: int
    rounds: int = 0
    #: per collective per size: p50 and busbw per loop; "benchmark" names the collective (absent: allreduce)
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None  # why the C program could not run
    native_why: str | None = None  # why the native loop did not time the mpi transport
    world_start_s: float | None = None
    host_copy_GBps: float | None = None
    benchmarks: tuple[str, ...] = BENCHMARKS
    root: int = 0
    #: the collectives whose native loop fell back, with why (their native column is empty)
    native_off: dict[str, str] = field(default_factory=dict)

    def label(self, row: dict[str, Any]) -> str:
        """'' where the report is allreduce's alone (its lines as they always were), else the
        row's collective and a space."""
        return "" if tuple(self.benchmarks) == BENCHMARKS else f"{row.get('benchmark', 'allreduce')} "

    def call(self, benchmark: str) -> str:
        """The MPI call the loops of ``benchmark`` make: MPI_Allgather."""
        return MPI_CALLS[benchmark]

    def targets(self) -> list[tuple[str, float | None, bool]]:
        """(what, measured, met) for each target size that was run, from the paired (same-round)
        deltas and ratios. ``measured`` is None when no round paired the native loop with C (no
        C program, no native loop): such a target is not met, since nothing shows it is."""
        out = []
        for r in self.rows:
            delta, ratio = r["delta_us"].get("native"), r["ratio"].get("native") or None
            name = self.label(r)
            if r["size_bytes"] == 4:
                out.append((f"{name}4 B native - C <= +{TARGET_4B_US} us", delta,
                            delta is not None and delta <= TARGET_4B_US))
            elif r["size_bytes"] == 1 << 20:
                out.append((f"{name}1 MiB native / C <= {TARGET_1MIB_RATIO}", ratio,
                            ratio is not None and ratio <= TARGET_1MIB_RATIO))
            elif r["size_bytes"] == 64 << 20:
                busbw = 1 / ratio if ratio is not None else None
                out.append((f"{name}64 MiB busbw native / C >= {TARGET_64MIB_BUSBW}", busbw,
                            busbw is not None and busbw >= TARGET_64MIB_BUSBW))
        return out

    def missed(self) -> list[str]:
        """The targets not met (the command exits 1 when one was missed, 4 when one was not measured)."""
        return [what for what, _value, met in self.targets() if not met]


def _loop_args(sizes: Sequence[int], options: dict) -> list[str]:
    """SIZE:ITERS:WARMUP per size, the counts the suite's kernel uses."""
    args = []
    for s in sizes:
        iters, warmup = default_iters(s)
        args.append(f"{s}:{int(options.get('iters') or iters)}:{int(options.get('warmup', warmup))}")
    return args


def c_args(benchmark: str, root: int, sizes: Sequence[int], options: dict) -> list[str]:
    """The C program's arguments for one collective: -c NAME, -r ROOT for a rooted one, and
    SIZE:ITERS:WARMUP per size."""
    rooted = collectives.get(benchmark).rooted
    return ["-c", benchmark, *(["-r", str(root)] if rooted else []), *_loop_args(sizes, options)]


def _rows(out: str, benchmark: str = "allreduce", world_size: int | None = None) -> dict[int, float]:
    """p50 per size from the C program's lines; with ``world_size``, each line's counts are held
    to the record's (``Collective.buffers``): a program timing other buffers is no yardstick."""
    rows = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    coll = collectives.get(benchmark)
    for d in rows:
        if d.get("collective", benchmark) != benchmark:
            raise LaunchError(f"the C program ran {d['collective']}, not {benchmark}")
        if world_size is not None and "send_count" in d:
            want = coll.buffers(d["size_bytes"], "float32", world_size)
            if (d["send_count"], d["recv_count"]) != want:
                raise LaunchError(f"the C program's {benchmark} at {d['size_bytes']} B has counts "
                                  f"{(d['send_count'], d['recv_count'])}, the record's are {want}")
    return {d["size_bytes"]: d["p50_us"] for d in rows}


def check_valid(result: Result, at: str) -> None:
    """Raise the INVALID line (a failed world: 4) for the first sample of ``result`` whose
    results were wrong."""
    from ..reading import verdict_text as vt

    for s in result.samples:
        if not s.valid:
            ranks = s.info.get("invalid_ranks") or []
            raise RankFailure(vt.invalid_sample(s, at=at), rank=ranks[0] if ranks else None,
                              case=s.case.name, kind="invalid")


def _suite_world(cfg: suite.SuiteConfig, world_size: int, sizes: Sequence[int], timing: str,
                 rep: OverheadReport, at: str = "", benchmark: str = "allreduce",
                 root: int = 0) -> dict[int, float]:
    cases = allreduce_cases(["mpi"], [world_size], list(sizes), root=root, benchmark=benchmark)
    options = {**cfg.options, "copy_bw": True, "host_timing": timing}
    outcome = suite.run_one(suite.plan(cases, options)[0], cfg)
    if outcome.failure is not None:
        raise outcome.failure
    if outcome.skipped:
        raise LaunchError(f"the suite's mpi loop cannot run {benchmark} here: {outcome.skipped}")
    result = outcome.result
    check_valid(result, at)
    rep.world_start_s = rep.world_start_s or result.world_start_s
    rep.host_copy_GBps = rep.host_copy_GBps or result.extra.get("host_copy_GBps")
    if timing == "auto":
        fell_back = [s for s in result.samples if timing_of(s.info) != "native"]
        if fell_back:  # not the loop this column is about: say why instead of mislabelling it
            why = str(fell_back[0].info.get("timing_why") or "the native loop did not time it")
            rep.native_off[benchmark] = why
            rep.native_why = (why if tuple(rep.benchmarks) == BENCHMARKS
                              else "; ".join(f"{b}: {w}" for b, w in rep.native_off.items()))
            return {}
    return {s.case.size_bytes or 0: s.info["p50_us"] for s in result.samples}


def overhead(cfg: suite.SuiteConfig, world_size: int = 2, sizes: Sequence[int] = SIZES,
             rounds: int = ROUNDS, benchmarks: Sequence[str] = BENCHMARKS, root: int = 0) -> OverheadReport:
    benchmarks = tuple(benchmarks)
    for b in benchmarks:  # a bad name or root is bad input before any world starts
        allreduce_cases(["mpi"], [world_size], list(sizes), root=root, benchmark=b)
    rep = OverheadReport(world_size, rounds, benchmarks=benchmarks, root=root)
    cfg = replace(cfg, rounds=None)  # one world per loop per round: the rounds are ours
    got = {b: {loop: [{} for _ in range(rounds)] for loop in LOOPS} for b in benchmarks}
    with tempfile.TemporaryDirectory(prefix="perfsuite-c-") as tmp:
        binary = f"{tmp}/collective_loop"
        try:
            source = importlib.resources.files("perfsuite.launch.native").joinpath(C_SOURCE)
            with importlib.resources.as_file(source) as path:
                build_c_program(str(path), binary)
        except LaunchError as exc:
            rep.skipped = f"no C program: {exc}"
        for r in range(rounds):
            k = r % len(benchmarks)
            for b in benchmarks[k:] + benchmarks[:k]:  # rotated: no collective always runs first
                for loop in LOOPS[r % 3:] + LOOPS[:r % 3]:  # rotated: no loop always runs first
                    if loop == "c":
                        if not rep.skipped:
                            out = run_program([binary, *c_args(b, root, sizes, cfg.options)], world_size,
                                              cfg.launch, cfg.timeout)
                            got[b]["c"][r] = _rows(out, b, world_size)
                    elif loop == "native" and b in rep.native_off:
                        continue
                    else:
                        got[b][loop][r] = _suite_world(cfg, world_size, sizes,
                                                       "auto" if loop == "native" else "python", rep,
                                                       f"round {r + 1}, the {loop} loop's world", b, root)
    for b in benchmarks:
        coll = collectives.get(b)
        for size in sizes:
            rep.rows.append({"benchmark": b, **_row(got[b], size, coll.sizes(size, "float32", world_size)
                                                    ["size_bytes"] * coll.busbw_factor(world_size))})
    return rep


def _row(got: dict[str, list[dict[int, float]]], size: int, bus_bytes: float) -> dict[str, Any]:
    """One size's row from every round's p50 per loop; ``bus_bytes``: the size column x busbw factor."""
    p50 = {loop: statistics.median(v[size] for v in got[loop] if size in v)
           for loop in LOOPS if any(size in v for v in got[loop])}
    spread = {loop: (min(v[size] for v in got[loop] if size in v),
                     max(v[size] for v in got[loop] if size in v)) for loop in p50}
    busbw = {loop: bus_bytes / (t * 1e-6) / 1e9 if t > 0 else 0.0 for loop, t in p50.items()}
    # Against C within each round: the machine's speed moves between rounds (2-4x here
    # between spells), far more than the loops differ, so only same-round pairs compare.
    pairs = {loop: [(v[size], c[size]) for v, c in zip(got[loop], got["c"]) if size in v and size in c]
             for loop in ("native", "python")}
    delta = {k: statistics.median(a - c for a, c in p) for k, p in pairs.items() if p}
    ratio = {k: statistics.median(a / c for a, c in p) for k, p in pairs.items() if p and all(c > 0 for _, c in p)}
    return {"size_bytes": size, "p50_us": p50, "range_us": spread, "busbw_GBps": busbw,
            "delta_us": delta, "ratio": ratio}


# --- a framework's own loop as the yardstick ----------------------------------------------------

#: Transports held to a plain loop of their framework's own call (kernels/plain/), with the
#: program that runs the loop; the harness may add TARGET_PLAIN_RATIO to it.
PLAIN_LOOPS = {"torch-gloo": ("perfsuite.kernels.plain.torch_allreduce", "gloo")}
TARGET_PLAIN_RATIO = 1.05
PLAIN_TARGET_SIZES = (4, 1 << 20)


@dataclass
class PlainOverheadReport:
    """The harness's loop of ``transport`` against a plain loop of the framework's own call of
    each collective (allreduce in place, as torch's is called; broadcast on its one buffer; the
    others out of place), float32, same counts. Each row names its collective (``benchmark``)."""

    transport: str
    world_size: int
    rounds: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    world_start_s: float | None = None

    def targets(self) -> list[tuple[str, float | None, bool]]:
        out = []
        several = len({r.get("benchmark") for r in self.rows}) > 1
        for r in self.rows:
            if r["size_bytes"] in PLAIN_TARGET_SIZES:
                ratio = r["ratio"]
                name = f"{r['benchmark']} " if several else ""
                out.append((f"{name}{r['size_bytes']} B harness / plain <= {TARGET_PLAIN_RATIO}", ratio,
                            ratio is not None and ratio <= TARGET_PLAIN_RATIO))
        return out

    def missed(self) -> list[str]:
        return [what for what, _value, met in self.targets() if not met]


def plain_overhead(cfg: suite.SuiteConfig, transport: str, world_size: int = 2,
                   sizes: Sequence[int] = PLAIN_TARGET_SIZES, rounds: int = ROUNDS,
                   benchmarks: Sequence[str] = ("allreduce",)) -> PlainOverheadReport:
    """``rounds`` rounds of ``kernels/yardstick`` worlds, one per collective in ``benchmarks``
    (their order turned each round): in each, short blocks of the harness's loop and of the
    plain loop alternate. Per collective and size: the median over every paired call (all
    worlds) of harness - plain, as a fraction of the plain loop's p50 (the ratio the target
    judges), the same ratio per world (its spread), and the median p50 of each loop."""
    rep = PlainOverheadReport(transport, world_size, rounds)
    cfg = replace(cfg, rounds=None)
    options = {**cfg.options, "copy_bw": False}
    worlds = {name: replace(suite.plan(allreduce_cases([transport], [world_size], list(sizes), benchmark=name),
                                       options)[0], kernel="perfsuite.kernels.collectives.yardstick")
              for name in benchmarks}
    got: dict[str, list[dict[int, dict]]] = {name: [] for name in benchmarks}
    for r in range(rounds):
        order = list(benchmarks)[r % len(benchmarks):] + list(benchmarks)[:r % len(benchmarks)]
        for name in order:
            outcome = suite.run_one(worlds[name], cfg)
            if outcome.failure is not None:
                raise outcome.failure
            if outcome.skipped:
                raise LaunchError(f"{transport} cannot run {name} here: {outcome.skipped}")
            check_valid(outcome.result, f"round {r + 1}")
            rep.world_start_s = rep.world_start_s or outcome.result.world_start_s
            got[name].append({s.case.size_bytes or 0: s.info for s in outcome.result.samples})
    for name in benchmarks:
        for size in sizes:
            rep.rows.append({**plain_row(size, [g[size] for g in got[name] if size in g]), "benchmark": name})
    return rep


def plain_row(size: int, infos: Sequence[dict]) -> dict[str, Any]:
    """One size's row from its worlds' estimates (``kernels/yardstick.paired_estimate``): the
    median over every paired call of all worlds, over the median plain p50 (the ratio the target
    judges), the per-world ratios (its spread), and each loop's p50 and range. Pure."""
    diffs = [d for i in infos for d in i["diffs_us"]]
    plain_p50 = statistics.median(i["plain_p50_us"] for i in infos) if infos else 0.0
    diff = statistics.median(diffs) if diffs else None
    world = [i["ratio"] for i in infos if i["ratio"] is not None]
    return {"size_bytes": size,
            "p50_us": {k: statistics.median(i[f"{k}_p50_us"] for i in infos) for k in ("plain", "harness") if infos},
            "range_us": {k: (min(i[f"{k}_p50_us"] for i in infos), max(i[f"{k}_p50_us"] for i in infos))
                         for k in ("plain", "harness") if infos},
            "diff_us": diff, "ratio": 1.0 + diff / plain_p50 if diff is not None and plain_p50 > 0 else None,
            "ratio_range": (min(world), max(world)) if world else None, "world_ratios": world, "pairs": len(diffs)}
