"""``perfsuite bisect``: the commit that made a case slower, found by A/B.

Each step is an A/B run (``experiments.ab``) of the good end against one commit, on the cases
in question, judged as ``ab`` judges: a step is *bad* when some case is DIFFERENT in the
regression's direction, *good* when every case is SAME (or better), and otherwise it cannot be
decided (UNKNOWN), or it failed (a world failed, or returned wrong results: the search stops
there, as at a step it cannot decide). The bad end is measured first: it must be a regression
against the good end, and only the cases it regressed in are carried into the search (the
others would only spend pairs). Then a binary search over the commits between the ends, oldest
first, stops at the first bad commit (one whose parent on the path is good) or at the first
step it cannot decide, naming the commits the culprit is still among.

Each step is its own test at ``ab``'s alpha: over the log2(n) steps of a search a wrong turn
has at most (steps x alpha) chance, which the report states.

A midpoint asks whether the regression the bad end showed is in: unless the user set a
tolerance, it is judged with one halfway to that regression (``step_tolerance``), so a
harmless commit is SAME within a few pairs when the bad end was x6, where +-2% would take a
quiet machine hundreds of pairs. The bad end's pairs are not reused, so a step is still a test
at alpha of fresh data.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import math

from ..records.model import Tolerance, Verdict

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
    invalid: list[dict] = field(default_factory=list)  # ab's records of samples that did not validate

    @property
    def regressed(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.is_failure]


def classify(verdicts: Sequence[Verdict], failures: Sequence[str], cases: Collection[str] | None,
             invalid: Sequence[dict] = ()) -> str:
    """bad / good / undecided / failed, from a step's verdicts on ``cases`` (None: every case);
    a failed world or a wrong result (``invalid``) fails the step whatever its verdicts say."""
    mine = [v for v in verdicts if cases is None or v.case in cases]
    if failures or invalid:
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
    tolerance: Tolerance | None = None  # the midpoints' (step_tolerance), None: the user's


def step_tolerance(end: Step, least: Tolerance) -> Tolerance:
    """The tolerance a midpoint is judged with: halfway, on a log scale, between no change and
    the slowdown the bad end measured (its estimate, the least over the cases it regressed in),
    and never tighter than ``least``. The halfway line makes a commit that carries the regression
    and one that does not equally quick to decide: after a x6 regression a commit is bad when it
    is surely more than x2.4 slower, good when it is surely within x2.4 either way. The line is
    set by the bad end's pairs alone, so each midpoint is still a test at alpha of its own. A
    bad end that overshot by the square of the true slowdown would put the line above it; the
    seeded simulation in tests/test_commit_envs.py (a bad end stopped at its first DIFFERENT
    look, noise up to 20%) finds no wrong turn in 300 searches, where a line at the whole
    estimate makes 14-18 in 100; capping the line at the interval's sure end made none fewer
    and left 8-70 of 100 searches undecided instead of 0-3."""
    factors = []
    for v in end.regressed:
        if v.change is None or not math.isfinite(v.change):
            continue
        # the measured slowdown, as a factor > 1 in either metric's direction
        factors.append(1.0 / (1.0 + v.change) if v.higher_is_better else 1.0 + v.change)
    factors = [f for f in factors if f > 1.0 and math.isfinite(f)]
    if not factors:
        return least
    half = math.sqrt(min(factors))
    return Tolerance(min(least.lower, 1.0 / half - 1.0), max(least.upper, half - 1.0))


#: probe(commit, cases or None, tolerance or None) -> the step's verdicts, failures, pairs and
#: seconds; None: the bad end, every case, at the user's tolerance.
Probe = Callable[[str, Collection[str] | None, Tolerance | None], Step]


def search(commits: Sequence[str], probe: Probe, progress: Callable[[str], None] | None = None,
           least: Tolerance | None = None) -> Bisection:
    """Binary search for the first bad commit of ``commits`` (oldest first; the last is the bad
    end, the good end is their parent). With ``least`` (no tolerance set by the user) the
    midpoints are judged by ``step_tolerance``, else at the probe's own."""
    say = progress or (lambda m: None)
    out = Bisection(list(commits), [])
    if not commits:
        return out
    end = probe(commits[-1], None, None)
    out.steps.append(end)
    if end.outcome != BAD:
        out.stopped, out.candidates = end, list(commits)
        return out
    out.cases = tuple(sorted({v.case for v in end.regressed}))
    out.tolerance = step_tolerance(end, least) if least is not None else None
    say(f"bad end {commits[-1][:10]} regressed in {', '.join(out.cases)}: searching {len(commits)} commits"
        + (f", each judged at {out.tolerance.lower:+.1%}:{out.tolerance.upper:+.1%}" if out.tolerance else ""))
    lo, hi = -1, len(commits) - 1  # commits[lo] is good (-1: the good end), commits[hi] bad
    bad_step = end
    while hi - lo > 1:
        mid = (lo + hi) // 2
        step = probe(commits[mid], out.cases, out.tolerance)
        out.steps.append(step)
        if step.outcome == BAD:
            hi, bad_step = mid, step
        elif step.outcome == GOOD:
            lo = mid
        else:
            out.stopped, out.candidates = step, list(commits[lo + 1:hi + 1])
            return out
        say(f"{commits[mid][:10]} is {step.outcome}: the first bad commit is one of {hi - lo} "
            f"({commits[lo + 1][:10]}..{commits[hi][:10]})")
    out.first_bad, out.candidates = bad_step, [commits[hi]]
    return out
