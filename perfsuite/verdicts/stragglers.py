"""Who is slow in a world: the rule that names a straggler rank (and its node) from what each
rank timed on its own clock, no clock shared between nodes. The ranks keep their times as
blocks (``kernels.ranks``); this side judges them, after a world returns (``annotate``).

What a rank times, per call or step, starts at a moment common to every rank and ends at the
rank's own arrival: in the allreduce loop, from its exit of the barrier to the end of its call
(when it arrives at the next barrier: a rank that arrives late is waited for there); in a
training step, its own compute apart from the exchange. Pure, so its error rates are shown by
simulation through this code (tests/test_stragglers.py) as well as on real worlds.

The rule, per world and case, on the blocks (per block of consecutive calls, each rank's median
log ratio to the other ranks of the same call; the block, not the call, is the unit of
replication, since consecutive calls share the machine's spell):

- per rank, the Hodges-Lehmann centre of its blocks with the signed-rank lower bound at the
  one-sided level ``alpha / n`` (the slowest of n ranks is picked after looking: Bonferroni
  over them; only lateness is named, so one side);
- arrival: a collective's structure makes a rank late by its place in it (a root finishes
  last; both ends of a slow link wait on it), so the world times the calls again over a second
  rank order in which every rank has another place, and a rank is named only when its bound
  lies above ``MIN_RATIO`` in both orders, and it is the only such rank;
- compute (a rank's own work, no place in any order): the latest rank is named when its bound
  lies above ``MIN_RATIO`` and above every other rank's ratio;
- links (``judge_links``): a node against the links it is not on, or a link against the rest.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..records import stats

ALPHA = 0.01
#: The least lateness named: a collective's structure leaves ranks a little apart in every clean
#: world (docs/stragglers.md has the measured spread); a straggler worth a person's time is
#: beyond that. ``kernels.ranks.SECOND_ORDER_ABOVE`` is the same number.
MIN_RATIO = 1.1
MEASURES = ("arrival", "compute", "bandwidth", "latency")
#: Links are measured alone, pair by pair: a link this much slower than the rest is named.
MIN_LINK_RATIO = 1.5


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


def per_rank(b: np.ndarray, alpha: float = ALPHA) -> list[tuple[float, float, float]]:
    """Each rank's (ratio, low, high) to the others from the blocks' log ratios (blocks x
    ranks, as ``kernels.ranks`` keeps them). Only lateness is named, so ``low`` is a one-sided
    bound at ``alpha / ranks``: the interval is the two-sided one at twice that."""
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


def late_ranks(blocks: np.ndarray, alpha: float = ALPHA, min_ratio: float = MIN_RATIO) -> list[int]:
    """Ranks whose lower bound lies above ``min_ratio``: later than the others."""
    return [r for r, (_, low, _) in enumerate(per_rank(blocks, alpha)) if low > min_ratio]


def judge(blocks: np.ndarray, nodes: Sequence[str], measure: str = "arrival", *,
          reordered: np.ndarray | None = None, alpha: float = ALPHA,
          min_ratio: float = MIN_RATIO) -> Straggler | None:
    """The straggler of one world's case from its blocks (blocks x ranks of log ratios), or
    None when no rank stands out (module doc).

    ``measure`` "arrival" needs ``reordered``: the blocks of the same calls timed over the
    ranks in the second order (columns still by world rank). A collective's structure makes a
    rank late by its place (a root finishes last, both ends of a slow link wait for it); a slow
    node is late wherever it stands, so only a rank late in both orders is named, each order
    judged at half of ``alpha``. ``compute`` (a rank's own work) has no place: one judgement,
    and the latest rank's bound must also lie above every other rank's ratio (two slow nodes
    name neither)."""
    if measure not in MEASURES:
        raise ValueError(f"straggler measure {measure!r} is none of {', '.join(MEASURES)}")
    blocks = np.asarray(blocks, dtype=float)
    if blocks.ndim != 2 or blocks.shape[1] < 2 or blocks.shape[0] < 2:
        return None
    n = blocks.shape[1]
    if measure == "arrival":
        if reordered is None or len(reordered) < 2:
            return None
        a = alpha / 2
        both = set(late_ranks(blocks, a, min_ratio)) & set(late_ranks(np.asarray(reordered, float), a, min_ratio))
        if len(both) != 1:
            return None
        [late] = both
        ratio, low, high = per_rank(blocks, a)[late]
        conf, orders = 1.0 - 2 * a / n, 2
    else:
        ranks = per_rank(blocks, alpha)
        late = max(range(n), key=lambda r: ranks[r][0])
        ratio, low, high = ranks[late]
        if not low > min_ratio or any(low <= ranks[r][0] for r in range(n) if r != late):
            return None
        conf, orders = 1.0 - 2 * alpha / n, 1
    return Straggler(late, str(nodes[late]) if late < len(nodes) else f"rank{late}", ratio, low, high,
                     measure, conf, orders)


def judged(info: dict) -> dict:
    """What the rule adds to one sample's ``info`` from what its world kept there: per-rank
    blocks (``kernels.ranks.kept``) or link measurements (``link_records``, the p2p kernel);
    nothing for a sample that kept neither (one rank, an exchange Python cannot see)."""
    nodes = info.get("nodes") or []
    if info.get("link_records"):
        return judge_links([tuple(r) for r in info["link_records"]], nodes, info.get("straggler_measure", "bandwidth"))
    if info.get("rank_blocks") and info.get("straggler_measure") in ("arrival", "compute"):
        late = judge(info["rank_blocks"], nodes, info["straggler_measure"], reordered=info.get("reordered_blocks"))
        return {"straggler": late.to_dict() if late else None}
    return {}


def annotate(result):
    """``result`` (a ``model.Result``) with every sample judged: the analysing side's step
    after a world returns, before its rounds are pooled."""
    from dataclasses import replace

    samples = tuple(replace(s, info={**s.info, **extra}) if (extra := judged(s.info)) else s
                    for s in result.samples)
    return replace(result, samples=samples)


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
