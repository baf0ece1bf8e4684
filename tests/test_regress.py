"""Verdict logic pinned on seeded synthetic samples: both directions (busbw higher is better,
latency lower is better), both units, every status, the interval-against-tolerance rule
(DIFFERENT beyond it, SAME inside it, UNKNOWN straddling it or unbounded), paired verdicts,
and the pooling of rounds with contended ones set aside."""
from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest

from perfsuite.verdicts import decision, regress, rounds as rounds_mod
from perfsuite.records import stats
from perfsuite.reading import verdict_text as vt
from perfsuite.records.errors import ConfigError
from perfsuite.records.model import VERDICT_ORDER, Baseline, Case, Metric, Sample, Tolerance, Verdict, round_values

LARGE = Case("allreduce", "mpi", 2, size_bytes=1 << 20)
SMALL = Case("allreduce", "mpi", 2, size_bytes=4)
TOL = Tolerance(-0.10, 0.10)


def one_round(case: Case, metric: str, centre: float, rng, n: int = 200, noise: float = 0.01,
              valid: bool = True) -> Sample:
    unit, hib = ("GB/s", True) if metric == "busbw_GBps" else ("us", False)
    raw = centre * (1.0 + noise * rng.standard_normal(n))
    m = Metric(metric, float(np.median(raw)), unit, hib, tuple(float(x) for x in raw))
    return Sample(case, {metric: m}, valid)


def rounds(case: Case, metric: str, centre: float, k: int, seed: int, between: float = 0.005,
           **kw) -> Sample:
    """k rounds, each centred on centre * (1 + between-round noise), pooled as the suite pools."""
    rng = np.random.default_rng(seed)
    return rounds_mod.pool_rounds([one_round(case, metric, centre * (1 + between * rng.standard_normal()),
                                          rng, **kw) for _ in range(k)])


def base_of(sample: Sample, metric: str, **kw):
    return regress.baseline_from_sample(sample, metric, **kw)


#: A session drift small enough that these tests pin what the rounds themselves decide.
DRIFT = 0.001


@pytest.mark.parametrize("case,metric,worse,better", [
    (LARGE, "busbw_GBps", 0.75, 1.30),  # bandwidth: lower is worse
    (SMALL, "latency_us", 1.30, 0.75),  # latency: higher is worse
])
def test_both_directions_with_rounds(case, metric, worse, better):
    centre = 1.25 if metric == "busbw_GBps" else 12.0
    base = base_of(rounds(case, metric, centre, 6, seed=1), metric)
    v = regress.verdict(case.name, metric, rounds(case, metric, centre * worse, 6, seed=2), base,
                        tolerance=TOL, system="box", session_sd=DRIFT)
    assert v.status == "regression" and v.kind == "DIFFERENT" and v.test == "stored"
    assert v.reason == "decided" and v.p_value < 0.01 and v.rounds == 6 and v.dropped == 0
    assert v.change == pytest.approx(worse - 1, abs=0.02)
    assert v.low <= v.change <= v.high and v.high - v.low < 0.05
    assert (v.high < TOL.lower) if metric == "busbw_GBps" else (v.low > TOL.upper)
    v = regress.verdict(case.name, metric, rounds(case, metric, centre * better, 6, seed=3), base,
                        tolerance=TOL, session_sd=DRIFT)
    assert v.status == "improvement" and v.kind == "DIFFERENT"
    assert v.change == pytest.approx(better - 1, abs=0.02)
    v = regress.verdict(case.name, metric, rounds(case, metric, centre, 6, seed=4), base, tolerance=TOL,
                        session_sd=DRIFT)
    assert v.status == "same" and v.kind == "SAME"
    assert TOL.lower <= v.low <= v.change <= v.high <= TOL.upper


def test_the_failure_line_reads_like_the_issue_asks():
    base = base_of(rounds(LARGE, "busbw_GBps", 1.25, 6, seed=1), "busbw_GBps")
    v = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.92, 6, seed=2), base,
                        tolerance=TOL, system="xeon-2c", session_sd=DRIFT)
    assert re.fullmatch(r"allreduce\[mpi-n2-1MiB\] busbw 0.92 GB/s vs baseline 1.25 GB/s on xeon-2c: "
                        r"-26.5% \[-2\d\.\d%, -2\d\.\d%\], tolerance \+-10%, 6 rounds: regression", vt.line(v))
    lat_base = base_of(rounds(SMALL, "latency_us", 10.0, 6, seed=1), "latency_us")
    v = regress.verdict(SMALL.name, "latency_us", rounds(SMALL, "latency_us", 13.0, 6, seed=2),
                        lat_base, tolerance=Tolerance(-0.05, 0.10), session_sd=DRIFT)
    assert re.fullmatch(r"allreduce\[mpi-n2-4B\] latency 13 us vs baseline 10 us: \+29.8% \[\+2\d\.\d%, "
                        r"\+3\d\.\d%\], tolerance -5%/\+10%, 6 rounds: regression", vt.line(v))
    assert not hasattr(v, "note")  # words are made when shown, never stored
    assert v.to_dict()["reason"] == "decided" and "note" not in v.to_dict()


def test_beyond_tolerance_but_not_surely_is_unknown():
    """+13.7% (the Hodges-Lehmann estimate) against a 10% tolerance, every new round slower
    than every baseline round, yet the interval reaches inside the tolerance: the change may be
    within it, so UNKNOWN, not a regression."""
    base = base_of(_pooled_latency([10.0, 10.1, 10.2, 10.3, 10.4, 10.5]), "latency_us")
    new = _pooled_latency([10.9, 11.2, 11.5, 11.8, 12.1, 12.4])
    v = regress.verdict(SMALL.name, "latency_us", new, base, tolerance=TOL, session_sd=DRIFT)
    assert v.status == "unknown" and v.kind == "UNKNOWN" and v.reason == "straddles"
    assert v.change == pytest.approx(0.137, abs=0.005) and v.low < TOL.upper < v.high
    assert vt.line(v).endswith("6 rounds: unknown (the interval straddles the tolerance)")
    assert regress.failing([v]) == [] and not decision.decided(v)


def test_significant_but_within_tolerance_is_same():
    """-3%, surely (the interval excludes 0), but the whole interval lies inside +-10%."""
    base = base_of(rounds(LARGE, "busbw_GBps", 1.0, 8, seed=1, between=0.001), "busbw_GBps")
    v = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.97, 8, seed=2, between=0.001),
                        base, tolerance=TOL, session_sd=DRIFT)
    assert v.status == "same" and decision.decided(v)
    assert TOL.lower < v.low <= v.high < 0.0


def test_one_round_against_one_is_unknown_however_large_the_change():
    """No fallback to raw iterations: one world against one cannot bound the change (worlds
    differ more than iterations do), so -20% is UNKNOWN with an unbounded interval."""
    base = base_of(rounds(LARGE, "busbw_GBps", 1.0, 1, seed=1), "busbw_GBps")
    v = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.8, 1, seed=2), base,
                        tolerance=TOL, session_sd=DRIFT)
    assert v.test == "stored" and v.status == "unknown" and v.rounds == 1 and v.reason == "unbounded"
    assert v.change == pytest.approx(-0.2, abs=0.01) and (v.low, v.high) == (-1.0, math.inf)
    assert "unknown (too few rounds to bound the change)" in vt.line(v)
    d = v.to_dict()
    assert d["kind"] == "UNKNOWN" and d["high"] is None and d["low"] == -1.0
    json.dumps(d, allow_nan=False)  # a stored verdict is plain JSON: no Infinity
    assert Verdict.from_dict(d) == v  # and reads back the same
    # 3 vs 3 cannot bound even a 95% rank interval (min p 0.1); 4 vs 4 can (2/70)
    three = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.5, 3, seed=2),
                            base_of(rounds(LARGE, "busbw_GBps", 1.0, 3, seed=1), "busbw_GBps"),
                            tolerance=TOL, session_sd=DRIFT)
    assert three.status == "unknown" and three.high == math.inf
    four = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.5, 4, seed=2),
                           base_of(rounds(LARGE, "busbw_GBps", 1.0, 4, seed=1), "busbw_GBps"),
                           tolerance=TOL, alpha=0.05, session_sd=DRIFT)
    assert four.status == "regression" and four.high < TOL.lower


