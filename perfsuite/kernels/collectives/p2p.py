"""Point-to-point between every pair of nodes, in n - 1 rounds (n even; n rounds with a bye
when odd) in which every node is busy with one partner: the circle method of round-robin
tournaments, so a world of n nodes measures all n(n-1)/2 links in O(n) rounds rather than one
pair at a time. One rank per node.

Per case (a message size), per repeat of the whole schedule, per pair: below ``LATENCY_MAX``
bytes a ping-pong (half the round trip, median of ``PINGS``, OMB's osu_latency); above it each
direction's bandwidth, a window of ``WINDOW`` non-blocking sends answered by one 4-byte
acknowledgement, timed by the sender (OMB's osu_bw). Rank 0 gathers every link's values into
the sample; the analysing side judges them (``stragglers.judge_links``): the node whose links are
slower than the others', or a link slower than the rest where neither end is.
"""
from __future__ import annotations

import time

import numpy as np

from ...records.model import Case, Metric, Sample
from ...transports.hosts import node_name
from ..context import RankContext, whole_option

LATENCY_MAX = 8192  # OMB's small-message threshold: latency below it, bandwidth above
PINGS, PING_WARMUP = 100, 10
WINDOW, WINDOW_WARMUP = 8, 1
REPEATS = 3
ACK_TAG, DATA_TAG = 1, 2


def schedule(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair once (the circle method): rank 0 stays, the
    others turn one place a round; with an odd count, the rank paired with the bye rests."""
    ranks = list(range(n)) + ([-1] if n % 2 else [])
    m = len(ranks)
    rounds = []
    for _ in range(m - 1):
        pairs = [(ranks[i], ranks[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs if a >= 0 and b >= 0])
        ranks = [ranks[0], ranks[-1], *ranks[1:-1]]
    return rounds


def partner_in(pairs: list[tuple[int, int]], rank: int) -> int | None:
    return next((b if a == rank else a for a, b in pairs if rank in (a, b)), None)


def ping_pong(comm, me: int, other: int, buf: np.ndarray, pings: int) -> float | None:
    """Half the median round trip in seconds, on the lower rank of the pair (None on the other)."""
    lead = me < other
    times = []
    for i in range(PING_WARMUP + pings):
        if lead:
            t0 = time.perf_counter()
            comm.Send(buf, other, DATA_TAG)
            comm.Recv(buf, other, DATA_TAG)
            if i >= PING_WARMUP:
                times.append((time.perf_counter() - t0) / 2)
        else:
            comm.Recv(buf, other, DATA_TAG)
            comm.Send(buf, other, DATA_TAG)
    return float(np.median(times)) if lead else None


def window(comm, sending: bool, other: int, buf: np.ndarray, ack: np.ndarray) -> float | None:
    """Bytes per second of one window from the sender's side (None on the receiver's)."""
    from mpi4py import MPI

    for w in range(WINDOW_WARMUP + 1):
        t0 = time.perf_counter()
        if sending:
            MPI.Request.Waitall([comm.Isend(buf, other, DATA_TAG) for _ in range(WINDOW)])
            comm.Recv(ack, other, ACK_TAG)
        else:
            MPI.Request.Waitall([comm.Irecv(buf, other, DATA_TAG) for _ in range(WINDOW)])
            comm.Send(ack, other, ACK_TAG)
        took = time.perf_counter() - t0
    return WINDOW * buf.nbytes / took if sending else None


def measure(comm, case: Case, repeats: int, pings: int) -> list[tuple[int, int, int, float]]:
    """This rank's measurements: (repeat, from rank, to rank, value), value seconds of latency
    or bytes/s of bandwidth from ``from`` to ``to``."""
    rank, n = comm.Get_rank(), comm.Get_size()
    size = int(case.size_bytes or 4)
    buf = np.zeros(max(size, 1), dtype=np.uint8)
    ack = np.zeros(4, dtype=np.uint8)
    out = []
    for rep in range(repeats):
        for pairs in schedule(n):
            comm.Barrier()  # every pair of the round starts together: each node busy with one
            other = partner_in(pairs, rank)
            if other is None:
                continue
            if size <= LATENCY_MAX:
                v = ping_pong(comm, rank, other, buf, pings)
                if v is not None:
                    out.append((rep, rank, other, v))
                continue
            for sender in sorted((rank, other)):
                v = window(comm, sender == rank, other, buf, ack)
                if v is not None:
                    out.append((rep, rank, other, v))
    return out


def summarize(case: Case, records: list[tuple[int, int, int, float]], nodes: list[str]) -> Sample:
    """Every link's values -> the case's sample: the slowest and the median link, each link's
    median, and the named node or link. Pure."""
    latency = (case.size_bytes or 0) <= LATENCY_MAX
    per_link: dict[tuple[int, int], list[float]] = {}
    for _, a, b, v in records:
        per_link.setdefault((a, b), []).append(v)
    medians = {k: float(np.median(v)) for k, v in per_link.items()}
    values = list(medians.values())
    info = {"world_size": len(nodes), "size_bytes": case.size_bytes, "nodes": nodes,
            "links": [{"from": a, "to": b, "value": v} for (a, b), v in sorted(medians.items())],
            "pairs": len(schedule(len(nodes))[0]) if len(nodes) > 1 else 0,
            "rounds_per_repeat": len(schedule(len(nodes))),
            # every measurement, for the straggler rule (stragglers.annotate judges them)
            "straggler_measure": "latency" if latency else "bandwidth",
            "link_records": [[rep, a, b, v] for rep, a, b, v in records]}
    if latency:
        us = np.array(values) * 1e6
        metrics = {"latency_us": Metric("latency_us", float(np.max(us)), "us", False, tuple(float(x) for x in us)),
                   "latency_median_us": Metric("latency_median_us", float(np.median(us)), "us", False)}
    else:
        gbps = np.array(values) / 1e9
        metrics = {"bw_min_GBps": Metric("bw_min_GBps", float(np.min(gbps)), "GB/s", True,
                                         tuple(float(x) for x in gbps)),
                   "bw_median_GBps": Metric("bw_median_GBps", float(np.median(gbps)), "GB/s", True)}
    return Sample(case, metrics, True, (), info)


def run(ctx: RankContext) -> dict:
    comm = ctx.comm
    repeats = whole_option(ctx.options, "repeats", REPEATS, 1, "repeats")
    pings = whole_option(ctx.options, "iters", PINGS, 1, "ping-pongs (iters)")
    nodes = comm.gather(node_name(), root=0)
    for case in ctx.cases:
        records = comm.gather(measure(comm, case, repeats, pings), root=0)
        if ctx.is_root:
            ctx.emit(summarize(case, [r for rs in records for r in rs], nodes).to_dict())
    comm.Barrier()
    return {"schedule": "circle", "repeats": repeats}
