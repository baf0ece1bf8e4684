"""Verdict logic pinned on seeded synthetic samples: both directions (busbw higher is better,
latency lower is better), both units, every status, the tolerance-and-significance rule."""
from __future__ import annotations

import numpy as np
import pytest

from perfsuite import regress
from perfsuite.errors import ConfigError
from perfsuite.model import Case, Metric, Sample, Tolerance

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
    return regress.pool_rounds([one_round(case, metric, centre * (1 + between * rng.standard_normal()),
                                          rng, **kw) for _ in range(k)])


def base_of(sample: Sample, metric: str, **kw):
    return regress.baseline_from_sample(sample, metric, **kw)


@pytest.mark.parametrize("case,metric,worse,better", [
    (LARGE, "busbw_GBps", 0.75, 1.30),  # bandwidth: lower is worse
    (SMALL, "latency_us", 1.30, 0.75),  # latency: higher is worse
])
def test_both_directions_with_rounds(case, metric, worse, better):
    centre = 1.25 if metric == "busbw_GBps" else 12.0
    base = base_of(rounds(case, metric, centre, 6, seed=1), metric)
    v = regress.verdict(case.name, metric, rounds(case, metric, centre * worse, 6, seed=2), base,
                        tolerance=TOL, system="box")
    assert v.status == "regression" and v.test == "mwu-rounds" and v.p_value < 0.01
    assert v.change == pytest.approx(worse - 1, abs=0.02)
    v = regress.verdict(case.name, metric, rounds(case, metric, centre * better, 6, seed=3), base,
                        tolerance=TOL)
    assert v.status == "improvement"
    v = regress.verdict(case.name, metric, rounds(case, metric, centre, 6, seed=4), base, tolerance=TOL)
    assert v.status == "unchanged"


def test_the_failure_line_reads_like_the_issue_asks():
    base = base_of(rounds(LARGE, "busbw_GBps", 1.25, 6, seed=1), "busbw_GBps")
    v = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.92, 6, seed=2), base,
                        tolerance=TOL, system="xeon-2c")
    assert v.note.startswith("allreduce[mpi-n2-1MiB] busbw 0.92 GB/s vs baseline 1.25 GB/s on xeon-2c (-26%, tolerance -10%, p=")
    lat_base = base_of(rounds(SMALL, "latency_us", 10.0, 6, seed=1), "latency_us")
    v = regress.verdict(SMALL.name, "latency_us", rounds(SMALL, "latency_us", 13.0, 6, seed=2),
                        lat_base, tolerance=TOL)
    assert "latency 13 us vs baseline 10 us (+30%, tolerance +10%" in v.note


def test_beyond_tolerance_but_not_significant_is_unchanged():
    """Rounds so noisy (30% between worlds) that 3 vs 3 cannot tell 15% apart at alpha 0.01:
    with too few rounds for U over rounds, U over raw iterations decides; here we make the raw
    samples of both sides come from one distribution so neither test sees a change."""
    rng = np.random.default_rng(0)
    shared = tuple(float(x) for x in 1.0 + 0.3 * rng.standard_normal(300))
    mk = lambda v: Sample(LARGE, {"busbw_GBps": Metric("busbw_GBps", v, "GB/s", True, shared)})  # noqa: E731
    base = base_of(mk(1.0), "busbw_GBps")
    v = regress.verdict(LARGE.name, "busbw_GBps", mk(0.85), base, tolerance=TOL)
    assert v.status == "unchanged" and v.test == "mwu-iterations" and v.p_value > 0.01
    assert "beyond tolerance but not significant" in v.note


def test_significant_but_within_tolerance_is_unchanged():
    base = base_of(rounds(LARGE, "busbw_GBps", 1.0, 8, seed=1, between=0.001), "busbw_GBps")
    v = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.97, 8, seed=2, between=0.001),
                        base, tolerance=TOL)
    assert v.p_value < 0.01 and v.status == "unchanged"


def test_few_rounds_fall_back_to_iterations_and_say_so():
    base = base_of(rounds(LARGE, "busbw_GBps", 1.0, 1, seed=1), "busbw_GBps")
    v = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.8, 1, seed=2), base,
                        tolerance=TOL)
    assert v.test == "mwu-iterations" and v.status == "regression"


def test_one_contended_round_does_not_move_the_median_of_rounds():
    rng = np.random.default_rng(9)
    rs = [one_round(LARGE, "busbw_GBps", 1.0, rng) for _ in range(6)]
    rs[2] = one_round(LARGE, "busbw_GBps", 0.5, rng)  # another job shared a core: half speed
    pooled = regress.pool_rounds(rs)
    assert pooled.metrics["busbw_GBps"].value == pytest.approx(1.0, abs=0.01)
    assert pooled.info["rounds"] == 6 and len(pooled.metrics["busbw_GBps"].samples) == 6 * 200


