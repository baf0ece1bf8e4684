"""Checks that ``PERFSUITE_INJECT_SLOWDOWN`` injects what it says, inside one world.

Between worlds a small message's latency moves by tens of percent here, so comparing a world
with the injection against one without cannot check a +5% injection to a percentage point.
Inside one world it can: per case, blocks of the allreduce loop alternate between plain and
injected (the same code path the kernel takes), and the injected fraction is the median over
block pairs of p50(injected) / p50(plain) - 1. Run as a world's kernel by
``perfsuite detection-power``; the asked fraction is the ``fraction`` knob.
"""
from __future__ import annotations

import numpy as np

from ...records.model import DTYPES
from ...transports import load as load_transport
from .allreduce import default_iters, injected_turns, pattern, summarize, timed_loop, world_max
from ..context import RankContext
from ..faults import spin

BLOCKS = 10


def run(ctx: RankContext) -> dict:
    comm = ctx.comm
    transport = load_transport(ctx.transport)(comm, ctx.options)
    spinner = spin(float(ctx.options["fraction"]), transport.native)
    blocks = int(ctx.options.get("blocks") or BLOCKS)
    for case in ctx.cases:
        count = (case.size_bytes or 0) // DTYPES[case.dtype]
        iters, warmup = default_iters(case.size_bytes or 0)
        per_block = max(iters // 2, 5)
        send, recv = transport.alloc(count, case.dtype), transport.alloc(count, case.dtype)
        transport.fill(send, pattern(ctx.rank, count, case.dtype))
        for _ in range(warmup):
            transport.allreduce(send, recv)
        slowest = world_max(comm)
        turns = injected_turns(transport, send, recv, spinner, comm.Barrier, case, slowest)
        plain, injected = [], []
        for b in range(blocks):
            # Alternate which goes first, so a drift within the world favours neither.
            order = ((None, -1), (spinner, turns)) if b % 2 == 0 else ((spinner, turns), (None, -1))
            for sp, t in order:
                times = timed_loop(transport, send, recv, per_block, comm.Barrier, None, case, sp, t)
                world = slowest(times)
                (injected if sp else plain).append(float(np.median(world)))
        if ctx.is_root:
            ratios = np.array(injected) / np.array(plain) - 1.0
            sample = summarize(case, np.array(plain)[:, None], True, per_block * blocks, warmup, False)
            info = {**sample.info, "world_size": ctx.world_size, "asked": spinner.fraction, "measured": float(np.median(ratios)),
                    "measured_min": float(ratios.min()), "measured_max": float(ratios.max()),
                    "blocks": blocks, "turns": turns}
            ctx.emit({**sample.to_dict(), "info": info})
    comm.Barrier()
    return {"per_turn_ns": spinner.per_turn * 1e9, "inline_call_ns": spinner.call * 1e9}

