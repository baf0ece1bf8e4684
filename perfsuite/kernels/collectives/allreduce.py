"""The collective microbenchmark (allreduce first, and every collective of ``perfsuite.collectives``)
with OSU (OMB) and nccl-tests semantics. A case's collective is its benchmark's name; its
record says the buffers' counts, the busbw factor and the exact values; the transport makes the
call it is bound to (``transports.base.Call``).

Per size: warm-up, then ``iters`` barrier-separated calls timed on every rank. Reported:
- ``latency_us`` (the table's time), ``p50_us`` and ``p99_us``: per call, the slowest rank's
  time (the time the world spent), p50 and p99 over calls; ``latency_us`` is the p50, the
  judged statistic, and the one algbw and busbw come from (as nccl-tests' time, algbw and busbw
  are one statistic per size);
- algbw = bytes / t and busbw = algbw x the collective's factor with t that p50 (nccl-tests'
  factors: allreduce 2(n-1)/n, all_gather, reduce_scatter and alltoall (n-1)/n, broadcast and
  reduce 1); bytes is nccl-tests' size, the larger of one rank's send and recv buffers (alltoallv:
  of the rank with the most send or receive bytes, as nccl-tests' alltoallv);
- ``omb_avg_us``/``omb_min_us``/``omb_max_us``: avg/min/max across ranks of each rank's mean
  time (OMB's Avg/Min/Max Latency). A mean keeps the slow calls a p50 drops, so ``omb_min_us``
  can lie above ``latency_us``.
Every size is validated against the exact expected values after the timed loop; ``invalid_ranks``
lists the ranks whose own result was wrong ([] when every rank's was right; absent when the
check is off).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from ... import collectives
from ...collectives import as_type
from ...records import memory
from ...records.model import Case, Metric, Sample, time_sliced_label
from ...transports import load as load_transport
from ...transports.base import Call
from ...transports.hosts import node_name
from .. import ranks
from .buffers import Buffers, bind_case, case_matrix, copies_of, transport_set
from ..context import RankContext
from ..contention import Probe, world_view
from ..memory import Watch
from ..faults import slowdown_fraction, spin
from ..training.loop import quiet_barrier

T = TypeVar("T")

SMALL_MESSAGE = 8192  # OMB's large-message threshold: fewer iterations above it
SMALL_ITERS, SMALL_WARMUP = 1000, 100
BYTE_BUDGET = 256 << 20  # per size, above the threshold: iterations = budget / size
MIN_ITERS, MIN_WARMUP = 10, 2
DEVICE_SAMPLES = 10  # batches per size for device transports' batch timing
# Calls in one batch at least: a batch of one call times the host's launch of it as well (with
# the device idle meanwhile), so large sizes read slower than the device is; nccl-tests times
# batches of 20 (docs/measurements.md, "First GPU contact", compares one-call and 10-call batches
# with nccl-tests).
MIN_BATCH_CALLS = 10
#: Under the time budget (``max_time``) and no ``--warmup``: warm-up calls until this share of
#: the budget is spent, at most the by-size count (as ``kernels/user/step.py``'s warm-up).
WARMUP_SHARE = 0.1


def default_iters(size: int, batched: bool = False) -> tuple[int, int]:
    """(iterations, warm-up) by message size, OMB-like: many for small, a byte budget for large;
    ``batched`` (device batch timing) keeps ``MIN_BATCH_CALLS`` calls in each of the samples."""
    if size <= SMALL_MESSAGE:
        return SMALL_ITERS, SMALL_WARMUP
    iters = max(MIN_ITERS, min(SMALL_ITERS, BYTE_BUDGET // size))
    if batched:
        iters = max(iters, DEVICE_SAMPLES * MIN_BATCH_CALLS)
    return iters, max(MIN_WARMUP, iters // 10)


def budget_iters(max_time: float, per_call_s: float | None, default: int,
                 floor: int = MIN_ITERS) -> tuple[int, str]:
    """Timed calls for one size under a time budget (pytest-benchmark's ``max_time``, seconds
    of timed calls per size; OSU and nccl-tests bound a size's iterations so): as many as
    ``max_time`` holds at ``per_call_s`` each, never more than the by-size ``default`` (a fast
    transport keeps OMB's counts) nor fewer than ``floor`` (a p99 needs calls). Returns the
    count and what decided it: "max_time" where the budget cut it, else "default". Pure: every
    rank calls it with the same agreed estimate, so every rank makes the same calls."""
    if per_call_s is None or not per_call_s > 0 or default <= floor:
        return default, "default"
    fits = int(max_time / per_call_s)
    return (default, "default") if fits >= default else (max(floor, fits), "max_time")


def iters_floor(transport) -> int:
    """The fewest timed calls the budget may leave: a device batch keeps ``MIN_BATCH_CALLS``
    calls in each of its ``DEVICE_SAMPLES`` samples."""
    return DEVICE_SAMPLES * MIN_BATCH_CALLS if batched(transport) else MIN_ITERS


def warm_up(transport, send, recv, calls: int, agree: Callable[[float], float] | None = None,
            max_time: float | None = None, barrier: Callable[[], None] | None = None,
            clock: Callable[[], float] = time.perf_counter) -> tuple[int, float | None]:
    """The warm-up calls, and the time per call they measure for the budget.

    Each call after ``barrier`` where given, as in the timed loop (OSU's warm-up is its timed
    loop, untimed): on a small machine a rank spinning in the barrier takes the cores a
    framework's threads would use, so calls issued back to back would promise a loop faster
    than it is. Without ``agree`` (``--iters`` given) nothing is measured. With it, the calls
    are timed in blocks and the estimate is their mean time after the first (which pays a new
    size's setup: a TensorFlow trace, a gloo buffer), the slowest rank's (``agree``: the max
    over ranks), so every rank picks the same calls. With ``max_time`` (no ``--warmup``), the
    calls stop once ``WARMUP_SHARE`` of it is spent, as estimated after ``MIN_WARMUP`` calls.
    Returns (calls made, seconds per call or None)."""
    def block(n: int) -> float:
        t0 = clock()
        for _ in range(n):
            if barrier is not None:
                barrier()
            transport.call(send, recv)
        transport.sync()
        return clock() - t0

    if agree is None or calls == 0:
        block(calls)
        return calls, None
    first = block(1)
    if calls == 1:
        return 1, agree(first)
    head = min(calls, MIN_WARMUP) - 1
    spent = block(head)
    estimate = agree(spent / head)
    if max_time is not None and estimate > 0:
        calls = min(calls, 1 + head + int(WARMUP_SHARE * max_time / estimate))
    if calls > 1 + head:
        spent += block(calls - 1 - head)
        estimate = agree(spent / (calls - 1))
    return calls, estimate


def slowest_rank(comm) -> Callable[[float], float]:
    """The largest of every rank's value (a collective: every rank calls it together)."""
    from mpi4py import MPI

    return lambda x: float(comm.allreduce(float(x), op=MPI.MAX))


def batched(transport) -> bool:
    """Does this transport time its calls in batches (CUDA events around many calls)?"""
    return transport.timing not in ("per-call", "python", "native")


def busbw_factor(world_size: int) -> float:
    """nccl-tests' allreduce factor 2(n-1)/n: 0 for one rank, whose call moves nothing over any
    bus (an in-place ring of one rank returns at once, which algbw would show as a huge rate)."""
    return collectives.get("allreduce").busbw_factor(world_size)


def pattern(rank: int, count: int, dtype: str) -> np.ndarray:
    """What rank ``rank`` sends in an allreduce (``collectives.rank_values``), as ``dtype``."""
    return as_type(collectives.rank_values(rank, count, dtype=dtype), dtype)


def zero_sum_pattern(rank: int, world_size: int, count: int, dtype: str) -> np.ndarray:
    """Small integers that sum to exactly 0 over the ranks (``collectives.zero_sum``)."""
    return as_type(collectives.zero_sum(rank, world_size, count, dtype), dtype)


def calls_per_sample(transport, iters: int) -> int:
    """Calls timed together per sample: 1 for host transports and ``per-call`` timing, else
    the timed calls cut into about ``DEVICE_SAMPLES`` batches (a batch is what nccl-tests times;
    several give the verdicts a spread)."""
    return max(1, iters // DEVICE_SAMPLES) if batched(transport) else 1


def expected_sum(world_size: int, count: int, dtype: str) -> np.ndarray:
    return as_type(collectives.reduced(world_size, count, dtype=dtype), dtype)


def summarize(case: Case, times: np.ndarray, valid: bool, iters: int, warmup: int,
              inplace: bool, copy_GBps: float | None = None,
              machine: dict | None = None, nodes: list[str] | None = None,
              reordered: np.ndarray | None = None, call: Call | None = None) -> Sample:
    """``times`` is iterations x ranks, seconds. Pure, so it is unit-tested without MPI.

    ``copy_GBps``: the buffers' own memory-copy bandwidth (device transports measure it), so
    busbw is also stated as a fraction of what the memory itself can move. ``machine``: the
    world's contention figures over the timed loop (``contention.world_view``). ``nodes``: each
    rank's node, for the straggler rule (``stragglers``): a rank's own time from its barrier
    exit to the end of its call is when it arrives at the next barrier; ``reordered``: calls x
    ranks timed over the second rank order, where the first showed a late rank.
    """
    n = times.shape[1]
    per_rank_mean = times.mean(axis=0)
    world_time = times.max(axis=1)  # per iteration, the slowest rank
    p50 = float(np.percentile(world_time, 50))
    p99 = float(np.percentile(world_time, 99))
    call = call or Call(dtype=case.dtype)
    coll = collectives.get(call.collective)
    sized = coll.sizes(case.size_bytes or 0, case.dtype, n, call.splits)
    size = sized["size_bytes"]
    factor = coll.busbw_factor(n)
    algbw = size / p50 / 1e9 if p50 > 0 else 0.0
    info = {
        "transport": case.transport, "world_size": n, **sized, "dtype": case.dtype,
        "op": call.op if coll.reduces else "none", **({"root": call.root} if coll.rooted else {}),
        **({"splits": collectives.splits_of(case.variant)} if coll.splits is not None else {}),
        "inplace": inplace, "iters": iters, "warmup": warmup,
        "latency_us": p50 * 1e6, "p50_us": p50 * 1e6, "p99_us": p99 * 1e6,
        "omb_avg_us": float(per_rank_mean.mean() * 1e6),
        "omb_min_us": float(per_rank_mean.min() * 1e6),
        "omb_max_us": float(per_rank_mean.max() * 1e6),
        "algbw_GBps": algbw, "busbw_GBps": algbw * factor, "valid": bool(valid),
        **(machine or {}),
    }
    if n > 1:  # for the straggler rule, judged on the analysing side (stragglers.annotate)
        info.update(nodes=list(nodes or [f"rank{r}" for r in range(n)]), **ranks.kept(times, "arrival"))
        if reordered is not None:
            info["reordered_blocks"] = [[round(float(v), 5) for v in row] for row in ranks.block_ratios(reordered)]
    if copy_GBps and n > 1:
        info["copy_GBps"] = copy_GBps
        # Both sides count the bytes of one buffer once: copy_GBps is bytes copied per second
        # (not read + written, STREAM's convention), busbw is nccl-tests' bus bytes per second.
        info["busbw_of_copy"] = algbw * factor / copy_GBps
    metrics = {
        "latency_us": Metric("latency_us", p50 * 1e6, "us", False,
                             tuple(float(x) for x in world_time * 1e6)),
    }
    if n > 1:  # one rank has no bus: busbw is 0 in the table and no metric to compare or record
        with np.errstate(divide="ignore"):
            busbw_samples = np.where(world_time > 0, size * factor / world_time / 1e9, 0.0)
        metrics["busbw_GBps"] = Metric("busbw_GBps", algbw * factor, "GB/s", True,
                                       tuple(float(x) for x in busbw_samples))
    return Sample(case, metrics, bool(valid), tuple(float(x) for x in world_time), info)


#: Test-only, as ``faults.ENV``: the suite's own tests set it (tests/conftest.py), so the worlds
#: of the many tests that never read a copy bandwidth skip its 64 MiB copies; a world whose
#: options name ``copy_bw`` follows them.
NO_COPY_BW_ENV = "PERFSUITE_TEST_NO_COPY_BW"


def copy_wanted(options: dict) -> bool:
    """Does this world measure the copy bandwidths (the busbw ceilings)? Its option ``copy_bw``
    (default on), unless the tests' switch is set and the option is not."""
    if options.get("copy_bw") is not None:
        return bool(options["copy_bw"])
    return os.environ.get(NO_COPY_BW_ENV) != "1"


def copy_bandwidth(nbytes: int = 64 << 20, repeats: int = 10) -> float:
    """This host's memory-copy bandwidth in GB/s (bytes copied per second, median of repeats)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        rates.append(nbytes / (time.perf_counter() - t0) / 1e9)
    return float(np.median(rates))


def injected_turns(transport, send, recv, spinner, barrier=lambda: None, case=None,
                   world_max=lambda x: x) -> int:
    """Spin turns that make this rank's host call take the injected fraction longer, or -1
    for device buffers (timed by CUDA events: those spin after the call, ``Spin.add``).

    Calibrated on what is reported (the median over calls of the slowest rank's time, via
    ``world_max``) on the path the timed loop takes (barrier, call, inline turns). A first
    guess from the per-turn cost, then corrected three times on the ratio spun / plain of
    blocks run back to back (plain, spun, spun, plain), so neither the per-turn cost nor the
    ranks' interplay at the barrier nor a drift of the machine decides the result alone. Every
    rank ends with the same turns (the slowest rank's count).
    """
    if not transport.host_buffers:
        return -1
    # Medians of enough calls that one slow call cannot steer the turns: 201 small calls (~0.3
    # ms; a turn is ~1% of a 4 B call, so the ratio must be known to well under that), 31 up to
    # 1 MiB, 5 above (a 16 MiB call takes ~15 ms).
    size = (case.size_bytes or 0) if case is not None else 0
    calls = 201 if size <= SMALL_MESSAGE else (31 if size <= 1 << 20 else 5)

    def median(turns: int) -> float:
        times = timed_loop(transport, send, recv, calls, barrier, None, case,
                           spinner if turns >= 0 else None, turns)
        return float(np.median(world_max(times)))

    def agreed(n: int) -> int:
        return int(world_max(np.array([float(max(n, 0))]))[0])

    turns = agreed(spinner.turns(median(-1)))
    for _ in range(3):
        p1, s1, s2, p2 = median(-1), median(turns), median(turns), median(-1)
        added = (s1 + s2) / (p1 + p2) - 1.0
        if turns > 0 and added > 0:
            turns = agreed(int(turns * spinner.fraction / added + 0.5))
    return turns


def world_max(comm):
    """Per call, the slowest rank's time: what the kernel reports (elementwise MAX over ranks)."""
    from mpi4py import MPI

    def slowest(times: np.ndarray) -> np.ndarray:
        out = np.empty_like(times)
        comm.Allreduce(times, out, op=MPI.MAX)
        return out

    return slowest


def timed_loop(transport, send, recv, iters: int, barrier, fault, case: Case,
               spinner=None, turns: int = -1, batch: int = 1) -> np.ndarray:
    """``iters`` calls timed on this rank, in seconds per call: each call alone after a
    barrier, or with ``batch`` > 1, batches of calls issued back to back after a barrier (one
    value per batch: its mean). With ``spinner``, every call takes the injected fraction
    longer: ``turns`` inline turns inside the timed region for host calls timed one by one, a
    measured spin after the call (or batch) otherwise. A transport whose ``native`` loop fits
    the buffers runs the same loop in C (one Python call for all ``iters``); the fault switch
    then acts where the loop starts, as the Python loop's first iteration would."""
    native = transport.native
    if native is not None and batch == 1 and native.fits(recv):
        if fault is not None:
            fault("timed", case)
        return native.loop(send, recv, iters, turns)
    clock = time.perf_counter
    spin_range = range(max(turns, 0))
    counts = [min(batch, iters - i) for i in range(0, iters, batch)] if batch > 1 else [1] * iters
    times = np.empty(len(counts))
    for i, calls in enumerate(counts):
        barrier()
        if fault is not None:
            fault("timed", case)
        if turns >= 0 and calls == 1:
            t0 = clock()
            transport.call(send, recv)  # host buffers: done when the call returns
            for _ in spin_range:  # the injected slowdown, inline: a call would cost more
                pass
            times[i] = clock() - t0
        else:
            # The transport times its own calls: the host clock, or CUDA events on a device.
            dt = transport.time_one(send, recv) if batch == 1 else \
                transport.time_batch(send, recv, calls)
            times[i] = (dt + spinner.add(dt) if spinner else dt) / calls
    return times


#: The canary: a fixed piece of memory and compute work, the same in every world and every
#: version, timed between blocks of the measured loop (see docs/measurements.md for whether it
#: predicts a world's speed).
CANARY_BYTES, CANARY_REPEATS = 1 << 18, 20
CANARY_BLOCKS = 2  # the timed loop in 2 blocks: the canary before, between and after


def canary_us(repeats: int = CANARY_REPEATS) -> float:
    """Median microseconds of one canary piece on this rank."""
    src = np.arange(CANARY_BYTES // 8, dtype=np.float64)
    dst = np.empty_like(src)
    took = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        dst *= 1.0000001
        took.append(time.perf_counter() - t0)
    return float(np.median(took) * 1e6)


def timed_blocks(transport, send, recv, iters: int, barrier, fault, case: Case, spinner,
                 turns: int, blocks: int, probe: Probe, batch: int = 1) -> tuple[np.ndarray, float]:
    """The timed loop in ``blocks`` pieces with the canary before each piece and after the
    last: (times, this rank's median canary in microseconds). ``probe`` is paused while the
    canary runs: contention is that of the timed loop (at 4 B the canaries take longer than
    the loop itself)."""
    parts, canary = [], []
    for b in range(blocks):
        probe.pause()
        canary.append(canary_us())
        probe.start()
        n = iters // blocks + (1 if b < iters % blocks else 0)
        parts.append(timed_loop(transport, send, recv, n, barrier, fault, case, spinner, turns, batch))
    probe.pause()
    canary.append(canary_us())
    return np.concatenate(parts), float(np.median(canary))


def run(ctx: RankContext) -> dict:
    comm = ctx.comm
    transport = load_transport(ctx.transport, transport_set(ctx))(comm, ctx.options)
    sliced = time_sliced_label(transport.describe())  # ranks that share one GPU take turns on it
    inplace = bool(ctx.options.get("inplace", False))
    validate = bool(ctx.options.get("validate", True))
    slow = slowdown_fraction()
    spinner = spin(slow, transport.native)
    barrier = comm.Barrier
    # Skip the call in the timed loop when no fault is set.
    fault = ctx.fault if getattr(ctx.fault, "active", True) else None
    # The canary runs between blocks of every size's loop (0 turns it off): verdicts compare
    # rounds in one machine mode only, and the canary is what tells the modes apart.
    canary_blocks = int(ctx.options.get("canary", CANARY_BLOCKS))
    nodes = comm.gather(node_name(), root=0)
    second = SecondOrder(comm, transport)
    # Device transports measure their memory's copy bandwidth (D2D) once, before the cases, so
    # every sample can state busbw as a fraction of it (rank 0's GPU; the others wait, quietly). Host
    # transports answer None; their ceiling is the host copy bandwidth measured after the cases.
    copy_bw = copy_wanted(ctx.options)
    copy_gbps = root_alone(comm, ctx.is_root, transport.copy_bandwidth) if copy_bw else None
    call = None
    coll = collectives.get(transport_set(ctx))
    largest = max((coll.sizes(c.size_bytes or 0, c.dtype, ctx.world_size, case_matrix(coll, c, ctx.world_size))["size_bytes"]
                   for c in ctx.cases), default=0)
    # --iters is exact; else each size's iterations come from the time budget (budget_iters): a
    # fast transport keeps OMB's counts, a slow one is cut (docs/measurements.md, "Default run").
    given_iters = ctx.options.get("iters")
    max_time = None if given_iters else float(ctx.options.get("max_time") or collectives.SIZE_MAX_TIME_S)
    agree = None if given_iters else slowest_rank(comm)
    given_warmup = ctx.options.get("warmup")
    for case in ctx.cases:
        call = bind_case(transport, coll, case, inplace, ctx.world_size)
        iters, warmup = default_iters(case.size_bytes or 0, batched(transport))
        iters = int(given_iters or iters)
        warmup = int(given_warmup if given_warmup is not None else warmup)
        # The budget never takes a batched transport below iters_floor's 100 calls, so its
        # batches hold several calls and rotate through as many copies as the default's would.
        bufs = Buffers(transport, coll, call, case, ctx.rank, ctx.world_size,
                       copies_of(transport, coll, case, ctx.world_size, largest,
                                 calls_per_sample(transport, iters)))
        transport.rotate(bufs.views, bufs.stride_bytes)
        send, recv = bufs.send, bufs.recv
        # What the timed calls leave in recv is checked: out of place every call writes the
        # same result; in place, inputs whose result every call leaves unchanged (allreduce: a
        # zero sum), or, where there are none, only the fresh call below.
        bufs.inputs(stable=True)
        warmup, per_call = warm_up(transport, send, recv, warmup, agree,
                                   max_time if given_warmup is None else None,
                                   None if batched(transport) else barrier)
        iters, iters_by = (iters, "iters") if given_iters else \
            budget_iters(max_time, per_call, iters, iters_floor(transport))
        batch = calls_per_sample(transport, iters)
        turns = (injected_turns(transport, send, recv, spinner, barrier, case, world_max(comm))
                 if spinner else -1)
        probe = Probe(scope=transport.contention_scope)
        # A device transport's buffers live in its framework's allocator: torch's, else CuPy's pool.
        watch = Watch("cpu" if transport.host_buffers else "cuda:0",
                      "torch" if ctx.transport.startswith("torch-") else "cupy").start()
        if canary_blocks:
            times, canary = timed_blocks(transport, send, recv, iters, barrier, fault, case,
                                         spinner, turns, canary_blocks, probe, batch)
        else:
            times, canary = timed_loop(transport, send, recv, iters, barrier, fault, case,
                                       spinner, turns, batch), None
        machine = probe.stop()
        figures = watch.stop()
        if canary is not None:
            machine["canary_us"] = canary
        checks = {}
        if validate:
            transport.sync()
            corrupt = getattr(ctx.fault, "corrupts", lambda c: False)(case)
            checks["timed"] = bufs.check(timed=True, corrupt=corrupt)
            # And one fresh call from the usual values: a transport that only ever wrote
            # zeros would pass the in-place check above.
            bufs.inputs()
            transport.call(send, recv)
            transport.sync()
            checks["fresh"] = bufs.check(timed=False, corrupt=corrupt)
            checks = {k: v for k, v in checks.items() if v is not None}
        # Each rank's own checks go to rank 0 with its times, so the sample names the ranks
        # whose result was wrong, not only that one was.
        gathered = comm.gather((times, machine, checks, figures), root=0)
        reordered = None
        if second.wanted(gathered, batch):
            reordered = comm.gather(second.time(send, recv, iters, case), root=0)
        if ctx.is_root:
            checked = [all(g[2].get(k, True) for g in gathered) for k in ("timed", "fresh")]
            ok = all(checked)
            timing = {"timing": loop_timing(transport, recv),
                      "clock": transport.clock, "calls_per_sample": batch, "iters_by": iters_by}
            if max_time is not None:  # what the budget read: seconds per size, the warm-up's call
                timing["max_time"] = max_time
                if per_call is not None:
                    timing["warmup_call_us"] = per_call * 1e6
            if timing["timing"] in ("python", "batch") and transport.timing_why:
                timing["timing_why"] = transport.timing_why
            if validate:
                timing.update(valid_timed=bool(checked[0]), valid_fresh=bool(checked[1]),
                              invalid_ranks=[r for r, g in enumerate(gathered) if not all(g[2].values())])
                if not any("timed" in g[2] for g in gathered):
                    timing["valid_timed"] = None  # in place, only the fresh call is checked
            if sliced:
                timing["time_sliced"] = sliced
            timing.update(buffer_bytes=bufs.nbytes, buffer_where="host" if transport.host_buffers else "device")
            if len(bufs.views) > 1:  # nccl-tests' rotation through copies of the buffers
                timing["buffer_copies"] = len(bufs.views)
            if reordered is not None:
                timing["reordered_calls"] = len(reordered[0])
            sample = summarize(case, np.stack([g[0] for g in gathered], axis=1), ok, iters, warmup,
                               call.inplace, copy_GBps=copy_gbps,
                               machine={**world_view([g[1] for g in gathered]), **timing}, nodes=nodes,
                               reordered=None if reordered is None else np.stack(reordered, axis=1),
                               call=call)
            mem_metrics, mem_info = memory.summarize([g[3] for g in gathered])
            sample.metrics.update(mem_metrics)
            sample.info.update(mem_info)
            ctx.emit(sample.to_dict())
        transport.rotate([], 0)
        del send, recv, bufs
    extra = {"transport_facts": transport.describe(), "inplace": bool(call.inplace) if call else inplace,
             "slowdown_injected": slow}
    if call is not None:
        extra["collective"] = call.collective
    if sliced:
        extra["time_sliced"] = sliced
    if copy_bw:
        host_copy = root_alone(comm, ctx.is_root, copy_bandwidth)
        if ctx.is_root:
            extra["host_copy_GBps"] = host_copy
    if copy_gbps is not None:
        extra["device_copy_GBps"] = copy_gbps
    comm.Barrier()
    second.close()
    transport.close()  # after the barrier: no rank is still inside a call
    return extra


#: Seconds between a waiting rank's polls while rank 0 works alone: short beside a copy of
#: tens of milliseconds, and a poll (a wake-up and one MPI_Test) takes microseconds of CPU.
ALONE_POLL_S = 0.001


def root_alone(comm, is_root: bool, work: Callable[[], T]) -> T | None:
    """``work()`` on rank 0 while the other ranks wait without spinning (None there): a
    blocking barrier busy-polls in MPI's progress loop, so with fewer cores than ranks the
    waiting ranks would take the core rank 0 times its copy on. Rank 0 joins the
    nonblocking barrier once its work is done; every rank leaves it together."""
    out = work() if is_root else None
    quiet_barrier(comm, ALONE_POLL_S)
    return out


class SecondOrder:
    """The straggler rule's second rank order (``ranks.reorder``): the transport made
    again over the world's ranks in that order, once a case's calls show a late rank (by its
    place in the collective, or a slow node: only the second order tells), then a loop of the
    same calls over it. Collective: rank 0 decides, every rank follows."""

    def __init__(self, comm, transport):
        self.comm, self.transport = comm, transport
        self.other = None

    def wanted(self, gathered: list | None, batch: int) -> bool:
        n = self.comm.Get_size()
        want = False
        if self.comm.Get_rank() == 0 and n >= 2 and batch == 1:
            want = ranks.wants_second_order(np.stack([g[0] for g in gathered], axis=1))
        want = bool(self.comm.bcast(want, root=0))
        if want and self.other is None:
            comm = self.comm.Split(0, ranks.reorder(n)[self.comm.Get_rank()])
            self.other = self.transport.reordered(comm) or False
            if not self.other:  # a transport made once per world: no second order
                comm.Free()
        if want and self.other:
            self.other.bind(self.transport.bound)
        return want and bool(self.other)

    def time(self, send, recv, iters: int, case: Case) -> np.ndarray:
        """This rank's times of the same calls over the second order (no fault, no slowdown)."""
        calls = min(iters, ranks.REORDERED_CALLS)
        for _ in range(max(MIN_WARMUP, calls // 10)):
            self.other.call(send, recv)
        return timed_loop(self.other, send, recv, calls, self.other.comm.Barrier, None, case)

    def close(self) -> None:
        if self.other:
            self.other.close()
            self.other.comm.Free()
        self.other = None


def loop_timing(transport, recv) -> str:
    """How this buffer's calls were timed: the transport's own timing, but "python" where its
    native loop cannot take the buffer (timed_loop falls back)."""
    timing, native = transport.timing, transport.native
    return "python" if timing == "native" and (native is None or not native.fits(recv)) else timing
