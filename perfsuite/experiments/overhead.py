"""What the Python harness adds: perfsuite's ``mpi`` allreduce loop against the same
barrier-separated ``MPI_Allreduce`` loop in C (built with the MPI's own ``mpicc``) and as a plain
mpi4py script, over the same sizes and iteration counts in one run, so the differences are the
harness's cost and the binding's."""
from __future__ import annotations

import importlib.resources
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import suite
from ..bench.allreduce import allreduce_cases
from ..errors import LaunchError
from ..kernels.allreduce import busbw_factor, default_iters
from ..launch.world import build_c_program, run_program

SIZES = (4, 1 << 20, 64 << 20)


@dataclass
class OverheadReport:
    world_size: int
    rows: list[dict[str, Any]] = field(default_factory=list)  # size, C and suite p50, busbw ratio
    skipped: str | None = None  # why the C loop could not run
    world_start_s: float | None = None
    host_copy_GBps: float | None = None
    busbw_64MiB_GBps: float | None = None


def _loop_args(sizes: Sequence[int], options: dict) -> list[str]:
    """SIZE:ITERS:WARMUP per size, the counts the suite's kernel uses."""
    args = []
    for s in sizes:
        iters, warmup = default_iters(s)
        args.append(f"{s}:{int(options.get('iters') or iters)}:{int(options.get('warmup', warmup))}")
    return args


def _rows(out: str) -> dict[int, dict]:
    return {d["size_bytes"]: d for d in (json.loads(x) for x in out.splitlines() if x.startswith("{"))}


def overhead(cfg: suite.SuiteConfig, world_size: int = 2, sizes: Sequence[int] = SIZES) -> OverheadReport:
    rep = OverheadReport(world_size)
    cases = allreduce_cases(["mpi"], [world_size], list(sizes))
    outcome = suite.run_one(suite.plan(cases, {**cfg.options, "copy_bw": True})[0], cfg)
    if outcome.failure is not None:
        raise outcome.failure
    if outcome.skipped:
        raise LaunchError(f"the suite's mpi loop cannot run here: {outcome.skipped}")
    result = outcome.result
    rep.world_start_s, rep.host_copy_GBps = result.world_start_s, result.extra.get("host_copy_GBps")
    args = _loop_args(sizes, cfg.options)
    loops = importlib.resources.files("perfsuite.kernels")
    with tempfile.TemporaryDirectory(prefix="perfsuite-c-") as tmp:
        binary = f"{tmp}/allreduce_loop"
        try:
            build_c_program(str(loops.joinpath("c/allreduce_loop.c")), binary)
        except LaunchError as exc:
            rep.skipped = f"no C reference: {exc}"
        c_rows = {} if rep.skipped else _rows(run_program([binary, *args], world_size, cfg.launch, cfg.timeout))
        # The same loop in plain Python: what the mpi4py binding costs, apart from the harness.
        py_rows = _rows(run_program([cfg.launch.python, str(loops.joinpath("c/plain_loop.py")), *args],
                                    world_size, cfg.launch, cfg.timeout))
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
                       c_busbw_GBps=c_busbw,
                       busbw_ratio=sample.info["busbw_GBps"] / c_busbw if c_busbw else float("nan"))
        rep.rows.append(row)
        if size == 64 << 20:
            rep.busbw_64MiB_GBps = sample.info["busbw_GBps"]
    return rep
