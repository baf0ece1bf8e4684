"""The trace files ``records/trace`` is read from, one per rank, tolerant of versions (an
argument is found by the op's schema where the trace names it, else by the position these
schemas have had since PyTorch 2.0):

- a **Kineto trace** (``torch.profiler.profile(record_shapes=True)`` then
  ``export_chrome_trace``; ``perfsuite capture`` writes the same, cut to its communication):
  each ``c10d::*`` op with its tensors' shapes and types, its scalar arguments (split sizes,
  root) and its host timestamps; NCCL's ``record_param_comms`` events add the process group's
  ranks, the dtype and the splits; ``perfsuite capture``'s own ``perfsuite.comm`` annotations
  add the group's ranks and the reduction op, which no PyTorch trace records on gloo; the
  backend's work (gloo's ``gloo:*`` events, NCCL's kernels) is the job's own communication time;
- an **execution trace** (``torch.profiler.ExecutionTraceObserver``): the same ``c10d::*``
  nodes, with no timestamps, group or op.
"""
from __future__ import annotations

import ast
import glob
import json
import math
import os
import re
from collections import Counter
from dataclasses import replace

from .errors import ConfigError
from .trace import MANIFEST, REDUCE_OPS, Comm, RankTrace

#: perfsuite capture's annotation of a call made through torch.distributed's Python API:
#: ``perfsuite.comm|ranks=0,1|op=max``.
ANNOTATION = "perfsuite.comm"
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
#: c10d op -> (kind, output argument, input argument, output splits, input splits, root):
#: each an argument name of the op's schema (PyTorch 2.x), or None. The positions are the
#: fallback where a trace carries no schema (Kineto), as these schemas have had them since 2.0.
_C10D = {
    "allreduce_": ("allreduce", "tensors", "tensors", None, None, None),
    "allreduce_coalesced_": ("allreduce", "tensors", "tensors", None, None, None),
    "_allgather_base_": ("all_gather", "output_tensor", "input_tensor", None, None, None),
    "allgather_": ("all_gather", "output_tensors", "input_tensors", None, None, None),
    "allgather_into_tensor_coalesced_": ("all_gather", "outputs", "inputs", None, None, None),
    "_reduce_scatter_base_": ("reduce_scatter", "output_tensor", "input_tensor", None, None, None),
    "reduce_scatter_": ("reduce_scatter", "output_tensors", "input_tensors", None, None, None),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", "outputs", "inputs", None, None, None),
    "alltoall_base_": ("alltoall", "output", "input", "output_split_sizes", "input_split_sizes", None),
    "alltoall_": ("alltoall", "output_tensors", "input_tensors", None, None, None),
    "broadcast_": ("broadcast", "tensors", "tensors", None, None, "root_rank"),
    "reduce_": ("reduce", "tensors", "tensors", None, None, "root_rank"),
    "barrier": ("barrier", None, None, None, None, None),
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
#: record_param_comms' collective names -> kinds.
_PARAM_KINDS = {"allreduce": "allreduce", "all_reduce": "allreduce", "allreduce_coalesced": "allreduce",
                "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
                "all_gather_into_tensor_coalesced": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
                "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
                "reduce_scatter_tensor_coalesced": "reduce_scatter", "all_to_all": "alltoall",
                "alltoall": "alltoall", "all_to_allv": "alltoallv", "alltoall_base": "alltoall",
                "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier"}


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
    kind, out_arg, in_arg, out_split, in_split, root_arg = spec
    pos = {n: i for i, n in enumerate(names or _POSITIONS.get(op, []))}

    def arg(name, seq):
        i = pos.get(name) if name else None
        return seq[i] if i is not None and i < len(seq) else None

    dtype = (_dtype(arg(in_arg, types)) or _dtype(arg(out_arg, types))) if kind != "barrier" else "float32"
    if dtype is None and arg(in_arg, types) not in ("TensorList", None):
        return None, f"{op} on a type this reader does not know ({arg(in_arg, types)!r})"
    in_count, out_count = _count(arg(in_arg, dims)), _count(arg(out_arg, dims))
    splits_in, splits_out = _groups_from(arg(in_split, values)), _groups_from(arg(out_split, values))
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