def test_one_contended_round_does_not_move_the_median_of_rounds():
    rng = np.random.default_rng(9)
    rs = [one_round(LARGE, "busbw_GBps", 1.0, rng) for _ in range(6)]
    rs[2] = one_round(LARGE, "busbw_GBps", 0.5, rng)  # another job shared a core: half speed
    pooled = rounds_mod.pool_rounds(rs)
    assert pooled.metrics["busbw_GBps"].value == pytest.approx(1.0, abs=0.01)
    assert pooled.info["rounds"] == 6 and len(pooled.metrics["busbw_GBps"].samples) == 6 * 200


def test_pooled_info_numbers_are_medians_over_rounds():
    rng = np.random.default_rng(4)
    rs = [one_round(LARGE, "busbw_GBps", 1.0, rng) for _ in range(3)]
    rs = [Sample(r.case, r.metrics, True, (), {"p50_us": v, "iters": 200, "valid": True})
          for r, v in zip(rs, (10.0, 30.0, 20.0))]
    info = rounds_mod.pool_rounds(rs).info
    assert info["p50_us"] == 20.0 and info["iters"] == 200 and info["valid"] is True


def test_new_missing_invalid():
    s = rounds(LARGE, "busbw_GBps", 1.0, 3, seed=1)
    assert regress.verdict(LARGE.name, "busbw_GBps", s, None).status == "new"
    b = base_of(s, "busbw_GBps")
    assert regress.verdict(LARGE.name, "busbw_GBps", None, b).status == "missing"
    bad = rounds(LARGE, "busbw_GBps", 1.0, 3, seed=2, valid=False)
    v = regress.verdict(LARGE.name, "busbw_GBps", bad, b)
    assert v.status == "invalid" and v.is_failure


def test_compare_lists_missing_only_for_selected_cases():
    # allreduce is judged on its latency (its record's ``judged``, regress.compare's default)
    b_large = base_of(rounds(LARGE, "latency_us", 1.0, 6, seed=1), "latency_us")
    b_small = base_of(rounds(SMALL, "latency_us", 10.0, 6, seed=1), "latency_us")
    baselines = {(LARGE.name, "latency_us"): b_large, (SMALL.name, "latency_us"): b_small}
    got = regress.compare([rounds(LARGE, "latency_us", 1.0, 1, seed=5)], baselines,
                          cases=[LARGE.name], session_sd=DRIFT)
    assert [v.status for v in got] == ["unknown"]  # 1 round vs 6: unbounded
    got = regress.compare([rounds(LARGE, "latency_us", 1.0, 6, seed=5)], baselines, session_sd=DRIFT)
    assert sorted(v.status for v in got) == ["missing", "same"]
    got = regress.compare([rounds(LARGE, "latency_us", 1.0, 6, seed=5)], baselines,
                          cases=[LARGE.name], session_sd=DRIFT)
    assert [v.status for v in got] == ["same"]


def test_xfail_excuses_a_regression_and_fail_on_improvement_fails_improvements():
    base = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps", xfail="known slow NIC")
    worse = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.7, 6, seed=2), base,
                            session_sd=DRIFT)
    assert worse.status == "regression" and worse.xfail == "known slow NIC"
    assert regress.failing([worse]) == []
    assert "[expected failure: known slow NIC]" in vt.line(worse)
    plain = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps")
    better = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 1.3, 6, seed=2), plain,
                             session_sd=DRIFT)
    assert regress.failing([better]) == [] and regress.failing([better], improvements=True) == [better]


def test_tolerance_precedence_argument_then_baseline_then_default():
    s = rounds(LARGE, "busbw_GBps", 0.94, 6, seed=2)
    b = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps", tolerance=Tolerance(-0.2, 0.2))
    v = regress.verdict(LARGE.name, "busbw_GBps", s, b, session_sd=DRIFT)
    assert v.status == "same" and v.tolerance == Tolerance(-0.2, 0.2)
    assert regress.verdict(LARGE.name, "busbw_GBps", s, b, tolerance=Tolerance(-0.02, 0.02),
                           session_sd=DRIFT).status == "regression"
    b0 = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps")
    v = regress.verdict(LARGE.name, "busbw_GBps", s, b0, session_sd=DRIFT)
    # a quiet baseline (0.5% between rounds) leaves the metric default as it is
    assert v.tolerance == regress.noise_tolerance("busbw_GBps", b0.rounds) == regress.default_tolerance("busbw_GBps")
    assert v.status == "regression"


def test_a_noisy_baseline_widens_the_default_tolerance():
    """Quiet worlds 8% apart cannot tell 3% from nothing: the default widens to 2x the
    baseline's robust spread, so -6% is SAME against it where a quiet baseline calls it."""
    noisy = [9.2, 9.6, 10.0, 10.0, 10.4, 10.8, 9.4, 10.6]
    spread = stats.relative_spread(noisy)
    tol = regress.noise_tolerance("latency_us", noisy)
    assert spread > 0.03 and tol == Tolerance(-regress.NOISE_FACTOR * spread, regress.NOISE_FACTOR * spread)
    assert regress.noise_tolerance("latency_us", [10.0, 10.01, 10.02]) == Tolerance(-0.03, 0.03)
    assert regress.noise_tolerance("latency_us", [5.0, 20.0]) == Tolerance(-0.03, 0.03)  # < 3 rounds: as is
    assert regress.noise_tolerance("algbw_GBps", [10.0, 10.0, 10.0]) == decision.DEFAULT_TOLERANCE
    cap = regress.MAX_NOISE_TOLERANCE
    assert 0.03 < cap < 0.5  # beyond the cap a noisy baseline would call everything SAME
    wild = regress.noise_tolerance("busbw_GBps", [1.0, 3.0, 9.0, 0.2, 5.0])  # 2x spread = 198%
    assert wild == Tolerance(-cap, cap)
    base = base_of(_pooled_latency(noisy), "latency_us")
    v = regress.verdict(SMALL.name, "latency_us", _pooled_latency([x * 0.94 for x in noisy]), base,
                        alpha=0.05, session_sd=DRIFT)
    assert v.tolerance == regress.noise_tolerance("latency_us", base.rounds)
    assert v.tolerance.upper == pytest.approx(tol.upper) and v.status == "same"
    quiet = [10.0, 10.02, 9.98, 10.01, 9.99, 10.0, 10.03, 9.97]
    v = regress.verdict(SMALL.name, "latency_us", _pooled_latency([x * 0.94 for x in quiet]),
                        base_of(_pooled_latency(quiet), "latency_us"), alpha=0.05, session_sd=DRIFT)
    assert v.tolerance == Tolerance(-0.03, 0.03) and v.status == "improvement"


def test_unit_mismatch_says_update_the_baseline():
    b = base_of(rounds(LARGE, "busbw_GBps", 1.0, 3, seed=1), "busbw_GBps")
    other = Sample(LARGE, {"busbw_GBps": Metric("busbw_GBps", 1.0, "Gbit/s", True, (1.0,))})
    with pytest.raises(ConfigError, match="update the baseline"):
        regress.verdict(LARGE.name, "busbw_GBps", other, b)


def test_parse_tolerance():
    assert decision.parse_tolerance("0.05") == Tolerance(-0.05, 0.05)
    assert decision.parse_tolerance("-0.1:0.02") == Tolerance(-0.1, 0.02)
    for bad in ("5%", "0.1:-0.1", "x"):
        with pytest.raises(ConfigError, match="tolerance"):
            decision.parse_tolerance(bad)


def _pooled_latency(centres: list[float]) -> Sample:
    """Rounds at exactly these centres (a tiny fixed ripple inside each), pooled."""
    out = []
    for c in centres:
        raw = tuple(float(x) for x in c * (1 + 0.001 * np.sin(np.arange(50))))
        out.append(Sample(SMALL, {"latency_us": Metric("latency_us", float(np.median(raw)), "us", False, raw)}))
    return rounds_mod.pool_rounds(out)


def test_alpha_decides_a_change_that_is_large_but_only_fairly_sure():
    """+8% median latency, but one new round sits inside the baseline's range: against a 1%
    tolerance the default alpha 0.01 leaves the interval reaching back inside it (UNKNOWN),
    alpha 0.05 does not (regression). Alpha moves the interval, never the estimate; and alpha
    0.05 split over 5 looks is alpha 0.01 at each."""
    base = base_of(_pooled_latency([10.0, 10.1, 10.2, 10.3, 10.4, 10.5]), "latency_us")
    new = _pooled_latency([10.15, 10.9, 11.0, 11.1, 11.2, 11.3])
    tol = Tolerance(-0.01, 0.01)
    strict = regress.verdict(SMALL.name, "latency_us", new, base, tolerance=tol, session_sd=DRIFT)
    loose = regress.verdict(SMALL.name, "latency_us", new, base, tolerance=tol, alpha=0.05, session_sd=DRIFT)
    assert (strict.status, loose.status) == ("unknown", "regression")
    assert strict.p_value == pytest.approx(loose.p_value) and 0.01 < strict.p_value < 0.05
    assert strict.low < tol.upper < loose.low and strict.change == loose.change
    assert (strict.confidence, loose.confidence) == (pytest.approx(0.99), pytest.approx(0.95))
    split = regress.verdict(SMALL.name, "latency_us", new, base, tolerance=tol, alpha=0.05, looks=5,
                            session_sd=DRIFT)
    assert split.low == pytest.approx(strict.low) and split.confidence == pytest.approx(0.99)


