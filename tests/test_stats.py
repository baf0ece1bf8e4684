"""stats.py on seeded synthetic data: each function against a value worked out by hand or a
known property (coverage, significance under a real shift, no significance without one)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from perfsuite.records import stats


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


# --- shift_ci: Mann-Whitney inverted (Hodges-Lehmann), two independent samples ------------------

def _u_lower_k(m: int, n: int, confidence: float) -> int:
    """By brute force: the largest k with P(U < k) <= (1 - confidence) / 2 under no shift, U the
    count of (new, base) pairs with new < base, over every arrangement of m + n distinct values."""
    from fractions import Fraction
    from itertools import combinations

    counts = [0] * (m * n + 1)
    for xs in combinations(range(m + n), m):
        taken = set(xs)
        ys = [p for p in range(m + n) if p not in taken]
        counts[sum(1 for x in xs for y in ys if x < y)] += 1
    total = sum(counts)
    tail = Fraction((1.0 - confidence) / 2.0)
    below, k = Fraction(0), 0
    for u in range(m * n + 1):
        below += Fraction(counts[u], total)  # P(U <= u) = P(U < u + 1)
        assert abs(below - tail) > Fraction(1, 10**9), "an exact tie with the tail: pick other sizes"
        if below > tail:
            break
        k = u + 1
    return k


@pytest.mark.parametrize("m,n", [(1, 1), (2, 3), (3, 3), (4, 4), (5, 3), (6, 6), (7, 5), (2, 9)])
@pytest.mark.parametrize("confidence", [0.95, 0.99])
def test_shift_ci_is_exact_for_small_samples(m, n, confidence):
    """The interval is [k-th smallest, k-th largest] of the m x n differences, k from the exact
    null distribution of U (here counted by brute force); k = 0 gives an unbounded interval."""
    rng = np.random.default_rng(m * 100 + n)
    new, base = rng.normal(1.0, 1.0, m), rng.normal(0.0, 1.0, n)
    est, lo, hi = stats.shift_ci(new, base, confidence)
    d = np.sort((new[:, None] - base[None, :]).ravel())
    assert est == pytest.approx(float(np.median(d)))
    k = _u_lower_k(m, n, confidence)
    if k == 0:
        assert (lo, hi) == (-math.inf, math.inf)
    else:
        assert (lo, hi) == (d[k - 1], d[d.size - k])


def test_shift_ci_by_hand():
    # 1 vs 1 and 3 vs 3 (min p 0.1) can never bound a 95% interval; 4 vs 4 (min p 2/70) can.
    assert stats.shift_ci([5.0], [1.0], 0.95) == (4.0, -math.inf, math.inf)
    est, lo, hi = stats.shift_ci([1.0, 2.0, 3.0], [0.0, 0.5, 0.7], 0.95)
    assert (lo, hi) == (-math.inf, math.inf) and est == pytest.approx(1.5)
    new, base = [10.0, 11.0, 12.0, 13.0], [0.0, 1.0, 2.0, 3.0]
    assert stats.shift_ci(new, base, 0.95) == (10.0, 7.0, 13.0)  # [min, max] of the differences
    # 6 vs 6 at 99%: P(U <= 2) = 4/924 <= 0.005 < P(U <= 3) = 7/924, so the 3rd from each end.
    base6 = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    new6 = [20.0, 30.0, 40.0, 50.0, 60.0, 70.0]
    d = sorted(x - y for x in new6 for y in base6)
    _, lo, hi = stats.shift_ci(new6, base6, 0.99)
    assert (lo, hi) == (d[2], d[-3]) == (17.0, 68.0)
    # an exact shift of the same values: the estimate is the shift itself
    b = [3.1, 4.7, 1.2, 9.9, 5.5]
    assert stats.shift_ci([x + 0.7 for x in b], b, 0.9)[0] == pytest.approx(0.7)


@pytest.mark.parametrize("m,n,dist", [(8, 8, "normal"), (20, 15, "exponential"), (110, 100, "normal")])
def test_shift_ci_covers_the_true_shift_about_as_promised(m, n, dist):
    """300 seeded draws per size (110 x 100 takes the normal approximation): the 95% interval
    holds the true shift about 95% of the time, and is narrow enough to exclude 0 often when
    the shift is 1.5 standard deviations."""
    rng = np.random.default_rng(m + n)
    draw = (lambda k: rng.standard_normal(k)) if dist == "normal" else (lambda k: rng.exponential(1.0, k))
    shift = 1.5
    hits = excluded = 0
    for _ in range(300):
        _, lo, hi = stats.shift_ci(draw(m) + shift, draw(n), 0.95)
        hits += lo <= shift <= hi
        excluded += lo > 0.0
    assert 0.92 <= hits / 300 <= 0.995, hits
    assert excluded / 300 >= 0.6, excluded


def test_shift_ci_refuses_bad_input():
    with pytest.raises(ValueError, match="confidence"):
        stats.shift_ci([1.0, 2.0], [1.0, 2.0], confidence=1.0)
    with pytest.raises(ValueError, match="new values"):
        stats.shift_ci([], [1.0])
    with pytest.raises(ValueError, match="base values.*finite"):
        stats.shift_ci([1.0], [math.nan])


# --- sign_ci: the sign test's interval of a median (paired differences) -------------------------

def _sign_k(n: int, confidence: float) -> int:
    """Largest k with 2 P(B <= k - 1) <= 1 - confidence, B ~ Binomial(n, 1/2), by exact sums."""
    from fractions import Fraction

    alpha = Fraction(1.0 - confidence)
    k = 0
    for j in range(1, n // 2 + 1):
        p = 2 * Fraction(sum(math.comb(n, i) for i in range(j)), 2**n)
        assert abs(p - alpha) > Fraction(1, 10**9), "an exact tie with alpha: pick other sizes"
        if p <= alpha:
            k = j
    return k


@pytest.mark.parametrize("n", [1, 2, 5, 6, 7, 9, 10, 20, 30, 51])
@pytest.mark.parametrize("confidence", [0.95, 0.99])
def test_sign_ci_is_exact(n, confidence):
    values = np.random.default_rng(n).normal(0.0, 1.0, n)
    est, lo, hi = stats.sign_ci(values, confidence)
    a = np.sort(values)
    assert est == pytest.approx(float(np.median(values)))
    k = _sign_k(n, confidence)
    if k == 0:
        assert (lo, hi) == (-math.inf, math.inf)
    else:
        assert (lo, hi) == (a[k - 1], a[n - k])


def test_sign_ci_by_hand():
    # 5 pairs: [min, max] covers the median with 1 - 2/32 = 94% < 95%: unbounded. 6 pairs: 97%.
    assert stats.sign_ci([1.0, 2.0, 3.0, 4.0, 5.0], 0.95)[1:] == (-math.inf, math.inf)
    assert stats.sign_ci([6.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == (3.5, 1.0, 6.0)
    # 30 pairs at 99%: P(B <= 7) = 0.0026 <= 0.005 < P(B <= 8) = 0.0081: 8th from each end.
    thirty = [float(i) for i in range(1, 31)]
    assert stats.sign_ci(thirty, 0.99) == (15.5, 8.0, 23.0)
    with pytest.raises(ValueError, match="confidence"):
        stats.sign_ci(thirty, 0.0)


def test_sign_ci_covers_the_median_of_a_skewed_distribution():
    """Exponential values (median ln 2, far from the mean 1): the sign test needs no symmetry."""
    rng = np.random.default_rng(17)
    hits = sum(lo <= math.log(2) <= hi for _, lo, hi in
               (stats.sign_ci(rng.exponential(1.0, 25), 0.95) for _ in range(300)))
    assert 0.92 <= hits / 300 <= 0.995, hits
    # ... and its interval is far narrower than the data when there are many pairs
    _, lo, hi = stats.sign_ci(rng.exponential(1.0, 400), 0.95)
    assert lo < math.log(2) < hi and hi - lo < 0.25


def test_stratified_shift_ci_sums_the_strata_exact_nulls():
    """Two strata (3 vs 4, 2 vs 5): the interval's k comes from the sum of the two U counts,
    whose null is counted here by brute force over both strata's arrangements; only
    differences within a stratum enter, so a level that differs between strata does not widen
    it; one stratum is shift_ci."""
    from fractions import Fraction
    from itertools import combinations

    def counts(m: int, n: int) -> list[int]:
        out = [0] * (m * n + 1)
        for xs in combinations(range(m + n), m):
            ys = [p for p in range(m + n) if p not in xs]
            out[sum(1 for x in xs for y in ys if x < y)] += 1
        return out

    joint = np.convolve(counts(3, 4), counts(2, 5))
    tail = Fraction(5, 100)  # 90%: the sum of two small strata can reach it, neither alone can
    below, k = Fraction(0), 0
    for u, c in enumerate(joint):
        below += Fraction(int(c), int(joint.sum()))
        if below > tail:
            break
        k = u + 1
    assert k >= 1
    rng = np.random.default_rng(7)
    s1 = (rng.normal(0.3, 0.1, 3), rng.normal(0.0, 0.1, 4))
    s2 = (rng.normal(50.3, 0.1, 2), rng.normal(50.0, 0.1, 5))  # another level, same shift
    est, lo, hi = stats.stratified_shift_ci([s1, s2], 0.9)
    d = np.sort(np.concatenate([(x[:, None] - y[None, :]).ravel() for x, y in (s1, s2)]))
    assert (lo, hi) == (d[k - 1], d[d.size - k]) and est == pytest.approx(float(np.median(d)))
    assert -1 < lo < 0.3 < hi < 1
    assert stats.stratified_shift_ci([s1], 0.9) == stats.shift_ci(*s1, 0.9)
    # a stratum without one side adds nothing; with none left there is nothing to say
    assert stats.stratified_shift_ci([s1, s2, ([], [1.0])], 0.9) == (est, lo, hi)
    with pytest.raises(ValueError, match="both sides"):
        stats.stratified_shift_ci([([1.0], [])], 0.9)


def test_stratified_mann_whitney_p_counts_arrangements_within_strata():
    """The p of the summed counts equals the one counted by brute force: every way to label
    each stratum's values new or base, the strata independent; one stratum is the plain test."""
    from itertools import combinations, product

    strata = [([0.9, 1.3, 1.25], [1.0, 1.1, 0.8, 0.7]), ([50.6, 50.2], [50.1, 50.0, 49.7])]

    def u(new, base) -> float:
        return sum((x > y) + 0.5 * (x == y) for x in new for y in base)

    seen = sum(u(n, b) for n, b in strata)
    labelings = []
    for n, b in strata:
        pool = list(n) + list(b)
        labelings.append([(list(c), [pool[i] for i in range(len(pool)) if i not in idx])
                          for idx in combinations(range(len(pool)), len(n))
                          for c in [[pool[i] for i in idx]]])
    totals = [sum(u(n, b) for n, b in combo) for combo in product(*labelings)]
    low = sum(t <= seen for t in totals) / len(totals)
    high = sum(t >= seen for t in totals) / len(totals)
    want = min(1.0, 2 * min(low, high))
    assert stats.stratified_mann_whitney_p(strata) == pytest.approx(want)
    assert 0.0 < want < 0.2  # the new values sit above the base ones in both strata
    assert stats.stratified_mann_whitney_p(strata[:1]) == stats.mann_whitney_p(strata[0][1], strata[0][0])
    with pytest.raises(ValueError, match="both sides"):
        stats.stratified_mann_whitney_p([([], [1.0])])


