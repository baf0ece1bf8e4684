"""Who is slow in a world: the rule that names a straggler rank (and its node) from what each
rank timed on its own clock, no clock shared between nodes.

What a rank times, per call or step, starts at a moment common to every rank and ends at the
rank's own arrival: in the allreduce loop, from its exit of the barrier to the end of its call
(when it arrives at the next barrier: a rank that arrives late is waited for there); in a
training step, its own compute apart from the exchange. Pure, so its error rates are shown by
simulation through this code (tests/test_stragglers.py) as well as on real worlds.

The rule, per world and case, for ``values`` (calls x ranks, seconds):

- per call, each rank's log ratio to the median of the other ranks (the same call, so the
  machine's slow and fast spells cancel);
- the calls cut into ``BLOCKS`` consecutive blocks, a block's value the median of its calls
  (consecutive calls share their spell: the block, not the call, is the unit of replication);
- per rank, the Hodges-Lehmann centre of its blocks with the signed-rank lower bound at the
  one-sided level ``alpha / n`` (the slowest of n ranks is picked after looking: Bonferroni
  over them; only lateness is named, so one side);
- arrival: a collective's structure makes a rank late by its place in it (a root finishes
  last; both ends of a slow link wait on it), so the calls are timed again over a second rank
  order in which every rank has another place, and a rank is named only when its interval
  lies wholly above ``MIN_RATIO`` in both orders, and it is the only such rank;
- compute (a rank's own work, no place in any order): the latest rank is named when its
  interval lies wholly above ``MIN_RATIO`` and above every other rank's ratio.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import stats

BLOCKS = 16
ALPHA = 0.01
#: The least lateness named: a collective's structure leaves ranks a little apart in every clean
#: world (docs/stragglers.md has the measured spread); a straggler worth a person's time is
#: beyond that.
MIN_RATIO = 1.1
MEASURES = ("arrival", "compute", "bandwidth", "latency")
#: Links are measured alone, pair by pair: a link this much slower than the rest is named.
MIN_LINK_RATIO = 1.5
#: The most calls timed again over the second rank order (as many as the case's own, up to this):
#: both orders must bound a rank's lateness as tightly.
REORDERED_CALLS = 256


@dataclass(frozen=True)
class Straggler:
    """A named rank: how much later than the others, with its interval at ``confidence``."""

    rank: int
    node: str
    ratio: float
    low: float
    high: float
    measure: str  # "arrival" or "compute"
    confidence: float
    orders: int = 1  # rank orders it was late in (2: told apart from a slow link's other end)

    def to_dict(self) -> dict:
        return {"rank": self.rank, "node": self.node, "ratio": self.ratio, "low": self.low,
                "high": self.high, "measure": self.measure, "confidence": self.confidence,
                "orders": self.orders}

    @classmethod
    def from_dict(cls, d: dict) -> "Straggler":
        return cls(int(d["rank"]), str(d["node"]), float(d["ratio"]), float(d["low"]),
                   float(d["high"]), str(d["measure"]), float(d["confidence"]), int(d.get("orders", 1)))


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


def per_rank(values: np.ndarray, alpha: float = ALPHA, blocks: int = BLOCKS
             ) -> list[tuple[float, float, float]]:
    """Each rank's (ratio, low, high) to the others, the interval at 1 - alpha / ranks."""
    return per_rank_of_blocks(block_ratios(values, blocks), alpha)


def per_rank_of_blocks(b: np.ndarray, alpha: float = ALPHA) -> list[tuple[float, float, float]]:
    """``per_rank`` from the blocks' log ratios (blocks x ranks), as a results file keeps them.
    Only lateness is named, so ``low`` is a one-sided bound at ``alpha / ranks``: the interval
    is the two-sided one at twice that."""
    b = np.asarray(b, dtype=float).reshape(len(b), -1)
    n = b.shape[1]
    conf = 1.0 - 2 * alpha / max(n, 1)
    out = []
    for r in range(n):
        if b.shape[0] == 0:
            out.append((1.0, 0.0, math.inf))
            continue
        test = stats.stratified_signed_rank_test([b[:, r]])
        lo, hi = test.interval(conf)
        out.append((math.exp(test.estimate), math.exp(lo), math.exp(hi)))
    return out


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


def late_ranks(values: np.ndarray, alpha: float = ALPHA, min_ratio: float = MIN_RATIO,
               blocks: int = BLOCKS) -> list[int]:
    """Ranks whose interval lies wholly above ``min_ratio``: later than the others."""
    return [r for r, (_, low, _) in enumerate(per_rank(values, alpha, blocks)) if low > min_ratio]


