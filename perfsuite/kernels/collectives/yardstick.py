"""A transport's timed loop beside a plain loop of its framework's own call, inside one world
(allreduce, or the collective the case's benchmark names).

Between worlds a small allreduce moves by tens of percent here (and gloo's by several times),
so a 5% bound on what the harness adds cannot be checked by comparing a harness world with a
plain one. Inside one world it can: per case, short blocks of the kernel's timed loop (the
transport's ``allreduce`` after a barrier, timed by ``kernels/allreduce.timed_loop`` itself)
alternate with blocks of the plain loop (``kernels/plain``), in place on the same tensor. The
harness adds a cost to each call, so the estimate is additive: the median over calls of the
difference between the k-th call of a harness block and the k-th call of the plain block beside
it (milliseconds apart, so in the same spell of the machine), as a fraction of the plain loop's
p50. A ratio of the blocks' medians moved by +-10% from one world to the next on gloo's bimodal
4 B latency; the paired difference does not. Run by ``perfsuite overhead --transports torch-gloo``;
the ``fraction`` knob makes each harness call cost that much more (a measured spin after the
call, added to its time, as device transports inject it), so a test shows the estimate sees a
harness that does cost something.
"""
from __future__ import annotations

import numpy as np

from ... import collectives
from ...transports import load as load_transport
from .allreduce import default_iters, summarize, timed_loop, world_max
from .buffers import Buffers, bind_case, transport_set
from ..context import RankContext
from ..faults import spin
from ..plain.torch_allreduce import timed_calls

MIN_BLOCKS, CALLS_PER_BLOCK = 10, 10


def run(ctx: RankContext) -> dict:
    comm = ctx.comm
    coll = collectives.get(transport_set(ctx))
    transport = load_transport(ctx.transport, coll.name)(comm, ctx.options)
    slowest = world_max(comm)
    for case in ctx.cases:
        iters, warmup = default_iters(case.size_bytes or 0)
        iters = int(ctx.options.get("iters") or iters)
        # Short blocks, many of them: the two loops take turns every CALLS_PER_BLOCK calls, so
        # a spell of the machine (gloo's 4 B call moves 2x for seconds here) falls on both.
        blocks = int(ctx.options.get("blocks") or max(MIN_BLOCKS, iters // CALLS_PER_BLOCK))
        per_block = max(iters // blocks, 5)
        # allreduce in place (torch's is, as users call it; every call's exact sum is 0, so the
        # tensor stays the same however many calls run), broadcast on its one buffer, the other
        # collectives out of place: each call leaves the same result, checked after the blocks.
        call = bind_case(transport, coll, case, coll.name == "allreduce", ctx.world_size)
        bufs = Buffers(transport, coll, call, case, ctx.rank, ctx.world_size)
        bufs.inputs(stable=True)
        send, recv = bufs.send, bufs.recv
        for _ in range(warmup):
            transport.call(send, recv)
        spinner = spin(float(ctx.options["fraction"]), None) if ctx.options.get("fraction") else None
        harness, plain = [], []
        for b in range(blocks):
            for loop in (("harness", "plain") if b % 2 == 0 else ("plain", "harness")):
                if loop == "harness":
                    times = timed_loop(transport, send, recv, per_block, comm.Barrier, None, case, spinner)
                else:
                    times = np.array(timed_calls(transport.dist, comm.Barrier, send, per_block,
                                                 None if recv is send else recv, coll.name, call.op, call.root))
                (harness if loop == "harness" else plain).append(slowest(times))
        transport.sync()
        exact = bool(comm.allreduce(bufs.check(timed=True, corrupt=False) is not False, op=_land()))
        if ctx.is_root:
            sample = summarize(case, np.concatenate(harness)[:, None], exact, per_block * blocks, warmup,
                               call.inplace, call=call)
            info = {**sample.info, "world_size": ctx.world_size, "blocks": blocks, "calls_per_block": per_block,
                    **paired_estimate(harness, plain)}
            ctx.emit({**sample.to_dict(), "info": info})
    comm.Barrier()
    transport.close()
    return {"transport_facts": transport.describe()}


def paired_estimate(harness: list[np.ndarray], plain: list[np.ndarray]) -> dict:
    """One world's estimate from its blocks (seconds per call, the slowest rank's; block k of
    each loop ran beside the other's): each loop's p50, the median of the paired differences,
    and the ratio 1 + difference / plain p50. Pure, so its error rates are simulated."""
    h, p = np.concatenate(harness), np.concatenate(plain)
    diff, plain_p50 = float(np.median(h - p)), float(np.median(p))
    return {"harness_p50_us": float(np.median(h) * 1e6), "plain_p50_us": plain_p50 * 1e6,
            "diff_us": diff * 1e6, "ratio": 1.0 + diff / plain_p50 if plain_p50 > 0 else None,
            "diffs_us": [float(d) for d in (h - p) * 1e6]}


def _land():
    from mpi4py import MPI

    return MPI.LAND
