"""Build the argv and environment that start a world. Never runs anything (ReFrame's habit), so
every line here is unit-tested as strings without MPI.

Supported: ``mpiexec`` of MPICH (Hydra) and of Open MPI, and Slurm's ``srun``.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..records.errors import ConfigError

LAUNCHERS = ("mpiexec", "srun")
FLAVORS = ("auto", "mpich", "openmpi")
OPENMPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


@dataclass(frozen=True)
class LaunchConfig:
    """How to start a world. ``None`` fields are decided from the world and the machine."""

    launcher: str = "mpiexec"
    flavor: str = "auto"  # resolved by commands.detect_flavor before build()
    program: str | None = None  # path of mpiexec/srun; default: the launcher's name on PATH
    hostfile: str | None = None
    hosts: tuple[str, ...] = ()
    ranks_per_node: int | None = None
    oversubscribe: bool | None = None  # None: only when the world has more ranks than cores
    allow_root: bool | None = None  # None: when running as root (Open MPI refuses root otherwise)
    env: Mapping[str, str] = field(default_factory=dict)  # passed to every rank explicitly
    extra_args: tuple[str, ...] = ()
    python: str = sys.executable
    cgroup: str | None = None  # the launcher joins this cgroup first (an emulated slow disk)
    #: The whole launch runs inside this image, or under this prefix (``containers.Container``):
    #: ``program`` and ``python`` are then the image's.
    container: Any = None

    def __post_init__(self):
        if self.launcher not in LAUNCHERS:
            raise ConfigError(f"launcher {self.launcher!r} is unknown; choose from {', '.join(LAUNCHERS)}")
        if self.flavor not in FLAVORS:
            raise ConfigError(f"MPI flavor {self.flavor!r} is unknown; choose from {', '.join(FLAVORS)}")
        if self.ranks_per_node is not None and self.ranks_per_node < 1:
            raise ConfigError(f"ranks per node {self.ranks_per_node} must be >= 1")


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: dict[str, str]  # added to the launcher's own environment


#: Ranks per core a world may put on this host unless told to oversubscribe: beyond it a world
#: measures the scheduler, and a slip (2000 for 20) starts thousands of processes.
MAX_RANKS_PER_CORE = 8


def local_ranks(cfg: LaunchConfig, world_size: int) -> int | None:
    """Ranks the world puts on this host, when it is a one-host world (None: a cluster's)."""
    if cfg.launcher == "srun" or cfg.hostfile or cfg.hosts:
        return None
    return world_size


def check_fits(cfg: LaunchConfig, world_size: int, cores: int) -> None:
    """Refuse a one-host world with more ranks than this host can start usefully."""
    here = local_ranks(cfg, world_size)
    limit = MAX_RANKS_PER_CORE * max(1, cores)
    if here is None or cfg.oversubscribe or here <= limit:
        return
    raise ConfigError(f"world size {world_size} puts {here} ranks on this host, which has {cores} "
                      f"core(s); at most {limit} run here ({MAX_RANKS_PER_CORE} per core): give "
                      "--hosts/--hostfile (or srun) for a bigger world, or --oversubscribe yes to start it anyway")


def worker_argv(cfg: LaunchConfig, job_path: str) -> list[str]:
    # -P (Python 3.11+): ``-m`` would put the current directory first on sys.path, so a command
    # run from a checkout made every rank import that checkout's perfsuite, whatever the Python:
    # an A/B arm on another venv silently ran arm A's code. Ranks keep the caller's working
    # directory, where a relative --workdir (the job file's folder) or --data-dir means what the
    # caller meant; it is only no longer where their imports come from.
    return [cfg.python, "-P", "-m", "perfsuite.worker", job_path]


def build(cfg: LaunchConfig, world_size: int, job_path: str, *, cpu_count: int = 1,
          is_root: bool = False, command: Sequence[str] | None = None) -> Launch:
    """The command line for a world of ``world_size`` ranks running the job at ``job_path``
    (or, with ``command``, any MPI program, e.g. the C reference loop)."""
    if world_size < 1:
        raise ConfigError(f"world size {world_size} is not allowed; world sizes are whole numbers >= 1")
    tail = list(command) if command else worker_argv(cfg, job_path)
    if cfg.launcher == "srun":
        launch = _srun(cfg, world_size, tail)
    elif cfg.flavor == "openmpi":
        launch = _openmpi(cfg, world_size, tail, cpu_count, is_root)
    elif cfg.flavor == "mpich":
        launch = _mpich(cfg, world_size, tail)
    else:
        raise ConfigError("MPI flavor must be resolved (mpich or openmpi) before building a command line")
    if cfg.cgroup:
        from .diskio import join_argv

        launch = Launch(tuple(join_argv(cfg.cgroup, list(launch.argv))), launch.env)
    return launch


def _mpich(cfg: LaunchConfig, n: int, tail: list[str]) -> Launch:
    argv = [cfg.program or "mpiexec", "-n", str(n)]
    if cfg.hostfile:
        argv += ["-f", cfg.hostfile]
    elif cfg.hosts:
        argv += ["-hosts", ",".join(cfg.hosts)]
    if cfg.ranks_per_node:
        argv += ["-ppn", str(cfg.ranks_per_node)]
    for k, v in sorted(cfg.env.items()):
        argv += ["-genv", k, v]
    argv += list(cfg.extra_args)
    # Hydra oversubscribes without being asked, so there is no flag for it.
    return Launch(tuple(argv + tail), dict(cfg.env))


def _openmpi(cfg: LaunchConfig, n: int, tail: list[str], cpu_count: int, is_root: bool) -> Launch:
    argv = [cfg.program or "mpiexec", "-n", str(n)]
    if cfg.hostfile:
        argv += ["--hostfile", cfg.hostfile]
    elif cfg.hosts:
        argv += ["--host", ",".join(cfg.hosts)]
    if cfg.ranks_per_node:
        argv += ["--map-by", f"ppr:{cfg.ranks_per_node}:node"]
    oversubscribe = cfg.oversubscribe
    if oversubscribe is None:
        oversubscribe = not (cfg.hostfile or cfg.hosts) and n > cpu_count
    if oversubscribe:
        argv.append("--oversubscribe")
    for k, v in sorted(cfg.env.items()):
        argv += ["-x", f"{k}={v}"]
    argv += list(cfg.extra_args)
    env = dict(cfg.env)
    if cfg.allow_root if cfg.allow_root is not None else is_root:
        env.update(OPENMPI_ROOT_ENV)
    return Launch(tuple(argv + tail), env)


def _srun(cfg: LaunchConfig, n: int, tail: list[str]) -> Launch:
    argv = [cfg.program or "srun", "-n", str(n), "--kill-on-bad-exit=1"]
    env = dict(cfg.env)
    if cfg.ranks_per_node:
        argv.append(f"--ntasks-per-node={cfg.ranks_per_node}")
    if cfg.hostfile:
        argv.append("--distribution=arbitrary")
        env["SLURM_HOSTFILE"] = cfg.hostfile
    elif cfg.hosts:
        argv.append(f"--nodelist={','.join(cfg.hosts)}")
    if cfg.env:
        argv.append("--export=ALL," + ",".join(f"{k}={v}" for k, v in sorted(cfg.env.items())))
    argv += list(cfg.extra_args)
    return Launch(tuple(argv + tail), env)


def parse_env(items: Sequence[str]) -> dict[str, str]:
    """['NCCL_DEBUG=INFO', ...] -> dict; a bad item names itself."""
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k or not k.replace("_", "").isalnum():
            raise ConfigError(f"environment setting {item!r} must be NAME=VALUE, e.g. NCCL_DEBUG=INFO")
        out[k] = v
    return out
