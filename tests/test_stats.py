"""stats.py on seeded synthetic data: each function against a value worked out by hand or a
known property (coverage, significance under a real shift, no significance without one)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from perfsuite import stats


def test_robust_summaries_by_hand():
    xs = [1.0, 2.0, 3.0, 4.0, 100.0]
    assert stats.median(xs) == 3.0
    assert stats.mad(xs) == 1.0  # |x - 3| = 2,1,0,1,97 -> median 1
    assert stats.iqr(xs) == 2.0  # p75 = 4, p25 = 2
    s = stats.summarize(xs)
    assert s == {"median": 3.0, "iqr": 2.0, "mad": 1.0, "min": 1.0, "max": 100.0, "n": 5}
    assert stats.relative_spread(xs) == pytest.approx(1.4826 / 3.0)
    assert stats.quantile(xs, 0.5) == 3.0


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_bad_input_names_the_problem(bad):
    with pytest.raises(ValueError, match="need at least one|finite"):
        stats.median(bad)


def test_median_ci_covers_the_true_median_about_as_promised():
    rng = np.random.default_rng(7)
    for n in (10, 30, 200):
        hits = sum(lo <= 0.0 <= hi for lo, hi in
                   (stats.median_ci(rng.standard_normal(n), 0.95) for _ in range(400)))
        assert 0.92 <= hits / 400 <= 0.995, (n, hits)


def test_median_ci_with_too_few_values_is_the_whole_range():
    assert stats.median_ci([5.0, 1.0]) == (1.0, 5.0)
    assert stats.median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)


def test_relative_ci_halfwidth_shrinks_with_more_values():
    rng = np.random.default_rng(1)
    few = stats.relative_ci_halfwidth(100 + rng.standard_normal(10))
    many = stats.relative_ci_halfwidth(100 + rng.standard_normal(1000))
    assert many < few / 3


def test_mann_whitney_sees_a_shift_and_not_its_absence():
    rng = np.random.default_rng(3)
    a = rng.normal(100, 1, 50)
    assert stats.mann_whitney_p(a, rng.normal(105, 1, 50)) < 1e-6
    assert stats.mann_whitney_p(a, rng.normal(100, 1, 50)) > 0.01
    assert stats.mann_whitney_p([2.0] * 5, [2.0] * 5) == 1.0  # constant: no evidence, no NaN


def test_mann_whitney_min_p_is_what_exact_u_reaches_at_full_separation():
    assert stats.mann_whitney_min_p(2, 2) == pytest.approx(1 / 3)
    assert stats.mann_whitney_min_p(5, 5) == pytest.approx(2 / 252)
    exact = stats.mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert exact == pytest.approx(stats.mann_whitney_min_p(5, 5))


def test_bootstrap_ratio_ci_brackets_the_true_ratio():
    rng = np.random.default_rng(5)
    a = rng.normal(100, 2, 200)
    b = rng.normal(110, 2, 200)
    lo, hi = stats.bootstrap_median_ratio_ci(a, b, seed=1)
    assert lo < 1.10 < hi and hi - lo < 0.02
    assert stats.bootstrap_median_ratio_ci(a, b, seed=1) == (lo, hi)  # seeded: reproducible


def test_rate_ci_is_clopper_pearson():
    lo, hi = stats.rate_ci(0, 100)
    assert lo == 0.0 and hi == pytest.approx(0.0362, abs=1e-4)  # the 'rule of three' region
    lo, hi = stats.rate_ci(95, 100)
    assert lo < 0.95 < hi and hi < 1.0
    with pytest.raises(ValueError, match="hits"):
        stats.rate_ci(3, 2)


def test_confidence_out_of_range_is_refused():
    with pytest.raises(ValueError, match="confidence"):
        stats.median_ci([1.0, 2.0, 3.0], confidence=95)
    assert math.isinf(stats.relative_ci_halfwidth([0.0, 0.0, 0.0]))