def test_rank_nulls_are_built_once_read_only_and_equal_to_a_fresh_count():
    """The rank nulls a growing comparison asks for at every look are kept per sizes: the kept
    one is the one counted afresh (and by brute force), the same object the next time, and
    read-only, so no caller can change what every later test reads."""
    from itertools import combinations, product

    def brute_mwu(m: int, n: int) -> np.ndarray:
        out = np.zeros(m * n + 1)
        for xs in combinations(range(m + n), m):
            out[sum(1 for x in xs for y in range(m + n) if y not in xs and x < y)] += 1
        return out / out.sum()

    def brute_signed_rank(n: int) -> np.ndarray:
        out = np.zeros(n * (n + 1) // 2 + 1)
        for signs in product((0, 1), repeat=n):
            out[sum(r for r, s in zip(range(1, n + 1), signs) if s)] += 1
        return out / out.sum()

    def check(null, args, want) -> None:
        kept = null(*args)
        assert kept is null(*args), null.__name__  # built once
        assert kept == pytest.approx(want, abs=1e-15), null.__name__
        assert not kept.flags.writeable, null.__name__
        with pytest.raises(ValueError, match="read-only"):
            kept[0] = 1.0

    check(stats._mwu_null, (3, 4), brute_mwu(3, 4))
    check(stats._signed_rank_null, (7,), brute_signed_rank(7))
    check(stats._mwu_sum_null, ([(3, 4), (2, 5)],), np.convolve(brute_mwu(3, 4), brute_mwu(2, 5)))
    check(stats._signed_rank_sum_null, ((4, 6),), np.convolve(brute_signed_rank(4), brute_signed_rank(6)))
    check(stats._cdf, ("signed-rank", (4, 6)), np.cumsum(np.convolve(brute_signed_rank(4), brute_signed_rank(6))))
    assert stats._mwu_sum_null([(2, 5), (3, 4)]) is stats._mwu_sum_null([(3, 4), (2, 5)])  # the order does not matter
    assert stats._mwu_null.__wrapped__(3, 4) == pytest.approx(stats._mwu_null(3, 4), abs=0)
    # the tests built on them read the kept nulls unharmed: a second inversion is the first
    rng = np.random.default_rng(3)
    x = rng.normal(0.1, 1.0, 12)
    assert stats.stratified_signed_rank_test([x]).interval(0.95) == stats.stratified_signed_rank_test([x]).interval(0.95)
