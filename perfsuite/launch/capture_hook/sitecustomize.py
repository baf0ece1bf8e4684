"""perfsuite capture's hook, loaded as ``sitecustomize`` by every Python the captured command
starts (``launch/capture.py`` puts this folder first on PYTHONPATH). Standard library only at
import: the command's own Python need not have perfsuite.

Where ``PERFSUITE_CAPTURE_DIR`` is set, once ``torch.distributed`` is imported:
- ``init_process_group`` starts PyTorch's profiler on the rank (``record_shapes``: each c10d
  op's tensor sizes, types and scalar arguments, with host timestamps);
- each collective called through torch.distributed's Python API runs inside an annotation
  ``perfsuite.comm|ranks=...|op=...``: its process group's ranks and reduction op, which no
  PyTorch trace records on gloo (calls made from C++, DDP's gradient buckets, have none and are
  read as the whole world's sums, which they are by default);
- the default group's ``destroy_process_group``, or the process's exit, stops the profiler and
  writes the rank's trace to ``$PERFSUITE_CAPTURE_DIR/rank{N}.json``: PyTorch's own Kineto
  format, cut to the communication (the c10d ops, their annotations, the backend's work), so a
  trace holds sizes and order, never other ops' arguments or a tensor's contents.
A user's own ``sitecustomize`` further along the path still runs.
"""
import functools
import importlib.machinery
import json
import os
import sys

_OUT = os.environ.get("PERFSUITE_CAPTURE_DIR")
_HERE = os.path.dirname(os.path.abspath(__file__))
_TARGET = "torch.distributed.distributed_c10d"
#: torch.distributed's Python collectives that take a group (and an op).
_CALLS = ("all_reduce", "all_reduce_coalesced", "all_gather_into_tensor", "all_gather_single", "all_gather",
          "reduce_scatter_tensor", "reduce_scatter_single", "reduce_scatter", "all_to_all_single",
          "all_to_all", "broadcast", "reduce", "barrier")
_KEEP = ("c10d::", "record_param_comms", "perfsuite.comm", "gloo:")
_OPS = {"sum": "sum", "product": "prod", "prod": "prod", "min": "min", "max": "max", "avg": "avg"}
_state = {"prof": None, "rank": None}


class _Finder:
    """Patches distributed_c10d right after it executes, before torch.distributed copies its names."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                _patch(module)
            except Exception as exc:  # never break the user's job: say so and run it uncaptured
                print(f"perfsuite capture: cannot hook torch.distributed ({exc}); nothing is captured",
                      file=sys.stderr)
        spec.loader.exec_module = exec_module
        return spec


def _patch(c10d) -> None:
    import inspect

    init, destroy = c10d.init_process_group, c10d.destroy_process_group

    @functools.wraps(init)
    def init_process_group(*args, **kwargs):
        out = init(*args, **kwargs)
        _start(c10d)
        return out

    @functools.wraps(destroy)
    def destroy_process_group(group=None):
        if group is None or group is c10d.GroupMember.WORLD:
            _stop()
        return destroy(group)

    c10d.init_process_group, c10d.destroy_process_group = init_process_group, destroy_process_group
    for name in _CALLS:
        fn = getattr(c10d, name, None)
        if fn is not None:
            setattr(c10d, name, _annotated(fn, inspect.signature(fn), c10d))


def _annotated(fn, signature, c10d):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if _state["prof"] is None:
            return fn(*args, **kwargs)
        import torch

        try:
            bound = signature.bind_partial(*args, **kwargs).arguments
            group = bound.get("group") or c10d.GroupMember.WORLD
            ranks = ",".join(map(str, c10d.get_process_group_ranks(group)))
            op = bound.get("op")
            op = _OPS.get(str(op).rsplit(".", 1)[-1].lower(), "") if op is not None else ""
            label = f"perfsuite.comm|ranks={ranks}|op={op}"
        except Exception:  # an argument this version names otherwise: the call, unannotated
            return fn(*args, **kwargs)
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)
    return call


def _start(c10d) -> None:
    if _state["prof"] is not None:
        return
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    prof = profile(activities=activities, record_shapes=True)
    prof.start()
    _state.update(prof=prof, rank=c10d.get_rank())
    import atexit

    atexit.register(_stop)


def _stop() -> None:
    prof, rank = _state["prof"], _state["rank"]
    if prof is None:
        return
    _state["prof"] = None
    prof.stop()
    tmp = os.path.join(_OUT, f".rank{rank}.full.json")
    prof.export_chrome_trace(tmp)
    with open(tmp) as f:
        data = json.load(f)
    os.unlink(tmp)
    events = [e for e in data.get("traceEvents", []) if isinstance(e, dict) and (
        str(e.get("name", "")).startswith(_KEEP)
        or (e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower()))]
    # The window starts after the first N calls (set-up: DDP's and FSDP's broadcasts, warm-up steps).
    skip = int(os.environ.get("PERFSUITE_CAPTURE_SKIP_CALLS") or 0)
    calls = sorted(e["ts"] for e in events if str(e.get("name", "")).startswith("c10d::") and "ts" in e)
    if skip and len(calls) > skip:
        start = calls[skip]
        events = [e for e in events if e.get("ts", start) >= start or (
            str(e.get("name", "")).startswith("perfsuite.comm") and e["ts"] + e.get("dur", 0) > start)]
    elif skip:
        events = []
    data["traceEvents"] = events
    data.pop("deviceProperties", None)
    path = os.path.join(_OUT, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path, the one this hook stands in front of."""
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == _HERE:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate) as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})
            return


if _OUT:
    sys.meta_path.insert(0, _Finder())
_chain()
