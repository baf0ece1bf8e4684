"""allreduce: every rank gets the reduction of every rank's buffer (nccl-tests
``all_reduce.cu``; busbw factor 2(n-1)/n: each rank sends and receives 2(n-1)/n of it)."""
from __future__ import annotations

import numpy as np

from . import Collective, rank_values, reduced, register, zero_sum


def _stable_inputs(rank: int, n: int, count: int, op: str, dtype: str = "") -> np.ndarray:
    if op in ("sum", "avg"):
        return zero_sum(rank, n, count, dtype)
    if op == "prod":
        return np.ones(count)
    return rank_values(rank, count, op, dtype)


def _stable_expected(n: int, count: int, op: str, dtype: str = "") -> np.ndarray:
    if op in ("sum", "avg"):
        return np.zeros(count)
    if op == "prod":
        return np.ones(count)
    return reduced(n, count, op, dtype)


ALLREDUCE = register(Collective(
    "allreduce", "AllReduce", "osu_allreduce", "OSU MPI Allreduce Latency Test",
    factor=lambda n: 2.0 * (n - 1) / n, factor_words="2(n-1)/n",
    wire=lambda n: 2 * (n - 1),
    counts=lambda count, n: (count, count),
    inputs=lambda rank, n, count, op, root, dtype="": rank_values(rank, count, op, dtype),
    expected=lambda rank, n, count, op, root, dtype="": reduced(n, count, op, dtype),
    reduces=True, inplace_offset=lambda rank, n, count: 0,
    stable_inputs=_stable_inputs, stable_expected=_stable_expected))
