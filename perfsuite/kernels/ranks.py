"""What a world keeps of its ranks' own times, for the straggler rule (``perfsuite.verdicts.stragglers``,
which judges them on the analysing side: ranks measure, they never judge).

Per call (or step), each rank's log ratio to the median of the other ranks in the same call,
then the calls cut into consecutive blocks, a block's value the median of its calls: a few
numbers per rank that keep who was late, and by how much, through the machine's spells. And the
second rank order a world times the same calls over, once its first shows a rank late by more
than ``SECOND_ORDER_ABOVE``: in it every rank has another place in the collective.
"""
from __future__ import annotations

import math

import numpy as np

BLOCKS = 16
#: A rank this much later than the others (its blocks' median) makes a world time the calls again
#: over the second order; the rule names nobody below it (``stragglers.MIN_RATIO``).
SECOND_ORDER_ABOVE = 1.1
#: The most calls timed over the second order (as many as the case's own, up to this): both
#: orders must bound a rank's lateness as tightly.
REORDERED_CALLS = 256


def others_median(x: np.ndarray) -> np.ndarray:
    """calls x ranks: per call, the median of every rank but the one in that column (one sort
    per call, so a world of thousands of ranks costs no more than sorting its calls)."""
    calls, n = x.shape
    order = np.argsort(x, axis=1, kind="stable")
    s = np.take_along_axis(x, order, axis=1)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(n)[None, :].repeat(calls, axis=0), axis=1)
    m = n - 1  # the others

    def kth(k: int) -> np.ndarray:
        """The k-th smallest of the others: the sorted row without the rank's own place."""
        i = np.where(pos > k, k, k + 1)
        return np.take_along_axis(s, i, axis=1)

    if m % 2:
        return kth(m // 2)
    return (kth(m // 2 - 1) + kth(m // 2)) / 2.0


def block_ratios(values: np.ndarray, blocks: int = BLOCKS) -> np.ndarray:
    """blocks x ranks: per block of consecutive calls, the median over its calls of each rank's
    log ratio to the median of the other ranks in the same call."""
    x = np.log(np.maximum(np.asarray(values, dtype=float), 1e-12))
    calls, n = x.shape
    if n < 2 or calls < 1:
        return np.zeros((0, n))
    d = x - others_median(x)
    cuts = np.array_split(np.arange(calls), min(blocks, calls))
    return np.stack([np.median(d[idx], axis=0) for idx in cuts])


def kept(values: np.ndarray, measure: str) -> dict:
    """What a sample's info keeps of calls x ranks: each rank's ratio to the others (the
    report's plot), the blocks (what the rule judges), and which measure they are."""
    b = block_ratios(values)
    return {"straggler_measure": measure,
            "rank_ratio": [float(math.exp(np.median(b[:, r]))) if b.shape[0] else 1.0 for r in range(b.shape[1])],
            "rank_blocks": [[round(float(v), 5) for v in row] for row in b]}


def wants_second_order(values: np.ndarray) -> bool:
    """Whether a rank stands late enough in these calls that only a second order can say if its
    place or its node made it so."""
    b = block_ratios(values)
    return bool(b.shape[0]) and bool(np.any(np.exp(np.median(b, axis=0)) > SECOND_ORDER_ABOVE))


def reorder(n: int) -> list[int]:
    """The second rank order, as each rank's position in it: odd ranks first, then even ones
    (1, 3, ..., 0, 2, ...; with an odd count the last even rank leads the even ones), so no rank
    keeps its place (a root's role moves to another rank) and ring neighbours and
    recursive-doubling partners change."""
    odd, even = list(range(1, n, 2)), list(range(0, n, 2))
    if n % 2 and n > 1:
        even = even[-1:] + even[:-1]
    order = odd + even
    return [order.index(r) for r in range(n)]
