"""What people read: OMB / nccl-tests style tables, and the versioned results file.

One of the three rooms that write files (results JSON, and later Markdown/HTML/plots).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .model import Result, format_size
from .suite import SuiteRun

ALLREDUCE_COLUMNS = ("size", "count", "type", "redop", "time(us)", "min(us)", "max(us)",
                     "p50(us)", "p99(us)", "algbw(GB/s)", "busbw(GB/s)", "valid")


def allreduce_table(result: Result) -> str:
    """nccl-tests-like columns; time is OMB's average over ranks of each rank's mean latency."""
    extra = result.extra or {}
    head = (f"# allreduce  transport={result.transport}  world_size={result.world_size}  "
            f"{'in-place' if extra.get('inplace') else 'out-of-place'}")
    if result.world_start_s is not None:
        head += f"  world start {result.world_start_s:.2f} s"
    # Device transports add busbw as a fraction of the device's measured copy bandwidth.
    of_copy = any("busbw_of_copy" in s.info for s in result.samples)
    columns = ALLREDUCE_COLUMNS + (("busbw/copy",) if of_copy else ())
    lines = [head, "#" + "".join(f"{c:>13}" for c in columns)[1:]]
    for s in result.samples:
        i = s.info
        lines.append(
            f"{i['size_bytes']:>12} {i['count']:>12} {i['dtype']:>12} {i['op']:>12} "
            f"{i['latency_us']:>12.2f} {i['latency_min_us']:>12.2f} {i['latency_max_us']:>12.2f} "
            f"{i['p50_us']:>12.2f} {i['p99_us']:>12.2f} {i['algbw_GBps']:>12.3f} "
            f"{i['busbw_GBps']:>12.3f} {'OK' if s.valid else 'WRONG':>12}"
            + (f" {i.get('busbw_of_copy', float('nan')):>12.3f}" if of_copy else ""))
    device_copy = extra.get("device_copy_GBps")
    if device_copy:
        lines.append(f"# device copy bandwidth {device_copy:.2f} GB/s (D2D on a GPU, measured in "
                     "this world); busbw/copy is busbw as a fraction of it")
    copy = extra.get("host_copy_GBps")
    last = result.samples[-1].info if result.samples else {}
    if copy and last.get("size_bytes", 0) >= 1 << 20:  # a ceiling only means something for large messages
        lines.append(f"# host memory-copy bandwidth {copy:.2f} GB/s; busbw at "
                     f"{format_size(last['size_bytes'])} is {last['busbw_GBps'] / copy:.2f} of it")
    return "\n".join(lines)


def result_table(result: Result) -> str:
    """The table for any benchmark; kernels other than allreduce register their own formatter."""
    fmt = TABLES.get(result.benchmark)
    if fmt is None:
        return "\n".join(f"{s.case.name}: " + ", ".join(f"{m.name}={m.value:.4g} {m.unit}"
                                                          for m in s.metrics.values())
                         for s in result.samples)
    return fmt(result)


TABLES = {"allreduce": allreduce_table}


def run_summary(run: SuiteRun) -> str:
    """Every table, then what was skipped and why, then what failed and the tail of its stderr."""
    parts = [result_table(r) for r in run.results]
    for o in run.failures:
        if o.samples():
            parts.append(result_table(Result(o.spec.benchmark, o.spec.transport, o.spec.world_size,
                                              tuple(o.samples()))) + "\n# (partial: world failed)")
    for o in run.skipped:
        parts.append(f"# SKIPPED {o.spec.label}: {o.skipped}")
    for o in run.failures:
        tail = getattr(o.failure, "stderr_tail", "")
        msg = f"# FAILED {o.failure}"
        if tail:
            msg += "\n" + "\n".join(f"#   | {line}" for line in tail.splitlines()[-8:])
        parts.append(msg)
    bad = [s.case.name for s in run.samples() if not s.valid]
    if bad:
        parts.append("# FAILED validation (wrong sum): " + ", ".join(bad))
    return "\n\n".join(parts)


def write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    """Write JSON so a reader never sees half a file (write a temp file, then rename)."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def write_run_json(path: str | os.PathLike, run: SuiteRun) -> None:
    write_json_atomic(path, run.to_dict())
