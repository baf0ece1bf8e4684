"""The machine's drift between sessions, learned from all its cases (perfsuite/verdicts/drift.py):
the pooled figure and its degrees of freedom in the layouts it must tell apart, and each case's
moderation. Pure: synthetic session levels, no world."""
from __future__ import annotations

import math

import numpy as np
import pytest

from perfsuite.verdicts import drift, regress


def table(levels: np.ndarray) -> dict:
    """Cases x sessions of log levels as ``learn``'s series (sessions shared by label)."""
    return {f"c{c}": [(f"s{s}", float(x)) for s, x in enumerate(row)] for c, row in enumerate(levels)}


def test_one_case_is_its_own_sample_variance():
    x = np.log([100.0, 104.0, 97.0, 101.0])
    got = drift.learn({"only": [(f"s{i}", float(v)) for i, v in enumerate(x)]})
    assert got.var == pytest.approx(np.var(x, ddof=1)) and got.df == pytest.approx(3)
    assert got.for_case(list(x)) == pytest.approx((math.sqrt(np.var(x, ddof=1)), 3))
    assert got.sessions == 4 and got.cases == 1


def test_nothing_learned_from_one_session():
    assert drift.learn({"a": [("s0", 0.0)], "b": [("s0", 1.0)]}) is None


def test_cases_that_drift_on_their_own_tell_far_more_than_one():
    rng = np.random.default_rng(1)
    own = rng.normal(0, 0.05, (30, 4)) + rng.normal(0, 1, (30, 1))  # case levels + own drift
    got = drift.learn(table(own))
    assert got.sessions == 4 and got.cases == 30 and got.levels == 120
    assert got.shared < 0.2 and got.df > 60  # ~ 30 x 3, not 3
    assert math.sqrt(got.var) == pytest.approx(0.05, rel=0.25)


def test_cases_that_move_together_tell_what_their_sessions_tell():
    rng = np.random.default_rng(2)
    shared = rng.normal(0, 0.2, (1, 4))
    levels = rng.normal(0, 1, (30, 1)) + shared + rng.normal(0, 0.002, (30, 4))
    got = drift.learn(table(levels))
    assert got.shared > 0.95 and got.df == pytest.approx(3, abs=0.3)
    sd, df = got.for_case(list(levels[0]))
    assert df <= got.df + 1e-9  # never more than the pool's, however alike the cases' variances


def test_a_case_that_drifts_more_keeps_more_of_its_own():
    rng = np.random.default_rng(3)
    sds = np.exp(rng.normal(np.log(0.05), 0.8, 30))  # cases drift differently
    levels = rng.normal(0, 1, (30, 1)) + rng.normal(0, 1, (30, 6)) * sds[:, None]
    got = drift.learn(table(levels))
    assert math.isfinite(got.prior_df)
    noisy = int(np.argmax(np.var(levels, axis=1)))
    sd, _ = got.for_case(list(levels[noisy]))
    assert sd > math.sqrt(got.prior_var) * 1.5


def test_a_new_case_of_a_known_machine_takes_the_machines_drift():
    rng = np.random.default_rng(4)
    got = drift.learn(table(rng.normal(0, 1, (10, 1)) + rng.normal(0, 0.03, (10, 5))))
    sd, df = got.for_case([0.0])  # one session of its own
    assert sd == pytest.approx(math.sqrt(got.prior_var)) and df > 4


def test_replaced_sessions_count_for_their_case_only():
    series = {"a": [("s0", 0.0), (("a", "replaced", 0), 0.1), (("a", "replaced", 1), -0.1)],
              "b": [("s0", 0.0)]}
    got = drift.learn(series)
    assert got.df == pytest.approx(2) and got.shared is None


def test_sessions_minutes_apart_are_one_sitting():
    """Sessions recorded back to back share the machine's state: one level (their mean); an
    hour apart, two. Names that are no start time are sittings of their own."""
    t = ["2026-12-06T10:00:00+00:00", "2026-12-06T10:03:00+00:00", "2026-12-06T10:07:00+00:00",
         "2026-12-06T11:30:00+00:00"]
    assert drift.sittings(t + ["monday"]) == {t[0]: t[0], t[1]: t[0], t[2]: t[0], t[3]: t[3], "monday": "monday"}
    back_to_back = {c: [(t[i], 0.01 * i * (c + 1)) for i in range(3)] for c in range(3)}
    assert drift.learn(back_to_back) is None  # one sitting: nothing learned of the drift between runs
    two = {c: [*v, (t[3], 0.5)] for c, v in back_to_back.items()}
    got = drift.learn(two)
    assert got.sessions == 2 and got.levels == 6


def test_confirm_takes_unknowns_and_differents_from_few_sittings():
    """--confirm's cases (``regress.to_confirm``): every stored UNKNOWN; a stored DIFFERENT while
    its baseline holds fewer than CONFIRM_SITTINGS sittings, unless the user stated the drift;
    never an expected failure, an A/B's verdict or a SAME."""
    from perfsuite.records.model import Verdict

    few, enough = regress.CONFIRM_SITTINGS - 1, regress.CONFIRM_SITTINGS

    def v(status, sittings, drift_from="machine", **kw):
        return Verdict(f"c{status}{sittings}{drift_from}{kw}", "t", status, test=kw.pop("test", "stored"),
                       facts={"sittings": sittings, "drift_from": drift_from}, **kw)

    taken = [v("unknown", enough), v("regression", few), v("improvement", 1, "span"), v("regression", few, "seen")]
    left = [v("regression", enough), v("same", 1), v("regression", few, "assumed"),
            v("regression", few, xfail="known"), v("regression", 1, test="paired")]
    assert regress.to_confirm(taken + left) == taken
    # --help says the same number (faces/options.py sits below the verdicts, so it states it)
    from perfsuite.faces import options
    assert f"decided from fewer than {regress.CONFIRM_SITTINGS} sittings" in options.reference_markdown()


def test_under_perf_confirm_a_case_the_ab_will_decide_is_not_failed_at_its_test(tmp_path):
    """pytest's face: a test's outcome cannot change after it ran, and --perf-confirm's A/B runs at
    the session's end, so a stored REGRESSION from few sittings fails its test only without it."""
    from dataclasses import replace

    from perfsuite.records.model import Verdict
    from perfsuite import gate
    from perfsuite.faces import options

    few = Verdict("c", "t", "regression", test="stored", facts={"sittings": 1, "drift_from": "machine"})
    enough = replace(few, facts={"sittings": regress.CONFIRM_SITTINGS, "drift_from": "machine"})
    plain = gate.Gate(options.gate_plan({}, compare=True, root=tmp_path))
    confirming = gate.Gate(replace(plain.plan, confirm=True))
    assert plain.case_failure("c", [few])[0] == "fail"
    assert confirming.case_failure("c", [few]) is None
    assert confirming.case_failure("c", [enough])[0] == "fail"