def test_parse_alpha():
    assert decision.parse_alpha(None) == decision.DEFAULT_ALPHA == 0.01
    assert decision.parse_alpha("0.05") == 0.05
    for bad in ("5%", "0", "1", "nan", "-0.1"):
        with pytest.raises(ConfigError, match=f"alpha.*{bad}.*between 0 and 1"):
            decision.parse_alpha(bad)


def test_precise_enough_stops_only_when_the_median_is_pinned():
    tight = rounds(LARGE, "busbw_GBps", 1.0, 12, seed=1, between=0.001)
    loose = rounds(LARGE, "busbw_GBps", 1.0, 12, seed=1, between=0.2)
    assert rounds_mod.precise_enough([tight], target=0.01)
    assert not rounds_mod.precise_enough([loose], target=0.01)
    assert not rounds_mod.precise_enough([rounds(LARGE, "busbw_GBps", 1.0, 2, seed=1, between=0.0)], 0.01)


def three_verdicts() -> tuple[Verdict, Verdict, Verdict]:
    """(same, regression, unknown) of busbw against one baseline."""
    base = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps")

    def judge(level: float, k: int, seed: int) -> Verdict:
        return regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", level, k, seed=seed), base,
                               session_sd=DRIFT)

    return judge(1.0, 6, 3), judge(0.7, 6, 2), judge(0.7, 1, 3)


def test_case_line_picks_the_worst_verdict():
    fine, bad, unsure = three_verdicts()
    assert (bad.status, fine.status, unsure.status) == ("regression", "same", "unknown")
    assert vt.case_line([fine, bad, unsure]) == vt.line(bad)
    assert vt.case_line([fine, unsure]) == vt.line(unsure)


def test_verdict_order_and_table_columns():
    assert VERDICT_ORDER == ("regression", "invalid", "improvement", "unknown", "missing", "new", "same")
    same, bad, unsure = three_verdicts()
    lines = vt.table([same, unsure, bad]).splitlines()
    assert lines[0].split() == ["status", "case", "metric", "value", "ref", "change", "interval", "tol", "rounds"]
    assert [line.split()[0] for line in lines[1:4]] == ["REGRESSION", "unknown", "same"]
    assert lines[1].split()[-1] == "6" and lines[1].split()[-2] == "+-3%"
    assert "[-100.0%, unbounded]" in lines[2] and lines[2].split()[-1] == "1"
    assert lines[4] == "1 regression, 1 unknown, 1 same"
    assert lines[5].startswith("# family: 1 verdict(s); the chance that any of them wrongly says "
                               "DIFFERENT is at most 0.01")
    # an unknown against a stored baseline says how to decide it; decided verdicts need no hint
    assert lines[-2].startswith("# unknown against a stored baseline") and "perfsuite ab --a-ref" in lines[-2]
    assert "perfsuite ab" not in vt.table([same, bad])
    # and what the ref column holds
    assert lines[-1].startswith("# ref: the baseline's median over its rounds")


def test_rounds_policy_minimum_then_adaptive_until_precise_or_budget():
    fixed = rounds_mod.RoundsPolicy(rounds=3)
    assert fixed.more(1, 0.0, []) and fixed.more(2, 0.0, []) and not fixed.more(3, 0.0, [])
    tight = [rounds(LARGE, "busbw_GBps", 1.0, 5, seed=1, between=0.0005)]
    loose = [rounds(LARGE, "busbw_GBps", 1.0, 5, seed=1, between=0.2)]
    adaptive = rounds_mod.RoundsPolicy(rounds=2, max_rounds=8, precision=0.01, budget_s=60)
    assert not adaptive.more(5, 1.0, tight)  # median pinned to +-1%: stop
    assert adaptive.more(5, 1.0, loose)  # not yet: another round
    assert not adaptive.more(5, 61.0, loose)  # budget spent
    assert not adaptive.more(8, 1.0, loose)  # max rounds reached
    for bad in (dict(rounds=0), dict(rounds=3, max_rounds=2), dict(precision=0), dict(budget_s=-1),
                dict(max_contention=0.0), dict(max_contention=1.5), dict(retries=-1)):
        with pytest.raises(ConfigError):
            rounds_mod.RoundsPolicy(**bad)
    assert rounds_mod.RoundsPolicy() == rounds_mod.RoundsPolicy(max_contention=0.05, retries=3)


def test_pool_results_keeps_rounds_and_sums_wall_time():
    from perfsuite.records.model import Result

    rng = np.random.default_rng(2)
    res = [Result("allreduce", "mpi", 2, (one_round(LARGE, "busbw_GBps", 1.0 + 0.01 * k, rng),),
                  world_start_s=0.4, wall_s=2.0) for k in range(3)]
    pooled = rounds_mod.pool_results(res)
    assert pooled.extra["rounds"] == 3 and pooled.wall_s == 6.0
    assert round_values(pooled.samples[0], "busbw_GBps") == pytest.approx([1.0, 1.01, 1.02], abs=0.005)


# --- the interval against the tolerance ----------------------------------------------------------

@pytest.mark.parametrize("low,high,if_higher_better,if_lower_better", [
    (-0.30, -0.20, "regression", "improvement"),  # wholly below the tolerance
    (0.20, 0.30, "improvement", "regression"),  # wholly above it
    (-0.05, 0.05, "same", "same"),  # wholly inside
    (-0.10, 0.10, "same", "same"),  # the tolerance's own edges count as inside
    (-0.05, 0.20, "unknown", "unknown"),  # straddles the upper edge
    (-0.20, 0.05, "unknown", "unknown"),  # straddles the lower edge
    (-0.20, 0.20, "unknown", "unknown"),  # wider than the tolerance on both sides
    (0.10, 0.20, "unknown", "unknown"),  # starts on the edge: not beyond it
    (-1.0, math.inf, "unknown", "unknown"),  # unbounded: too few rounds
])
def test_interval_status_both_directions(low, high, if_higher_better, if_lower_better):
    assert decision.interval_status(low, high, TOL, higher_is_better=True) == if_higher_better
    assert decision.interval_status(low, high, TOL, higher_is_better=False) == if_lower_better


def test_interval_status_with_an_asymmetric_tolerance():
    tol = Tolerance(-0.02, 0.10)
    assert decision.interval_status(0.03, 0.08, tol, True) == "same"
    assert decision.interval_status(-0.05, -0.03, tol, True) == "regression"
    assert decision.interval_status(-0.05, -0.03, tol, False) == "improvement"
    assert decision.interval_status(0.05, 0.12, tol, False) == "unknown"


def test_looks_hold_only_looks_that_can_decide():
    # stored: the first look at 3 rounds, then half again as many (a look costs alpha)
    assert decision.stored_looks(1, 12) == (3, 5, 8, 12)
    assert decision.stored_looks(10, 10) == (10,) and decision.stored_looks(1, None) == (1,)
    assert decision.stored_looks(5, 12) == (5, 8, 12)
    # A/B: whole ABBA blocks, each look ~25% more pairs, none where n pairs cannot reach the
    # look's level (the signed-rank test's smallest two-sided p is 2^(1-n))
    for max_pairs, cases in ((40, 1), (200, 1), (200, 13)):
        looks = decision.paired_looks(max_pairs, 0.01, cases)
        assert looks[-1] == max_pairs and all(n % 2 == 0 for n in looks)
        level = 0.01 / (len(looks) * cases)
        assert 2.0 ** (1 - looks[0]) <= level < 2.0 ** (1 - 10)  # 10 pairs could not decide
        assert all(b / a <= 1.4 for a, b in zip(looks, looks[1:]))
    assert decision.paired_looks(40) == (14, 18, 24, 30, 38, 40)
    assert decision.at_look(14, (14, 18)) and not decision.at_look(16, (14, 18)) and decision.at_look(19, (14, 18))


