"""``perfsuite bisect``: the commit that made a case slower, found by A/B.

Each step is an A/B run (``experiments.ab``) of the good end against one commit, on the cases
in question, judged as ``ab`` judges: a step is *bad* when some case is DIFFERENT in the
regression's direction, *good* when every case is SAME (or better), and otherwise it cannot be
decided (UNKNOWN, or a world failed). The bad end is measured first: it must be a regression
against the good end, and only the cases it regressed in are carried into the search (the
others would only spend pairs). Then a binary search over the commits between the ends, oldest
first, stops at the first bad commit (one whose parent on the path is good) or at the first
step it cannot decide, naming the commits the culprit is still among.

Each step is its own test at ``ab``'s alpha: over the log2(n) steps of a search a wrong turn
has at most (steps x alpha) chance, which the report states.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from ..model import Verdict

#: A step's outcome.
BAD, GOOD, UNDECIDED, FAILED = "bad", "good", "undecided", "failed"


@dataclass
class Step:
    """One A/B run: the good end (A) against ``commit`` (B)."""
    commit: str
    outcome: str
    verdicts: list[Verdict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    pairs: int = 0
    wall_s: float = 0.0

    @property
    def regressed(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.is_failure]


def classify(verdicts: Sequence[Verdict], failures: Sequence[str], cases: Collection[str] | None) -> str:
    """bad / good / undecided / failed, from a step's verdicts on ``cases`` (None: every case)."""
    mine = [v for v in verdicts if cases is None or v.case in cases]
    if failures:
        return FAILED
    if any(v.is_failure for v in mine):
        return BAD
    if mine and all(v.kind == "SAME" or (v.kind == "DIFFERENT" and not v.is_failure) for v in mine):
        return GOOD
    return UNDECIDED


@dataclass
class Bisection:
    commits: list[str]  # after good, up to bad, oldest first
    steps: list[Step]
    cases: tuple[str, ...] = ()  # the cases the bad end regressed in, carried into the search
    first_bad: Step | None = None
    candidates: list[str] = field(default_factory=list)  # the culprit is one of these
    stopped: Step | None = None  # the step that could not be decided, or the bad end not bad


#: probe(commit, cases or None) -> the step's verdicts, failures, pairs and seconds.
Probe = Callable[[str, Collection[str] | None], Step]


def search(commits: Sequence[str], probe: Probe, progress: Callable[[str], None] | None = None) -> Bisection:
    """Binary search for the first bad commit of ``commits`` (oldest first; the last is the bad
    end, the good end is their parent)."""
    say = progress or (lambda m: None)
    out = Bisection(list(commits), [])
    if not commits:
        return out
    end = probe(commits[-1], None)
    out.steps.append(end)
    if end.outcome != BAD:
        out.stopped, out.candidates = end, list(commits)
        return out
    out.cases = tuple(sorted({v.case for v in end.regressed}))
    say(f"bad end {commits[-1][:10]} regressed in {', '.join(out.cases)}: searching {len(commits)} commits")
    lo, hi = -1, len(commits) - 1  # commits[lo] is good (-1: the good end), commits[hi] bad
    bad_step = end
    while hi - lo > 1:
        mid = (lo + hi) // 2
        step = probe(commits[mid], out.cases)
        out.steps.append(step)
        say(f"{commits[mid][:10]} is {step.outcome} ({hi - lo - 1} commits left)")
        if step.outcome == BAD:
            hi, bad_step = mid, step
        elif step.outcome == GOOD:
            lo = mid
        else:
            out.stopped, out.candidates = step, list(commits[lo + 1:hi + 1])
            return out
    out.first_bad, out.candidates = bad_step, [commits[hi]]
    return out
