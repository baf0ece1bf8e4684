"""The ranks' side of ``replay``: a job's captured window of collectives (``records/trace``),
issued again in order on this world's transport, as a step is timed (``kernels/user/step``).

Per case: every rank reads every rank's trace (each rank makes every sub-group, in one order),
prepares its own calls, warms up, then times ``iters`` iterations of its window, each after a
barrier: from the rank's exit of the barrier to the end of its last call (the host clock; on a
GPU after a device sync). Each call is timed too, so the window splits into kinds: time, share
and busbw per kind (nccl-tests' factor per call, over the call's own group). With
``replay_gaps`` the host time the job spent between two calls is spun before the second
(``recorded``, or ``scaled:F`` for F times it), so the calls overlap nothing they did not.

After the timed iterations one pass issues every call from the collectives' records' exact
values and checks each result on every rank: a wrong result makes the sample invalid (exit 4),
naming the first wrong call. The calls as issued (kind, dtype, sizes, group, splits, read from
what was handed to the library) are kept per rank as a digest, and listed in full for a test
that compares them with the capture.
"""
from __future__ import annotations

import hashlib
import time

import numpy as np

from ...records import trace as traces, userbench
from ...records.errors import ConfigError, TransportUnavailable
from ...records.model import Case
from ...transports.hosts import node_name
from .. import contention
from ..collectives.allreduce import canary_us
from ..context import whole_option
from ..faults import spin
from ..memory import Watch
from ..user import step as user_step
from .issue import MpiIssuer, TorchIssuer, bus_bytes

def run(ctx) -> dict:
    path = ctx.options.get("trace")
    if not path:
        raise ConfigError("replay needs --trace PATH: a folder of one trace file per rank, or a name with {rank}")
    trace = traces.load(path)
    if trace.world_size != ctx.world_size:
        raise ConfigError(f"trace {trace.name!r} has {trace.world_size} ranks; run it on a world of that size "
                          f"(--world-sizes {trace.world_size}), not {ctx.world_size}")
    mode, scale = traces.parse_gaps(ctx.options.get("replay_gaps"))
    if mode != "off" and not trace.has_times():
        raise ConfigError(f"--replay-gaps {mode} needs the trace's timestamps, and {trace.ranks[0].format} traces "
                          "have none; capture a Kineto trace (perfsuite capture) or replay with --replay-gaps off")
    device = "cpu"
    if ctx.transport == "torch-nccl":
        device = user_step.cuda_device(ctx)
    issuer = _issuer(ctx, trace, device)
    mine = trace.ranks[ctx.rank].comms
    gaps = [g * scale / 1e6 for g in traces.gaps_us(mine)] if mode != "off" else [0.0] * len(mine)
    clock = time.perf_counter if device == "cpu" else _synced(issuer)
    spinner = spin()
    try:
        for case in ctx.cases:
            _case(ctx, case, trace, issuer, mine, gaps, clock, spinner, mode, scale)
    finally:
        issuer.close()
        if isinstance(issuer, TorchIssuer):
            issuer.dist.destroy_process_group()
    return {"transport_facts": {"device": device, "trace": trace.name, "trace_format": trace.ranks[0].format}}


def _issuer(ctx, trace, device):
    if ctx.transport == "mpi":
        return MpiIssuer(ctx.comm, trace)
    if ctx.transport.startswith("torch-"):
        import torch

        from ...transports.torch.support import start_group

        dev = torch.device(device)
        dist, _ = start_group(ctx.comm, ctx.transport.removeprefix("torch-"), device=None if device == "cpu" else dev)
        return TorchIssuer(ctx.comm, trace, dist, torch, dev, ctx.transport.removeprefix("torch-"))
    raise TransportUnavailable(f"replay runs on mpi, torch-gloo, torch-nccl and torch-mpi, not {ctx.transport}")


def _synced(issuer):
    def clock() -> float:
        issuer.sync()
        return time.perf_counter()
    return clock


