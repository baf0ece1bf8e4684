"""alltoallv as a collective of its own: the split matrices (rows sum to the total, zipf's skew,
nccl-tests' distance pattern, the same matrix every time), the record's exact values (a chunk
in the wrong place or of the wrong length is caught; the pad is zeros), what each transport is
handed (MPI's counts and displacements, NCCL's sends and receives), the case names and the
table; then real worlds on mpi (both loops) and torch-gloo at 2 and 4 ranks, and a wrong result
failing the world."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conftest import perfsuite, said
from perfsuite import bench, collectives
from perfsuite.bench.allreduce import allreduce_cases, parse_splits
from perfsuite.collectives.alltoallv import split_matrix
from perfsuite.records.errors import ConfigError
from perfsuite.records.model import Case
from perfsuite.transports import collectives_of
from perfsuite.transports.base import Call, peer_counts
from perfsuite.transports.nccl import peer_plan

A2AV = collectives.get("alltoallv")


@pytest.mark.parametrize("splits", collectives.SPLITS)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("total", [1, 7, 64, 1000, 262144])
def test_every_row_sums_to_the_total_in_whole_elements(splits, n, total):
    m = split_matrix(splits, n, total)
    assert len(m) == n and all(len(row) == n for row in m)
    assert all(sum(row) == total for row in m)
    assert all(isinstance(c, int) and c >= 0 for row in m for c in row)
    assert split_matrix(splits, n, total) == m  # deterministic: every rank builds the same one


def test_uniform_is_equal_and_distance_is_nccl_tests_pattern():
    assert split_matrix("uniform", 4, 400) == ((100,) * 4,) * 4
    # nccl-tests' spread 1.0: peer at distance d gets d / (n(n-1)/2) of the total, itself nothing
    assert split_matrix("distance", 4, 600) == ((0, 100, 200, 300), (300, 0, 100, 200),
                                                 (200, 300, 0, 100), (100, 200, 300, 0))
    # every rank sends and receives the same total there
    m = split_matrix("distance", 4, 600)
    assert [sum(col) for col in zip(*m)] == [600] * 4


def test_zipf_skews_the_receivers_alike_for_every_sender():
    """An MoE router's load: receiver j's share ~ 1/(j+1) (s = 1), the same order for every
    sender, so rank 0 receives the most and the receive totals are uneven."""
    n, total = 4, 25 * 1000
    m = split_matrix("zipf", n, total)
    assert len(set(m)) == 1  # every sender alike
    row = m[0]
    assert list(row) == sorted(row, reverse=True)
    assert row[0] == pytest.approx(2 * row[1], abs=1) and row[0] == pytest.approx(4 * row[3], abs=1)
    recv = [sum(col) for col in zip(*m)]
    assert recv[0] == 4 * row[0] and recv[0] / recv[-1] == pytest.approx(4, rel=1e-3)
    # with fewer elements than peers the shares still round to the total, the popular first
    assert split_matrix("zipf", 4, 4)[0] == (2, 1, 1, 0)


def test_buffers_sizes_and_count_follow_nccl_tests():
    """send is the total, recv the largest receive total; size is the most bytes any rank sends
    or receives; count is nccl-tests' per-peer paramcount; OMB's size one peer's part."""
    n, size = 4, 1 << 20
    m = A2AV.matrix(size, "float32", n, "zipf")
    total = size // 4
    assert all(sum(row) == total for row in m)
    most = max(sum(col) for col in zip(*m))
    assert A2AV.buffers(size, "float32", n, m) == (total, most)
    assert A2AV.sizes(size, "float32", n, m) == {"size_bytes": most * 4, "count": total // n,
                                                 "omb_size_bytes": total // n * 4}
    # uniform is alltoall's layout
    assert A2AV.sizes(size, "float32", n, A2AV.matrix(size, "float32", n)) == \
        collectives.get("alltoall").sizes(size, "float32", n)
    # at least one element per peer, rounded down to a multiple of n, as alltoall
    assert A2AV.matrix(4, "float32", n) == ((1,) * 4,) * 4
    assert A2AV.busbw_factor(n) == 0.75 and collectives.get("alltoall").matrix(size, "float32", n) == ()


def deliver(sent: list[np.ndarray], m, n: int, recv_count: int) -> list[np.ndarray]:
    """What MPI_Alltoallv leaves in each rank's recv (zeros first) for these send buffers."""
    out = []
    for r in range(n):
        got = np.zeros(recv_count)
        at = 0
        for q in range(n):
            start = sum(m[q][:r])
            got[at:at + m[q][r]] = sent[q][start:start + m[q][r]]
            at += m[q][r]
        out.append(got)
    return out


@pytest.mark.parametrize("splits", collectives.SPLITS)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_exact_values_catch_a_misplaced_or_mislengthed_chunk(splits, n):
    m = A2AV.matrix(4096, "float32", n, splits)
    s, r = A2AV.buffers(4096, "float32", n, m)
    sent = [A2AV.inputs(q, n, s, "sum", 0, matrix=m) for q in range(n)]
    assert all(x.size == s for x in sent)
    got = deliver(sent, m, n, r)
    for rank in range(n):
        want = A2AV.expected(rank, n, r, "sum", 0, matrix=m)
        assert want.size == r and np.array_equal(got[rank], want)
        mine = sum(row[rank] for row in m)
        assert not want[mine:].any()  # the pad is zeros, and checked as such
        assert want.max() <= 64  # exact in bfloat16
    # sender 1's largest chunk one element short, the next peer's one long: both caught
    wrong = [list(row) for row in m]
    j = int(np.argmax(m[1]))
    wrong[1][j] -= 1
    wrong[1][(j + 1) % n] += 1
    bad = deliver(sent, wrong, n, r + 1)  # room for the one too many, zero where right
    for rank in (j, (j + 1) % n):
        assert not np.array_equal(bad[rank], A2AV.expected(rank, n, r + 1, "sum", 0, matrix=m))
    # senders' chunks swapped (the wrong place) are caught
    swapped = got[0].copy()
    a, b = m[0][0], m[1][0]
    if a and b:
        swapped[:b], swapped[b:a + b] = got[0][a:a + b], got[0][:a]
        assert not np.array_equal(swapped, A2AV.expected(0, n, r, "sum", 0, matrix=m))


def test_each_transport_gets_its_own_counts_and_displacements():
    m = split_matrix("zipf", 3, 11)  # (6, 3, 2) from every rank
    assert peer_counts(m, 1) == ((6, 3, 2), (0, 6, 9), (3, 3, 3), (0, 3, 6))
    m = split_matrix("distance", 3, 6)  # ((0, 2, 4), (4, 0, 2), (2, 4, 0))
    assert peer_counts(m, 0) == ((0, 2, 4), (0, 0, 2), (0, 4, 2), (0, 0, 4))
    # NCCL: a send and a receive per peer at byte offsets (float32), zero counts issue nothing
    assert peer_plan(m, 0, 4) == ((0, 0, 0, 0, 0), (1, 0, 2, 0, 4), (2, 8, 4, 16, 2))
    assert Call("alltoallv", splits=m) == Call("alltoallv", splits=m)  # hashable: a graph's key
    assert hash(Call("alltoallv", splits=m))


def test_the_splits_are_an_axis_named_in_the_case():
    cases = allreduce_cases(["mpi"], [4], [1 << 20], benchmark="alltoallv", splits=("uniform", "zipf"))
    assert [c.name for c in cases] == ["alltoallv[mpi-n4-1MiB]", "alltoallv[mpi-n4-1MiB-zipf]"]
    assert [collectives.splits_of(c.variant) for c in cases] == ["uniform", "zipf"]
    # a regular collective ignores them; op and root read back as before
    assert [c.name for c in allreduce_cases(["mpi"], [2], [4], splits=("zipf",))] == ["allreduce[mpi-n2-4B]"]
    assert collectives.op_root("max-root1") == ("max", 1) and collectives.splits_of("max-root1") == "uniform"
    assert collectives.variant("sum", 0, "distance") == "distance"
    assert parse_splits("all") == collectives.SPLITS
    with pytest.raises(ConfigError, match="splits 'pareto' is unknown; choose from uniform, zipf, distance"):
        parse_splits("uniform,pareto")
    assert "alltoallv" in bench.names() and "alltoallv" in collectives_of("mpi")
    assert "alltoallv" in collectives_of("torch-gloo") and "alltoallv" in collectives_of("nccl")
    layout = bench.get("alltoallv").asv
    assert layout.axes[4:] == ("splits", "timing", "straggler")
    assert layout.values(Case("alltoallv", "mpi", 4, 1 << 20, variant="zipf"))[-1] == "zipf"


def test_a_regular_transport_says_why_not():
    from perfsuite import transports

    assert "allreduce design" in transports.unavailable_reason("ring", "alltoallv")
    from perfsuite.transports.base import AllreduceTransport

    class Bare(AllreduceTransport):
        collectives = ("allreduce", "alltoallv")

    t = Bare(None)
    assert t.lacks(Call("alltoallv"), "float32") == "alltoallv needs its split matrix on the call (Call.splits)"
    assert t.lacks(Call("alltoall"), "float32").startswith("base has no alltoall")


# --- worlds -----------------------------------------------------------------------------------

def run_json(tmp_path, *args, **env) -> tuple:
    r = perfsuite("run", "--benchmarks", "alltoallv", "--iters", "20", "--warmup", "2",
                  "--max-contention", "off", "--json", "out.json", *args, cwd=tmp_path, **env)
    data = json.loads((tmp_path / "out.json").read_text()) if (tmp_path / "out.json").exists() else {}
    return r, [s for w in data.get("results", []) for s in w.get("samples", [])]


@pytest.mark.world
@pytest.mark.parametrize("transport,timing", [("mpi", "native"), ("mpi", "python"), ("torch-gloo", "python")])
def test_alltoallv_is_exact_on_every_split_at_2_and_4_ranks(tmp_path, transport, timing, no_leftover_ranks):
    host = ("--host-timing", timing) if transport == "mpi" else ()
    r, got = run_json(tmp_path, "--transports", transport, "--world-sizes", "2,4", "--splits", "all",
                      "--sizes", "4,64KiB", *host)
    assert r.returncode == 0, said(r)
    assert len(got) == 2 * 3 * 2, said(r)
    for s in got:
        i, case = s["info"], s["case"]
        assert s["valid"] and i["invalid_ranks"] == [] and i["valid_fresh"] and i["valid_timed"], s
        assert i["timing"] == timing, i
        n, splits = case["world_size"], collectives.splits_of(case["variant"])
        assert i["splits"] == splits
        m = A2AV.matrix(case["size_bytes"], "float32", n, splits)
        assert i["size_bytes"] == 4 * max(max(sum(row) for row in m), max(sum(col) for col in zip(*m)))
        assert i["busbw_GBps"] == pytest.approx(i["algbw_GBps"] * (n - 1) / n)
    names = {f"alltoallv[{transport}-n{n}-64KiB{v}]" for n in (2, 4) for v in ("", "-zipf", "-distance")}
    assert names <= {f"alltoallv[{s['case']['transport']}-n{s['case']['world_size']}-64KiB"
                     f"{'-' + s['case']['variant'] if s['case']['variant'] else ''}]" for s in got}
    # the table: nccl-tests' columns and the splits; zipf's size is the busiest receiver's bytes
    assert re.search(r"^#\s+size\s+count\s+type\s+redop\s+splits\s+time\(us\)", r.stdout, re.M), said(r)
    assert re.search(r"^\s+125824\s+4096\s+float32\s+none\s+zipf\s", r.stdout, re.M), said(r)


@pytest.mark.world
def test_a_wrong_alltoallv_result_fails_the_world(tmp_path, no_leftover_ranks):
    r, got = run_json(tmp_path, "--transports", "mpi", "--world-sizes", "2", "--splits", "zipf",
                      "--sizes", "4KiB", PERFSUITE_TEST_FAULT="corrupt@1")
    assert r.returncode == 4, said(r)
    assert re.search(r"INVALID: alltoallv\[mpi-n2-4KiB-zipf\] returned wrong results on rank 1\b",
                     r.stdout + r.stderr), said(r)
    assert len(got) == 1 and not got[0]["valid"] and got[0]["info"]["invalid_ranks"] == [1]
