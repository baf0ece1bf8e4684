"""Peak memory per rank as a metric: its name, how it is judged, and a world's summary of its
ranks' figures (``kernels.memory.Watch``). Pure, so it is tested without a world.

The judged figure of a rank is where its work lives: the allocator's peak on its GPU when the
step runs on one, else its peak resident memory over the timed steps. A world's value is its
largest rank's (the one that runs out first), and which rank that was is kept beside it.

Memory is a property of the code and its libraries, not of the machine's speed: it does not move
with the machine's spells or with a neighbour's load, so a memory verdict sets no rounds aside as
contended or in another machine mode, and its drift between sessions is declared (``DRIFT``), as
``--session-drift`` states a time's, rather than learned from the time metrics' sessions: one
session of baseline decides a memory change (docs/measurements.md, "Memory").
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .model import Metric, Tolerance

METRIC = "peak_mem_MiB"
UNIT = "MiB"
SHORT_NAME = "peak_mem"
MIB = float(1 << 20)
#: What a memory change must exceed to be a change: the smallest growth that matters at scale
#: (a 20% growth fails a job that fitted) with room for the allocator's rounding.
TOLERANCE = Tolerance(-0.10, 0.10)
#: The drift of a memory figure between sessions of one code on one machine, taken as known: the
#: widest measured between sessions here, doubled (docs/measurements.md, "Memory").
DRIFT = 0.01
#: Where a world's memory figures are kept in ``Sample.info``, one dict per rank.
KEY = "memory"


def is_memory(metric: str) -> bool:
    return metric == METRIC


def rank_peak(fig: dict[str, Any]) -> tuple[int | None, str]:
    """(bytes, where) of one rank's judged figure: the device allocator's peak where the rank ran
    on a GPU and it was read, else the host's peak resident memory."""
    if fig.get("device") and fig.get("device_peak_B") is not None:
        return int(fig["device_peak_B"]), "device"
    peak = fig.get("host_peak_B")
    return (int(peak) if peak is not None else None), "host"


def summarize(per_rank: Sequence[dict[str, Any] | None]) -> tuple[dict[str, Metric], dict[str, Any]]:
    """(metrics, info) of a world from each rank's figures: ``peak_mem_MiB`` (the largest rank's
    judged figure), and the info beside it: which rank, where, and every rank's figures. A world
    with a rank that read nothing reports none (a maximum over some ranks is no world's peak)."""
    figs = [dict(f) for f in per_rank if f]
    if not figs or len(figs) != len(per_rank):
        return {}, {}
    peaks = [rank_peak(f) for f in figs]
    if any(b is None for b, _ in peaks):
        return {}, {}
    top = max(range(len(peaks)), key=lambda r: peaks[r][0])
    value = peaks[top][0] / MIB
    where = peaks[top][1]
    info: dict[str, Any] = {METRIC: value, "peak_mem_where": where,
                            "peak_mem_span": figs[top].get("host_span", "timed") if where == "host" else "timed",
                            "rank_peak_mem_MiB": [round(b / MIB, 3) for b, _ in peaks], KEY: figs}
    metrics = {METRIC: Metric(METRIC, value, UNIT, False)}
    host = [f.get("host_peak_B") for f in figs]
    if where == "device" and all(h is not None for h in host):
        info["host_peak_mem_MiB"] = max(host) / MIB
    states = [f.get("model_state_B") for f in figs]
    if all(states):
        totals = [sum(v or 0 for v in s.values()) for s in states]
        info["model_state_MiB"] = [round(t / MIB, 4) for t in totals]
    return metrics, info


def state_prediction(replicated: dict[str, int | None], world_size: int) -> float:
    """Bytes of model state one rank holds under full sharding (FSDP): the replicated state
    (parameters, gradients and optimizer state of one full copy) over the world's ranks."""
    return sum(v or 0 for v in replicated.values()) / max(1, world_size)


def peak_rank(info: dict[str, Any]) -> int | None:
    """The rank with the largest peak (of the last round, where rounds were pooled: a rank's
    number is a label, and a median over rounds of labels is none)."""
    per_rank = info.get("rank_peak_mem_MiB") or []
    return max(range(len(per_rank)), key=per_rank.__getitem__) if per_rank else None


def column(info: dict[str, Any]) -> str:
    """A world table's cell: '412.3 r1' (MiB, the largest rank), '-' where none was read."""
    value = info.get(METRIC)
    if value is None:
        return "-"
    return f"{value:.1f} r{peak_rank(info)}"
