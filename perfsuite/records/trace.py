"""A job's captured communication: each rank's collectives, in order, read from the traces
PyTorch writes, so the replay kernel (``kernels/replay``) can issue them again.

Two formats are read, one file per rank, tolerant of versions (an argument is found by the
op's schema, not by a fixed position where the trace names the schema):

- a **Kineto trace** (``torch.profiler.profile(record_shapes=True)`` then
  ``export_chrome_trace``; ``perfsuite capture`` writes the same, cut to its communication):
  each ``c10d::*`` op with its tensors' shapes and types, its scalar arguments (split sizes,
  root) and its host timestamps; NCCL's ``record_param_comms`` events add the process group's
  ranks, the dtype and the splits; ``perfsuite capture``'s own ``perfsuite.comm`` annotations
  add the group's ranks and the reduction op, which no PyTorch trace records on gloo; the
  backend's work (gloo's ``gloo:*`` events, NCCL's kernels) is the job's own communication time;
- an **execution trace** (``torch.profiler.ExecutionTraceObserver``): the same ``c10d::*``
  nodes, with no timestamps, group or op.

What a trace cannot say is one line each (``Trace.notes``), never a guess in silence: a call
that names no group is replayed on the whole world, one with no op sums (DDP's and FSDP's
gradients are sums), a point-to-point call is left out.

A trace holds sizes, types and order, never a tensor's contents (``summary`` prints what a
trace holds, for sharing).
"""
from __future__ import annotations

import ast
import glob
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field, replace

from .errors import ConfigError

#: perfsuite capture's annotation of a call made through torch.distributed's Python API:
#: ``perfsuite.comm|ranks=0,1|op=max``.
ANNOTATION = "perfsuite.comm"
#: The manifest ``perfsuite capture`` writes beside the rank files (a stored format).
MANIFEST = "capture.json"
MANIFEST_FORMAT, MANIFEST_VERSION = "perfsuite-capture", 1

KINDS = ("allreduce", "all_gather", "reduce_scatter", "alltoall", "alltoallv", "broadcast", "reduce", "barrier")
#: Trace type names -> perfsuite's dtype names (Kineto's "Input type", the execution trace's
#: "Tensor(...)", record_param_comms' "dtype").
DTYPE_NAMES = {
    "float": "float32", "float32": "float32", "double": "float64", "float64": "float64",
    "c10::half": "float16", "half": "float16", "float16": "float16",
    "c10::bfloat16": "bfloat16", "bfloat16": "bfloat16",
    "int": "int32", "int32": "int32", "long int": "int64", "long": "int64", "int64": "int64",
    "unsigned char": "uint8", "byte": "uint8", "uint8": "uint8", "signed char": "int8", "char": "int8",
    "int8": "int8", "bool": "bool",
}
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8,
               "uint8": 1, "int8": 1, "bool": 1}
REDUCE_OPS = ("sum", "prod", "min", "max", "avg")

#: c10d op -> (kind, output argument, input argument, output splits, input splits, root, op):
#: each an argument name of the op's schema (PyTorch 2.x), or None. The positions are the
#: fallback where a trace carries no schema (Kineto), as these schemas have had them since 2.0.
_C10D = {
    "allreduce_": ("allreduce", "tensors", "tensors", None, None, None, "reduce_op"),
    "allreduce_coalesced_": ("allreduce", "tensors", "tensors", None, None, None, "reduce_op"),
    "_allgather_base_": ("all_gather", "output_tensor", "input_tensor", None, None, None, None),
    "allgather_": ("all_gather", "output_tensors", "input_tensors", None, None, None, None),
    "allgather_into_tensor_coalesced_": ("all_gather", "outputs", "inputs", None, None, None, None),
    "_reduce_scatter_base_": ("reduce_scatter", "output_tensor", "input_tensor", None, None, None, "reduce_op"),
    "reduce_scatter_": ("reduce_scatter", "output_tensors", "input_tensors", None, None, None, "reduce_op"),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", "outputs", "inputs", None, None, None, "reduce_op"),
    "alltoall_base_": ("alltoall", "output", "input", "output_split_sizes", "input_split_sizes", None, None),
    "alltoall_": ("alltoall", "output_tensors", "input_tensors", None, None, None, None),
    "broadcast_": ("broadcast", "tensors", "tensors", None, None, "root_rank", None),
    "reduce_": ("reduce", "tensors", "tensors", None, None, "root_rank", "reduce_op"),
    "barrier": ("barrier", None, None, None, None, None, None),
}
_POSITIONS = {  # argument name -> position, per op, where the trace names no schema
    "allreduce_": ["tensors", "process_group", "reduce_op"],
    "allreduce_coalesced_": ["tensors", "process_group", "reduce_op"],
    "_allgather_base_": ["output_tensor", "input_tensor", "process_group"],
    "allgather_": ["output_tensors", "input_tensors", "process_group"],
    "allgather_into_tensor_coalesced_": ["outputs", "inputs", "process_group"],
    "_reduce_scatter_base_": ["output_tensor", "input_tensor", "process_group", "reduce_op"],
    "reduce_scatter_": ["output_tensors", "input_tensors", "process_group", "reduce_op"],
    "reduce_scatter_tensor_coalesced_": ["outputs", "inputs", "process_group", "reduce_op"],
    "alltoall_base_": ["output", "input", "process_group", "output_split_sizes", "input_split_sizes"],
    "alltoall_": ["output_tensors", "input_tensors", "process_group"],
    "broadcast_": ["tensors", "process_group", "root_rank", "root_tensor"],
    "reduce_": ["tensors", "process_group", "reduce_op", "root_rank", "root_tensor"],
    "barrier": ["tensor", "process_group"],
}
#: Point-to-point and rooted gathers: read, counted, and left out of a replay (one line).
_LEFT_OUT = ("send", "recv_", "recv_any_source_", "gather_", "scatter_", "allgather_coalesced_",
             "monitored_barrier_")
