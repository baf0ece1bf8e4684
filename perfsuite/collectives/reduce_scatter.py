"""reduce_scatter: rank r gets chunk r of the reduction of every rank's buffer of c
(nccl-tests ``reduce_scatter.cu``: the size is the send buffer's; busbw factor (n-1)/n).
Out of place only here: in place, MPI leaves the result at the buffer's start and NCCL at
chunk r, so the two would not time the same call."""
from __future__ import annotations

from . import Collective, rank_values, reduced, register, split

REDUCE_SCATTER = register(Collective(
    "reduce_scatter", "ReduceScatter", "osu_reduce_scatter", "OSU MPI Reduce_scatter Latency Test",
    factor=lambda n: (n - 1) / n, factor_words="(n-1)/n",
    wire=lambda n: n - 1,
    counts=lambda count, n: (split(count, n) * n, split(count, n)),
    inputs=lambda rank, n, count, op, root, dtype="": rank_values(rank, count, op, dtype),
    expected=lambda rank, n, count, op, root, dtype="": reduced(n, count * n, op, dtype)[rank * count:(rank + 1) * count],
    reduces=True))
