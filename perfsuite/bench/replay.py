"""replay: a job's captured communication (``--trace``: one PyTorch trace per rank, from
``perfsuite capture`` or the profiler in the user's own script) issued again in order on a
transport, iteration after iteration (``kernels/replay``). One case per trace and transport, on
a world of the trace's ranks; its time is the window's per iteration (the slowest rank), judged
as a step is, beside its peak memory; the table splits it into kinds (time, share, busbw).

"This NCCL on my job's pattern": the case runs wherever a step runs (baselines, ``ab`` with
commits, images or environments as arms, asv, the straggler line).
"""
from __future__ import annotations

import os

from ..records import memory, trace as traces, userbench
from ..records.errors import ConfigError
from ..records.model import Case, Opt, Result
from . import BenchmarkSpec, NothingSelected, Selection, heading, register

GAPS_HELP = ("replay: the job's compute between its calls: off (calls back to back), recorded (the host "
             "time between two calls, spun before the second; Kineto traces), or scaled:F (F times it)")


def parse_trace(text: str) -> str:
    """The trace's path, absolute (every rank reads it), checked now: one line where it is not one job's."""
    path = os.path.abspath(os.path.expanduser(str(text)))
    traces.load(path)
    return path


def parse_gaps(text: str) -> str:
    traces.parse_gaps(text)
    return str(text)


def cases(sel: Selection) -> list[Case]:
    path = sel.values.get("trace")
    if not path:  # a pytest session over every benchmark skips it (NothingSelected); run says this
        raise NothingSelected("replay needs --trace PATH (pytest: --perf-trace PATH): a folder of one trace file per rank (perfsuite capture -o DIR "
                          "writes one), or a name with {rank}, e.g. trace/rank{rank}.json")
    trace = traces.load(path)
    if sel.world_sizes_given and tuple(sel.world_sizes) != (trace.world_size,):
        raise ConfigError(f"--world-sizes {','.join(map(str, sel.world_sizes))}: trace {trace.name!r} has "
                          f"{trace.world_size} ranks and replays on {trace.world_size}; leave --world-sizes out")
    picked = sel.transports if sel.transports is not None else userbench.TRANSPORTS
    return [Case("replay", t, trace.world_size, variant=trace.name) for t in picked]


def table(result: Result) -> str:
    """One world: the window per iteration, and per kind its calls, bytes, time, share and busbw."""
    lines = []
    for s in result.samples:
        i = s.info
        step = s.metrics.get(userbench.METRIC)
        gaps = i.get("replay_gaps", "off") + (f" x{i['replay_gaps_scale']:g}" if "replay_gaps_scale" in i else "")
        lines.append(heading(result, f"trace {i.get('trace')}", f"gaps {gaps}"))
        captured = i.get("captured_comm_us")
        lines.append(f"# window {step.value if step else float('nan'):.4g} us per iteration (p50, slowest rank), "
                     f"p99 {i.get('p99_us', float('nan')):.4g} us, {int(i.get('iters') or 0)} iterations, "
                     f"{i.get('calls_per_window')} calls, peak(MiB) {memory.column(i)}"
                     + (f"; the captured job's own communication: {captured / 1e3:.2f} ms of its "
                        f"{i['captured_span_us'] / 1e3:.2f} ms window" if captured is not None else ""))
        lines.append(f"#{'kind':>15} {'calls':>6} {'bytes':>12} {'time(us)':>10} {'share':>6} {'busbw(GB/s)':>12}")
        for kind, k in (i.get("kinds") or {}).items():
            lines.append(f"{kind:>16} {k['calls']:>6} {traces.format_bytes(k['bytes']):>12} {k['us']:>10.4g} "
                         f"{k['share'] * 100:>5.1f}% {k['busbw_GBps']:>12.4g}")
        lines += [f"# note: {n}" for n in i.get("trace_notes") or []]
    return "\n".join(lines)


OPTIONS = (
    Opt("trace", None, "replay: the captured job, a folder of one trace file per rank (perfsuite capture -o DIR) "
        "or a name with {rank}", metavar="PATH", parse=parse_trace, knob="trace"),
    Opt("replay-gaps", "off", GAPS_HELP, metavar="MODE", parse=parse_gaps, knob="replay_gaps"),
)

SPEC = register(BenchmarkSpec(
    "replay", "a job's captured collectives replayed in order: time per window, per kind, checked",
    kernel="perfsuite.kernels.replay.window", cases=cases, transport_set=userbench.TRANSPORT_SET,
    options=OPTIONS, table=table, judged=(userbench.METRIC, memory.METRIC),
    short_names={userbench.METRIC: "step", memory.METRIC: memory.SHORT_NAME}))
