"""A job's captured communication: each rank's collectives in order (``Comm``, ``Trace``), the
check that the ranks' files are one job's window, and what a trace holds (``summary``). The
files are read by ``trace_formats`` (PyTorch's Kineto and execution traces); ``kernels/replay``
issues the calls again.

What a trace cannot say is one line each (``Trace.notes``), never a guess in silence: a call
that names no group is replayed on the whole world, one with no op sums (DDP's gradient
allreduce is a sum), a point-to-point call is left out. A trace holds sizes, types and order,
never a tensor's contents.
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field, replace

from .errors import ConfigError


#: The manifest ``perfsuite capture`` writes beside the rank files (a stored format).
MANIFEST = "capture.json"
MANIFEST_FORMAT, MANIFEST_VERSION = "perfsuite-capture", 1

KINDS = ("allreduce", "all_gather", "reduce_scatter", "alltoall", "alltoallv", "broadcast", "reduce", "barrier")
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8,
               "uint8": 1, "int8": 1, "bool": 1}
REDUCE_OPS = ("sum", "prod", "min", "max", "avg")

@dataclass(frozen=True)
class Comm:
    """One collective of one rank's trace. Counts are elements of ``dtype``; ``group`` is the
    process group's global ranks (None: the whole world); ``root`` is the group's own rank of
    the root (as c10d's ops take it); splits are elements per peer (alltoallv)."""

    kind: str
    dtype: str = "float32"
    in_count: int = 0
    out_count: int = 0
    group: tuple[int, ...] | None = None
    op: str | None = None  # None: the trace does not say (replayed as sum)
    root: int = 0
    in_splits: tuple[int, ...] | None = None
    out_splits: tuple[int, ...] | None = None
    ts_us: float | None = None  # host time the call was issued, and how long the call took
    dur_us: float | None = None

    def ranks(self, world_size: int) -> tuple[int, ...]:
        return self.group if self.group is not None else tuple(range(world_size))

    def nbytes(self) -> int:
        """Bytes this rank hands the call and gets back, the larger (nccl-tests' size)."""
        return max(self.in_count, self.out_count) * DTYPE_BYTES.get(self.dtype, 1)

    def shape(self, world_size: int) -> tuple:
        """What must be equal between a capture and its replay: kind, dtype, sizes, group, splits."""
        splits = splits_of(self, len(self.ranks(world_size))) if self.kind == "alltoallv" else (None, None)
        return (self.kind, self.dtype, self.in_count, self.out_count, self.ranks(world_size), *splits)


@dataclass(frozen=True)
class RankTrace:
    rank: int
    comms: tuple[Comm, ...]
    source: str  # the file
    format: str  # "kineto" or "execution-trace"
    #: The backend's own time spent in the collectives (gloo's work, NCCL's kernels) over the
    #: window, microseconds, and the window's span; None where the trace has no timestamps.
    work_us: float | None = None
    span_us: float | None = None
    left_out: Counter = field(default_factory=Counter)  # op name -> calls not replayed


@dataclass(frozen=True)
class Trace:
    name: str
    ranks: tuple[RankTrace, ...]
    notes: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def groups(self) -> list[tuple[int, ...]]:
        """Every sub-communicator the traces name, in first-use order over the ranks (each
        rank makes them all, in this order: a communicator is made by every rank together)."""
        seen: dict[tuple[int, ...], None] = {}
        for rt in self.ranks:
            for c in rt.comms:
                if c.group is not None and len(c.group) != self.world_size:
                    seen.setdefault(c.group, None)
        return list(seen)

    def has_times(self) -> bool:
        return all(c.ts_us is not None and c.dur_us is not None for rt in self.ranks for c in rt.comms)


# --- reading (trace_formats) --------------------------------------------------------------

def load(path: str, name: str | None = None) -> Trace:
    """Every rank's trace of ``path`` (``rank_files``), each checked against the others."""
    from .trace_formats import rank_files, read_file

    files = rank_files(path)
    if not files:
        raise ConfigError(f"--trace {path!r} names no trace files; give a folder of one JSON file per rank "
                          "(perfsuite capture -o DIR writes one) or a name with {rank}, e.g. trace/rank{rank}.json")
    read = [read_file(f) for f in files]
    named = [r for r, _ in read]
    if all(isinstance(r, int) for r in named):
        if sorted(named) != list(range(len(read))):
            raise ConfigError(f"--trace {path!r}: the files name ranks {sorted(named)}; a world of {len(read)} "
                              f"needs ranks 0..{len(read) - 1}, one file each")
        read.sort(key=lambda rt: rt[0])
    n = len(read)
    ranks = tuple(replace(rt, rank=i, comms=tuple(complete(c, n) for c in rt.comms)) for i, (_, rt) in enumerate(read))
    trace = Trace(name or trace_name(path), ranks)
    return replace(trace, notes=tuple(check(trace)))


def complete(c: Comm, world_size: int) -> Comm:
    """A list-form call's missing side (Kineto records no dims for a list of tensor lists):
    all_gather's output is its input from every rank, reduce_scatter's input every rank's part."""
    g = len(c.ranks(world_size))
    if c.kind == "all_gather" and not c.out_count:
        return replace(c, out_count=c.in_count * g)
    if c.kind == "reduce_scatter" and not c.in_count:
        return replace(c, in_count=c.out_count * g)
    return c


def trace_name(path: str) -> str:
    """A case's name for the trace: its folder's (or file pattern's folder's) name."""
    base = os.path.basename(os.path.normpath(path if os.path.isdir(path) else os.path.dirname(path) or "."))
    return re.sub(r"[^A-Za-z0-9_.+]", "_", base) or "trace"


def check(trace: Trace) -> list[str]:
    """Raise where the ranks' traces cannot be one job's window (a group's members disagree on
    its calls); return the lines of what the trace does not say and how it is replayed."""
    n = trace.world_size
    if not any(rt.comms for rt in trace.ranks):
        raise ConfigError(f"trace {trace.name!r} holds no collective on any rank; capture a window in which "
                          "the job communicates (c10d ops)")
    per_group: dict[tuple[int, ...], dict[int, list[Comm]]] = {}
    for rt in trace.ranks:
        for c in rt.comms:
            ranks = c.ranks(n)
            if rt.rank not in ranks:
                raise ConfigError(f"trace {trace.name!r}: rank {rt.rank} calls {c.kind} on group {list(ranks)}, "
                                  "which it is not in")
            if max(ranks) >= n:
                raise ConfigError(f"trace {trace.name!r}: a group names rank {max(ranks)}, beyond the "
                                  f"{n} rank files given; give every rank's file")
            per_group.setdefault(ranks, {}).setdefault(rt.rank, []).append(c)
    for ranks, members in per_group.items():
        lengths = {r: len(members.get(r, [])) for r in ranks}
        if len(set(lengths.values())) > 1:
            raise ConfigError(f"trace {trace.name!r}: group {list(ranks)}'s ranks make different numbers of "
                              f"calls ({', '.join(f'rank {r}: {k}' for r, k in lengths.items())}); the files are "
                              "not one window of one job")
        for i, calls in enumerate(zip(*(members[r] for r in ranks))):
            kinds = {c.kind for c in calls}
            if len(kinds) > 1:
                raise ConfigError(f"trace {trace.name!r}: call {i} on group {list(ranks)} is "
                                  f"{' / '.join(sorted(kinds))} on different ranks; the files are not one window")
            mismatch = _mismatch(calls, ranks)
            if mismatch:
                raise ConfigError(f"trace {trace.name!r}: call {i} ({calls[0].kind}) on group {list(ranks)}: {mismatch}")
    notes = []
    no_group = sum(1 for rt in trace.ranks for c in rt.comms if c.group is None)
    if no_group and trace.groups():
        notes.append(f"{no_group} calls (all ranks) name no process group: replayed on the whole world")
    no_op = sum(1 for rt in trace.ranks for c in rt.comms if c.op is None and c.kind in ("allreduce", "reduce_scatter", "reduce"))
    if no_op:
        notes.append(f"{no_op} reductions (all ranks) name no op (this trace does not record it): replayed as sum")
    left = Counter()
    for rt in trace.ranks:
        left.update(rt.left_out)
    if left:
        notes.append("not replayed (calls across ranks): " + ", ".join(f"{k} x{v}" for k, v in sorted(left.items())))
    return notes


def _mismatch(calls: tuple[Comm, ...], ranks: tuple[int, ...]) -> str | None:
    """Why the members' records of one call cannot be one call, or None."""
    kind = calls[0].kind
    if len({c.dtype for c in calls}) > 1:
        return f"dtypes {sorted({c.dtype for c in calls})} differ between ranks"
    if kind in ("allreduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "alltoall") \
            and len({c.in_count for c in calls}) > 1:
        return f"input sizes {[c.in_count for c in calls]} differ between ranks"
    if kind in ("broadcast", "reduce") and len({c.root for c in calls}) > 1:
        return f"roots {[c.root for c in calls]} differ between ranks"
    if kind == "alltoallv":
        g = len(ranks)
        sizes = {len(s) for c in calls for s in (c.in_splits, c.out_splits) if s}
        if sizes and sizes != {g}:
            return (f"its splits are for {sorted(sizes)[0]} ranks, not the group's {g}: the call was on a "
                    "sub-group the trace does not name (PyTorch's gloo traces record no group); capture "
                    "with perfsuite capture, which records each call's group")
        for i, c in enumerate(calls):
            sent = c.in_splits or _even(c.in_count, g)
            for j, other in enumerate(calls):
                got = other.out_splits or _even(other.out_count, g)
                if len(sent) != g or len(got) != g or sent[j] != got[i]:
                    return (f"rank {ranks[i]} sends {sent[j] if j < len(sent) else '?'} elements to rank {ranks[j]}, "
                            f"which expects {got[i] if i < len(got) else '?'}")
    return None


def _even(count: int, n: int) -> tuple[int, ...]:
    return tuple([count // n] * n)


def splits_of(c: Comm, group_size: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(input splits, output splits) of an alltoall(v), elements per peer in group order."""
    return (c.in_splits or _even(c.in_count, group_size), c.out_splits or _even(c.out_count, group_size))


def gaps_us(comms: tuple[Comm, ...]) -> list[float]:
    """Host time between one call's return and the next call's issue, per call (the first
    call's is 0): the job's compute between its collectives, as the host saw it."""
    out = [0.0]
    for prev, c in zip(comms, comms[1:]):
        out.append(max(0.0, c.ts_us - (prev.ts_us + prev.dur_us)))
    return out


GAPS = ("off", "recorded")  # and "scaled:F"


def parse_gaps(text: str) -> tuple[str, float]:
    """'off' | 'recorded' | 'scaled:F' -> (mode, factor)."""
    text = str(text or "off").strip()
    if text in GAPS:
        return text, 1.0 if text == "recorded" else 0.0
    if text.startswith("scaled:"):
        try:
            f = float(text.split(":", 1)[1])
        except ValueError:
            f = -1.0
        if f >= 0:
            return "scaled", f
    raise ConfigError(f"--replay-gaps {text!r} is not off, recorded or scaled:F (F a factor >= 0, e.g. scaled:0.5)")


# --- what a trace holds -----------------------------------------------------------------------

def summary(trace: Trace) -> list[str]:
    """What the trace holds, per rank: its calls per kind and bytes, with groups and dtypes;
    shareable (sizes and order only)."""
    n = trace.world_size
    lines = [f"trace {trace.name}: {n} ranks, formats {', '.join(sorted({rt.format for rt in trace.ranks}))}"]
    for rt in trace.ranks:
        kinds = Counter(c.kind for c in rt.comms)
        nbytes = Counter()
        for c in rt.comms:
            nbytes[c.kind] += c.nbytes()
        parts = ", ".join(f"{k} x{kinds[k]} ({format_bytes(nbytes[k])})" for k in KINDS if kinds[k])
        groups = sorted({c.ranks(n) for c in rt.comms})
        dtypes = sorted({c.dtype for c in rt.comms})
        work = f", backend work {rt.work_us / 1e3:.2f} ms of {rt.span_us / 1e3:.2f} ms" \
            if rt.work_us is not None and rt.span_us else ""
        lines.append(f"  rank {rt.rank}: {len(rt.comms)} calls, {format_bytes(sum(nbytes.values()))} per window: "
                     f"{parts or 'none'}; dtypes {', '.join(dtypes) or '-'}; groups "
                     f"{' '.join('[' + ','.join(map(str, g)) + ']' for g in groups) or '-'}{work}")
    lines += [f"  note: {line}" for line in trace.notes]
    return lines


def format_bytes(n: float) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{int(n)} B"


def manifest(world_size: int, command: list[str], torch_version: str | None) -> dict:
    return {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "world_size": world_size,
            "command": command, "torch": torch_version}
