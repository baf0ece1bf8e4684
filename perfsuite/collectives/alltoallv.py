"""alltoallv: rank i sends M[i][j] elements to rank j, the counts differing by peer (nccl-tests
``alltoallv.cu``; MPI_Alltoallv; torch's ``all_to_all_single`` with split sizes; an MoE layer's
token dispatch). A case's size is what each rank sends in total, as in nccl-tests; its split
distribution (``SPLITS``, the case's variant) decides the matrix:

- ``uniform``: total / n to every peer (alltoall's exchange, timed through the v call);
- ``zipf``: receiver j's share is proportional to 1 / (j + 1)^s (s = ``ZIPF_S``), the same order
  for every sender, as an MoE router's skewed expert load: rank 0 receives the most, so receive
  totals are uneven while every rank sends the same total;
- ``distance``: nccl-tests' generated pattern at its default spread 1.0: the share to the peer
  at distance d = (j - i) mod n is d / (n(n-1)/2), nothing to itself; every rank sends and
  receives about the same total.

Shares are rounded to whole elements by largest remainder (ties to the lower peer), so each row
sums to the total exactly (nccl-tests rounds each peer down to 16 bytes instead, and sends less).
Buffers: send the total, recv the largest receive total over ranks, a smaller one's tail a zero
pad that is checked too. nccl-tests' busbw: the largest of any rank's send and receive bytes
over the time, x (n-1)/n. Each chunk's values name its sender and receiver (alltoall's
``chunk_values``), so a chunk landing in the wrong place or with the wrong length is caught. Out
of place only, as nccl-tests' alltoallv.
"""
from __future__ import annotations

import numpy as np

from . import DEFAULT_SPLITS, SPLITS, Collective, Matrix, register, split
from .alltoall import chunk_values

#: Zipf's exponent: s = 1 is the classic law (the k-th most popular gets 1/k of the first's share).
ZIPF_S = 1.0


def shares(splits: str, sender: int, n: int) -> np.ndarray:
    """The fraction of ``sender``'s total each peer gets (sums to 1)."""
    if splits == "uniform" or n == 1:
        w = np.ones(n)
    elif splits == "zipf":
        w = 1.0 / np.arange(1, n + 1) ** ZIPF_S
    elif splits == "distance":
        w = ((np.arange(n) - sender) % n).astype(np.float64)
    else:
        raise ValueError(f"splits {splits!r} is not one of {', '.join(SPLITS)}")
    return w / w.sum()


def whole(share: np.ndarray, total: int) -> tuple[int, ...]:
    """``total`` x ``share`` in whole elements summing to ``total``: each floor, then one more to
    the largest remainders (Hamilton's method), ties to the lower peer so every rank agrees."""
    exact = share * total
    counts = np.floor(exact).astype(np.int64)
    left = int(total - counts.sum())
    order = sorted(range(len(share)), key=lambda j: (-(exact[j] - counts[j]), j))
    for j in order[:left]:
        counts[j] += 1
    return tuple(int(c) for c in counts)


def split_matrix(splits: str, n: int, total: int) -> Matrix:
    """M[i][j]: elements rank i sends rank j, every row summing to ``total``."""
    return tuple(whole(shares(splits, i, n), total) for i in range(n))


def uniform(n: int, total: int) -> Matrix:
    return split_matrix(DEFAULT_SPLITS, n, total)


def _inputs(rank: int, n: int, count: int, op: str, root: int, matrix: Matrix = (), dtype: str = "") -> np.ndarray:
    m = matrix or uniform(n, count)
    return np.concatenate([chunk_values(rank, p, n, m[rank][p], dtype) for p in range(n)])


def _expected(rank: int, n: int, count: int, op: str, root: int, matrix: Matrix = (), dtype: str = "") -> np.ndarray:
    """The chunks from each sender in rank order, then zeros up to ``count`` (the pad)."""
    m = matrix or uniform(n, count)
    got = np.concatenate([chunk_values(q, rank, n, m[q][rank], dtype) for q in range(n)])
    return np.concatenate([got, np.zeros(count - got.size)])


ALLTOALLV = register(Collective(
    "alltoallv", "AlltoAllv", "osu_alltoallv", "OSU MPI All-to-Allv Personalized Exchange Latency Test",
    factor=lambda n: (n - 1) / n, factor_words="(n-1)/n",
    # Every split here puts (n-1) x size on the wires at least: uniform, and zipf exactly (its rows
    # are alike, so the diagonal holds one total over all ranks); distance n x size (no diagonal).
    wire=lambda n: n - 1,
    counts=lambda count, n: (split(count, n) * n, split(count, n) * n),
    inputs=_inputs, expected=_expected,
    # nccl-tests' count column is its per-peer paramcount; OMB's size is one peer's (equal) part
    param=lambda send, recv, n: send // n, omb=lambda send, recv, n: send // n,
    splits=split_matrix))