def test_pooled_info_numbers_are_medians_over_rounds():
    rng = np.random.default_rng(4)
    rs = [one_round(LARGE, "busbw_GBps", 1.0, rng) for _ in range(3)]
    rs = [Sample(r.case, r.metrics, True, (), {"p50_us": v, "iters": 200, "valid": True})
          for r, v in zip(rs, (10.0, 30.0, 20.0))]
    info = regress.pool_rounds(rs).info
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
    b_large = base_of(rounds(LARGE, "busbw_GBps", 1.0, 3, seed=1), "busbw_GBps")
    b_small = base_of(rounds(SMALL, "latency_us", 10.0, 3, seed=1), "latency_us")
    baselines = {(LARGE.name, "busbw_GBps"): b_large, (SMALL.name, "latency_us"): b_small}
    got = regress.compare([rounds(LARGE, "busbw_GBps", 1.0, 3, seed=5)], baselines,
                          cases=[LARGE.name])
    assert [v.status for v in got] == ["unchanged"]
    got = regress.compare([rounds(LARGE, "busbw_GBps", 1.0, 3, seed=5)], baselines)
    assert sorted(v.status for v in got) == ["missing", "unchanged"]


def test_xfail_excuses_a_regression_and_strict_fails_improvements():
    base = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps", xfail="known slow NIC")
    worse = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.7, 6, seed=2), base)
    assert worse.status == "regression" and worse.xfail == "known slow NIC"
    assert regress.failing([worse]) == []
    assert "[expected failure: known slow NIC]" in worse.note
    plain = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps")
    better = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 1.3, 6, seed=2), plain)
    assert regress.failing([better]) == [] and regress.failing([better], strict=True) == [better]


def test_tolerance_precedence_argument_then_baseline_then_default():
    s = rounds(LARGE, "busbw_GBps", 0.94, 6, seed=2)
    b = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps", tolerance=Tolerance(-0.2, 0.2))
    assert regress.verdict(LARGE.name, "busbw_GBps", s, b).status == "unchanged"
    assert regress.verdict(LARGE.name, "busbw_GBps", s, b, tolerance=Tolerance(-0.02, 0.02)).status == "regression"
    b0 = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps")
    v = regress.verdict(LARGE.name, "busbw_GBps", s, b0)
    assert v.tolerance == regress.default_tolerance("busbw_GBps")


def test_unit_mismatch_says_update_the_baseline():
    b = base_of(rounds(LARGE, "busbw_GBps", 1.0, 3, seed=1), "busbw_GBps")
    other = Sample(LARGE, {"busbw_GBps": Metric("busbw_GBps", 1.0, "Gbit/s", True, (1.0,))})
    with pytest.raises(ConfigError, match="update the baseline"):
        regress.verdict(LARGE.name, "busbw_GBps", other, b)


def test_parse_tolerance():
    assert regress.parse_tolerance("0.05") == Tolerance(-0.05, 0.05)
    assert regress.parse_tolerance("-0.1:0.02") == Tolerance(-0.1, 0.02)
    for bad in ("5%", "0.1:-0.1", "x"):
        with pytest.raises(ConfigError, match="tolerance"):
            regress.parse_tolerance(bad)


def _pooled_latency(centres: list[float]) -> Sample:
    """Rounds at exactly these centres (a tiny fixed ripple inside each), pooled."""
    out = []
    for c in centres:
        raw = tuple(float(x) for x in c * (1 + 0.001 * np.sin(np.arange(50))))
        out.append(Sample(SMALL, {"latency_us": Metric("latency_us", float(np.median(raw)), "us", False, raw)}))
    return regress.pool_rounds(out)


def test_alpha_decides_a_change_that_is_large_but_only_fairly_sure():
    """+14 % median latency, but one new round sits inside the baseline's range (U = 4 of 36,
    p = 0.026): at the default alpha 0.01 it is not called, at 0.05 it is."""
    base = base_of(_pooled_latency([10.0, 10.1, 10.2, 10.3, 10.4, 10.5]), "latency_us")
    new = _pooled_latency([10.15, 11.5, 11.6, 11.7, 11.8, 11.9])
    strict = regress.verdict(SMALL.name, "latency_us", new, base, tolerance=TOL)
    loose = regress.verdict(SMALL.name, "latency_us", new, base, tolerance=TOL, alpha=0.05)
    assert strict.p_value == loose.p_value == pytest.approx(0.026, abs=0.001)
    assert (strict.status, loose.status) == ("unchanged", "regression")


