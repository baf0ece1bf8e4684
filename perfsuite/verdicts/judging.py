"""The judging policy, once for both faces and the experiments that judge as they do: the rounds a
judging run takes and the looks its verdicts are taken at (``judging_rounds``), and the family of
verdicts a run's false-alarm rate is controlled over (``family``). Which metrics of a case are
judged is ``regress``'s default: its benchmark's declared ones (``BenchmarkSpec.judged``)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from ..records.model import Case, round_values
from . import decision, regress
from .rounds import DEFAULT_CANARY_SHIFT, RoundsPolicy, precise_enough

#: The most rounds a comparison adds while a verdict is UNKNOWN (unless max rounds are set).
COMPARE_MAX_ROUNDS = 12


def family(cases: Iterable[Case] | Iterable[str], baselines: dict) -> int:
    """How many verdicts a run of ``cases`` can take against ``baselines``: the family the run's
    false-alarm rate is controlled over."""
    return regress.family_size([c if isinstance(c, str) else c.name for c in cases], baselines)


def judging_rounds(policy: RoundsPolicy | None, *, update: bool, rounds_given: bool,
                   baselines: dict | Callable[[], dict] | None = None, tolerance=None,
                   alpha: float = decision.DEFAULT_ALPHA,
                   canary_shift: float | None = DEFAULT_CANARY_SHIFT,
                   family: int | Callable[[], int] | None = None,
                   session_sd: float | None = None,
                   history: Callable | None = None) -> tuple[RoundsPolicy, int]:
    """(rounds policy, looks) for both faces. Recording a baseline: ``regress.BASELINE_ROUNDS`` unless rounds
    were asked for. Judging against ``baselines``: rounds are added while a verdict is UNKNOWN,
    up to COMPARE_MAX_ROUNDS, and the world's verdicts are taken at the looks of
    ``decision.stored_looks`` only, each spending its share of the family's alpha (``family``
    verdicts in the run), so the final verdicts must be taken with the same ``looks``.
    ``baselines`` and ``family`` may be functions, asked when the first look comes: the gate
    reads its baselines once it knows the system of the nodes that measure."""
    policy = policy or RoundsPolicy()
    if update and not rounds_given:
        policy = replace(policy, rounds=regress.BASELINE_ROUNDS)
    if baselines is None:
        return policy, 1
    cap = policy.max_rounds or max(policy.rounds, COMPARE_MAX_ROUNDS)
    schedule = decision.stored_looks(policy.rounds, cap)
    looks = len(schedule) + (1 if policy.budget_s is not None else 0)  # a budget's stop is a look
    asked = policy  # what the user asked for, kept for worlds no baseline judges

    def decided(samples: list) -> bool:
        names = {s.case.name for s in samples}
        stored = baselines() if callable(baselines) else baselines
        judged_here = {k: b for k, b in stored.items() if k[0] in names}
        if not judged_here:  # nothing to decide: the asked rounds, or the precision rule
            return asked.max_rounds is None or precise_enough(
                samples, asked.precision, min_rounds=min(3, asked.max_rounds))
        done = min((len(round_values(s, m)) for s in samples for m in s.metrics), default=0)
        if not decision.at_look(done, schedule):
            return False
        verdicts = regress.compare(samples, judged_here, tolerance=tolerance, alpha=alpha, looks=looks,
                                   canary_shift=canary_shift,
                                   family=family() if callable(family) else family,
                                   session_sd=session_sd, history=history, learn_from=stored)
        return all(decision.decided(v) for v in verdicts)

    return replace(policy, max_rounds=cap, decided=decided), looks
