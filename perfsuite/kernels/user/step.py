"""The ranks' side of a user's own benchmark (``perfsuite.benchmark``, ``userbench``): find the
user's function, give it the rank's ``World``, and time its step as the built-in kernels time
theirs.

Per case: the function's first call (the setup, or the first step), warm-up steps, the
iteration count from the time budget (every rank agrees on it: the slowest rank's warm-up
time decides), then ``iters`` steps, each after a barrier, timed on every rank from its exit of
the barrier to the end of its own step (CUDA events on the rank's GPU with ``device="cuda"``),
in two blocks with the canary before, between and after. Rank 0 gathers the ranks' times: per
iteration the slowest rank is the world's step time (``step_us``, its median), and the ranks'
own times are kept for the straggler rule (``arrival``, with a second rank order as the
collectives have). A step that raises fails its world with the rank's message, like any
kernel; a check the step returns beside it, or the test fault ``corrupt``, makes the sample
invalid (exit 4).
"""
from __future__ import annotations

import importlib
import math
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...records import memory, userbench
from ...records.errors import ConfigError
from ...records.model import Case, Metric, Sample
from .. import contention, faults, ranks
from ..memory import Watch
from ..collectives.allreduce import canary_us
from ..context import whole_option

#: Warm-up when ``--warmup`` is not given: steps until this share of the time budget is spent,
#: at least one, at most WARMUP_MAX (the first call, the setup, is never counted).
WARMUP_SHARE = 0.1
WARMUP_MAX = 100
MAX_ITERS = 10_000  # OSU's count for its smallest messages
#: The env file of a commit's environment (launch.envs.STAMP): a file-declared benchmark is
#: read from that commit's tree, which the environment keeps beside it.
COMMIT_STAMP = "perfsuite-env.json"


@dataclass
class World:
    """What the user's function gets: this rank's view of its world."""

    comm: Any  # the world's mpi4py communicator (every transport)
    rank: int
    world_size: int
    transport: str
    device: str = "cpu"  # "cuda:N" with device="cuda" or on torch-nccl
    dist: Any = None  # torch.distributed, joined to the world's group, on a torch transport
    node: str = ""

    @property
    def is_root(self) -> bool:
        return self.rank == 0