#: record_param_comms' collective names -> kinds.
_PARAM_KINDS = {"allreduce": "allreduce", "all_reduce": "allreduce", "allreduce_coalesced": "allreduce",
                "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
                "all_gather_into_tensor_coalesced": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
                "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
                "reduce_scatter_tensor_coalesced": "reduce_scatter", "all_to_all": "alltoall",
                "alltoall": "alltoall", "all_to_allv": "alltoallv", "alltoall_base": "alltoall",
                "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier"}


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


# --- reading ----------------------------------------------------------------------------------

def _literal(text):
    """A Kineto "Concrete Inputs" value as Python ('' for a tensor)."""
    if not isinstance(text, str):
        return text
    if text in ("", "None"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _count(dims) -> int:
    """Elements of a tensor's dims ([85, 256]) or of a list of tensors' ([[1000], [24]])."""
    if not isinstance(dims, list) or not dims:
        return 0 if isinstance(dims, list) else 1
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)
    return sum(_count(d) for d in dims)


def _dtype(type_text) -> str | None:
    """'float', 'Tensor(c10::BFloat16)', 'GenericList[Tensor(long int)]' -> a dtype name."""
    if not isinstance(type_text, str):
        return None
    inner = re.search(r"Tensor\(([^)]*)\)", type_text)
    key = (inner.group(1) if inner else type_text).strip().lower()
    return DTYPE_NAMES.get(key)


def schema_names(schema: str) -> list[str]:
    """Argument names of a c10d schema, in order: 'c10d::f(Tensor a, int[] b=1) -> ...' -> [a, b]."""
    args = schema.split("(", 1)[1].rsplit(") ->", 1)[0] if "(" in schema else ""
    names, depth, part = [], 0, ""
    for ch in args + ",":
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            token = part.split("=", 1)[0].split()
            if token:
                names.append(token[-1])
            part = ""
        else:
            part += ch
    return names


def _groups_from(text) -> tuple[int, ...] | None:
    value = _literal(text) if isinstance(text, str) else text
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def _annotation(name: str) -> dict:
    """'perfsuite.comm|ranks=0,1|op=max' -> {'ranks': (0, 1), 'op': 'max'}."""
    out: dict = {}
    for part in name.split("|")[1:]:
        key, _, value = part.partition("=")
        if key == "ranks" and value:
            out["group"] = tuple(int(v) for v in value.split(","))
        elif key == "op" and value in REDUCE_OPS:
            out["op"] = value
    return out


