"""Turn SIGTERM (and SIGINT) into an exception, so a signalled run unwinds like Ctrl-C: every
``finally`` kills its world's process tree and what finished is written before exiting.

Python's default for SIGTERM is to die at once, leaving the MPI world running (Hydra's proxies
and ranks live in their own sessions) and writing nothing. Only the first signal raises; later
ones are noted and ignored, so a second Ctrl-C cannot cut the write of the results short.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from .records.errors import Interrupted

SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")


class Handler:
    def __init__(self) -> None:
        self.raised: Interrupted | None = None
        self.deferring = False

    def defer(self) -> None:
        """From now on a signal is only noted (``raised``): the measuring is over and what
        remains (writing the results) must not be cut short."""
        self.deferring = True

    def __call__(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.raised is not None:
            os.write(2, f"perfsuite: {name} while stopping; still writing what finished\n".encode())
            return
        self.raised = Interrupted(signum, name)
        if self.deferring:
            os.write(2, f"perfsuite: {name}; stopping once the results are written\n".encode())
            return
        raise self.raised


@contextlib.contextmanager
def handled(names: tuple[str, ...] = SIGNALS) -> Iterator[Handler]:
    """Within this block the named signals raise ``Interrupted`` (once). A signal the process
    was started ignoring stays ignored (``nohup``, a shell's background job and SIGINT). Outside
    the main thread nothing changes (signals reach only the main thread)."""
    handler, old = Handler(), {}
    if threading.current_thread() is not threading.main_thread():
        yield handler
        return
    for name in names:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN:
            continue
        old[sig] = current
        signal.signal(sig, handler)
    try:
        yield handler
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
