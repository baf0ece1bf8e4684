"""How long each collective of a training step took, and how much of it was exposed: not
overlapped with the step's compute, so the step waited for it.

A few steps after the timed epoch run under ``torch.profiler`` (its cost stays out of the timed
steps). From the trace, per rank:

- the collectives: on a GPU, NCCL's kernels on the device; on the host, gloo's work items on its
  worker threads (gloo runs a reduce_scatter as an allreduce of the whole buffer; the work is
  named by the call that launched it, ``c10d::_reduce_scatter_base_``, in launch order);
- the compute: on a GPU every other kernel; on the host every ``aten::`` operator the training
  thread ran (a thread waiting for a collective runs none);
- exposed = the part of a collective's interval covered by no compute interval, the definition of
  Holistic Trace Analysis' communication/computation overlap.

Totals per collective are per step (the profiled steps' sum over their number); collectives
that run side by side each count their own time.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

#: c10d's call -> the field's name of the collective (nccl-tests', as ``perfsuite.collectives``).
CALLS = {"allreduce": "allreduce", "_allgather_base": "all_gather", "allgather": "all_gather",
         "allgather_into_tensor_coalesced": "all_gather", "_reduce_scatter_base": "reduce_scatter",
         "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
         "broadcast": "broadcast", "reduce": "reduce", "alltoall_base": "alltoall",
         "allreduce_coalesced": "allreduce"}
#: NCCL kernel names (ncclDevKernel_AllGather_RING_LL...) -> the collective.
NCCL_KERNELS = {"AllGather": "all_gather", "ReduceScatter": "reduce_scatter", "AllReduce": "allreduce",
                "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send_recv", "AllToAll": "alltoall"}
#: gloo's work names -> the collectives it can carry out (the launch decides which).
GLOO = {"all_gather": ("all_gather",), "allgather": ("all_gather",), "broadcast": ("broadcast",),
        "all_reduce": ("allreduce", "reduce_scatter"), "allreduce": ("allreduce", "reduce_scatter"),
        "reduce": ("reduce",), "alltoall": ("alltoall",), "reduce_scatter": ("reduce_scatter",)}
STEP = "perfsuite:step"

Interval = tuple[float, float]


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of intervals as sorted, disjoint intervals."""
    out: list[list[float]] = []
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def covered(start: float, end: float, union: Sequence[Interval]) -> float:
    """How much of [start, end] the disjoint, sorted ``union`` covers."""
    total = 0.0
    for s, e in union:
        if s >= end:
            break
        total += max(0.0, min(e, end) - max(s, start))
    return total


def exposure(collectives: Iterable[tuple[str, float, float]], compute: Iterable[Interval],
             steps: int) -> dict[str, dict[str, float]]:
    """{collective: {calls, ms, exposed_ms}} per step, from (name, start, end) collectives and
    compute intervals (any one clock, in microseconds as the profiler's)."""
    union = merged(compute)
    out: dict[str, dict[str, float]] = {}
    for name, s, e in collectives:
        row = out.setdefault(name, {"calls": 0.0, "ms": 0.0, "exposed_ms": 0.0})
        row["calls"] += 1
        row["ms"] += (e - s) / 1e3
        row["exposed_ms"] += ((e - s) - covered(s, e, union)) / 1e3
    return {k: {m: v / max(steps, 1) for m, v in row.items()} for k, row in sorted(out.items())}


def named_host_work(launches: Sequence[tuple[str, float]], works: Sequence[tuple[str, float, float]]
                    ) -> list[tuple[str, float, float]]:
    """gloo's work items, each named by the launch it carries out: in start order, a work item
    takes the earliest launch not yet taken of a collective its kind can be (gloo runs its queue
    in launch order)."""
    order = [call for call, _ in sorted(launches, key=lambda c: c[1])]
    taken = [False] * len(order)
    out = []
    for work, s, e in sorted(works, key=lambda w: w[1]):
        kinds = GLOO.get(work, (work,))
        i = next((i for i, call in enumerate(order) if not taken[i] and call in kinds), None)
        if i is not None:
            taken[i] = True
        out.append((order[i] if i is not None else kinds[0], s, e))
    return out


def from_events(events: Iterable[Any], device: str) -> tuple[list, list, list[Interval]]:
    """(collectives, compute, steps) from a profile's FunctionEvents."""
    events = list(events)
    steps = [e for e in events if e.name == STEP]
    main = steps[0].thread if steps else None
    step_spans = [(e.time_range.start, e.time_range.end) for e in steps]
    if device == "cuda":
        kernels = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")
                   and getattr(e, "is_async", False) is False and e.name]
        comm, compute = [], []
        for e in kernels:
            span = (e.time_range.start, e.time_range.end)
            kind = next((v for k, v in NCCL_KERNELS.items() if e.name.startswith("nccl")
                         and f"_{k}" in e.name), None)
            if e.name.startswith("nccl"):
                comm.append((kind or "nccl", *span))
            else:
                compute.append(span)
        return comm, compute, step_spans
    launches = [(_call(e.name), e.time_range.start) for e in events
                if e.thread == main and e.name.startswith("c10d::") and _call(e.name)]
    works = [(e.name[len("gloo:"):], e.time_range.start, e.time_range.end) for e in events
             if e.name.startswith("gloo:")]
    compute = [(e.time_range.start, e.time_range.end) for e in events
               if e.thread == main and e.name.startswith("aten::")]
    return named_host_work(launches, works), compute, step_spans


def _call(name: str) -> str | None:
    return CALLS.get(name[len("c10d::"):].rstrip("_"))


def profile(torch: Any, step: Callable[[], Any], steps: int, device: str
            ) -> tuple[dict[str, dict[str, float]], list[float]]:
    """Run ``steps`` steps under the profiler: (per-collective exposure per step, each step's
    seconds apart from its exposed communication, on the host; none on a GPU)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        for _ in range(steps):
            with record_function(STEP):
                step()
    comm, compute, spans = from_events(prof.events(), device)
    table = exposure(comm, compute, steps)
    union = merged(compute)
    per_step: list[float] = []
    for s, e in spans if device != "cuda" else ():  # a device's kernels run after their host step
        exposed = sum((ce - cs) - covered(cs, ce, union) for _, cs, ce in comm if s <= cs < e)
        per_step.append(max((e - s) - exposed, 0.0) / 1e6)
    return table, per_step
