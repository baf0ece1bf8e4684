"""Exit statuses, the same for every command and for the gate below both faces (docs/running.md's
table; pytest keeps its own numbers and says which of these a session's findings are)."""
from __future__ import annotations

EXIT_OK = 0          # nothing wrong
EXIT_REGRESSION = 1  # a comparison said DIFFERENT (a regression, or a gate tripped)
EXIT_USAGE = 2       # bad input, refused before any world starts
EXIT_UNKNOWN = 3     # --strict: some comparison could not be decided (UNKNOWN), nothing failed
EXIT_WORLD = 4       # a world failed, a case was invalid, or what was measured could not be written
EXIT_INTERRUPTED = 128  # + the signal's number: 130 Ctrl-C, 143 SIGTERM, 141 a closed pipe

#: What each status means, in the words docs/cli.md's tables give it (docs/running.md's table adds
#: examples); a command's own module may say what a status means for it (its ``EXITS``).
MEANING = {
    EXIT_OK: "nothing wrong",
    EXIT_REGRESSION: "a regression: a comparison said DIFFERENT, or a gate tripped",
    EXIT_USAGE: "bad input (an option, a file to read, a place to write), refused in one line before any "
                "world starts",
    EXIT_UNKNOWN: "--strict: a comparison left UNKNOWN, or nothing compared, and nothing worse",
    EXIT_WORLD: "a world failed, a case was invalid, or what was measured could not be written: "
                "infrastructure, not performance",
    EXIT_INTERRUPTED: "signal N stopped it: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP, 141 a reader "
                      "that went away",
}

#: When one command finds several things wrong, its status names the first of these it found.
#: A failed world (or an invalid case, or results that could not be kept) comes before a
#: regression: the comparison then lacks part of its evidence, and a rerun must come before
#: anyone reads its verdicts; a regression comes before an undecided case. An interrupted
#: command says so above all (128+N), and bad input (2) stops a command before any of these.
PRECEDENCE = (EXIT_WORLD, EXIT_REGRESSION, EXIT_UNKNOWN)


def exit_status(*found: int) -> int:
    """The one status for everything a command found wrong (``PRECEDENCE``); 0 for nothing."""
    stopped = [s for s in found if s > EXIT_INTERRUPTED]
    if stopped:
        return stopped[0]
    return next((s for s in PRECEDENCE if s in found), EXIT_OK)