@pytest.mark.parametrize("cases", [1, 13])
def test_the_last_look_is_max_pairs_itself_so_no_look_goes_unbudgeted(cases):
    """An A/B run goes on to its last pair and judges there (``at_look`` is true past the last
    look): that pair must be a look alpha was split over, odd or even. An odd cap takes the
    place of the even look below it; the looks before it are the even cap's."""
    for max_pairs in range(2, 401):
        looks = decision.paired_looks(max_pairs, 0.01, cases)
        assert looks[-1] == max_pairs, (max_pairs, looks)
        assert [n for n in range(1, max_pairs + 1) if decision.at_look(n, looks)] == list(looks)
        if max_pairs % 2:
            assert looks[:-1] == decision.paired_looks(max_pairs - 1, 0.01, cases)[:-1]
    assert len(decision.paired_looks(201)) == len(decision.paired_looks(200)) == 13


def test_an_ab_run_to_an_odd_max_pairs_judges_at_its_looks_only(monkeypatch):
    """``perfsuite ab --max-pairs 201`` on a machine that cannot decide (tolerance 0): it runs
    every pair and judges exactly at the looks its alpha was split over, the last at pair 201."""
    from perfsuite.experiments import ab, validity

    judged_at: list[int] = []
    judge_logs = ab.judge_logs

    def counting(logs, **kw):
        judged_at.append(len(next(iter(logs.values())).ratios))
        return judge_logs(logs, **kw)

    monkeypatch.setattr(ab, "judge_logs", counting)
    rep = validity.ab_run(validity.Machine(0.04, 0.0, 0.0), np.random.default_rng(3), max_pairs=201,
                          tolerance=Tolerance(0.0, 0.0))
    assert rep.pairs == 201 and [v.kind for v in rep.verdicts] == ["UNKNOWN"]
    assert judged_at == list(rep.config.looks) and judged_at[-1] == 201
    assert rep.verdicts[0].facts["looks"] == len(rep.config.looks) == 13


# --- paired verdicts (arm B against arm A) -------------------------------------------------------

PAIR_TOL = Tolerance(-0.03, 0.03)


def paired(ratios, metric="latency_us", higher_is_better=False, strata=None, **kw) -> Verdict:
    q = regress.paired_question("allreduce[mpi-n2-4B]", metric, strata or [list(ratios)], unit="us",
                                higher_is_better=higher_is_better, tolerance=PAIR_TOL, **kw)
    return decision.judge([q])[0]


def test_paired_a_a_ratios_are_never_called_different():
    """200 seeded A/A comparisons of 30 pairs, 2% noise per pair: none is DIFFERENT at alpha
    0.01, and nearly all are SAME (the interval of the ratio's centre fits inside +-3%)."""
    kinds = []
    for seed in range(200):
        v = paired(np.exp(0.02 * np.random.default_rng(seed).standard_normal(30)))
        assert v.test == "paired" and v.rounds == 30
        kinds.append(v.kind)
    assert "DIFFERENT" not in kinds
    assert kinds.count("SAME") >= 190


@pytest.mark.parametrize("metric,higher_is_better,status", [
    ("latency_us", False, "regression"),  # 10% more time
    ("busbw_GBps", True, "improvement"),  # 10% more bandwidth
])
def test_paired_ten_percent_with_thirty_quiet_pairs_is_different(metric, higher_is_better, status):
    ratios = 1.10 * np.exp(0.01 * np.random.default_rng(1).standard_normal(30))
    v = paired(ratios, metric, higher_is_better, a=10.0, b=11.0, dropped=2)
    assert v.status == status and v.kind == "DIFFERENT" and v.reason == "decided"
    assert v.change == pytest.approx(0.10, abs=0.01) and PAIR_TOL.upper < v.low <= v.change <= v.high
    # by hand: Wilcoxon's 99% interval of 30 pairs is the 110th smallest to the 110th largest of
    # the 465 Walsh averages (scipy's exact signed-rank null: P(T <= 109) <= 0.005 < P(T <= 110))
    logs = np.log(ratios)
    i, j = np.triu_indices(30)
    walsh = np.sort((logs[i] + logs[j]) / 2)
    from scipy.stats import wilcoxon  # noqa: F401  (the null below is scipy's too)
    from scipy.stats._wilcoxon import _get_wilcoxon_distr
    cdf = np.cumsum(_get_wilcoxon_distr(30))
    k = int(np.searchsorted(cdf, 0.005, side="right"))
    assert (v.low, v.high) == (pytest.approx(math.expm1(walsh[k - 1])), pytest.approx(math.expm1(walsh[-k])))
    assert (v.value, v.baseline, v.rounds, v.dropped) == (11.0, 10.0, 30, 2)
    line = vt.line(v)
    assert "vs A 10 us" in line and "30 pairs (2 left out: contended or in another machine mode)" in line
    assert line.endswith(f": {status}")
    wider = paired(ratios, metric, higher_is_better, share=1 / 20)
    assert wider.low <= v.low and wider.high >= v.high  # each of 20 looks at 99.95%


def test_paired_with_too_few_or_no_pairs_is_unknown():
    few = paired([1.5] * 3 + [1.6, 1.7])
    assert few.status == "unknown" and few.high == math.inf and few.reason == "unbounded"
    none = decision.judge([regress.paired_question("c", "latency_us", [[]], unit="us", higher_is_better=False,
                                                  tolerance=PAIR_TOL, dropped=4)])[0]
    assert none.status == "unknown" and none.dropped == 4 and none.reason == "no-pairs"
    assert vt.line(none) == "c latency: no pair to judge (4 dropped: contended)"


def test_paired_strata_rank_pairs_across_modes_apart():
    """A +10% arm on a machine whose slow spell doubles the time: pairs that straddle the two
    spells read +10% x2 or +10% / 2 (randomized order: as often one as the other). Ranked with
    the quiet pairs they swamp them; ranked apart, the quiet pairs decide and the straddling
    ones' Walsh averages across directions still centre on +10%."""
    rng = np.random.default_rng(3)
    quiet = list(1.10 * np.exp(0.01 * rng.standard_normal(20)))
    straddle = [1.10 * 2.0 ** (1 if k % 2 else -1) * math.exp(0.01 * rng.standard_normal()) for k in range(12)]
    apart = paired(None, strata=[quiet, straddle])
    together = paired(None, strata=[quiet + straddle])
    assert apart.status == "regression" and apart.low > PAIR_TOL.upper
    assert apart.high - apart.low < together.high - together.low
    assert apart.change == pytest.approx(0.10, abs=0.02)


def test_the_family_holds_over_many_cases_with_holm():
    """13 cases of one world, one of them 10% slower: Holm's step-down flags that one at
    alpha / 13 and judges the rest at levels that stop at the first it cannot reject; the run's
    chance of any false DIFFERENT stays <= alpha, which each verdict says."""
    rng = np.random.default_rng(5)
    qs = []
    for i in range(13):
        factor = 1.10 if i == 4 else 1.0
        qs.append(regress.paired_question(f"c{i}", "latency_us", [list(factor * np.exp(0.01 * rng.standard_normal(30)))],
                                          unit="us", higher_is_better=False, tolerance=PAIR_TOL))
    verdicts = decision.judge(qs, 0.01)
    assert [v.case for v in verdicts if v.kind == "DIFFERENT"] == ["c4"]
    assert verdicts[4].confidence == pytest.approx(1 - 0.01 / 13)
    assert all(v.facts["family"] == 13 and v.facts["alpha"] == 0.01 for v in verdicts)
    assert vt.family(verdicts).startswith("# family: 13 verdict(s); the chance that any of them wrongly "
                                          "says DIFFERENT is at most 0.01 (Holm over the cases")
    # alpha is shared across worlds by their cases: a world of 2 in a run of 26 gets 2/26 of it
    two = [decision.Question(q.verdict, q.evidence, 1.0, group="w") for q in qs[:2]]
    assert max(v.confidence for v in decision.judge(two, 0.01, family=26)) == pytest.approx(1 - 0.01 * 2 / 26 / 2)


# --- rounds: contended ones set aside ------------------------------------------------------------

def _round(value: float, contention: float | None, case: Case = LARGE, valid: bool = True) -> Sample:
    info = {} if contention is None else {"contention": contention, "cpu_pressure": 0.1}
    m = Metric("busbw_GBps", value, "GB/s", True, (value, value))
    return Sample(case, {"busbw_GBps": m}, valid, (), info)


