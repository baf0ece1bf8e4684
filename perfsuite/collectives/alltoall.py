"""alltoall: chunk p of rank r's buffer of c goes to rank p, landing at chunk r (nccl-tests
``alltoall.cu``, grouped sends and receives there; busbw factor (n-1)/n). Each chunk's values
name its sender and receiver, so a chunk delivered to the wrong place is caught. Out of place
only: NCCL has no in-place alltoall."""
from __future__ import annotations

import numpy as np

from . import PATTERN, Collective, register, small, split


def chunk_values(sender: int, receiver: int, n: int, count: int, dtype: str = "") -> np.ndarray:
    """Small integers (<= 64: exact in bfloat16) that differ between (sender, receiver) pairs;
    in fp8 at most 7 (exact in e5m2 too), so neighbouring pairs still differ."""
    pairs = 4 if small(dtype) else 60
    return ((sender * n + receiver) % pairs + np.arange(count) % PATTERN + 1).astype(np.float64)


def _inputs(rank: int, n: int, count: int, op: str, root: int, dtype: str = "") -> np.ndarray:
    chunk = count // n
    return np.concatenate([chunk_values(rank, p, n, chunk, dtype) for p in range(n)])


def _expected(rank: int, n: int, count: int, op: str, root: int, dtype: str = "") -> np.ndarray:
    chunk = count // n
    return np.concatenate([chunk_values(q, rank, n, chunk, dtype) for q in range(n)])


ALLTOALL = register(Collective(
    "alltoall", "AlltoAll", "osu_alltoall", "OSU MPI All-to-All Personalized Exchange Latency Test",
    factor=lambda n: (n - 1) / n, factor_words="(n-1)/n",
    wire=lambda n: n - 1,
    counts=lambda count, n: (split(count, n) * n, split(count, n) * n),
    inputs=_inputs, expected=_expected, param=lambda send, recv, n: send // n,
    omb=lambda send, recv, n: send // n))