def _case(ctx, case: Case, trace, issuer, mine, gaps, clock, spinner, mode: str, scale: float) -> None:
    calls = [(c, *issuer.prepare(c)) for c in mine]
    issuer.zero()
    issuer.issued = []

    def window() -> np.ndarray:
        """One iteration: every call in order (after its gap); each call's seconds."""
        took = np.empty(len(calls))
        t = clock()
        for k, (c, send, recv) in enumerate(calls):
            if gaps[k]:
                _spin(gaps[k])
                t = clock()
            issuer.call(c, send, recv)
            now = clock()
            took[k] = now - t
            t = now
        return took

    window()  # the first pass, set-up included, is the record of what was issued; timed passes keep none
    issued, issuer.issued = issuer.issued, None
    budget_s = float(ctx.options.get("max_time") or userbench.DEFAULT_MAX_TIME_S)
    def timer(step) -> float:
        t0 = clock()
        step()
        return clock() - t0

    warmup, estimate = user_step.warm_up(ctx, window, timer, budget_s)
    iters = whole_option(ctx.options, "iters", None, 1, "iterations")
    if iters is None:
        iters = max(10, min(user_step.MAX_ITERS, int(np.ceil(budget_s / max(estimate, 1e-9)))))
    probe = contention.Probe(scope="process" if ctx.transport.startswith("torch-") else "thread")
    watch = Watch("cpu" if not calls or str(getattr(issuer, "device", "cpu")) == "cpu" else "cuda:0",
                  "torch" if ctx.transport.startswith("torch-") else "").start()
    times, per_call, canaries = np.empty(iters), np.empty((iters, len(calls))), []
    halves = (iters // 2, iters - iters // 2)
    i = 0
    for half in halves:
        probe.pause()
        canaries.append(canary_us())
        probe.start()
        for _ in range(half):
            ctx.comm.Barrier()
            ctx.fault("timed", case)
            t0 = time.perf_counter()
            per_call[i] = window()
            dt = clock() - t0
            times[i] = dt + spinner.add(dt) if spinner else dt
            i += 1
    probe.pause()
    canaries.append(canary_us())
    figures = watch.stop()
    machine = {**probe.stop(), "canary_us": float(np.median(canaries))}
    wrong = _checked(ctx, case, trace, issuer, calls)
    kinds = _kinds(mine, per_call, trace.world_size)
    sequence = [list(map(_jsonable, s)) for s in issued]
    gathered = ctx.comm.gather((times, machine, node_name(), wrong, figures, kinds,
                                _digest(issued), sequence), root=0)
    if ctx.is_root:
        matrix = np.stack([g[0] for g in gathered], axis=1)
        invalid = {r: g[3] for r, g in enumerate(gathered) if g[3]}
        sample = user_step.summarize(case, {}, matrix, warmup, contention.world_view([g[1] for g in gathered]),
                                     [g[2] for g in gathered], clock="host", invalid=invalid,
                                     memory_figures=[g[4] for g in gathered])
        sample.info.update(replay_info(trace, [g[5] for g in gathered], mode, scale))
        sample.info["trace_notes"] += issuer.notes
        sample.info["replayed_digest"] = [g[6] for g in gathered]
        sample.info["captured_digest"] = [digest_of(rt.comms, trace.world_size) for rt in trace.ranks]
        sample.info["replayed_calls"] = [g[7] for g in gathered]
        ctx.emit(sample.to_dict())


def _spin(seconds: float) -> None:
    """The job's compute between two calls, as busy host time (a sleep would hand the core away)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _checked(ctx, case, trace, issuer, calls) -> str | None:
    """Why this rank's results are wrong (the first wrong call), or None: one pass of every
    call from the records' exact inputs, each checked on return."""
    corrupt = getattr(ctx.fault, "corrupts", lambda c: False)(case)
    wrong = None
    for k, (c, _, _) in enumerate(calls):
        ranks = c.ranks(trace.world_size)
        ok = issuer.check(c, ranks.index(ctx.rank), len(ranks), corrupt=corrupt)
        if ok is not None and corrupt:  # the test fault spoils the first call that is checked
            corrupt = False
            why = " (injected corrupt result, PERFSUITE_TEST_FAULT)"
        else:
            why = ""
        if ok is False and wrong is None:
            wrong = (f"call {k} ({c.kind} of {c.out_count or c.in_count} {c.dtype} on group "
                     f"{list(ranks)}) left a wrong result{why}")
    issuer.zero()
    return wrong


def _kinds(mine, per_call: np.ndarray, n: int) -> dict:
    """Per kind on this rank: calls, bytes and bus bytes per window, median seconds per window."""
    out: dict = {}
    for k, c in enumerate(mine):
        d = out.setdefault(c.kind, {"calls": 0, "bytes": 0, "bus_bytes": 0.0, "cols": []})
        d["calls"] += 1
        d["bytes"] += c.nbytes()
        d["bus_bytes"] += bus_bytes(c, len(c.ranks(n)))
        d["cols"].append(k)
    for d in out.values():
        d["s"] = float(np.median(per_call[:, d.pop("cols")].sum(axis=1))) if len(per_call) else 0.0
    return out


def replay_info(trace, kinds_per_rank: list[dict], mode: str, scale: float) -> dict:
    """The world's split of the window into kinds: per kind the slowest rank's median time,
    its share of the kinds' sum, the largest rank's bytes and busbw (bus bytes / that time);
    and what the capture said of the job's own communication."""
    kinds: dict = {}
    for per_rank in kinds_per_rank:
        for kind, d in per_rank.items():
            k = kinds.setdefault(kind, {"calls": 0, "bytes": 0, "bus_bytes": 0.0, "s": 0.0})
            k["calls"] = max(k["calls"], d["calls"])
            k["bytes"] = max(k["bytes"], d["bytes"])
            k["bus_bytes"] = max(k["bus_bytes"], d["bus_bytes"])
            k["s"] = max(k["s"], d["s"])
    total = sum(k["s"] for k in kinds.values()) or 1.0
    for k in kinds.values():
        k["share"] = k["s"] / total
        k["busbw_GBps"] = k["bus_bytes"] / k["s"] / 1e9 if k["s"] > 0 else 0.0
        k["us"] = k.pop("s") * 1e6
    captured = [rt.work_us for rt in trace.ranks]
    info = {"trace": trace.name, "trace_format": trace.ranks[0].format, "replay_gaps": mode,
            "calls_per_window": max(len(rt.comms) for rt in trace.ranks), "kinds": kinds,
            "trace_notes": list(trace.notes)}
    if mode == "scaled":
        info["replay_gaps_scale"] = scale
    if all(w is not None for w in captured):
        info["captured_comm_us"] = max(captured)
        info["captured_span_us"] = max(rt.span_us or 0.0 for rt in trace.ranks)
    return info


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def _digest(shapes: list[tuple]) -> str:
    return hashlib.sha256(repr([tuple(s) for s in shapes]).encode()).hexdigest()[:16]


def digest_of(comms, world_size: int) -> str:
    """The digest a replay of ``comms`` must issue (``Comm.shape`` per call, in order)."""
    return _digest([c.shape(world_size) for c in comms])