def test_pool_rounds_leaves_contended_rounds_out():
    rs = [_round(1.00, 0.01), _round(0.50, 0.40), _round(1.02, 0.02), _round(0.98, 0.03),
          _round(0.40, 0.07), _round(1.01, None)]  # None: not measured, never dropped
    pooled = rounds_mod.pool_rounds(rs, max_contention=0.05)
    assert round_values(pooled, "busbw_GBps") == [1.00, 1.02, 0.98, 1.01]
    assert pooled.metrics["busbw_GBps"].value == pytest.approx(1.005)
    assert pooled.info["rounds_dropped"] == 2 and pooled.info["contended"] is False
    assert pooled.info["contention"] == 0.03  # the worst of the rounds kept
    assert len(pooled.metrics["busbw_GBps"].samples) == 2 * 4
    # without a limit nothing is dropped, and the result is what it always was
    plain = rounds_mod.pool_rounds(rs)
    assert len(round_values(plain, "busbw_GBps")) == 6 and "rounds_dropped" not in plain.info
    assert not hasattr(regress, "pool_rounds")  # one home: the rounds module, no re-export
    # a contended round that failed validation still makes the pooled sample invalid
    assert not rounds_mod.pool_rounds([_round(1.0, 0.0), _round(1.0, 0.9, valid=False)], 0.05).valid


def test_pool_rounds_marks_all_contended_and_keeps_them_all():
    rs = [_round(0.6, 0.30), _round(0.5, 0.20), _round(0.7, 0.50)]
    pooled = rounds_mod.pool_rounds(rs, max_contention=0.05)
    assert pooled.info["contended"] is True and pooled.info["rounds_dropped"] == 3
    assert sorted(round_values(pooled, "busbw_GBps")) == [0.5, 0.6, 0.7]
    assert pooled.info["contention"] == 0.20  # the least contended of them
    one = rounds_mod.pool_rounds([_round(0.6, 0.3)], max_contention=0.05)
    assert one.info["contended"] is True and round_values(one, "busbw_GBps") == [0.6]
    by_case = rounds_mod.pool_by_case([[_round(1.0, 0.0), _round(5.0, 0.0, SMALL)],
                                       [_round(0.4, 0.9), _round(5.1, 0.0, SMALL)]], max_contention=0.05)
    assert [s.info["rounds_dropped"] for s in by_case] == [1, 0]


def test_a_contended_sample_gets_no_verdict_however_large_the_change():
    base = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps")
    contended = rounds_mod.pool_rounds([_round(x, c) for x, c in
                                        ((0.5, 0.3), (0.52, 0.25), (0.49, 0.4), (0.51, 0.35), (0.5, 0.3), (0.5, 0.5))],
                                       max_contention=0.05)
    v = regress.verdict(LARGE.name, "busbw_GBps", contended, base, tolerance=TOL)
    assert v.status == "unknown" and v.kind == "UNKNOWN" and regress.failing([v], improvements=True) == []
    assert v.reason == "contended" and v.change is None
    assert "machine contended (25% run-queue wait" in vt.line(v) and "of 6 round(s)" in vt.line(v)
    # some contended: judged on the calm rounds only, the dropped ones counted
    mixed = rounds_mod.pool_rounds([_round(x, c) for x, c in
                                    ((1.0, 0.01), (0.5, 0.3), (1.001, 0.0), (0.999, 0.02), (1.002, 0.01),
                                     (1.0, 0.0), (0.998, 0.01), (0.4, 0.6))], max_contention=0.05)
    v = regress.verdict(LARGE.name, "busbw_GBps", mixed, base, tolerance=TOL, session_sd=DRIFT)
    assert v.status == "same" and (v.rounds, v.dropped) == (6, 2)
    assert "6 rounds (2 left out: contended or in another machine mode): same" in vt.line(v)
    table = vt.table([v])
    assert table.splitlines()[1].split()[-1] == "6-2" and "left out as contended" in table


def test_rounds_policy_reruns_contended_rounds_up_to_the_retries():
    def pooled(dropped: int) -> list[Sample]:
        return [Sample(LARGE, {}, True, (), {"rounds_dropped": dropped})]

    once = rounds_mod.RoundsPolicy(rounds=1, retries=3)
    assert once.more(1, 0.0, pooled(1)) and once.more(2, 0.0, pooled(2)) and once.more(3, 0.0, pooled(3))
    assert not once.more(4, 0.0, pooled(4))  # 3 retries spent, all contended: stop
    assert not once.more(2, 0.0, pooled(1))  # the retry was calm: done
    three = rounds_mod.RoundsPolicy(rounds=3, retries=3)
    assert three.more(3, 0.0, pooled(1)) and not three.more(4, 0.0, pooled(1))
    assert three.more(4, 0.0, pooled(2)) and not three.more(5, 0.0, pooled(2))
    assert not three.more(6, 0.0, pooled(3))  # never more than rounds + retries worlds
    # a busy spell: all 3 rounds and the first retry contended; the other 2 retries still run
    assert three.more(3, 0.0, pooled(3)) and three.more(4, 0.0, pooled(4)) and three.more(5, 0.0, pooled(5))
    assert not three.more(6, 0.0, pooled(6))
    # 4 of 10 contended: the 3 retries run (9 calm rounds beat 6) even though 10 cannot be reached
    ten = rounds_mod.RoundsPolicy(rounds=10, retries=3)
    assert ten.more(10, 0.0, pooled(4)) and ten.more(12, 0.0, pooled(4)) and not ten.more(13, 0.0, pooled(4))
    assert not rounds_mod.RoundsPolicy(rounds=1, retries=0).more(1, 0.0, pooled(1))
    assert not rounds_mod.RoundsPolicy(rounds=1, budget_s=10).more(1, 10.0, pooled(1))  # budget first
    # the worst case decides: one calm case does not hide a contended one
    assert once.more(1, 0.0, [*pooled(0), *pooled(1)])


def test_rounds_policy_adds_rounds_until_decided():
    seen: list[int] = []

    def decided_after(n: int):
        def decided(samples: list[Sample]) -> bool:
            seen.append(len(samples))
            return int(samples[0].info.get("rounds", 1)) >= n
        return decided

    def at(done: int, dropped: int = 0) -> list[Sample]:
        return [Sample(LARGE, {}, True, (), {"rounds": done - dropped, "rounds_dropped": dropped})]

    policy = rounds_mod.RoundsPolicy(rounds=2, max_rounds=6, decided=decided_after(4))
    assert policy.more(2, 0.0, at(2)) and policy.more(3, 0.0, at(3)) and not policy.more(4, 0.0, at(4))
    assert seen == [1, 1, 1]  # called with the pooled samples
    never = rounds_mod.RoundsPolicy(rounds=2, max_rounds=6, decided=lambda s: False)
    assert never.more(5, 0.0, at(5)) and not never.more(6, 0.0, at(6))  # up to max_rounds
    # a round left out as contended extends the cap by one, up to the retries
    assert never.more(6, 0.0, at(6, dropped=1)) and not never.more(7, 0.0, at(7, dropped=1))
    assert never.more(8, 0.0, at(8, dropped=3)) and not never.more(9, 0.0, at(9, dropped=3))
    assert not never.more(9, 0.0, at(9, dropped=5))  # only ``retries`` (3) extra
    spent = rounds_mod.RoundsPolicy(rounds=2, max_rounds=6, budget_s=5.0, decided=lambda s: False)
    assert spent.more(3, 4.9, at(3)) and not spent.more(3, 5.0, at(3))  # the budget still stops it
    # ``decided`` replaces the precision rule: decided stops even when the median is loose ...
    loose = [rounds(LARGE, "busbw_GBps", 1.0, 5, seed=1, between=0.2)]
    assert not rounds_mod.RoundsPolicy(rounds=2, max_rounds=8, decided=lambda s: True).more(5, 0.0, loose)
    # ... and undecided goes on when it is tight
    tight = [rounds(LARGE, "busbw_GBps", 1.0, 5, seed=1, between=0.0005)]
    assert rounds_mod.RoundsPolicy(rounds=2, max_rounds=8, decided=lambda s: False).more(5, 0.0, tight)
    assert not rounds_mod.RoundsPolicy(rounds=2, max_rounds=8, precision=0.01).more(5, 0.0, tight)