def judge(values: np.ndarray, nodes: Sequence[str], measure: str = "arrival", *,
          reordered: np.ndarray | None = None, alpha: float = ALPHA, min_ratio: float = MIN_RATIO,
          blocks: int = BLOCKS) -> Straggler | None:
    """The straggler of one world's case, or None when no rank stands out (module doc).

    ``measure`` "arrival" needs ``reordered``: the same calls timed over the ranks in
    ``reorder``'s order (columns still by world rank). A collective's structure makes a rank
    late by its place (a root finishes last, both ends of a slow link wait for it); a slow node
    is late wherever it stands, so only a rank late in both orders is named, each order judged
    at half of ``alpha``. ``compute`` (a rank's own work) has no place: one judgement, and the
    latest rank's interval must also lie above every other rank's ratio (two slow nodes name
    neither)."""
    if measure not in MEASURES:
        raise ValueError(f"straggler measure {measure!r} is none of {', '.join(MEASURES)}")
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape[1] < 2 or values.shape[0] < 2:
        return None
    n = values.shape[1]
    if measure == "arrival":
        if reordered is None:
            return None
        a = alpha / 2
        both = set(late_ranks(values, a, min_ratio, blocks)) & set(late_ranks(reordered, a, min_ratio, blocks))
        if len(both) != 1:
            return None
        [late] = both
        ratio, low, high = per_rank(values, a, blocks)[late]
        conf, orders = 1.0 - 2 * a / n, 2
    else:
        ranks = per_rank(values, alpha, blocks)
        late = max(range(n), key=lambda r: ranks[r][0])
        ratio, low, high = ranks[late]
        if not low > min_ratio or any(low <= ranks[r][0] for r in range(n) if r != late):
            return None
        conf, orders = 1.0 - 2 * alpha / n, 1
    return Straggler(late, str(nodes[late]) if late < len(nodes) else f"rank{late}", ratio, low, high,
                     measure, conf, orders)


def profile(values: np.ndarray, blocks: int = BLOCKS) -> dict:
    """What a results file keeps of a case's per-rank times: each rank's ratio to the others
    (the report's per-rank plot) and the blocks' log ratios the rule judged (blocks x ranks,
    so the rule can be run again on a stored run)."""
    b = block_ratios(np.asarray(values, dtype=float), blocks)
    return {"rank_ratio": [float(math.exp(np.median(b[:, r]))) if b.shape[0] else 1.0
                           for r in range(b.shape[1])],
            "rank_blocks": [[round(float(v), 5) for v in row] for row in b]}


def judge_links(records: Sequence[tuple[int, int, int, float]], nodes: Sequence[str], measure: str,
                alpha: float = ALPHA, min_ratio: float = MIN_LINK_RATIO) -> dict:
    """The slow node, or slow links, from point-to-point measurements ``(repeat, from, to,
    value)`` (bytes/s for "bandwidth", seconds for "latency"): each value's slowness against
    the median of all, then per node its links' slowness against the links it is not on
    (Mann-Whitney shift, one-sided bound at alpha / nodes); the slowest node is named when its
    interval lies wholly above ``min_ratio`` and above every other node's. Without a named node,
    each link whose own values lie wholly above ``min_ratio`` against the rest is named (at
    alpha / links, one-sided). Returns ``straggler`` (a dict or None), ``slow_links`` and
    ``node_ratio`` (each node's links against the others', the report's plot)."""
    n = len(nodes)
    out: dict = {"straggler": None, "slow_links": [], "node_ratio": []}
    if n < 3 or not records:
        out["straggler_why"] = "a node is told from its links only with 3 or more nodes"
        return out
    values = np.array([v for *_, v in records], dtype=float)
    mid = float(np.median(values))
    slow = np.log(mid / values) if measure == "bandwidth" else np.log(values / mid)
    ends = [(a, b) for _, a, b, _ in records]
    conf = 1.0 - 2 * alpha / n  # one side: only slowness is named
    ranked = []
    for i in range(n):
        on = np.array([i in e for e in ends])
        if on.all() or not on.any():
            ranked.append((0.0, -math.inf, math.inf))
            continue
        test = stats.stratified_shift_test([(slow[on], slow[~on])])
        lo, hi = test.interval(conf)
        ranked.append((test.estimate, lo, hi))
    out["node_ratio"] = [float(math.exp(e)) for e, _, _ in ranked]
    late = max(range(n), key=lambda r: ranked[r][0])
    est, lo, hi = ranked[late]
    if lo > math.log(min_ratio) and all(lo > ranked[r][2] for r in range(n) if r != late):
        out["straggler"] = Straggler(late, str(nodes[late]), math.exp(est), math.exp(lo), math.exp(hi),
                                     measure, conf).to_dict()
        return out
    links = sorted({tuple(sorted(e)) for e in ends})
    conf = 1.0 - 2 * alpha / max(len(links), 1)
    for a, b in links:
        on = np.array([tuple(sorted(e)) == (a, b) for e in ends])
        if on.all():
            continue
        test = stats.stratified_shift_test([(slow[on], slow[~on])])
        lo, hi = test.interval(conf)
        if lo > math.log(min_ratio):
            out["slow_links"].append({"a": a, "b": b, "nodes": [str(nodes[a]), str(nodes[b])],
                                      "ratio": math.exp(test.estimate), "low": math.exp(lo),
                                      "high": math.exp(hi), "measure": measure, "confidence": conf})
    return out


