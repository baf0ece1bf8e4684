"""The option group, defined once and added to both faces (pytest-benchmark's habit):
``--perf-<name>`` plus an ini twin ``perf_<name>`` in the pytest plugin, ``--<name>`` in the CLI.
Values are turned into checked objects (``Selection``, ``SuiteConfig``) at this boundary; a bad
value raises ConfigError naming it, which each face reports its own way (UsageError, exit 2).
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from . import cases as _cases
from . import transports
from .errors import ConfigError
from .launch.launchers import FLAVORS, LAUNCHERS, LaunchConfig, parse_env
from .suite import DEFAULT_TIMEOUT_S, Selection, SuiteConfig


@dataclass(frozen=True)
class Opt:
    name: str  # dashed, without prefix
    default: Any
    help: str
    kind: str = "str"  # str | flag | list
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


OPTIONS: list[Opt] = [
    Opt("transports", "all", "comma list of transports, or 'all' (unavailable ones are skipped with the reason)", metavar="LIST"),
    Opt("world-sizes", "2", "comma list of world sizes (ranks), e.g. 1,2,4", metavar="LIST"),
    Opt("sizes", _cases.DEFAULT_SIZES, "message sizes: 4,1024,1MiB or a range MIN:MAX[:FACTOR] (default x4)", metavar="SIZES"),
    Opt("dtypes", _cases.DEFAULT_DTYPE, "comma list of float32, float64, float16, int32", metavar="LIST"),
    Opt("launcher", "mpiexec", f"how worlds start: {', '.join(LAUNCHERS)}", metavar="NAME"),
    Opt("launcher-program", None, "path of mpiexec/srun if not the one on PATH", metavar="PATH"),
    Opt("launcher-args", None, "extra launcher arguments, split like a shell: srun '--mpi=pmi2' "
        "(where Slurm's MpiDefault is none), mpiexec '-bind-to core'", metavar="ARGS"),
    Opt("mpi-flavor", "auto", f"mpiexec's MPI: {', '.join(FLAVORS)} (auto asks mpiexec --version)", metavar="NAME"),
    Opt("hostfile", None, "hostfile for multi-node worlds (MPICH -f, Open MPI --hostfile, srun SLURM_HOSTFILE)", metavar="PATH"),
    Opt("hosts", None, "comma list of hosts instead of a hostfile", metavar="LIST"),
    Opt("ppn", None, "ranks per node", metavar="N"),
    Opt("oversubscribe", "auto", "Open MPI --oversubscribe: auto (when ranks > cores), yes, no", metavar="WHEN"),
    Opt("env", [], "NAME=VALUE passed to every rank (repeatable), e.g. NCCL_DEBUG=INFO", kind="list", metavar="NAME=VALUE"),
    Opt("timeout", str(DEFAULT_TIMEOUT_S), "seconds one world may take before it is killed", metavar="S"),
    Opt("iters", None, "timed iterations per size (default: by size, OMB-like)", metavar="N"),
    Opt("warmup", None, "warm-up iterations per size (default: by size)", metavar="N"),
    Opt("inplace", False, "in-place allreduce (default out-of-place)", kind="flag"),
    Opt("no-validate", False, "skip checking each result against the exact expected sum", kind="flag"),
    Opt("workdir", None, "folder for world scratch files (must be shared across nodes on a cluster)", metavar="DIR"),
    Opt("rounds", "1", "rounds: run each world this many times and pool them (noise on shared machines)", metavar="N"),
    Opt("max-rounds", None, "adaptive sampling: more rounds, up to N, until each median is known to --precision", metavar="N"),
    Opt("precision", "0.01", "adaptive sampling stops when the 95% CI of each median is within +-this fraction", metavar="F"),
    Opt("round-budget", None, "adaptive sampling stops after this many seconds per world", metavar="S"),
    Opt("system", None, "baseline system name [default: from this machine's fingerprint]", metavar="NAME"),
    Opt("baseline-dir", "baselines", "folder of baselines/<system>/<benchmark>.json", metavar="DIR"),
    Opt("baseline-update", False, "record this run as the baselines (atomic; prints what changed)", kind="flag"),
    Opt("strict", False, "also fail improvements beyond tolerance (a prompt to refresh the baseline)", kind="flag"),
    Opt("alpha", None, "significance level of the gate's Mann-Whitney U test: a change beyond tolerance "
        "counts only when p < alpha [default: 0.01]", metavar="P"),
    Opt("tolerance", None, "override every tolerance: 0.05 or LOWER:UPPER like -0.10:0.05 [default: per metric]", metavar="TOL"),
    Opt("emulated-network", None, "run every world with one rank per emulated node (network namespaces, "
        "tbf-shaped veth links; root): 1gbit, 10gbit, 25gbit", metavar="RATE"),
    Opt("stalls", None, "run the stall breakdown benchmark (benchmarks/test_stalls.py) for MODEL, "
        "e.g. small-cnn; its network run uses --emulated-network; unset: skipped", metavar="MODEL"),
    Opt("report", None, "after the run, write index.html, summary.md, CSV and PNG plots into DIR", metavar="DIR"),
    Opt("models", _cases.DEFAULT_MODELS, "tf-epoch: comma list of small-cnn, mobilenet, resnet50, or 'all'", metavar="LIST"),
    Opt("batches", _cases.DEFAULT_BATCHES, "tf-epoch: comma list of per-worker batch sizes, e.g. 16,32,64", metavar="LIST"),
    Opt("image-size", None, "tf-epoch: image height = width in pixels (default: the model's, 32 or 224)", metavar="N"),
    Opt("fusion-threshold", None, "tf-epoch mpi/horovod: tensor fusion buffer in bytes, 0 = one allreduce "
        "per tensor (default 64MiB)", metavar="SIZE"),
]


def add_options(addoption: Callable[..., Any], prefix: str = "",
                names: Collection[str] | None = None) -> None:
    """Add every option (or only ``names``) through ``addoption`` (argparse's add_argument or
    pytest's group.addoption)."""
    for o in OPTIONS:
        if names is not None and o.name not in names:
            continue
        flag = f"--{prefix}{o.name}"
        dest = f"{prefix.replace('-', '_')}{o.dest}"
        text = o.help.replace("%", "%%")  # argparse %-formats help: '95% CI' would crash --help
        if o.kind == "flag":
            addoption(flag, action="store_true", default=None, dest=dest, help=text)
        elif o.kind == "list":
            addoption(flag, action="append", default=None, dest=dest, metavar=o.metavar, help=text)
        else:
            addoption(flag, default=None, dest=dest, metavar=o.metavar, help=f"{text} [default: {o.default}]")


def _int(value: Any, what: str, low: int = 1) -> int | None:
    if value in (None, ""):
        return None
    s = str(value).strip()
    if not s.isdigit() or int(s) < low:
        raise ConfigError(f"{what} {value!r} must be a whole number >= {low}")
    return int(s)


def _timeout(value: Any) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = -1.0
    if not t > 0:
        raise ConfigError(f"timeout {value!r} must be a number of seconds > 0, e.g. 120")
    return t


def selection(values: Mapping[str, Any], benchmark: str = "allreduce", **extra: Any) -> Selection:
    """A checked Selection from raw option values (keys are ``Opt.dest``; missing means default)."""
    v = {o.dest: o.default for o in OPTIONS} | {k: x for k, x in values.items() if x is not None}
    # Names are checked against every benchmark's transports, then filtered to this one's, so
    # one --transports list serves a session that runs allreduce and training cases together.
    every = list(dict.fromkeys(s.name for s in transports.REGISTRY.values()))
    own = set(transports.names(benchmark))
    picked = tuple(t for t in _cases.parse_names(v["transports"], every, "transport") if t in own)
    dtypes = _cases.parse_dtypes(v["dtypes"])
    sizes: tuple[int, ...] = ()
    for dt in dtypes:
        sizes = _cases.parse_sizes(v["sizes"], dt)
    if benchmark == "tf-epoch":  # marker kwargs (extra) win over the options
        extra = {"models": v["models"], "batches": v["batches"], **extra}
    return Selection(benchmark=benchmark, transports=picked,
                     world_sizes=_cases.parse_world_sizes(v["world_sizes"]),
                     sizes=sizes, dtypes=dtypes, extra=extra)


def _launcher_args(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        return tuple(shlex.split(str(text)))
    except ValueError as exc:
        raise ConfigError(f"launcher args {text!r} cannot be split like a shell ({exc}); "
                          "quote them as a shell would, e.g. '--mpi=pmi2'") from None


def suite_config(values: Mapping[str, Any]) -> SuiteConfig:
    v = {o.dest: o.default for o in OPTIONS} | {k: x for k, x in values.items() if x is not None}
    over = str(v["oversubscribe"]).lower()
    if over not in ("auto", "yes", "no"):
        raise ConfigError(f"oversubscribe {v['oversubscribe']!r} must be auto, yes or no")
    hosts = tuple(h.strip() for h in str(v["hosts"]).split(",") if h.strip()) if v["hosts"] else ()
    if v["hostfile"] and not os.path.isfile(v["hostfile"]):
        raise ConfigError(f"hostfile {v['hostfile']!r} does not exist")
    launch = LaunchConfig(launcher=str(v["launcher"]), flavor=str(v["mpi_flavor"]),
                          program=v["launcher_program"], hostfile=v["hostfile"], hosts=hosts,
                          ranks_per_node=_int(v["ppn"], "ranks per node (ppn)"),
                          oversubscribe=None if over == "auto" else over == "yes",
                          env=parse_env(v["env"] or []),
                          extra_args=_launcher_args(v["launcher_args"]))
    options: dict[str, Any] = {"inplace": bool(v["inplace"]), "validate": not v["no_validate"]}
    if (it := _int(v["iters"], "iterations")) is not None:
        options["iters"] = it
    if (wu := _int(v["warmup"], "warm-up iterations", low=0)) is not None:
        options["warmup"] = wu
    if (px := _int(v["image_size"], "image size")) is not None:
        options["image_size"] = px
    if v["fusion_threshold"] not in (None, ""):
        ft = str(v["fusion_threshold"]).strip()
        options["fusion_threshold"] = 0 if ft == "0" else _cases.parse_size(ft, "fusion threshold")
    network = None
    if v.get("emulated_network"):
        from .launch.netns import parse_shaping

        network = parse_shaping(v["emulated_network"])
    return SuiteConfig(launch=launch, timeout=_timeout(v["timeout"]), options=options,
                       workdir=v["workdir"], network=network, rounds=rounds_policy(v))


def rounds_policy(v: Mapping[str, Any]):
    """--rounds/--max-rounds/--precision/--round-budget as a checked regress.RoundsPolicy."""
    from .regress import RoundsPolicy

    try:
        precision = float(v.get("precision") or 0.01)
        budget = float(v["round_budget"]) if v.get("round_budget") not in (None, "") else None
    except ValueError:
        raise ConfigError(f"precision {v.get('precision')!r} and round budget {v.get('round_budget')!r} "
                          "must be numbers, e.g. 0.01 and 60") from None
    return RoundsPolicy(rounds=_int(v.get("rounds") or 1, "rounds"),
                        max_rounds=_int(v.get("max_rounds"), "max rounds"),
                        precision=precision, budget_s=budget)