def find(source: dict) -> Any:
    """The user's declared benchmark on this rank: its module by name where that imports (an
    installed package: a commit's environment holds its own version), else its file (a test
    module: from the commit's tree when this Python is a commit's environment)."""
    module, qualname = source["module"], source["qualname"]
    obj = None
    if module != "__main__":
        try:
            obj = importlib.import_module(module)
        except ImportError:
            obj = None
    if obj is None:
        path = source.get("file")
        if os.path.isfile(os.path.join(sys.prefix, COMMIT_STAMP)):
            # A commit's environment runs its commit's file, never the working tree's: an arm
            # that imported the other arm's code would measure nothing between them.
            path = os.path.join(sys.prefix, "src", source["relfile"]) if source.get("relfile") else None
            if not path or not os.path.isfile(path):
                raise ConfigError(f"user benchmark {source.get('name')!r}: this commit's tree ({sys.prefix}/src) "
                                  f"has no {source.get('relfile') or source.get('file')}; an arm runs its own "
                                  "commit's benchmark file")
        if not path or not os.path.isfile(path):
            raise ConfigError(f"user benchmark {source.get('name')!r}: module {module!r} does not import "
                              f"here and its file {path!r} is missing")
        obj = userbench.import_file(path, "perfsuite_user_main" if module == "__main__" else None)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def run(ctx) -> dict:
    source = ctx.options["user_benchmark"]
    declared = find(source)
    world = _world(ctx, declared)
    facts: dict[str, Any] = {"user_benchmark": f"{declared.module}.{declared.qualname}",
                             "device": world.device}
    if world.dist is not None:
        facts["torch_backend"] = world.transport.removeprefix("torch-")
    clock = _clock(world)
    spinner = faults.spin()  # PERFSUITE_INJECT_SLOWDOWN: the gate's own check, as in every kernel
    # --max-time given replaces the decorator's, as --world-sizes given replaces its world sizes
    budget_s = float(ctx.options.get("max_time") or declared.max_time_s)
    for case in ctx.cases:
        values = declared.values_of(case.variant)
        step, check = _step(declared, world, values)
        warmup, estimate = warm_up(ctx, step, clock, budget_s)
        iters = whole_option(ctx.options, "iters", None, 1, "iterations")
        if iters is None:
            iters = max(declared.min_iters, min(MAX_ITERS, math.ceil(budget_s / max(estimate, 1e-9))))
        probe = contention.Probe(scope="process")
        watch = Watch(world.device, _framework()).start()
        canaries, parts = [], []
        for n in (iters // 2, iters - iters // 2):
            probe.pause()
            canaries.append(canary_us())
            probe.start()
            parts.append(_timed(ctx, case, step, clock, n, spinner))
        probe.pause()
        canaries.append(canary_us())
        figures = watch.stop()
        mine = {**probe.stop(), "canary_us": float(np.median(canaries))}
        times = np.concatenate(parts)
        wrong = _checked(check, ctx, case, declared.qualname)
        gathered = ctx.comm.gather((times, mine, world.node, wrong, figures), root=0)
        reordered = _second_order(ctx, declared, world, values, clock, gathered, iters)
        if ctx.is_root:
            matrix = np.stack([g[0] for g in gathered], axis=1)  # iterations x ranks
            machine = contention.world_view([g[1] for g in gathered])
            invalid = {r: g[3] for r, g in enumerate(gathered) if g[3]}
            sample = summarize(case, values, matrix, warmup, machine, [g[2] for g in gathered],
                               clock="host" if world.device == "cpu" else "cuda-events", invalid=invalid,
                               reordered=None if reordered is None else np.stack(reordered, axis=1),
                               memory_figures=[g[4] for g in gathered])
            ctx.emit(sample.to_dict())
    if world.dist is not None:
        world.dist.destroy_process_group()
    return {"transport_facts": facts}


def _world(ctx, declared) -> World:
    """The rank's World: its GPU where the step runs on one, and the torch.distributed group
    of a torch transport (refused on every rank together where it cannot start)."""
    device, dist = "cpu", None
    if declared.device == "cuda" or ctx.transport == "torch-nccl":
        device = cuda_device(ctx)
    if ctx.transport.startswith("torch-"):
        from ...transports.torch.support import start_group

        dist, _ = start_group(ctx.comm, ctx.transport.removeprefix("torch-"),
                              device=None if device == "cpu" else _torch_device(device))
    return World(ctx.comm, ctx.rank, ctx.world_size, ctx.transport, device, dist, socket.gethostname())


def cuda_device(ctx) -> str:
    """This rank's GPU (the worker narrowed CUDA_VISIBLE_DEVICES to it), or the world's skip."""
    from ...transports.gpu import agree

    reason = None
    try:
        import torch

        if not torch.cuda.is_available():
            reason = "the step runs on a GPU (device='cuda') and torch sees no CUDA device here"
        else:
            torch.cuda.set_device(0)
    except ImportError:
        try:
            import cupy

            cupy.cuda.Device(0).use()
        except Exception as exc:  # noqa: BLE001 - no CUDA stack at all: the world's skip
            reason = f"the step runs on a GPU (device='cuda') and neither torch nor CuPy can use one ({exc})"
    agree(ctx.comm, reason)  # raises on every rank where one has a reason
    return "cuda:0"


def _framework() -> str:
    """Whose allocator holds a GPU step's memory: torch's where the step loaded torch, else CuPy's."""
    return "torch" if "torch" in sys.modules else "cupy" if "cupy" in sys.modules else ""


def _torch_device(device: str):
    import torch

    return torch.device(device)


def host_clock(step) -> float:
    """Seconds of one call of ``step`` on the host clock."""
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def _clock(world: World):
    """A function timing one call of ``step`` on this rank, in seconds: the host clock, or
    CUDA events around it on the rank's current stream."""
    if world.device == "cpu":
        return host_clock
    try:
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sync = torch.cuda.synchronize
    except ImportError:
        import cupy

        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        sync = cupy.cuda.Device().synchronize

    def device(step) -> float:
        sync()  # the step starts on an idle GPU: nothing queued before it is counted
        start.record()
        step()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) if hasattr(start, "elapsed_time") else cupy.cuda.get_elapsed_time(start, end)
        return ms / 1e3
    return device


def _step(declared, world: World, values: dict):
    """(the step to time, its check or None): what the function returned (a step, or a step
    and a check), or the function itself when it returned None (then this first call was the
    first warm-up step)."""
    made = declared.fn(world, **values)
    if made is None:
        return (lambda: declared.fn(world, **values)), None
    step, check = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if not callable(step) or not (check is None or callable(check)):
        raise TypeError(f"{declared.name}: {declared.qualname}(world, ...) returned {type(made).__name__}; "
                        "return the step to time (a function of no arguments), or (step, check), "
                        "or None when the function is itself the step")
    return step, check


def _checked(check, ctx, case: Case, owner: str = "the step") -> str | None:
    """Why this rank's result is wrong after the timed steps (the user's check returned False
    or raised AssertionError), or None; in words that name the user's own check (``owner``:
    the function that returned it), which is what the INVALID line quotes.
    ``PERFSUITE_TEST_FAULT=corrupt@R`` makes rank R's result wrong, so the suite's tests prove a
    wrong result fails the world."""
    if getattr(ctx.fault, "corrupts", lambda c: False)(case):
        return "injected corrupt result (PERFSUITE_TEST_FAULT)"
    if check is None:
        return None
    try:
        ok = check()
    except AssertionError as exc:
        return f"{owner}'s check failed: {exc}" if str(exc) else f"{owner}'s check failed"
    return None if ok is None or ok else f"{owner}'s check returned False"