def test_parse_alpha():
    assert regress.parse_alpha(None) == regress.DEFAULT_ALPHA == 0.01
    assert regress.parse_alpha("0.05") == 0.05
    for bad in ("5%", "0", "1", "nan", "-0.1"):
        with pytest.raises(ConfigError, match=f"alpha.*{bad}.*between 0 and 1"):
            regress.parse_alpha(bad)


def test_precise_enough_stops_only_when_the_median_is_pinned():
    tight = rounds(LARGE, "busbw_GBps", 1.0, 12, seed=1, between=0.001)
    loose = rounds(LARGE, "busbw_GBps", 1.0, 12, seed=1, between=0.2)
    assert regress.precise_enough([tight], target=0.01)
    assert not regress.precise_enough([loose], target=0.01)
    assert not regress.precise_enough([rounds(LARGE, "busbw_GBps", 1.0, 2, seed=1, between=0.0)], 0.01)


def test_case_line_picks_the_worst_metric():
    base = base_of(rounds(LARGE, "busbw_GBps", 1.0, 6, seed=1), "busbw_GBps")
    bad = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 0.7, 6, seed=2), base)
    fine = regress.verdict(LARGE.name, "busbw_GBps", rounds(LARGE, "busbw_GBps", 1.0, 6, seed=3), base)
    assert regress.case_line([fine, bad]) == bad.note


def test_detection_power_counts_hits_and_false_alarms_with_a_fake_runner():
    """The experiment's bookkeeping on fake worlds: a clean rerun differs only by 0.5% noise, a
    slowdown shifts every iteration; so the rates must be ~0 for clean and ~1 for +20%."""
    from perfsuite.experiments import detection

    rng = np.random.default_rng(11)

    def runner(spec, slowdown):
        out = []
        for case in spec.cases:
            t = (1e-5 if case.size_bytes == 4 else 1e-2) * (1 + slowdown) * (1 + 0.005 * rng.standard_normal()) \
                * (1 + 0.002 * rng.standard_normal(50))
            bw = case.size_bytes / t / 1e9
            out.append(Sample(case, {
                "latency_us": Metric("latency_us", float(np.median(t * 1e6)), "us", False, tuple(t * 1e6)),
                "busbw_GBps": Metric("busbw_GBps", float(np.median(bw)), "GB/s", True, tuple(bw))}))
        return out

    cfg = detection.DetectionConfig(worlds=10, rounds=5, slowdowns=(0.2,), comparisons=40)
    rep = detection.run(cfg, runner)
    for case, metric in cfg.metrics:
        assert rep.row(case, metric, 0.0).rate == 0.0
        hit = rep.row(case, metric, 0.2)
        assert hit.rate == 1.0 and hit.measured == pytest.approx(0.2 if metric == "latency_us" else -1 / 6, abs=0.02)
        assert rep.smallest_detected(case, metric) == 0.2
    text = detection.format_report(rep)
    assert "smallest slowdown meeting the target: +20%" in text and "within" in text
    with pytest.raises(ConfigError, match="twice the rounds"):
        detection.DetectionConfig(worlds=6, rounds=5)


def test_rounds_policy_minimum_then_adaptive_until_precise_or_budget():
    fixed = regress.RoundsPolicy(rounds=3)
    assert fixed.more(1, 0.0, []) and fixed.more(2, 0.0, []) and not fixed.more(3, 0.0, [])
    tight = [rounds(LARGE, "busbw_GBps", 1.0, 5, seed=1, between=0.0005)]
    loose = [rounds(LARGE, "busbw_GBps", 1.0, 5, seed=1, between=0.2)]
    adaptive = regress.RoundsPolicy(rounds=2, max_rounds=8, precision=0.01, budget_s=60)
    assert not adaptive.more(5, 1.0, tight)  # median pinned to +-1%: stop
    assert adaptive.more(5, 1.0, loose)  # not yet: another round
    assert not adaptive.more(5, 61.0, loose)  # budget spent
    assert not adaptive.more(8, 1.0, loose)  # max rounds reached
    for bad in (dict(rounds=0), dict(rounds=3, max_rounds=2), dict(precision=0), dict(budget_s=-1)):
        with pytest.raises(ConfigError):
            regress.RoundsPolicy(**bad)


def test_pool_results_keeps_rounds_and_sums_wall_time():
    from perfsuite.model import Result

    rng = np.random.default_rng(2)
    res = [Result("allreduce", "mpi", 2, (one_round(LARGE, "busbw_GBps", 1.0 + 0.01 * k, rng),),
                  world_start_s=0.4, wall_s=2.0) for k in range(3)]
    pooled = regress.pool_results(res)
    assert pooled.extra["rounds"] == 3 and pooled.wall_s == 6.0
    assert regress.round_values(pooled.samples[0], "busbw_GBps") == pytest.approx([1.0, 1.01, 1.02], abs=0.005)