def _from_args(op: str, names: list[str], dims: list, types: list, values: list) -> tuple[Comm | None, str | None]:
    """One c10d op's Comm from its arguments (dims and types per argument; values: scalars and
    lists as Python), or (None, why)."""
    spec = _C10D.get(op)
    if spec is None:
        return None, op
    kind, out_arg, in_arg, out_split, in_split, root_arg, _ = spec
    pos = {n: i for i, n in enumerate(names or _POSITIONS.get(op, []))}

    def arg(name, seq):
        i = pos.get(name) if name else None
        return seq[i] if i is not None and i < len(seq) else None

    dtype = (_dtype(arg(in_arg, types)) or _dtype(arg(out_arg, types))) if kind != "barrier" else "float32"
    if dtype is None and arg(in_arg, types) not in ("TensorList", None):
        return None, f"{op} on a type this reader does not know ({arg(in_arg, types)!r})"
    in_count, out_count = _count(arg(in_arg, dims)), _count(arg(out_arg, dims))
    splits_in, splits_out = _groups_or_none(arg(in_split, values)), _groups_or_none(arg(out_split, values))
    if op == "alltoall_" and isinstance(arg(in_arg, dims), list):  # a list of tensors: one per peer
        splits_in = tuple(_count(d) for d in arg(in_arg, dims))
        splits_out = tuple(_count(d) for d in arg(out_arg, dims))
    if kind == "alltoall" and (splits_in or splits_out):
        kind = "alltoallv"
    splits_in, splits_out = in_elements(splits_in, in_count), in_elements(splits_out, out_count)
    root = arg(root_arg, values)
    return Comm(kind, dtype or "", in_count, out_count, root=int(root) if isinstance(root, int) else 0,
                in_splits=splits_in or None, out_splits=splits_out or None), None


def in_elements(splits: tuple[int, ...] | None, count: int) -> tuple[int, ...] | None:
    """Split sizes in elements: c10d's are along dim 0 (rows of a [tokens, hidden] tensor)."""
    if not splits or sum(splits) in (0, count) or count % sum(splits):
        return splits
    row = count // sum(splits)
    return tuple(k * row for k in splits)