def test_judging_rounds_record_ten_and_add_rounds_while_unknown():
    from perfsuite.verdicts import judging, regress

    policy, looks = judging.judging_rounds(None, update=True, rounds_given=False)
    assert policy.rounds == regress.BASELINE_ROUNDS and looks == 1 and policy.decided is None
    asked = rounds_mod.RoundsPolicy(rounds=3)
    assert judging.judging_rounds(asked, update=True, rounds_given=True)[0].rounds == 3
    base = {(LARGE.name, "busbw_GBps"): base_of(rounds(LARGE, "busbw_GBps", 1.0, 10, seed=1), "busbw_GBps")}
    policy, looks = judging.judging_rounds(None, update=False, rounds_given=False, baselines=base)
    assert policy.max_rounds == judging.COMPARE_MAX_ROUNDS and looks == len(decision.stored_looks(1, 12)) == 4
    one = rounds(LARGE, "busbw_GBps", 0.5, 1, seed=2)  # 1 round against 10 cannot be bounded
    assert policy.more(1, 0.0, [one])
    # -50% against one session at the default drift (10%): decided at the look of 8 rounds ...
    assert not policy.more(8, 0.0, [rounds(LARGE, "busbw_GBps", 0.5, 8, seed=2)])
    # ... but 7 rounds are no look: another round, whatever they show
    assert policy.more(7, 0.0, [rounds(LARGE, "busbw_GBps", 0.5, 7, seed=2)])
    assert not policy.more(12, 0.0, [one])  # the cap
    # a case with no baseline adds no rounds for verdicts: exactly the rounds asked for ...
    other = Case("allreduce", "mpi", 2, size_bytes=4)
    assert not policy.more(1, 0.0, [rounds(other, "busbw_GBps", 1.0, 1, seed=3)])
    # ... or, with max rounds asked, until its median is precise (the adaptive rule it asked for)
    precise, _ = judging.judging_rounds(rounds_mod.RoundsPolicy(rounds=1, max_rounds=8, precision=0.01),
                                      update=False, rounds_given=True, baselines=base)
    assert precise.more(5, 0.0, [rounds(other, "busbw_GBps", 1.0, 5, seed=3, between=0.2)])
    assert not precise.more(5, 0.0, [rounds(other, "busbw_GBps", 1.0, 5, seed=3, between=0.0005)])


def _moded(value: float, canary: float) -> Sample:
    m = Metric("busbw_GBps", value, "GB/s", True, (value,))
    return Sample(LARGE, {"busbw_GBps": m}, True, (), {"contention": 0.0, "canary_us": canary})


def test_verdicts_compare_rounds_within_machine_modes_only():
    """A machine with two modes (canary ~100 us: 1.4 GB/s; ~165 us: 0.95 GB/s). A baseline of
    both modes, a clean candidate mostly in the slow one: across modes it reads -20% and more;
    within each mode it is the same. The canary goes into the baseline file and back."""
    fast = [_moded(1.40 * (1 + 0.004 * k), 100 + k) for k in range(-2, 3)]
    slow = [_moded(0.95 * (1 + 0.004 * k), 165 + k) for k in range(-2, 3)]
    base = base_of(rounds_mod.pool_rounds(fast + slow), "busbw_GBps")
    assert base.canary == (98.0, 99.0, 100.0, 101.0, 102.0, 163.0, 164.0, 165.0, 166.0, 167.0)
    again = Baseline.from_dict(base.case, base.metric, json.loads(json.dumps(base.to_dict())))
    assert again.canary == base.canary
    cand = rounds_mod.pool_rounds([_moded(0.95 * (1 + 0.003 * k), 164 + k) for k in range(-3, 3)]
                                  + [_moded(1.41, 101)])
    assert rounds_mod.round_canaries(cand)[-1] == 101
    v = regress.verdict(LARGE.name, "busbw_GBps", cand, again, tolerance=TOL, session_sd=DRIFT)
    # the fast round is judged against the fast baseline rounds; value and reference are the
    # candidate's main (slow) mode
    assert v.status == "same" and (v.rounds, v.dropped) == (7, 0)
    assert v.value == pytest.approx(0.95, rel=0.01) and v.baseline == pytest.approx(0.95)
    off = regress.verdict(LARGE.name, "busbw_GBps", cand, again, tolerance=TOL, canary_shift=None,
                          session_sd=DRIFT)
    assert off.status != "same" and off.rounds == 7  # across modes: a change that is the machine's
    # A candidate in a mode the baseline never ran in: only a change beyond the modes' span decides.
    odd = rounds_mod.pool_rounds([_moded(0.7, 240 + k) for k in range(6)])
    v = regress.verdict(LARGE.name, "busbw_GBps", odd, again, tolerance=TOL, session_sd=DRIFT)
    assert v.status == "unknown" and v.reason == "other-mode"
    # more rounds may find the machine back in a mode the baseline ran in: never futile
    assert "futile" not in v.facts and not decision.decided(v)
    assert "machine in another mode than the baseline: canary 2" in vt.line(v)
    assert "0 of 10 baseline rounds within +-15%" in vt.line(v) and "beyond x4.0 is decided" in vt.line(v)
    # A baseline without canaries (older files): every round, as before.
    plain = Baseline(**{**again.__dict__, "canary": ()})
    assert regress.verdict(LARGE.name, "busbw_GBps", cand, plain, tolerance=TOL).rounds == 7
    # A candidate round in a mode with no baseline round is left out, and says so.
    stray = rounds_mod.pool_rounds([_moded(0.95 * (1 + 0.003 * k), 164 + k) for k in range(-3, 3)]
                                   + [_moded(0.6, 300)])
    v = regress.verdict(LARGE.name, "busbw_GBps", stray, again, tolerance=TOL, session_sd=DRIFT)
    assert v.status == "same" and (v.rounds, v.dropped) == (6, 1)
    assert "1 left out: contended or in another machine mode" in vt.line(v)


def test_a_change_beyond_the_modes_span_is_decided_in_any_mode():
    """x6 slower (MPICH's ring algorithm at 4 B), the candidate in a mode no baseline round ran
    in: beyond anything the modes produce (x4 by default, or the baseline's own wider span), so
    a regression; x2 in another mode could be the mode's, so UNKNOWN."""
    base = base_of(rounds_mod.pool_rounds([_moded(1.0 * (1 + 0.01 * k), 100 + k) for k in range(-5, 5)]),
                   "busbw_GBps")
    for factor, status in ((1 / 6, "regression"), (1 / 2, "unknown"), (6.0, "improvement")):
        cand = rounds_mod.pool_rounds([_moded(factor * (1 + 0.01 * k), 240 + k) for k in range(8)])
        v = regress.verdict(LARGE.name, "busbw_GBps", cand, base, session_sd=DRIFT)
        assert v.status == status, (factor, v)
        assert v.reason == ("across-modes" if status != "unknown" else "other-mode")
        assert v.facts["span"] == pytest.approx(regress.PRIOR_SPAN)
    assert "across machine modes: beyond x4.0" in vt.line(v)
    # The machine changed state between them, one candidate round left in the baseline's mode:
    # too few within modes to bound anything, so every round against every round, with the span
    # (the e2e gate's MPICH ring, 11 of 12 rounds in another mode, read UNKNOWN [-100%, unbounded]).
    for factor, status in ((1 / 6, "regression"), (1 / 2, "unknown")):
        cand = rounds_mod.pool_rounds([_moded(factor * (1 + 0.01 * k), 240 + k) for k in range(7)]
                                      + [_moded(factor, 100)])
        v = regress.verdict(LARGE.name, "busbw_GBps", cand, base, session_sd=DRIFT)
        assert v.status == status, (factor, v)
        assert v.reason == ("across-modes" if status != "unknown" else "other-mode")
        assert v.facts["base_in_mode"] == 0


def test_a_slowdown_is_seen_through_modes_the_baseline_split_across():
    """Baseline and candidate each split over two modes, 30% slower in both: each mode alone
    holds too few rounds to bound the change at the gate's confidence; together they decide it."""
    def side(level: float, n_fast: int, n_slow: int, seed: int) -> Sample:
        rng = np.random.default_rng(seed)
        return rounds_mod.pool_rounds(
            [_moded(1.40 * level * (1 + 0.02 * rng.standard_normal()), 100 + k) for k in range(n_fast)]
            + [_moded(0.95 * level * (1 + 0.02 * rng.standard_normal()), 165 + k) for k in range(n_slow)])

    base = base_of(side(1.0, 5, 5, seed=1), "busbw_GBps")
    cand = side(1 / 1.3, 6, 6, seed=2)
    one_mode = stats.shift_ci(np.log(round_values(cand, "busbw_GBps")[:6]),
                              np.log(base.rounds[:5]), 1 - 0.01 / 4)
    assert one_mode[1] == -math.inf  # 6 against 5 cannot be bounded at 99.75%
    v = regress.verdict(LARGE.name, "busbw_GBps", cand, base, looks=4, session_sd=DRIFT)
    assert v.status == "regression" and v.rounds == 12 and v.dropped == 0
    assert v.low < 1 / 1.3 - 1 < v.high and v.change == pytest.approx(1 / 1.3 - 1, abs=0.03)


