"""The straggler rule (perfsuite.verdicts.stragglers): its pieces, and its error rates by seeded
simulation through its own code. The unit of replication is a world: one simulated world is
one judgement. Real worlds' rates come from scripts/straggler-rates.sh (docs/stragglers.md).

The simulated worlds carry what real ones showed here: calls share the machine's slow and fast
spells (x3, all ranks alike), a rank is late by its place in the collective (MPICH's two-rank
shared-memory allreduce leaves rank 0 x1.2 later at 4 B; both ends of a slow link wait), and
each call has its own noise with a heavy tail.
"""
from __future__ import annotations


import numpy as np
import pytest

from perfsuite.verdicts import stragglers as st
from perfsuite.kernels import ranks
from perfsuite.kernels.collectives.p2p import partner_in, schedule
from perfsuite.records.model import Case, Sample

SIMS = 200


def world(rng, n: int, calls: int = 256, place_late: dict[int, float] | None = None,
          node_late: dict[int, float] | None = None, order: list[int] | None = None,
          sigma: float = 0.2) -> np.ndarray:
    """calls x ranks of simulated times: ``place_late`` by position in ``order`` (the rank at
    each position), ``node_late`` by rank wherever it stands; ``sigma`` each call's own noise
    (log scale; 0.2 is what clean 1 MiB calls over the emulated TCP links showed here)."""
    order = order or list(range(n))
    spells = np.repeat(rng.choice([1.0, 3.0], size=calls // 32 + 1), 32)[:calls]
    noise = rng.lognormal(0.0, sigma, (calls, n))
    tails = np.where(rng.random((calls, n)) < 0.03, rng.uniform(2, 20, (calls, n)), 1.0)
    t = 1e-6 * spells[:, None] * noise * tails
    for pos, f in (place_late or {}).items():
        t[:, order.index(pos)] *= f
    for r, f in (node_late or {}).items():
        t[:, r] *= f
    return t


def arrival(rng, n: int, place_late=None, node_late=None) -> st.Straggler | None:
    """One simulated world judged as the kernel judges it: the calls in the world's order,
    then again in the second order (positions follow the ranks' new places)."""
    first = world(rng, n, place_late=place_late, node_late=node_late)
    pos = ranks.reorder(n)
    second_order = sorted(range(n), key=lambda r: pos[r])  # rank at each new position
    second = world(rng, n, place_late=place_late, node_late=node_late, order=second_order)
    if not ranks.wants_second_order(first):
        return None  # the world would not time a second order: nothing to name
    return judge(first, "arrival", reordered=second)


def judge(values: np.ndarray, measure: str, reordered: np.ndarray | None = None) -> st.Straggler | None:
    """As the analysing side judges what a world kept (kernels.ranks.kept)."""
    n = values.shape[1]
    return st.judge(ranks.block_ratios(values), [f"node{r}" for r in range(n)], measure,
                    reordered=None if reordered is None else ranks.block_ratios(reordered))


def test_others_median_is_the_median_of_the_other_ranks():
    rng = np.random.default_rng(1)
    for n in (2, 3, 4, 5, 8):
        x = rng.random((9, n))
        want = np.stack([np.median(np.delete(x, r, axis=1), axis=1) for r in range(n)], axis=1)
        assert np.allclose(ranks.others_median(x), want)


def test_the_second_order_moves_every_rank():
    for n in range(2, 65):
        pos = ranks.reorder(n)
        assert sorted(pos) == list(range(n)) and all(pos[r] != r for r in range(n)), n


def test_a_rank_late_by_its_place_is_never_named():
    """Rank 0 (the root) x1.3 later in every call: the second order puts another rank there."""
    rng = np.random.default_rng(2)
    named = sum(arrival(rng, n, place_late={0: 1.3}) is not None for n in (2, 4, 8) for _ in range(SIMS // 3))
    assert named <= 0.01 * SIMS, named


def test_clean_arrival_worlds_name_nobody():
    rng = np.random.default_rng(3)
    named = sum(arrival(rng, n) is not None for n in (2, 3, 4, 8) for _ in range(SIMS // 4))
    assert named <= 0.01 * SIMS, named


def test_a_slow_link_names_its_node_not_its_partner():
    """node2's link slow: in each order, node2 and the rank that waits on it are late (x1.25,
    as measured here at 1 MiB over a 10x slower link, whose pacing also quiets each call's noise
    to ~0.06); only node2 is late in both."""
    rng = np.random.default_rng(4)
    n, hits = 4, 0
    for _ in range(SIMS):
        first = world(rng, n, node_late={2: 1.25, 3: 1.25}, sigma=0.06)  # node2 and its partner
        second = world(rng, n, node_late={2: 1.25, 1: 1.25}, sigma=0.06)  # another partner in order 2
        s = judge(first, "arrival", reordered=second) if ranks.wants_second_order(first) else None
        hits += s is not None and s.rank == 2
    assert hits >= 0.95 * SIMS, hits


def test_arrival_needs_the_second_order():
    rng = np.random.default_rng(5)
    assert judge(world(rng, 4, node_late={1: 3.0}), "arrival") is None


def test_compute_names_the_throttled_rank_and_not_clean_or_two_slow_ones():
    rng = np.random.default_rng(6)
    steps = 20  # torch-epoch's default
    hits = sum((s := judge(world(rng, 4, steps, node_late={3: 2.0}), "compute")) is not None
               and s.rank == 3 for _ in range(SIMS))
    clean = sum(judge(world(rng, 4, steps), "compute") is not None for _ in range(SIMS))
    two = sum(judge(world(rng, 4, steps, node_late={1: 2.0, 3: 2.0}), "compute") is not None
              for _ in range(SIMS))
    assert hits >= 0.95 * SIMS and clean <= 0.01 * SIMS and two <= 0.01 * SIMS, (hits, clean, two)


def links(rng, n: int, slow_node: int | None = None, slow_link: tuple[int, int] | None = None,
          repeats: int = 3) -> list[tuple[int, int, int, float]]:
    """(repeat, from, to, bytes/s) as the p2p kernel records bandwidth."""
    out = []
    for rep in range(repeats):
        for pairs in schedule(n):
            for a, b in pairs:
                for src, dst in ((a, b), (b, a)):
                    v = 1e8 * rng.lognormal(0.0, 0.2)
                    if slow_node in (a, b):
                        v /= 10
                    if slow_link == (a, b):
                        v /= 5
                    out.append((rep, src, dst, v))
    return out


def test_the_schedule_meets_every_pair_once_each_node_busy_in_every_round():
    for n in range(2, 34):
        rounds = schedule(n)
        assert len(rounds) == (n - 1 if n % 2 == 0 else n)
        met = [p for r in rounds for p in r]
        assert sorted(met) == [(a, b) for a in range(n) for b in range(a + 1, n)]
        for r in rounds:
            busy = [x for p in r for x in p]
            assert len(busy) == len(set(busy)) >= n - 1
            assert all(partner_in(r, x) is not None for x in busy)


def test_links_name_the_slow_node_or_the_slow_link_and_nothing_when_clean():
    rng = np.random.default_rng(7)
    nodes = [f"node{r}" for r in range(4)]
    node_hits = link_hits = clean = 0
    for _ in range(SIMS // 4):
        j = st.judge_links(links(rng, 4, slow_node=2), nodes, "bandwidth")
        node_hits += bool(j["straggler"]) and j["straggler"]["rank"] == 2 and not j["slow_links"]
        j = st.judge_links(links(rng, 4, slow_link=(0, 1)), nodes, "bandwidth")
        link_hits += not j["straggler"] and [(x["a"], x["b"]) for x in j["slow_links"]] == [(0, 1)]
        j = st.judge_links(links(rng, 4), nodes, "bandwidth")
        clean += bool(j["straggler"] or j["slow_links"])
    assert node_hits == link_hits == SIMS // 4 and clean == 0, (node_hits, link_hits, clean)


def test_two_nodes_have_no_others_to_be_judged_against():
    rng = np.random.default_rng(8)
    j = st.judge_links(links(rng, 2, slow_node=1), ["a", "b"], "bandwidth")
    assert j["straggler"] is None and "3 or more nodes" in j["straggler_why"]


def test_rounds_pool_to_the_rank_named_in_most_of_them():
    s = st.Straggler(2, "node2", 1.3, 1.2, 1.4, "arrival", 0.99, 2).to_dict()
    t = st.Straggler(1, "node1", 1.3, 1.2, 1.4, "arrival", 0.99, 2).to_dict()
    assert st.pooled([s, s, None])["straggler"]["rank"] == 2
    assert st.pooled([s, None, None])["straggler"] is None
    assert st.pooled([s, t, None])["straggler"] is None
    assert st.pooled([s, None])["round_stragglers"] == [s, None]


def test_the_world_line_names_rank_node_ratio_interval_and_measure():
    case = Case("allreduce", "mpi", 4, size_bytes=1 << 20)
    other = Case("allreduce", "mpi", 4, size_bytes=4)
    s = st.Straggler(2, "node2", 1.8, 1.5, 2.2, "arrival", 0.99, 2)
    samples = [Sample(other, {}, True, (), {"straggler": None}),
               Sample(case, {}, True, (), {"straggler": s.to_dict()})]
    assert st.world_line(samples) == (
        "# straggler: rank 2 on node node2, x1.80 [1.50, 2.20] later than the others (arrival, in two "
        "rank orders; allreduce[mpi-n4-1MiB], named in 1 of 2 case(s))")
    assert st.world_line(samples[:1]) is None


@pytest.mark.parametrize("bad", ["speed", "bandwidth!"])
def test_an_unknown_measure_is_refused(bad):
    with pytest.raises(ValueError, match=bad.replace("!", ".")):
        st.judge(np.ones((4, 2)), ["a", "b"], bad)


def test_what_a_world_keeps_is_what_the_analysing_side_judges():
    rng = np.random.default_rng(9)
    t = world(rng, 4, node_late={1: 2.0})
    kept = ranks.kept(t, "compute")
    assert len(kept["rank_blocks"]) == ranks.BLOCKS and len(kept["rank_ratio"]) == 4
    info = {"nodes": ["a", "b", "c", "d"], **kept}
    assert st.judged(info)["straggler"]["node"] == "b"
    assert st.judged({"nodes": ["a"]}) == {}
    assert ranks.SECOND_ORDER_ABOVE == st.MIN_RATIO


def test_a_p2p_case_keeps_every_link_and_names_the_slow_node():
    from perfsuite.kernels.collectives.p2p import summarize

    rng = np.random.default_rng(10)
    nodes = [f"node{r}" for r in range(4)]
    big = summarize(Case("p2p", "mpi", 4, size_bytes=1 << 20), links(rng, 4, slow_node=2), nodes)
    assert len(big.info["links"]) == 12 and st.judged(big.info)["straggler"]["node"] == "node2"
    assert big.metrics["bw_min_GBps"].value < big.metrics["bw_median_GBps"].value / 5
    lat = [(rep, a, b, 20e-6 * rng.lognormal(0, 0.05)) for rep in range(3) for r in schedule(4) for a, b in r]
    small = summarize(Case("p2p", "mpi", 4, size_bytes=4), lat, nodes)
    assert st.judged(small.info)["straggler"] is None and len(small.info["links"]) == 6
    assert 15 < small.metrics["latency_median_us"].value < 25


def test_the_census_counts_worlds_per_named_node():
    from types import SimpleNamespace as SuiteRun  # census reads only .results

    from perfsuite.records.model import Result

    late = st.Straggler(2, "node2", 1.3, 1.2, 1.4, "arrival", 0.99, 2).to_dict()
    a = Case("allreduce", "mpi", 4, size_bytes=4)
    b = Case("allreduce", "mpi", 4, size_bytes=1 << 20)
    world = Result("allreduce", "mpi", 4, (Sample(a, {}, True, (), {"straggler": None}),
                                           Sample(b, {}, True, (), {"straggler": late})))
    clean = Result("allreduce", "ring", 4, (Sample(a, {}, True, (), {"straggler": None}),))
    link = Result("p2p", "mpi", 4, (Sample(Case("p2p", "mpi", 4, size_bytes=1 << 20), {}, True, (),
                                           {"straggler": None, "slow_links": [{"nodes": ["node0", "node1"]}]}),))
    runs = [SuiteRun(results=[world, clean]), SuiteRun(results=[link])]
    assert st.census(runs) == ["node0: named in 1 of 3 world(s)", "node1: named in 1 of 3 world(s)",
                               "node2: named in 1 of 3 world(s)"]
    assert st.census([SuiteRun(results=[clean])]) == ["no node named in any of 1 world(s)"]
