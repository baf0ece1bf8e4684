"""Run a world (short helper commands are ``commands.py``'s).

A world is started in its own session (process group); it is bounded by a timeout, and whatever
happens, crash, signal, hang or success, the whole group is killed before we return, so no rank
outlives its case. A failure becomes a ``RankFailure`` naming the rank, the case and the tail of
that rank's stderr, and carrying the samples measured before it.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from ..store import formats
from ..records.errors import ConfigError, FormatError, Interrupted, LaunchError, RankFailure
from ..store.fingerprint import is_root
from ..records.model import Result, Sample, WorldSpec
from . import containers, launchers, proctree
from .commands import OFFLINE, TAIL_LINES, default_program, detect_flavor, run_command
from .deathwatch import DeathWatch
from .launchers import LaunchConfig

STACK_DUMP_WAIT_S = 0.5
#: How long a world's ranks have to check in (each writes ``rank-<r>.pid`` right after MPI_Init)
#: unless told: a launcher that cannot start them (a missing proxy, a Python that cannot load
#: MPI) must not cost the whole world timeout. Containers and Slurm steps start slower (an
#: image to mount, an allocation to wait for).
START_TIMEOUT_S = 30.0
START_TIMEOUT_SLOW_S = 180.0
START_POLL_S = 0.2  # how often the check-ins are counted until every rank is in
#: A launcher line that means its ranks will never start (Hydra, Open MPI/PRRTE, srun); once one
#: is written and no rank has checked in within FATAL_GRACE_S, the world fails at once.
#: Only lines that mean no rank will start: Open MPI also writes benign warnings that say "was
#: unable to" (a network interface, a shared-memory size), after which its ranks start.
_LAUNCHER_FATAL = re.compile(r"execvp error|HYDU_create_process|HYD_spawn"
                             r"|(?:mpirun|prterun|mpiexec|ORTE) was unable to (?:launch|reliably start|start)"
                             r"|could not (?:access or )?execute|srun: error: Unable to (?:create step|allocate)",
                             re.IGNORECASE)
#: A Python exception line on the launcher's stderr: a rank that died before MPI_Init said why there.
_PY_ERROR = re.compile(r"^\s*(?:\w+\.)*\w*(?:Error|Exception)\b:?")
FATAL_GRACE_S = 2.0
_ERRORISH = re.compile(r"error|unrecognized|unable|cannot|invalid|not found|denied", re.IGNORECASE)
TERM_GRACE_S = 5.0  # a launcher's time to take its world down after SIGTERM
LOG_LINES = 200  # per rank, kept with a failure for the report and pytest's failure section
# How launchers report a rank that died (MPICH Hydra; Open MPI / PRRTE).
# Hydra names the PID, not the rank; the rank comes from the PID files the ranks wrote.
_HYDRA_PID = re.compile(r"PID\s+(\d+)\s+RUNNING AT\s+(\S+)\s*\n=\s+EXIT CODE:\s*(\d+)")
_HYDRA_STRING = re.compile(r"EXIT STRING:\s*(.+)")
# srun: "srun: error: node7: task 1: Killed" (the first such line is the cause; later ones are
# the tasks srun then terminated).
_SRUN_TASK = re.compile(r"srun: error: (\S+): task (\d+): (.+)")
# Open MPI 5's prterun wraps this message at ~70 columns, so any space may be a line break.
_OMPI_RANK = re.compile(r"process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+node\s+(\S+)\s+exited\s+on\s+"
                        r"signal\s+(\d+)(?:\s+\(([^)]*)\))?")


def resolve(cfg: LaunchConfig, named: bool = False) -> LaunchConfig:
    """Fill in what depends on this machine (the launcher's path, the MPI flavor). ``named``:
    the user named the program, so one that is missing or is no MPI launcher is bad input."""
    if named:
        try:
            return resolve(cfg)
        except LaunchError as exc:
            raise ConfigError(f"launcher program {cfg.program!r}: {exc}") from None
    if cfg.container is not None:
        return _resolve_inside(cfg)
    if cfg.program is None and cfg.launcher == "mpiexec":
        cfg = replace(cfg, program=default_program("mpiexec"))
    if cfg.launcher == "srun":
        if shutil.which(cfg.program or "srun") is None:
            raise LaunchError(f"launcher {cfg.program or 'srun'!r} not found on PATH; srun needs a Slurm allocation")
        return cfg
    if cfg.flavor == "auto":
        return replace(cfg, flavor=detect_flavor(cfg.program or "mpiexec"))
    if shutil.which(cfg.program or "mpiexec") is None:
        raise LaunchError(f"MPI launcher {cfg.program or 'mpiexec'!r} not found on PATH; "
                          f"install an MPI (pip install mpich; {OFFLINE})")
    return cfg


def _resolve_inside(cfg: LaunchConfig) -> LaunchConfig:
    """An arm in an image: its own launcher (``mpiexec`` on the image's PATH unless named), and
    its MPI flavor read there. srun starts tasks on other nodes: there the image is srun's
    (pyxis' ``--container-image``, a launcher argument), not a wrapper around it."""
    if cfg.launcher != "mpiexec":
        raise ConfigError(f"an image or prefix arm runs its launch inside the image, which mpiexec does; under "
                          f"{cfg.launcher} give the image to it: --a-launcher-args='--container-image=IMG' "
                          "with --a-python naming the image's Python")
    program = cfg.program or ("mpiexec" if cfg.container.image else default_program("mpiexec"))
    if cfg.flavor != "auto":
        return replace(cfg, program=program)
    return replace(cfg, program=program, flavor=_flavor_inside(cfg.container, program))


@functools.lru_cache(maxsize=8)
def _flavor_inside(container, program: str) -> str:
    out = run_command(container.program_argv([program, "--version"]), timeout=120, check=False)
    text = (out.stdout + out.stderr).lower()
    if out.returncode in (126, 127) or "no such file" in text or "not found" in text:
        raise ConfigError(f"{container.describe()}: the launcher {program!r} is not found inside it; install an MPI "
                          "there, or put its bin folder on the PATH the arm runs with")
    if "open mpi" in text or "openrte" in text or "prte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel" in text:
        return "mpich"
    raise ConfigError(f"{container.describe()}: {program} --version inside it says neither MPICH nor Open MPI "
                      f"({text.strip()[-160:]!r}); install an MPI into the image or name it with --mpi-flavor")


def _tail(path: Path, n: int = TAIL_LINES, upto: int | None = None) -> str:
    """The last ``n`` lines of a file (of its first ``upto`` bytes, when given)."""
    try:
        with open(path, "rb") as f:
            data = f.read() if upto is None else f.read(upto)
    except OSError:
        return ""
    lines = data.decode(errors="replace").strip().splitlines()
    return "\n".join(lines[-n:])


def _world_logs(folder: Path) -> dict[str, str]:
    """Every rank's stderr and the launcher's output, each cut to its last LOG_LINES lines; a
    rank that wrote nothing keeps an empty entry (that it said nothing is itself a clue)."""
    logs = {}
    ranks = sorted(int(p.stem.split("-")[1]) for p in folder.glob("rank-*.err"))
    for rank in ranks:
        logs[f"rank {rank}"] = _tail(folder / f"rank-{rank}.err", LOG_LINES)
    launcher = "\n".join(t for t in (_tail(folder / "launcher.out", LOG_LINES),
                                     _tail(folder / "launcher.err", LOG_LINES)) if t)
    if launcher:
        logs["launcher"] = launcher
    return logs


SHM_DIR = Path("/dev/shm")


def _shm_names() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _shm_in_use() -> set[str]:
    """Names under /dev/shm that some live process maps or holds open."""
    used = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            maps = (proc / "maps").read_text(errors="replace")
        except OSError:
            maps = ""
        for line in maps.splitlines():
            at = line.find(f"{SHM_DIR}/")
            if at >= 0:
                used.add(line[at + len(str(SHM_DIR)) + 1:].split(" (deleted)")[0].strip())
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(f"{SHM_DIR}/"):
                used.add(target[len(str(SHM_DIR)) + 1:])
    return used


def _remove_orphan_shm(before: set[str], pids: Iterable[int]) -> list[str]:
    """Unlink the shared-memory segments that appeared while a killed world ran and that no
    live process uses. MPICH (mpich_shm_*) and Open MPI (sm_segment.*) unlink them at
    MPI_Finalize, which a killed rank never reaches: each killed world left 16 MB behind, and
    under srun, whose job ids restart with a fresh controller, a later world that hashed to a
    stale segment's name failed in MPI_Init ("Message truncated")."""
    new = _shm_names() - before
    if not new:
        return []
    deadline = time.monotonic() + TERM_GRACE_S
    for pid in pids:  # a SIGKILLed rank releases its mappings only once it is gone
        while time.monotonic() < deadline and Path(f"/proc/{pid}/maps").exists():
            try:
                if not Path(f"/proc/{pid}/maps").read_text():
                    break  # a zombie maps nothing
            except OSError:
                break
            time.sleep(0.05)
    removed = []
    for name in sorted(new - _shm_in_use()):
        try:
            (SHM_DIR / name).unlink()
            removed.append(name)
        except OSError:
            pass
    return removed


def _rank_pids(folder: Path) -> dict[int, tuple[int, str]]:
    pids = {}
    for p in folder.glob("rank-*.pid"):
        try:
            pid, host = p.read_text().split()
            pids[int(p.stem.split("-")[1])] = (int(pid), host)
        except (OSError, ValueError):
            continue
    return pids


def _local_pids(folder: Path) -> dict[int, int]:
    import socket

    me = socket.gethostname()
    return {r: pid for r, (pid, host) in _rank_pids(folder).items() if host == me}


def _kill_group(proc: subprocess.Popen, folder: Path, token: str | None = None) -> None:
    """Ask a launcher that is still running to stop its world, then kill its whole process
    tree on this host (``proctree``) and any local rank that escaped it, and wait for them.

    SIGTERM first because only the launcher can reach what it started elsewhere: Hydra's
    mpiexec kills its proxies and their ranks on every node, and srun cancels its job step and
    the job it allocated (SIGKILLed, srun left that job RUNNING, holding its nodes, until
    scancel). SIGKILL follows for whatever did not go within TERM_GRACE_S."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=TERM_GRACE_S)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _local_pids(folder).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proctree.kill_tree(proc.pid if proc.returncode is None else None, token)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _partial(folder: Path) -> list[Sample]:
    out = []
    try:
        with open(folder / "partial.jsonl") as f:
            for line in f:
                if line.strip():
                    out.append(Sample.from_dict(json.loads(line)))
    except (OSError, ValueError):
        pass  # a half-written last line is dropped; earlier ones are kept
    return out


def _innermost_frame(stack_text: str) -> str:
    """From a faulthandler dump, the innermost frame of the main thread, e.g. 'worker.py:40 in main'."""
    m = re.search(r"(?:Current thread|Thread) [^\n]*\n((?:\s+File [^\n]*\n?)+)", stack_text)
    if not m:
        return "no stack"
    first = m.group(1).strip().splitlines()[0]
    f = re.search(r'File "([^"]+)", line (\d+) in (\S+)', first)
    return f"{Path(f.group(1)).name}:{f.group(2)} in {f.group(3)}" if f else first.strip()


def _sizes(folder: Path, names: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for name in names:
        try:
            out[name] = (folder / name).stat().st_size
        except OSError:
            out[name] = 0
    return out


def _diagnose(spec: WorldSpec, folder: Path, rc: int | None, timed_out: bool, timeout: float,
              partial: list[Sample], before_kill: dict[str, int] | None = None,
              first_dead: int | None = None) -> RankFailure:
    """Name the failed rank and why. ``before_kill``: the launcher logs' sizes when the timeout
    struck; only what was written before then can name a cause, the rest answers our own kill.
    ``first_dead``: the local rank the death watch saw die first, alone; it outranks the
    launcher's choice (see deathwatch.py) unless that rank had finished cleanly."""
    label = spec.label
    done = f" ({len(partial)} of {len(spec.cases)} cases measured before it)" if spec.cases else ""
    failed = [(int(p.stem.split("-")[1]), p.read_text(errors="replace").strip())
              for p in sorted(folder.glob("rank-*.failed"))]
    failed = [(r, what) for r, what in failed if what]
    if failed:
        rank, what = failed[0]
        tail = _tail(folder / f"rank-{rank}.err")
        return RankFailure(f"{label}: rank {rank} raised {what}{done}", rank=rank, case=label,
                           stderr_tail=tail, partial=partial, kind="crash")
    cut = before_kill or {}
    launcher_err = (_tail(folder / "launcher.err", 40, cut.get("launcher.err")) + "\n"
                    + _tail(folder / "launcher.out", 40, cut.get("launcher.out")))
    by_pid = {pid: rank for rank, (pid, _host) in _rank_pids(folder).items()}
    found = None
    m = _HYDRA_PID.search(launcher_err)
    if m and int(m.group(1)) in by_pid:
        s = _HYDRA_STRING.search(launcher_err)
        found = (by_pid[int(m.group(1))], m.group(2), int(m.group(3)),
                 s.group(1).strip() if s else f"exit code {m.group(3)}")
    m = _OMPI_RANK.search(launcher_err)
    if m and found is None:
        found = (int(m.group(1)), m.group(2), int(m.group(3)),
                 f"signal {m.group(3)}" + (f" ({m.group(4)})" if m.group(4) else ""))
    m = _SRUN_TASK.search(launcher_err)
    if m and found is None:
        found = (int(m.group(2)), m.group(1), 0, m.group(3).strip())
    if found is not None:
        rank, host, _code, how = found
        if (first_dead is not None and first_dead != rank
                and not (folder / f"rank-{first_dead}.done").exists()):
            rank, host = first_dead, _rank_pids(folder).get(first_dead, (0, host))[1]
        tail = _tail(folder / f"rank-{rank}.err") or launcher_err.strip()
        return RankFailure(f"{label}: rank {rank} on {host} died: {how}{done}", rank=rank,
                           case=label, stderr_tail=tail, partial=partial, kind="signal")
    if timed_out:
        where = []
        for rank in sorted(_rank_pids(folder)):
            where.append(f"rank {rank} in {_innermost_frame(_tail(folder / f'rank-{rank}.err', 200))}")
        started = len(_rank_pids(folder))
        if started < spec.world_size:
            where.append(f"only {started} of {spec.world_size} ranks started")
        return RankFailure(f"{label}: did not finish, killed at the {timeout:g} s timeout{done}; "
                           + ("; ".join(where) or "no rank started"), case=label,
                           stderr_tail=launcher_err.strip(), partial=partial, kind="timeout")
    tail = launcher_err.strip()
    if not _rank_pids(folder):  # nobody reached MPI_Init's end: the launch itself failed
        return RankFailure(f"{label}: no rank started: the launcher exited with status {rc}: "
                           f"{telling_line(tail)}", case=label, partial=partial, kind="start")
    # The last line that says something: Open MPI frames its messages in rows of dashes.
    said = [line.strip() for line in tail.splitlines() if line.strip(" -=\t")]
    return RankFailure(f"{label}: world exited with status {rc} and wrote no result{done}: "
                       f"{said[-1] if said else 'no output'}", case=label,
                       stderr_tail=tail, partial=partial, kind="crash")


def telling_line(text: str) -> str:
    """The launcher's own line that says why no rank started: a Python exception a rank printed
    before MPI_Init, else the launcher's fatal line, else its last line that says something."""
    said = [line.strip() for line in text.splitlines() if line.strip(" -=\t")]
    # Hydra writes a chain of "[mpiexec@host] func (file:line): ..." lines, cause first.
    for pattern in (_PY_ERROR, _LAUNCHER_FATAL, _ERRORISH):
        hits = [line for line in said if pattern.search(line)]
        if hits:
            return hits[-1] if pattern is _PY_ERROR else hits[0]
    return said[-1] if said else "it wrote nothing"


def start_timeout(cfg: LaunchConfig, given: float | None = None) -> float:
    """The start deadline of a world launched by ``cfg``: ``given``, else START_TIMEOUT_S, or
    START_TIMEOUT_SLOW_S for a world in a container, under srun or over other hosts (ssh to
    each, MPI_Init across the network)."""
    if given is not None:
        return given
    slow = cfg.container is not None or cfg.launcher == "srun" or cfg.hostfile or cfg.hosts
    return START_TIMEOUT_SLOW_S if slow else START_TIMEOUT_S


def _start_failure(spec: WorldSpec, folder: Path, deadline: float, fatal: bool) -> RankFailure:
    started, text = len(_rank_pids(folder)), _tail(folder / "launcher.err", 40) + "\n" + _tail(folder / "launcher.out", 40)
    when = ("and the launcher wrote a fatal error" if fatal
            else f"within the {deadline:g} s start deadline (--start-timeout); the launcher said")
    return RankFailure(f"{spec.label}: {started} of {spec.world_size} ranks started {when}: {telling_line(text)}",
                       case=spec.label, kind="start")  # the whole logs stay in .logs


#: Test-only, as the fault switch is: the suite's own tests set it in every test not marked
#: ``world`` (tests/conftest.py), so a test that starts an MPI world unmarked fails, naming itself,
#: instead of running beside other tests where CI runs the unmarked ones side by side.
UNMARKED = "PERFSUITE_TEST_UNMARKED"


def _refuse_unmarked(what: str) -> None:
    test = os.environ.get(UNMARKED)
    if test:
        raise LaunchError(f"{test} starts {what} but is not marked world (pytest.mark.world): mark it, "
                          "so CI runs it alone")


def run_world(spec: WorldSpec, cfg: LaunchConfig, timeout: float, workdir: str | None = None,
              keep: bool = False, start: float | None = None) -> Result:
    """Start the world for ``spec``, wait at most ``timeout`` seconds, return its Result.

    Raises RankFailure (with the partial samples) when a rank fails, of kind "start" when its
    ranks did not all check in within the start deadline (``start``, else ``start_timeout``),
    LaunchError when the world cannot be started at all.
    """
    _refuse_unmarked(f"the world {spec.label}")
    cfg = resolve(cfg)
    folder = Path(tempfile.mkdtemp(prefix="perfsuite-world-", dir=workdir))
    try:
        return _run(spec, cfg, timeout, folder, min(timeout, start_timeout(cfg, start)))
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def _wait_for_start(proc: subprocess.Popen, spec: WorldSpec, folder: Path, deadline_s: float) -> tuple[int | None, str]:
    """Wait until every rank has checked in, the launcher exits, or the start deadline passes:
    (the launcher's exit status or None, "" or why the start failed: "deadline", "fatal"). Polled, as the check-ins are
    files: a world that starts costs a few glob calls."""
    t0 = time.monotonic()
    fatal_at = None
    while True:
        try:
            return proc.wait(timeout=START_POLL_S), ""
        except subprocess.TimeoutExpired:
            pass
        if len(_rank_pids(folder)) >= spec.world_size:
            return None, ""
        now = time.monotonic()
        if fatal_at is None and _LAUNCHER_FATAL.search(_tail(folder / "launcher.err", 40)):
            fatal_at = now
        if now - t0 >= deadline_s:
            return None, "deadline"
        if fatal_at is not None and now - fatal_at >= FATAL_GRACE_S:
            return None, "fatal"


def _run(spec: WorldSpec, cfg: LaunchConfig, timeout: float, folder: Path, start_s: float) -> Result:
    job_path, out_path = folder / "job.json", folder / "result.json"
    launch = launchers.build(cfg, spec.world_size, str(job_path), cpu_count=os.cpu_count() or 1,
                             is_root=is_root())
    formats.write_json(job_path, formats.job(spec, str(folder), str(out_path), time.time()))
    token = f"{os.getpid()}-{folder.name}"
    box = f"perfsuite-{token}"  # the container's name, where the world runs in one
    if cfg.container is not None:
        names = containers.passed_names(os.environ, [*launch.env, proctree.TOKEN_VAR])
        launch = launchers.Launch(tuple(cfg.container.wrap(launch.argv, str(folder), os.getcwd(), names, box,
                                                           timeout)), launch.env)
    env = {**os.environ, **launch.env, proctree.TOKEN_VAR: token}
    shm_before = _shm_names()
    timed_out, before_kill = False, None
    proctree.become_subreaper()
    with open(folder / "launcher.out", "w") as out, open(folder / "launcher.err", "w") as err, \
            DeathWatch(lambda: _local_pids(folder), spec.world_size) as watch:
        try:
            proc = subprocess.Popen(launch.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        except FileNotFoundError:
            raise LaunchError(f"MPI launcher {launch.argv[0]!r} not found; install an MPI "
                              "(pip install mpich) or name one with --perf-launcher") from None
        killing_at = None  # deaths from here on are ours, not the failure's
        t0, start_failed = time.monotonic(), ""
        try:
            rc, start_failed = _wait_for_start(proc, spec, folder, start_s)
            if start_failed:
                killing_at = time.monotonic()
            elif rc is None:
                rc = proc.wait(timeout=max(0.0, timeout - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            timed_out, rc, killing_at = True, None, time.monotonic()
            before_kill = _sizes(folder, ("launcher.err", "launcher.out"))
            for pid in _local_pids(folder).values():  # ask every rank where it is stuck
                try:
                    os.kill(pid, signal.SIGUSR1)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(STACK_DUMP_WAIT_S)
        except Interrupted as exc:  # SIGINT/SIGTERM: the world goes, what it measured stays
            _kill_group(proc, folder, token)
            _remove_orphan_shm(shm_before, _local_pids(folder).values())
            exc.partial = _partial(folder)
            raise
        finally:
            _kill_group(proc, folder, token)
            containers.remove(cfg.container, box)
            containers.reap(str(folder))
    if start_failed:
        _remove_orphan_shm(shm_before, _local_pids(folder).values())
        failure = _start_failure(spec, folder, start_s, fatal=start_failed == "fatal")
        failure.logs = _world_logs(folder)
        raise failure
    partial = _partial(folder)
    if not timed_out and rc == 0 and out_path.exists():
        # Invalid samples come back as such: the suite fails those cases, not the world.
        try:
            return formats.load_result(json.loads(out_path.read_text()), spec.label)
        except (ValueError, FormatError) as exc:  # rank 0 wrote it: the world's fault, not input
            raise RankFailure(f"{spec.label}: rank 0's result cannot be read: {exc}", rank=0,
                              case=spec.label, partial=partial, kind="invalid") from None
    _remove_orphan_shm(shm_before, _local_pids(folder).values())
    failure = _diagnose(spec, folder, rc, timed_out, timeout, partial, before_kill,
                        first_dead=watch.first_before(killing_at))
    failure.logs = _world_logs(folder)
    raise failure


def run_program(command: list[str], world_size: int, cfg: LaunchConfig, timeout: float) -> str:
    """Run any MPI program (e.g. the C reference loop) as a world under the same bounds and kill
    rules as the suite's own worlds; return its stdout."""
    _refuse_unmarked(f"the MPI program {command[0]}")
    cfg = resolve(cfg)
    folder = Path(tempfile.mkdtemp(prefix="perfsuite-prog-"))
    try:
        launch = launchers.build(cfg, world_size, "", cpu_count=os.cpu_count() or 1,
                                 is_root=is_root(), command=command)
        token = f"{os.getpid()}-{folder.name}"
        proctree.become_subreaper()
        with open(folder / "out", "w") as out, open(folder / "err", "w") as err:
            proc = subprocess.Popen(launch.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env={**os.environ, **launch.env, proctree.TOKEN_VAR: token},
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                _kill_group(proc, folder, token)
        if rc != 0:
            why = f"timed out after {timeout:g} s" if rc is None else f"exited {rc}"
            raise LaunchError(f"{Path(command[0]).name} world {why}: {_tail(folder / 'err', 4)}")
        return (folder / "out").read_text()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
