"""Failures that repeat stop the run that meets them: a broken arm, commit environment or
launcher fails every world after the first the same way, and two hundred identical lines and
minutes of worlds tell the user nothing the first two did not.

The rule, for ``ab``, ``bisect``'s steps, ``study`` and ``detection-power``: stop once the same
failure has happened on both arms of the first pair, or twice in a row on one stream (an arm, a
study point); a launch whose ranks never started (``suite.launcher_broken``) stops at once, as
every later world of that launcher would fail the same way. "The same" is the message with what
differs from world to world taken out: the world's name, numbers (PIDs, pair indices, seconds,
ports) and scratch paths.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..suite import launcher_broken

_LABEL = re.compile(r"^[\w.-]+\[[^\]]*\]:\s*")  # "allreduce[mpi-n2]: " that starts a world's message
_SCRATCH = re.compile(r"/\S*perfsuite-(?:world|prog)-\w+\S*")
_HEX = re.compile(r"\b0x[0-9a-f]+\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def signature(failure: BaseException | str) -> str:
    """What a failure says once the parts that differ between two worlds are taken out."""
    text = str(failure).strip().splitlines()[0] if str(failure).strip() else type(failure).__name__
    text = _LABEL.sub("", text)
    # a round's or pair's note appended by the runner ("(round 3; the 2 finished round(s) are kept)")
    text = re.sub(r"\s*\(round \d+;[^)]*\)$", "", text)
    return _NUMBER.sub("#", _HEX.sub("#", _SCRATCH.sub("SCRATCH", text)))


@dataclass
class Repeats:
    """The last outcome of each stream (an arm, a point): ``seen`` says when to stop."""

    last: dict[str, tuple[str, str] | None] = field(default_factory=dict)  # stream -> (signature, where)
    first: dict[str, str] = field(default_factory=dict)  # stream -> signature of its first world's failure

    def seen(self, stream: str, failure: BaseException | str | None, where: str = "") -> str | None:
        """Record ``stream``'s latest world (``failure`` None: it succeeded); a line saying why
        to stop, or None. ``where`` names the world in that line ("pair 2")."""
        if failure is None:
            self.last[stream] = None
            self.first.setdefault(stream, "")
            return None
        sig = signature(failure)
        text = str(failure).strip()
        message = _LABEL.sub("", text.splitlines()[0]) if text else sig
        if not isinstance(failure, str) and launcher_broken(failure):
            return f"{stream}'s ranks never started ({where}), nor would they in any later world: {message}"
        before, self.last[stream] = self.last.get(stream), (sig, where)
        first_world = stream not in self.first
        self.first.setdefault(stream, sig)
        if before is not None and before[0] == sig:
            return f"{stream} failed the same way in {before[1]} and {where}: {message}"
        others = [s for s, f in self.first.items() if s != stream and f == sig]
        if first_world and others:
            return f"{others[0]} and {stream} both failed the same way in their first world ({where}): {message}"
        return None


def collapse(failures: list[str]) -> list[str]:
    """One line per distinct failure, in order: the first of its kind, with how many more said
    the same (a failure's lines begin with where it happened: "pair 3, arm A: ...")."""
    groups: dict[str, list[str]] = {}
    for line in failures:
        groups.setdefault(signature(line), []).append(line)
    return [same[0] + (f" (and {len(same) - 1} more the same)" if len(same) > 1 else "")
            for same in groups.values()]