def warm_up(ctx, step, clock, budget_s: float) -> tuple[int, float]:
    """Warm-up steps, each after a barrier: ``--warmup`` of them, else until WARMUP_SHARE of
    the budget is spent (at least one). Returns (steps, the slowest rank's median step time),
    the same on every rank, so every rank runs the same iterations."""
    from mpi4py import MPI

    given = whole_option(ctx.options, "warmup", None, 0, "warm-up iterations")
    took: list[float] = []
    spent = 0.0
    while True:
        if given is not None and len(took) >= given:
            break
        if given is None and took and (spent >= WARMUP_SHARE * budget_s or len(took) >= WARMUP_MAX):
            break
        ctx.comm.Barrier()
        dt = ctx.comm.allreduce(clock(step), op=MPI.MAX)
        took.append(dt)
        spent += dt
    if not took:  # --warmup 0: one untimed measurement still sizes the loop
        ctx.comm.Barrier()
        took.append(ctx.comm.allreduce(clock(step), op=MPI.MAX))
    return len(took), float(np.median(took))


def _second_order(ctx, declared, world: World, values: dict, clock, gathered, iters: int):
    """The straggler rule's second rank order (``ranks.reorder``), once the calls show a late
    rank: a step's collective makes a rank late by its place (a root finishes last), a slow
    node is late wherever it stands, and only a second order tells which. The user's function
    is set up again over the world's ranks in that order (its ``world.comm`` and ``world.rank``
    the reordered ones) and the same steps timed; rank 0's list of each rank's times, column
    by world rank, or None. Collective. A torch group keeps its ranks, so on a torch transport
    there is no second order and the rule names nobody."""
    n = ctx.world_size
    want = bool(ctx.is_root and n >= 2 and ranks.wants_second_order(np.stack([g[0] for g in gathered], axis=1)))
    want = bool(ctx.comm.bcast(want, root=0)) and world.dist is None
    if not want:
        return None
    comm = ctx.comm.Split(0, ranks.reorder(n)[ctx.rank])
    try:
        other = World(comm, comm.Get_rank(), n, world.transport, world.device, None, world.node)
        step, _ = _step(declared, other, values)
        calls = min(iters, ranks.REORDERED_CALLS)
        for _ in range(max(1, calls // 10)):
            comm.Barrier()
            clock(step)
        times = np.empty(calls)
        for i in range(calls):
            comm.Barrier()
            times[i] = clock(step)
    finally:
        comm.Free()
    return ctx.comm.gather(times, root=0)


def _timed(ctx, case: Case, step, clock, iters: int, spinner) -> np.ndarray:
    times = np.empty(iters)
    barrier = ctx.comm.Barrier
    for i in range(iters):
        barrier()
        ctx.fault("timed", case)
        dt = clock(step)
        times[i] = dt + spinner.add(dt) if spinner else dt
    return times


def summarize(case: Case, values: dict, times: np.ndarray, warmup: int, machine: dict,
              nodes: list[str], clock: str = "host", invalid: dict[int, str] | None = None,
              reordered: np.ndarray | None = None, memory_figures: list[dict] | None = None) -> Sample:
    """``times``: iterations x ranks, seconds; ``invalid``: rank -> why its result was wrong;
    ``reordered``: calls x ranks timed over the second order; ``memory_figures``: each rank's
    memory over the timed steps (``kernels.memory.Watch``). Pure, so it is unit-tested
    without MPI."""
    n = times.shape[1]
    world_time = times.max(axis=1)  # per iteration, the slowest rank
    p50 = float(np.percentile(world_time, 50))
    info = {"transport": case.transport, "world_size": n, "params": dict(values),
            "iters": int(times.shape[0]), "warmup": warmup, "p50_us": p50 * 1e6,
            "p99_us": float(np.percentile(world_time, 99)) * 1e6, "clock": clock,
            "rank_median_us": [float(np.median(times[:, r])) * 1e6 for r in range(n)],
            "rank_times_us": [[round(float(t) * 1e6, 3) for t in times[:, r]] for r in range(n)],
            **machine}
    if n > 1:  # a rank's own time to the end of its step: its arrival (stragglers)
        info.update(nodes=list(nodes), **ranks.kept(times, "arrival"))
        if reordered is not None:
            info["reordered_blocks"] = [[round(float(v), 5) for v in row] for row in ranks.block_ratios(reordered)]
    if invalid:
        info.update(invalid_ranks=sorted(invalid), invalid_reason=next(iter(invalid.values())))
    metric = Metric(userbench.METRIC, p50 * 1e6, "us", False, tuple(float(t) * 1e6 for t in world_time))
    mem_metrics, mem_info = memory.summarize(memory_figures or [])
    info.update(mem_info)
    return Sample(case, {userbench.METRIC: metric, **mem_metrics}, not invalid,
                  tuple(float(t) for t in world_time), info)
