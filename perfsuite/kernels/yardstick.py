"""A transport's timed loop beside a plain loop of its framework's own call, inside one world.

Between worlds a small allreduce moves by tens of percent here (and gloo's by several times),
so a 5% bound on what the harness adds cannot be checked by comparing a harness world with a
plain one. Inside one world it can: per case, blocks of the kernel's timed loop (the transport's
``allreduce`` after a barrier, timed as ``kernels/allreduce.timed_loop`` times it) alternate with
blocks of the plain loop (``kernels/plain``), in place on the same tensor; the harness's cost is
the median over block pairs of p50(harness) / p50(plain). Run as a world's kernel by
``perfsuite overhead --transports torch-gloo``.
"""
from __future__ import annotations

import numpy as np

from ..model import DTYPES
from ..transports import load as load_transport
from .allreduce import default_iters, summarize, timed_loop, world_max, zero_sum_pattern
from .context import RankContext
from .plain.torch_allreduce import timed_calls

BLOCKS = 10


def run(ctx: RankContext) -> dict:
    comm = ctx.comm
    transport = load_transport(ctx.transport)(comm, ctx.options)
    blocks = int(ctx.options.get("blocks") or BLOCKS)
    slowest = world_max(comm)
    for case in ctx.cases:
        count = (case.size_bytes or 0) // DTYPES[case.dtype]
        iters, warmup = default_iters(case.size_bytes or 0)
        iters = int(ctx.options.get("iters") or iters)
        per_block = max(iters // blocks, 5)
        buf = transport.alloc(count, case.dtype)
        # Every call's exact sum is 0: the tensor stays the same however many calls run.
        transport.fill(buf, zero_sum_pattern(ctx.rank, ctx.world_size, count, case.dtype))
        for _ in range(warmup):
            transport.allreduce(buf, buf)
        harness, plain = [], []
        for b in range(blocks):
            for loop in (("harness", "plain") if b % 2 == 0 else ("plain", "harness")):
                if loop == "harness":
                    times = timed_loop(transport, buf, buf, per_block, comm.Barrier, None, case)
                else:
                    times = np.array(timed_calls(transport.dist, comm.Barrier, buf, per_block))
                (harness if loop == "harness" else plain).append(float(np.median(slowest(times))))
        exact = bool(comm.allreduce(not np.any(transport.to_host(buf)), op=_land()))
        if ctx.is_root:
            ratios = np.array(harness) / np.array(plain)
            sample = summarize(case, np.array(harness)[:, None], exact, per_block * blocks, warmup, True)
            info = {**sample.info, "world_size": ctx.world_size, "blocks": blocks, "calls_per_block": per_block,
                    "harness_p50_us": float(np.median(harness) * 1e6),
                    "plain_p50_us": float(np.median(plain) * 1e6),
                    "ratio": float(np.median(ratios)), "ratio_min": float(ratios.min()),
                    "ratio_max": float(ratios.max()), "ratios": [float(r) for r in ratios]}
            ctx.emit({**sample.to_dict(), "info": info})
    comm.Barrier()
    transport.close()
    return {"transport_facts": transport.describe()}


def _land():
    from mpi4py import MPI

    return MPI.LAND
