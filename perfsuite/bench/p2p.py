"""p2p: point-to-point latency and bandwidth of every link between the world's nodes, one rank
per node, in round-robin rounds (``kernels/p2p``); names the node whose links are slow, or the
slow links themselves. ``perfsuite nodes`` runs it; ``perfsuite run --benchmarks p2p`` too.
"""
from __future__ import annotations

from ..records.model import Case, Opt, Result, format_size, whole_number
from . import BenchmarkSpec, Selection, heading, register
from .allreduce import parse_sizes

DEFAULT_SIZES = "4,1MiB"  # one latency case, one bandwidth case
DEFAULT_REPEATS = 3


def p2p_cases(world_sizes, sizes) -> list[Case]:
    return [Case("p2p", "mpi", n, size_bytes=s) for n in world_sizes for s in sizes]


def cases(sel: Selection) -> list[Case]:
    return p2p_cases(sel.world_sizes, sel.values.get("link_sizes") or parse_sizes(DEFAULT_SIZES, None))


def _link(info: dict, pick) -> str:
    links = info.get("links") or []
    if not links:
        return "-"
    worst = pick(links, key=lambda x: x["value"])
    nodes = info.get("nodes") or []
    a, b = (nodes[worst["from"]], nodes[worst["to"]]) if nodes else (worst["from"], worst["to"])
    return f"{a}->{b}"


def table(result: Result) -> str:
    lines = [heading(result, "one rank per node, round-robin pairs"),
             f"#{'size':>11} {'links':>6} {'measure':>10} {'slowest':>12} {'median':>12} {'unit':>6}  slowest link"]
    for s in result.samples:
        i = s.info
        if "latency_us" in s.metrics:
            worst, mid, unit, what = s.metrics["latency_us"].value, s.metrics["latency_median_us"].value, "us", "latency"
            link = _link(i, max)
        else:
            worst, mid = s.metrics["bw_min_GBps"].value * 1e3, s.metrics["bw_median_GBps"].value * 1e3
            unit, what, link = "MB/s", "bandwidth", _link(i, min)
        lines.append(f"{format_size(s.case.size_bytes or 0):>12} {len(i.get('links') or []):>6} {what:>10} "
                     f"{worst:>12.4g} {mid:>12.4g} {unit:>6}  {link}")
    if any("straggler_why" in s.info for s in result.samples):
        lines.append(f"# no node named: {result.samples[0].info['straggler_why']}")
    return "\n".join(lines)


OPTIONS = (
    Opt("link-sizes", DEFAULT_SIZES, "p2p: message sizes of the link checks (latency up to 8 KiB, "
        "bandwidth above)", metavar="SIZES", parse=lambda text: parse_sizes(text, None)),
    Opt("repeats", DEFAULT_REPEATS, "p2p: how many times every pair is measured (the whole round-robin "
        "schedule, repeated)", metavar="N", parse=lambda v: whole_number(v, "repeats"), knob="repeats"),
)

SPEC = register(BenchmarkSpec(
    "p2p", "point-to-point latency and bandwidth of every node pair, slow nodes and links named",
    kernel="perfsuite.kernels.collectives.p2p", cases=cases, options=OPTIONS, table=table,
    judged=("latency_us", "bw_min_GBps"),
    short_names={"latency_median_us": "latency median", "bw_min_GBps": "slowest link",
                 "bw_median_GBps": "median link"}))