def pooled(per_round: Sequence[dict | None]) -> dict:
    """A case's straggler over its rounds: the rank named in more than half of them (each
    round is a world of its own), with the median ratio and interval of those rounds; the
    rounds' own verdicts are kept beside it."""
    found = [Straggler.from_dict(d) for d in per_round if d]
    counts: dict[int, list[Straggler]] = {}
    for s in found:
        counts.setdefault(s.rank, []).append(s)
    best = max(counts.values(), key=len, default=[])
    out: dict = {"round_stragglers": list(per_round), "straggler": None}
    if 2 * len(best) > len(per_round):
        mid = sorted(best, key=lambda s: s.ratio)[len(best) // 2]
        out["straggler"] = mid.to_dict()
    return out


def named(samples: Sequence) -> list[tuple[str, Straggler]]:
    """(case name, straggler) for each sample whose world named one (``info["straggler"]``)."""
    out = []
    for s in samples:
        d = (s.info or {}).get("straggler")
        if d:
            out.append((s.case.name, Straggler.from_dict(d)))
    return out


def world_line(samples: Sequence) -> str | None:
    """The one line a world prints when a case of it named a straggler: the rank with the
    strongest evidence (the highest lower bound), and in how many of the world's cases it was
    named; None for a world that named nobody."""
    found = named(samples)
    if not found:
        return None
    case, s = max(found, key=lambda cs: cs[1].low)
    judged = sum(1 for x in samples if "straggler" in (x.info or {}))
    same = sum(1 for _, x in found if x.rank == s.rank)
    how = s.measure + (", in two rank orders" if s.orders > 1 else "")
    others = sorted({f"rank {x.rank}" for _, x in found if x.rank != s.rank})
    than = "later than the others" if s.measure in ("arrival", "compute") else "slower than the others' links"
    return (f"# straggler: rank {s.rank} on node {s.node}, x{s.ratio:.2f} [{s.low:.2f}, {s.high:.2f}] "
            f"{than} ({how}; {case}, named in {same} of {judged} case(s)"
            + (f"; also named: {', '.join(others)}" if others else "") + ")")


def link_lines(samples: Sequence) -> list[str]:
    """A line per slow link a case named (where no node explains it)."""
    lines = []
    for x in samples:
        for link in (x.info or {}).get("slow_links") or ():
            lines.append(f"# slow link: {link['nodes'][0]} - {link['nodes'][1]} (ranks {link['a']}, {link['b']}), "
                         f"x{link['ratio']:.2f} [{link['low']:.2f}, {link['high']:.2f}] slower than the others "
                         f"({link['measure']}; {x.case.name})")
    return lines


def census(runs: Sequence) -> list[str]:
    """The nightly's lines: every node named in any world of ``runs`` (``formats.SuiteRun``s),
    with how many worlds named it, as a straggler or at one end of a slow link."""
    worlds: dict[str, set] = {}
    total = 0
    for i, run in enumerate(runs):
        for r in run.results:
            total += 1
            key = (i, r.benchmark, r.transport, r.world_size)
            for _, s in named(r.samples):
                worlds.setdefault(s.node, set()).add(key)
            for sample in r.samples:
                for link in sample.info.get("slow_links") or ():
                    for node in link["nodes"]:
                        worlds.setdefault(node, set()).add(key)
    if not worlds:
        return [f"no node named in any of {total} world(s)"]
    return [f"{node}: named in {len(keys)} of {total} world(s)"
            for node, keys in sorted(worlds.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
