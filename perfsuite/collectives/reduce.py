"""reduce: the root gets the reduction of every rank's buffer of c (nccl-tests ``reduce.cu``;
busbw factor 1). Other ranks' recv is not defined, so only the root's is checked; in place,
the root's buffer takes each call's result as its next input, so there only a fresh call
after the timed loop is checked."""
from __future__ import annotations

from . import Collective, rank_values, reduced, register

REDUCE = register(Collective(
    "reduce", "Reduce", "osu_reduce", "OSU MPI Reduce Latency Test",
    factor=lambda n: 1.0, factor_words="1",
    wire=lambda n: n - 1,
    counts=lambda count, n: (count, count),
    inputs=lambda rank, n, count, op, root, dtype="": rank_values(rank, count, op, dtype),
    expected=lambda rank, n, count, op, root, dtype="": reduced(n, count, op, dtype) if rank == root else None,
    reduces=True, rooted=True, inplace_offset=lambda rank, n, count: 0, inplace_stable=False))
