"""Which local rank died first, as the kernel saw it rather than as the launcher tells it.

MPICH's Hydra prints one PID for a failed world: the lowest rank whose exit status is non-zero.
When a rank is SIGKILLed, its proxy may reap it in its ``waitpid`` path and SIGKILL the other
ranks before its PMI-socket path has marked them clean (``pmip.c`` and ``pmip_cb.c``), so they
end "killed by signal 9" too, and Hydra then names rank 0 for rank 1's death. A thread blocked
in ``poll`` on each local rank's pidfd wakes at the first exit; when exactly one rank is gone at
that moment, that rank died first. When several are (the thread was not scheduled in time) the
watch says nothing and the launcher's word stands. So the thread asks for a real-time priority
(SCHED_FIFO, the lowest; root or CAP_SYS_NICE only): it then runs the moment the first rank
exits, before the proxy that kills the rest, instead of queueing behind busy ranks on a small
machine (without it, 3 of 40 runs of a rank's SIGKILL under two busy loops named rank 0).
"""
from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable

DISCOVER_S = 0.05  # how often to look for the PID files of ranks still starting


class DeathWatch:
    def __init__(self, local_pids: Callable[[], dict[int, int]], world_size: int):
        """``local_pids``: rank -> PID of the ranks on this host that have started so far."""
        self.local_pids, self.world_size = local_pids, world_size
        self.first: int | None = None  # the rank that died alone, first
        self.at: float | None = None  # time.monotonic() of that observation
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._watch, name="perfsuite-deathwatch", daemon=True)

    def __enter__(self) -> DeathWatch:
        if hasattr(os, "pidfd_open"):  # Linux >= 5.3; elsewhere the launcher's word stands
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        os.write(self._stop_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        os.close(self._stop_r)
        os.close(self._stop_w)

    def first_before(self, deadline: float | None) -> int | None:
        """The first rank to die, if it died before ``deadline`` (when we began killing)."""
        if self.first is None or (deadline is not None and self.at is not None and self.at >= deadline):
            return None
        return self.first

    def _watch(self) -> None:
        _urgent()
        poller = select.poll()
        poller.register(self._stop_r, select.POLLIN)
        fds: dict[int, int] = {}  # pidfd -> rank
        seen: set[int] = set()
        try:
            while True:
                gone = []  # ranks already dead when we first looked: they count as seen now
                if len(seen) < self.world_size:
                    for rank, pid in self.local_pids().items():
                        if rank in seen:
                            continue
                        seen.add(rank)
                        try:
                            fd = os.pidfd_open(pid)
                        except OSError:
                            gone.append(rank)
                            continue
                        fds[fd] = rank
                        poller.register(fd, select.POLLIN)
                if gone:
                    timeout_ms = 0
                elif len(seen) >= self.world_size:
                    timeout_ms = None
                else:
                    timeout_ms = int(DISCOVER_S * 1000)
                ready = [fd for fd, _ in poller.poll(timeout_ms)]
                if self._stop_r in ready:
                    return
                dead = sorted(gone + [fds[fd] for fd in ready if fd in fds])
                if dead:
                    if len(dead) == 1:
                        self.first, self.at = dead[0], time.monotonic()
                    return
        finally:
            for fd in fds:
                os.close(fd)


def _urgent() -> None:
    """This thread ahead of every ordinary one when it wakes (it sleeps in ``poll`` otherwise);
    where that is not allowed, it stays as it is."""
    try:
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO, os.sched_param(1))
    except (AttributeError, OSError):
        pass
