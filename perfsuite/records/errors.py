"""One exception tree for the whole suite.

Every error a user can meet is a ``PerfsuiteError``; its ``str`` is one line that names the bad
value or the failed rank and says what would be right, so faces (pytest, CLI) print it as is.
"""
from __future__ import annotations


class PerfsuiteError(Exception):
    """Base of every error the suite raises on purpose."""


class ConfigError(PerfsuiteError, ValueError):
    """Bad input: an option, a case or a job file that cannot be right."""


class LaunchError(PerfsuiteError):
    """The world could not be started (no launcher, no MPI, bad host list)."""


class RankFailure(PerfsuiteError):
    """A rank crashed, hung, was killed or returned a wrong result.

    ``partial`` keeps what the world measured before it failed, so nothing measured is lost;
    ``logs`` keeps every rank's stderr (its last lines) and the launcher's output, by source
    ("rank 0", ..., "launcher"), because the rank that failed is not always the one that explains it.
    """

    def __init__(self, message: str, *, rank: int | None = None, case: str = "",
                 stderr_tail: str = "", partial: object | None = None, kind: str = "crash",
                 logs: dict[str, str] | None = None):
        super().__init__(message)
        self.rank = rank
        self.case = case
        self.stderr_tail = stderr_tail
        self.partial = partial
        self.kind = kind  # crash | signal | timeout | invalid | start (the ranks never all checked in)
        self.logs = dict(logs or {})


class FormatError(PerfsuiteError):
    """A stored file (result, baseline, job) is malformed or of an unknown version."""


class BaselineFormatError(FormatError):
    """A baseline file is malformed or of a version this suite cannot read."""


class Unavailable(PerfsuiteError):
    """Something a world needs cannot be had here (a device, root, a tool); the message is the
    reason shown where the world is skipped."""


class TransportUnavailable(Unavailable):
    """A transport cannot run here."""


class PortInUse(ConfigError):
    """A port a world was told to use is taken (raised inside the world, by every rank)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM (what Ctrl-C, CI runners, Slurm and ``timeout`` send) arrived while the
    suite ran. A KeyboardInterrupt, so everything that already cleans up after Ctrl-C cleans up
    after SIGTERM too; ``partial`` carries what the interrupted world had measured."""

    def __init__(self, signum: int, name: str):
        super().__init__(name)
        self.signum, self.name = signum, name
        self.partial: list = []

    @property
    def status(self) -> int:
        """The exit status a shell gives a process killed by this signal."""
        return 128 + self.signum