def _groups_or_none(value) -> tuple[int, ...] | None:
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def read_kineto(data: dict, source: str) -> tuple[int | None, RankTrace]:
    """(the rank the trace names, its RankTrace) from a Kineto trace's JSON."""
    events = [e for e in data.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    rank = (data.get("distributedInfo") or {}).get("rank")
    ops = sorted((e for e in events if str(e.get("name", "")).startswith("c10d::")), key=lambda e: e["ts"])
    params = [e for e in events if e.get("name") == "record_param_comms"]
    notes = [e for e in events if str(e.get("name", "")).startswith(ANNOTATION)]
    work = sorted((e for e in events if str(e.get("name", "")).startswith("gloo:")
                   or (e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower())),
                  key=lambda e: e["ts"])
    comms, left, used = [], Counter(), set()
    outer_end: dict = {}
    for e in ops:
        tid, end = e.get("tid"), e["ts"] + e.get("dur", 0)
        if e["ts"] < outer_end.get(tid, -1):  # a c10d op inside another (a coalesced call's parts)
            continue
        outer_end[tid] = end
        a = e.get("args") or {}
        op = e["name"].split("::", 1)[1]
        comm, why = _from_args(op, [], a.get("Input Dims") or [], a.get("Input type") or [],
                               [_literal(v) for v in a.get("Concrete Inputs") or []])
        if comm is None:
            left[why] += 1
            continue
        extra = {}
        for p in params:  # NCCL's record of the same call: its group and splits
            if p.get("tid") == tid and e["ts"] <= p["ts"] <= end:
                extra.update(_param_fields(p.get("args") or {}, comm))
                break
        if not comm.dtype:  # a tensor list's type is not recorded: gloo's own event of the call says it
            comm = replace(comm, dtype=_work_dtype(work, used, e["ts"], comm.in_count) or "float32")
        for n in notes:  # perfsuite capture's: the Python call that issued it
            if n.get("tid") == tid and n["ts"] <= e["ts"] and end <= n["ts"] + n.get("dur", 0):
                extra.update(_annotation(n["name"]))
        comms.append(replace(comm, ts_us=float(e["ts"]), dur_us=float(e.get("dur", 0)), **extra))
    if not ops and params:  # a trace of record_param_comms alone
        for p in sorted(params, key=lambda e: e["ts"]):
            comm = _param_comm(p.get("args") or {})
            if comm is None:
                left[str((p.get("args") or {}).get("Collective name"))] += 1
                continue
            comms.append(replace(comm, ts_us=float(p["ts"]), dur_us=float(p.get("dur", 0))))
    span = None
    if comms:
        span = max(c.ts_us + c.dur_us for c in comms) - comms[0].ts_us
    return rank, RankTrace(rank if isinstance(rank, int) else -1, tuple(comms), source, "kineto",
                           work_us=covered_us(work) if work else None, span_us=span, left_out=left)


def _work_dtype(work: list, used: set, after: float, count: int) -> str | None:
    """The dtype of the first unclaimed backend event after ``after`` of ``count`` elements."""
    for i, w in enumerate(work):
        a = w.get("args") or {}
        dims = a.get("Input Dims") or []
        if i not in used and w["ts"] >= after and dims and _count(dims[0]) == count:
            used.add(i)
            return _dtype((a.get("Input type") or [None])[0])
    return None


def covered_us(events: list) -> float:
    """Microseconds during which at least one of ``events`` ran (gloo's threads overlap)."""
    total, end = 0.0, float("-inf")
    for e in sorted(events, key=lambda e: e["ts"]):
        start, stop = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _param_fields(a: dict, comm: Comm) -> dict:
    out = {}
    group = _groups_from(a.get("Process Group Ranks"))
    if group is not None:
        out["group"] = group
    dtype = _dtype(a.get("dtype"))
    if dtype:
        out["dtype"] = dtype
    ins, outs = _groups_from(a.get("In split size")), _groups_from(a.get("Out split size"))
    if ins:
        out["in_splits"] = in_elements(ins, comm.in_count)
    if outs:
        out["out_splits"] = in_elements(outs, comm.out_count)
    if comm.kind == "alltoall" and (ins or outs):
        out["kind"] = "alltoallv"
    return out


def _param_comm(a: dict) -> Comm | None:
    name = str(a.get("Collective name", "")).lower()
    kind = _PARAM_KINDS.get(name)
    dtype = _dtype(a.get("dtype"))
    if kind is None or dtype is None:
        return None
    base = Comm(kind, dtype, int(a.get("In msg nelems") or 0), int(a.get("Out msg nelems") or 0))
    return replace(base, **_param_fields(a, base))


def read_execution_trace(data: dict, source: str) -> RankTrace:
    """A RankTrace from an execution trace's JSON (``ExecutionTraceObserver``)."""
    comms, left = [], Counter()
    nodes = sorted((n for n in data.get("nodes", []) if str(n.get("name", "")).startswith("c10d::")),
                   key=lambda n: n.get("id", 0))
    by_id = {n.get("id"): n for n in data.get("nodes", [])}
    for n in nodes:
        op = n["name"].split("::", 1)[1]
        attrs = {a.get("name"): a.get("value") for a in n.get("attrs", []) if isinstance(a, dict)}
        names = schema_names(attrs.get("op_schema", "")) if attrs.get("op_schema") else []
        ins = n.get("inputs") or {}
        comm, why = _from_args(op, names, ins.get("shapes") or [], ins.get("types") or [],
                               list(ins.get("values") or []))
        if comm is None:
            left[why] += 1
            continue
        parent = by_id.get(n.get("ctrl_deps"))
        if parent is not None and str(parent.get("name", "")).startswith(ANNOTATION):
            comm = replace(comm, **_annotation(parent["name"]))
        comms.append(comm)
    return RankTrace(-1, tuple(comms), source, "execution-trace", left_out=left)


def read_file(path: str) -> tuple[int | None, RankTrace]:
    """(the rank the file names or None, its RankTrace): either format, told by its keys."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"trace file {path} cannot be read as JSON ({exc}); give a Kineto trace "
                          "(torch.profiler export_chrome_trace) or an execution trace per rank") from None
    if isinstance(data, dict) and "traceEvents" in data:
        return read_kineto(data, path)
    if isinstance(data, dict) and "nodes" in data:
        return None, read_execution_trace(data, path)
    raise ConfigError(f"trace file {path} is neither a Kineto trace (no traceEvents) nor an execution "
                      "trace (no nodes)")


def rank_files(path: str) -> list[str]:
    """The per-rank files a ``--trace`` names: a folder's ``*.json`` (but the capture's
    manifest), or a name with ``{rank}`` in it, filled from 0 until a file is missing."""
    if "{rank}" in path:
        files = []
        while os.path.isfile(path.format(rank=len(files))):
            files.append(path.format(rank=len(files)))
        return files
    if os.path.isdir(path):
        return sorted((f for f in glob.glob(os.path.join(path, "*.json")) if os.path.basename(f) != MANIFEST),
                      key=_natural)
    return []


def _natural(path: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", os.path.basename(path))]


def load(path: str, name: str | None = None) -> Trace:
    """Every rank's trace of ``path`` (``rank_files``), each checked against the others."""
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
        notes.append("left out: " + ", ".join(f"{k} x{v}" for k, v in sorted(left.items()))
                     + " (point-to-point and rooted gathers are not replayed)")
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