def test_a_mode_with_one_baseline_round_does_not_narrow_the_tolerance():
    """The spread behind the default tolerance comes from modes with two or more baseline
    rounds: a lone round is its own median, and counting its ratio of 1 would narrow it."""
    strata = [([1.0], [0.90, 1.00, 1.10]), ([2.0], [2.0])]
    assert regress._within_mode(strata) == pytest.approx([0.9, 1.0, 1.1])
    assert regress._within_mode([([1.0], [2.0])]) == []


# --- sessions: the drift between runs -------------------------------------------------------------

def _session(level: float, seed: int, k: int = 10, noise: float = 0.005) -> Sample:
    rng = np.random.default_rng(seed)
    return _pooled_latency([level * (1 + noise * rng.standard_normal()) for _ in range(k)])


def test_one_session_decides_only_beyond_the_machines_span():
    """One session of baseline rounds says nothing of how far the next run lands: only a change
    beyond the span (x4, what this machine's unseen states move a level by between runs) is
    decided. A clean rerun in the other state (x3) is not a regression, though its rounds alone
    would say so; MPICH's ring algorithm (x6) is; x2 is not decided, and never SAME."""
    one = base_of(_session(10.0, 1), "latency_us", session="monday")
    assert one.sessions == ("monday",) * 10 and regress.session_drift(one) is None
    other_state = _session(31.0, 2)
    v = regress.verdict(SMALL.name, "latency_us", other_state, one)
    assert v.status == "unknown" and v.reason == "span" and v.facts["drift_from"] == "span"
    assert v.facts["span"] == pytest.approx(regress.PRIOR_SPAN)
    assert "drift between runs is not learned yet, from 1 session(s): only a change beyond x4.0, the prior" in vt.line(v)
    assert regress.verdict(SMALL.name, "latency_us", other_state, one, session_sd=DRIFT).status == "regression"
    ring = regress.verdict(SMALL.name, "latency_us", _session(64.0, 3), one)
    assert ring.status == "regression" and ring.reason == "beyond-span"
    assert "beyond x4.0, the most this machine moves between runs on its own" in vt.line(ring)
    assert regress.verdict(SMALL.name, "latency_us", _session(20.0, 4), one).status == "unknown"
    assert regress.verdict(SMALL.name, "latency_us", _session(10.0, 5), one).status == "unknown"
    with pytest.raises(ConfigError, match="session drift 0.0 must be a fraction > 0"):
        regress.verdict(SMALL.name, "latency_us", other_state, one, session_sd=0.0)


def test_sessions_added_to_a_baseline_measure_its_drift():
    """--baseline-add: each run's rounds join the baseline as a session; from MIN_SESSIONS
    sessions of the machine their levels' spread is the drift, with a t quantile on its degrees
    of freedom (one case: its own). A quiet machine's sessions (0.5% apart) then let a +30%
    change be decided; sessions 10% apart keep it undecided. An update replaces the rounds but
    keeps the old levels as history."""
    quiet, loud = _sessions(0.005), _sessions(0.10)
    assert len(quiet.session_rounds()) == 5 and len(quiet.rounds) == 50 and quiet.history == ()
    machine = regress.machine_drift({(SMALL.name, "latency_us"): quiet})
    assert regress.session_drift(quiet) is None  # nothing learned is nothing known
    sd, df, source, sessions = regress.session_drift(quiet, machine=machine)
    # the sessions' spread, or half the widest step between two of them where that is wider
    assert source in ("machine", "seen") and df == 4 and sessions == 5 and sd < 0.02
    cand = _session(13.0, 99)
    v = regress.verdict(SMALL.name, "latency_us", cand, quiet)
    assert v.status == "regression" and v.facts["drift_from"] in ("machine", "seen") and v.facts["df"] == 4
    assert regress.verdict(SMALL.name, "latency_us", _session(10.05, 98), loud).status == "unknown"
    replaced = regress.baseline_from_sample(_session(10.0, 50), "latency_us", session="new", previous=quiet)
    assert len(replaced.session_rounds()) == 1 and len(replaced.history) == 5
    learned = regress.machine_drift({(SMALL.name, "latency_us"): replaced})  # 1 session + 5 earlier levels
    assert learned is not None and learned.df == 5
    again = Baseline.from_dict(replaced.case, replaced.metric, json.loads(json.dumps(replaced.to_dict())))
    assert again.history == pytest.approx(replaced.history) and again.sessions == replaced.sessions


def test_an_unknown_no_number_of_rounds_could_decide_is_futile():
    """``decided``: an UNKNOWN whose evidence at its limit (the candidate's own rounds without
    number, so only what no round narrows is left: the span, or the drift between sessions)
    still straddles the tolerance, at the most alpha it may be granted, is ``futile``: more
    rounds are spent in vain. Its status is what it was; only when rounds stop changes."""
    one = base_of(_session(10.0, 1), "latency_us", session="monday")
    # one session: a clean rerun, or x2, or the machine's other state, lands inside the span's
    # window however many rounds are added; x6 (the ring algorithm) lies beyond it, and while
    # its first 3 rounds cannot bound it yet, more can
    for level, k in ((10.05, 3), (10.05, 10), (20.0, 10), (31.0, 10)):
        v = regress.verdict(SMALL.name, "latency_us", _session(level, 2, k=k), one, looks=4)
        assert (v.status, v.reason, v.facts.get("futile")) == ("unknown", "span", True), level
        assert decision.decided(v)
    early = regress.verdict(SMALL.name, "latency_us", _session(60.0, 2, k=3), one, looks=4)
    assert early.status == "unknown" and "futile" not in early.facts and not decision.decided(early)
    # sessions 10% apart against a tolerance of 10%: the drift alone straddles it, for good
    loud = _sessions(0.10)
    v = regress.verdict(SMALL.name, "latency_us", _session(10.0, 2, k=3), loud, looks=4, tolerance=TOL)
    assert v.status == "unknown" and v.facts.get("futile") and decision.decided(v)
    # a quiet machine's sessions: noisy rounds straddle it now, but more of them can show SAME
    quiet = _sessions(0.005)
    v = regress.verdict(SMALL.name, "latency_us", _session(10.0, 2, k=5, noise=0.10), quiet, looks=4,
                        tolerance=TOL)
    assert v.status == "unknown" and "futile" not in v.facts and not decision.decided(v)
    # a drift stated by the user (--session-drift) is the floor likewise
    v = regress.verdict(SMALL.name, "latency_us", _session(10.0, 2, k=3), one, looks=4, session_sd=0.10)
    assert v.status == "unknown" and v.facts.get("futile")
    # Two timing loops: no round can bring evidence; a contended round may be followed by calm ones.
    from perfsuite.records.model import Verdict
    assert decision.decided(Verdict(SMALL.name, "latency_us", "unknown", reason="timing"))
    assert not decision.decided(Verdict(SMALL.name, "latency_us", "unknown", reason="contended"))
    # A/B: rank evidence has no floor, so more pairs can always decide
    ab = decision.judge([regress.paired_question("c", "latency_us", [[1.01, 0.99, 1.02, 0.98] * 4], unit="us",
                                                higher_is_better=False, tolerance=Tolerance(0.0, 0.0))])[0]
    assert ab.status == "unknown" and "futile" not in ab.facts and not decision.decided(ab)
    # Futility is a fact beside the verdict, never a change of it: without the limit, the same.
    for level in (10.05, 20.0, 31.0, 60.0, 100.0):
        for base in (one, loud, quiet):
            q = regress.stored_question(SMALL.name, "latency_us", _session(level, 4, k=5), base, share=0.25)
            with_limit, = decision.judge([q])
            without, = decision.judge([replace(q, evidence=replace(q.evidence, limit=None))])
            futile = {"futile": True} if with_limit.facts.get("futile") else {}
            assert with_limit == replace(without, facts={**without.facts, **futile})


def test_a_clean_rerun_against_one_session_stops_at_the_first_look():
    """The span rule cannot decide a clean rerun against a one-session baseline however many
    rounds it adds: the compare stops at its first look (3 rounds) instead of the cap (12);
    x6 goes on until it is decided."""
    from perfsuite.experiments import validity

    rng = np.random.default_rng(11)
    clean = validity.stored_run(validity.Machine(0.02, 0.3, 0.05), rng)
    assert clean.rounds == 3 and [v.kind for v in clean.verdicts] == ["UNKNOWN"]
    assert clean.verdicts[0].facts["futile"]
    ring = validity.stored_run(validity.Machine(0.02, 0.3, 0.05), rng, change=5.0)
    assert ring.rounds > 3 and [v.status for v in ring.verdicts] == ["regression"]


