"""broadcast: the root's buffer of c lands in every rank's (nccl-tests ``broadcast.cu``; busbw
factor 1). One buffer, as MPI_Bcast and torch's broadcast have: always in place (each call
rewrites the same values, so the timed loop's output is checked too)."""
from __future__ import annotations

import numpy as np

from . import Collective, rank_values, register


def _inputs(rank: int, n: int, count: int, op: str, root: int, dtype: str = "") -> np.ndarray:
    return rank_values(root, count, dtype=dtype) if rank == root else np.zeros(count)


BROADCAST = register(Collective(
    "broadcast", "Broadcast", "osu_bcast", "OSU MPI Broadcast Latency Test",
    factor=lambda n: 1.0, factor_words="1",
    wire=lambda n: n - 1,
    counts=lambda count, n: (count, count), inputs=_inputs,
    expected=lambda rank, n, count, op, root, dtype="": rank_values(root, count, dtype=dtype),
    rooted=True, inplace_offset=lambda rank, n, count: 0, one_buffer=True))
