"""all_gather: rank r's c/n elements land at r x c/n in every rank's buffer of c (nccl-tests
``all_gather.cu``: the size is the gathered buffer's; busbw factor (n-1)/n)."""
from __future__ import annotations

import numpy as np

from . import Collective, rank_values, register, split


def _expected(rank: int, n: int, count: int, op: str, root: int, dtype: str = "") -> np.ndarray:
    chunk = count // n
    return np.concatenate([rank_values(q, chunk, dtype=dtype) for q in range(n)])


ALL_GATHER = register(Collective(
    "all_gather", "AllGather", "osu_allgather", "OSU MPI Allgather Latency Test",
    factor=lambda n: (n - 1) / n, factor_words="(n-1)/n",
    wire=lambda n: n - 1,
    counts=lambda count, n: (split(count, n), split(count, n) * n),
    inputs=lambda rank, n, count, op, root, dtype="": rank_values(rank, count, dtype=dtype),
    expected=_expected, omb=lambda send, recv, n: send, inplace_offset=lambda rank, n, count: rank * (count // n)))