def _sessions(spread: float) -> Baseline:
    """A baseline of 5 sessions (--baseline-add) whose levels are ``spread`` apart."""
    b = None
    for k, level in enumerate(10.0 * (1 + spread * np.random.default_rng(7).standard_normal(5))):
        b = regress.baseline_from_sample(_session(level, 10 + k), "latency_us", session=f"s{k}",
                                         previous=b, add=b is not None)
    return b


def test_lag1_correlation_of_rounds_widens_the_interval():
    """Rounds of one run are not independent (a spell lasts minutes): their lag-1 correlation,
    estimated from the rounds in time order, widens the rounds' part of the interval."""
    trend = [10.0 * (1 + 0.01 * k) for k in (0, 2, 1, 3, 4, 6, 5, 7, 9, 8)]  # a slow drift
    ripple = [10.0 * (1 + 0.01 * (-1) ** k) for k in range(10)]  # alternating: lag-1 negative
    assert regress.lag1([trend]) > 0.5 and regress.lag1([ripple]) == 0.0
    assert regress.lag1([[1.0, 2.0]]) == 0.0  # too few neighbours to say
    shuffled = [trend[i] for i in (0, 9, 1, 8, 2, 7, 3, 6, 4, 5)]
    assert regress.lag1([shuffled]) < 0.1
    base = base_of(_pooled_latency(trend), "latency_us")
    slow = regress.verdict(SMALL.name, "latency_us", _pooled_latency([x * 1.1 for x in trend]), base,
                           session_sd=DRIFT)
    fast = regress.verdict(SMALL.name, "latency_us", _pooled_latency([x * 1.1 for x in shuffled]),
                           base_of(_pooled_latency(shuffled), "latency_us"), session_sd=DRIFT)
    assert slow.change == pytest.approx(fast.change)
    assert slow.facts["lag1"] > 0.5 and fast.facts["lag1"] < 0.1
    assert slow.high - slow.low > 1.5 * (fast.high - fast.low)


def test_one_verdict_per_case_with_its_reciprocal_shown():
    """Latency and busbw are one number seen two ways: one test, on latency, with busbw's
    change beside it; the baseline keeps both metrics."""
    def both(level: float, seed: int) -> Sample:
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(8):
            lat = level * (1 + 0.005 * rng.standard_normal())
            out.append(Sample(SMALL, {"latency_us": Metric("latency_us", lat, "us", False),
                                      "busbw_GBps": Metric("busbw_GBps", 4e-3 / lat, "GB/s", True)}))
        return rounds_mod.pool_rounds(out)

    base = both(10.0, 1)
    stored = {(SMALL.name, m): base_of(base, m) for m in base.metrics}
    verdicts = regress.compare([both(13.0, 2)], stored, session_sd=DRIFT)
    assert [(v.metric, v.status, v.mirror) for v in verdicts] == [("latency_us", "regression", "busbw_GBps")]
    assert "(busbw -23." in vt.line(verdicts[0])
    assert regress.family_size([SMALL.name], stored) == 1
    gone = regress.compare([], stored, cases=[SMALL.name])
    assert [(v.metric, v.status) for v in gone] == [("latency_us", "missing")]


def test_two_intervals_read_as_one_keep_only_what_either_supports():
    """``either``: each interval at half the level, their intersection when they meet; when they
    do not (one assumption failed, and the data cannot say which), their hull, never a point."""
    wide = decision.normal_evidence(0.0, 0.5)
    narrow = decision.normal_evidence(0.05, 0.01)
    both = decision.either(wide, narrow)
    lo, hi = both.interval(0.99)
    assert (lo, hi) == pytest.approx(narrow.interval(0.995))
    apart = decision.either(decision.normal_evidence(0.5, 0.01), decision.normal_evidence(-0.5, 0.01))
    lo, hi = apart.interval(0.99)
    assert lo < -0.5 and hi > 0.5  # covers both, so it shows neither a change nor sameness
    assert decision.interval_status(math.expm1(lo), math.expm1(hi), Tolerance(-0.03, 0.03), False) == "unknown"
    # ... and its p-values say so: the hull straddles the tolerance at every level
    assert apart.p_beyond(-0.03, 0.03) == 1.0 and apart.p_within(-0.03, 0.03) == 1.0


LEVELS = np.geomspace(1e-6, 0.9, 50)


def _agrees(ev: decision.Evidence, lo: float, hi: float) -> list[tuple]:
    """Levels at which the interval ``ev`` shows and its p-values disagree (beyond, within),
    and where an interval is not inside the one of the next lower level (they must nest)."""
    p_beyond, p_within = ev.p_beyond(lo, hi), ev.p_within(lo, hi)
    wrong, last = [], (-math.inf, math.inf)
    for level in LEVELS:
        low, high = ev.interval(1.0 - level)
        if not math.isclose(level, p_beyond, rel_tol=1e-6) and (p_beyond <= level) != (low > hi or high < lo):
            wrong.append(("beyond", level, p_beyond, low, high))
        if not math.isclose(level, p_within, rel_tol=1e-6) and (p_within <= level) != (lo <= low and high <= hi):
            wrong.append(("within", level, p_within, low, high))
        if low < last[0] - 1e-12 or high > last[1] + 1e-12:
            wrong.append(("nest", level, low, high, last))
        last = (low, high)
    return wrong


def test_the_p_values_of_two_intervals_read_as_one_are_the_inversion_of_the_interval_shown():
    """Two intervals that part (0 and +10%, each +-2%: they meet at 97.5% confidence and not
    above): at 99% their intersection lies beyond +-3% while at 95% their hull straddles it, so
    no p-value can say both. The interval shown therefore holds, at every level where the two
    still meet, their hull where they part: the intervals nest, and p_beyond and p_within are
    the smallest levels at which the interval shown lies beyond or within the tolerance."""
    parting = decision.either(decision.normal_evidence(0.0, 0.02), decision.normal_evidence(0.10, 0.02))
    assert _agrees(parting, -0.03, 0.03) == []
    lo, hi = parting.interval(0.99)
    assert lo < -0.03 and hi > 0.10 and parting.p_beyond(-0.03, 0.03) == 1.0
    assert decision.judge([decision.Question(Verdict("c", "latency_us", "unknown", "us", False,
                                                     tolerance=Tolerance(-0.03, 0.03)), parting)])[0].kind == "UNKNOWN"
    # The cases of a stored verdict's two intervals, and pairs that part or meet, at random.
    rng = np.random.default_rng(5)
    for _ in range(80):
        a = decision.normal_evidence(rng.normal(0, 0.2), rng.uniform(0.001, 0.05), df=rng.choice([0, 4]) or None)
        b = (decision.band_evidence(0.0, rng.normal(0, 0.5), rng.uniform(0.001, 0.05), (-0.2, 0.3), math.log(1.5))
             if rng.random() < 0.5 else decision.normal_evidence(rng.normal(0, 0.2), rng.uniform(0.001, 0.05)))
        tol = (-rng.uniform(0, 0.1), rng.uniform(0, 0.1))
        assert _agrees(decision.either(a, b), *tol) == [], (a.estimate, b.estimate, tol)


def test_the_span_band_covers_every_level_an_unchanged_machine_makes_and_nothing_beyond():
    """``band_evidence``: baseline rounds at 1.0 and 3.0 (both of a machine's states), a span
    of x4: an unchanged run lands within [3/4, 4]; its interval covers 0 there and never
    shows sameness; x6 of the fast state lies beyond, so its interval lies above 0."""
    band, span = (math.log(1.0), math.log(3.0)), math.log(4.0)
    for level in (0.8, 1.0, 3.0, 3.9):
        ev = decision.band_evidence(0.0, math.log(level), 0.01, band, span)
        lo, hi = ev.interval(0.99)
        assert lo <= 0 <= hi, level
        assert ev.p_within(-0.03, 0.03) == 1.0
    ev = decision.band_evidence(math.log(6.0), math.log(6.0), 0.01, band, span)
    lo, _ = ev.interval(0.99)
    assert lo > 0 and ev.p_beyond(-0.03, 0.03) < 0.01
    assert decision.band_evidence(0.0, 0.0, math.inf, band, span).interval(0.99) == (-math.inf, math.inf)
