"""Kill a world's whole process tree on this host, and wait until it is gone.

A process group is not enough: Hydra's ``mpiexec`` starts each ``hydra_pmi_proxy`` and each
rank in a session of its own, so ``killpg`` on the launcher leaves them running, and a proxy
orphaned mid-launch keeps starting ranks. Open MPI's ``prterun`` daemonises its helpers too.
Two ways find them: descent from the launcher (parent ids), and a token every process of the
world inherits in its environment (which survives re-parenting). Everything found is stopped
first (SIGSTOP), so nothing forks while the tree is walked, then killed.

This process becomes a child subreaper, so a rank whose parent died is re-parented here rather
than to PID 1 (which, in some containers, never reaps), and its zombie is reaped here.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

TOKEN_VAR = "PERFSUITE_WORLD_TOKEN"
_PR_SET_CHILD_SUBREAPER = 36
_subreaper = False


def become_subreaper() -> bool:
    """Ask Linux to re-parent orphaned descendants to this process (once; False elsewhere)."""
    global _subreaper
    if not _subreaper and hasattr(os, "pidfd_open"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper = False
    return _subreaper


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (those that vanish while we read are skipped)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces or ')': split after the last.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            out[int(entry.name)] = int(fields[1])
    return out


def _carries(pid: int, token: bytes) -> bool:
    try:
        return token in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def members(root: int | None, token: str | None) -> set[int]:
    """Live processes of the tree under ``root`` and those carrying ``token``, minus this one."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [root] if root is not None and root in parents else []
    if token:
        mark = f"{TOKEN_VAR}={token}".encode()
        stack += [pid for pid in parents if _carries(pid, mark)]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack += children.get(pid, [])
    found.discard(os.getpid())
    return found


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap(pids: set[int]) -> None:
    """Collect the zombies among ``pids`` that are our children (the launcher, orphans
    re-parented to us); never ``waitpid(-1)``, which would steal other children's statuses."""
    for pid in list(pids):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid  # not ours to reap, or already reaped
        if done:
            pids.discard(pid)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return state[state.rfind(b")") + 2:][:1] != b"Z"


def kill_tree(root: int | None, token: str | None, wait_s: float = 10.0) -> list[int]:
    """SIGSTOP every member until no new one appears, SIGKILL them all, wait until none is
    alive (zombies we can reap are reaped, except ``root``: its ``Popen`` reaps it, and needs
    its status). Returns the pids that were killed."""
    seen: set[int] = set()
    for _ in range(100):
        new = members(root, token) - seen
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        seen |= new
    _signal(seen, signal.SIGKILL)
    pending = set(seen)
    deadline = time.monotonic() + wait_s
    while pending and time.monotonic() < deadline:
        _reap(pending - {root})
        pending = {p for p in pending if _alive(p)}
        if pending:
            time.sleep(0.02)
    _reap(seen - {root})
    return sorted(seen)


def stragglers(token: str) -> list[int]:
    """Processes still carrying ``token`` (a test's and a caller's check that nothing is left)."""
    return sorted(p for p in members(None, token) if _alive(p))
