"""Pure statistics over lists of numbers: robust summaries, confidence intervals, tests.

Nothing here knows about cases, baselines or files (asv's ``_stats.py`` habit), so every
function is tested on seeded synthetic data. Inputs are any sequence of floats; outputs are
plain floats, so callers never hold numpy scalars in frozen records or JSON.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


class LazyModule:
    """A module imported when first used: scipy.stats and scipy.special take a noticeable part of
    a second to import (docs/measurements.md), which every command and every pytest session would
    otherwise pay at start, whether or not it computes a single interval."""

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attr: str):
        if self._module is None:
            import importlib

            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


_sps = LazyModule("scipy.stats")

#: Scale that turns a MAD into a standard-deviation estimate for normal data.
MAD_TO_SIGMA = 1.4826
#: Resamples of a bootstrap.
BOOTSTRAP = 2000
#: Raw samples a stored record keeps (baselines, asv results); ``thin`` above this.
MAX_KEPT_SAMPLES = 256


def _array(values: Sequence[float], what: str = "values") -> np.ndarray:
    a = np.asarray(list(values), dtype=float)
    if a.size == 0:
        raise ValueError(f"{what}: need at least one number, got none")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: every number must be finite, got {a[~np.isfinite(a)][:3].tolist()}")
    return a


def median(values: Sequence[float]) -> float:
    return float(np.median(_array(values)))


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1), linear interpolation (numpy's default)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q!r} must be between 0 and 1")
    return float(np.quantile(_array(values), q))


def iqr(values: Sequence[float]) -> float:
    """Interquartile range (p75 - p25)."""
    a = _array(values)
    q75, q25 = np.quantile(a, [0.75, 0.25])
    return float(q75 - q25)


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    a = _array(values)
    return float(np.median(np.abs(a - np.median(a))))


def relative_spread(values: Sequence[float]) -> float:
    """Robust coefficient of variation: 1.4826 * MAD / |median| (0 when the median is 0)."""
    m = median(values)
    return MAD_TO_SIGMA * mad(values) / abs(m) if m else 0.0


def summarize(values: Sequence[float]) -> dict[str, float | int]:
    """median, IQR, MAD, min, max and n of ``values``, as plain numbers for JSON."""
    a = _array(values)
    return {"median": float(np.median(a)), "iqr": iqr(a), "mad": mad(a),
            "min": float(a.min()), "max": float(a.max()), "n": int(a.size)}


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median from order statistics (binomial, no bootstrap).

    With too few values for the requested confidence the whole range is returned (the honest
    answer: the data cannot pin the median any tighter).
    """
    _check_confidence(confidence)
    a = np.sort(_array(values))
    n = a.size
    if n < 3:
        return float(a[0]), float(a[-1])
    # [a[k], a[n-1-k]] covers the median with probability P(k < B < n-k), B ~ Binomial(n, 1/2);
    # take the narrowest such pair whose coverage is still >= confidence.
    ks = np.arange(0, (n - 1) // 2)
    coverage = _sps.binom.cdf(n - ks - 1, n, 0.5) - _sps.binom.cdf(ks, n, 0.5)
    ok = ks[coverage >= confidence]
    k = int(ok.max()) if ok.size else 0
    lo, hi = k, n - 1 - k
    return float(a[lo]), float(a[hi])


def relative_ci_halfwidth(values: Sequence[float], confidence: float = 0.95) -> float:
    """Half the width of ``median_ci`` relative to the median: what adaptive sampling watches."""
    lo, hi = median_ci(values, confidence)
    m = median(values)
    return (hi - lo) / 2.0 / abs(m) if m else math.inf


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value that ``a`` and ``b`` come from the same distribution.

    Exact for small tie-free samples, normal approximation otherwise (scipy's 'auto'). Two
    identical constant samples give p = 1 (no evidence of a change), not a warning or NaN.
    """
    x, y = _array(a, "first sample"), _array(b, "second sample")
    if np.ptp(np.concatenate([x, y])) == 0.0:
        return 1.0
    return float(_sps.mannwhitneyu(x, y, alternative="two-sided", method="auto").pvalue)


def mann_whitney_min_p(n1: int, n2: int) -> float:
    """The smallest two-sided p a Mann-Whitney test can give with n1 vs n2 values (no ties).

    With 2 vs 2 it is 0.33: such a test can never be significant, which callers must know.
    """
    if n1 < 1 or n2 < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def _generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def bootstrap_medians(values: Sequence[float], n_boot: int = BOOTSTRAP,
                      rng: np.random.Generator | int | None = 0) -> np.ndarray:
    """The medians of ``n_boot`` resamples (with replacement) of ``values``."""
    x = _array(values)
    return np.median(_generator(rng).choice(x, size=(n_boot, x.size), replace=True), axis=1)


def percentile_interval(draws: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The central ``confidence`` interval of bootstrap draws (percentile method)."""
    _check_confidence(confidence)
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(draws, [tail, 100.0 - tail])
    return float(lo), float(hi)


def bootstrap_median_ci(values: Sequence[float], confidence: float = 0.95, n_boot: int = BOOTSTRAP,
                        rng: np.random.Generator | int | None = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the median of ``values``."""
    return percentile_interval(bootstrap_medians(values, n_boot, rng), confidence)


def bootstrap_median_difference_ci(a: Sequence[float], b: Sequence[float], confidence: float = 0.95,
                                   n_boot: int = BOOTSTRAP, rng: np.random.Generator | int | None = 0
                                   ) -> tuple[float, float, float]:
    """(median(a) - median(b), CI low, CI high), each sample resampled on its own (the two are
    separate runs, not pairs)."""
    g = _generator(rng)
    draws = bootstrap_medians(a, n_boot, g) - bootstrap_medians(b, n_boot, g)
    return (median(a) - median(b), *percentile_interval(draws, confidence))


def bootstrap_median_ratio_ci(a: Sequence[float], b: Sequence[float], confidence: float = 0.95,
                              n_boot: int = BOOTSTRAP, seed: int | None = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of median(b) / median(a), resampling each sample independently."""
    g = _generator(seed)
    mx, my = bootstrap_medians(a, n_boot, g), bootstrap_medians(b, n_boot, g)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = my / mx
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return math.nan, math.nan
    return percentile_interval(ratios, confidence)


def thin(values: Sequence[float], cap: int = MAX_KEPT_SAMPLES) -> list[float]:
    """At most ``cap`` values that keep a sample's shape: all of them (in their order), or
    evenly spaced order statistics including min and max, so the median and quartiles of what
    is kept are those of all values while a stored history stays small."""
    if len(values) <= cap:
        return [float(x) for x in values]
    s = sorted(float(x) for x in values)
    n = len(s)
    return [s[round(i * (n - 1) / (cap - 1))] for i in range(cap)]


def rate_ci(hits: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact) CI of a rate ``hits / n``: how sure a measured hit rate is."""
    _check_confidence(confidence)
    if n < 1 or not 0 <= hits <= n:
        raise ValueError(f"rate needs 0 <= hits <= n and n >= 1, got hits={hits}, n={n}")
    alpha = 1.0 - confidence
    lo = 0.0 if hits == 0 else float(_sps.beta.ppf(alpha / 2, hits, n - hits + 1))
    hi = 1.0 if hits == n else float(_sps.beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return lo, hi


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence!r} must be between 0 and 1, e.g. 0.95")


#: Rank nulls kept per kind: each depends only on the sizes, which the cases of one look, and
#: runs of one experiment, share; at most 20001 probabilities each (EXACT_LIMIT), so a kind's
#: cache stays within about 40 MB. Kept read-only, so no caller can corrupt a shared one.
NULLS_KEPT = 256


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@functools.lru_cache(maxsize=NULLS_KEPT)
def _mwu_null(m: int, n: int) -> np.ndarray:
    """P(U = u) for u = 0..m*n under no shift, U the Mann-Whitney count over m x n pairs
    (counting arrangements, the classic recursion)."""
    counts = np.zeros(m * n + 1)
    counts[0] = 1.0
    # Generating function: prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i).
    for i in range(1, m + 1):
        shifted = np.zeros_like(counts)
        if n + i <= m * n:
            shifted[n + i:] = counts[: m * n + 1 - (n + i)]
        counts = counts - shifted
        for u in range(i, m * n + 1):  # divide by (1 - q^i): running sum with stride i
            counts[u] += counts[u - i]
    return _frozen(counts / counts.sum())


def _mwu_sum_null(sizes: Sequence[tuple[int, int]]) -> np.ndarray:
    """P(U = u) for U the sum of independent Mann-Whitney counts over the (m, n) strata."""
    return _mwu_sum_null_of(tuple(sorted((int(m), int(n)) for m, n in sizes)))  # convolution commutes


@functools.lru_cache(maxsize=NULLS_KEPT)
def _mwu_sum_null_of(sizes: tuple[tuple[int, int], ...]) -> np.ndarray:
    pmf = np.ones(1)
    for m, n in sizes:
        pmf = np.convolve(pmf, _mwu_null(m, n))
    return _frozen(pmf)


def _mwu_sum_sd(sizes: Sequence[tuple[int, int]]) -> float:
    """The standard deviation of the summed Mann-Whitney counts under no shift (no ties)."""
    return math.sqrt(sum(m * n * (m + n + 1) / 12.0 for m, n in sizes))


@functools.lru_cache(maxsize=NULLS_KEPT)
def _signed_rank_null(n: int) -> np.ndarray:
    """P(T = t) for t = 0..n(n+1)/2 under no shift, T Wilcoxon's signed-rank statistic of n
    values (the count of positive Walsh averages): each rank's sign a fair coin."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for i in range(1, n + 1):
        counts[i:] = counts[i:] + counts[:-i].copy()
    return _frozen(counts / counts.sum())


@functools.lru_cache(maxsize=NULLS_KEPT)
def _signed_rank_sum_null(ns: tuple[int, ...]) -> np.ndarray:
    """P(T = t) for T the sum of independent signed-rank statistics of strata of ``ns`` values."""
    out = np.ones(1)
    for n in ns:
        out = np.convolve(out, _signed_rank_null(n))
    return _frozen(out)


#: Above this many differences (Walsh averages or between-sample pairs) a rank null is taken
#: from its normal approximation rather than convolved exactly.
EXACT_LIMIT = 20000


@dataclass(frozen=True)
class RankTest:
    """A shift inferred from sorted differences whose count below a shift is a rank statistic
    with a known null: Walsh averages within strata (signed rank) or differences between two
    samples within strata (Mann-Whitney). Its interval and its p-values against a tolerance are
    the same inversion, so a verdict and its family adjustment can never disagree.

    For a shift ``x``, ``#{d <= x}`` under "the shift is x" follows the null of the summed
    counts (symmetric about half the total). The interval at confidence c is [d_(k), d_(M+1-k)],
    k the largest with P(U <= k-1) <= (1-c)/2."""

    d: np.ndarray  # every difference, sorted
    estimate: float  # their median (Hodges-Lehmann)
    cdf: np.ndarray | None  # P(U <= j) for j = 0..M, exact; None: normal approximation
    mean: float
    sd: float

    @property
    def total(self) -> int:
        return int(self.d.size)

    def lower_cdf(self, j: float) -> float:
        """P(U <= j) under the null."""
        if j < 0:
            return 0.0
        if self.cdf is not None:
            return float(self.cdf[min(int(math.floor(j)), self.cdf.size - 1)])
        return float(_sps.norm.cdf((math.floor(j) + 0.5 - self.mean) / self.sd)) if self.sd > 0 else 1.0

    def interval(self, confidence: float) -> tuple[float, float]:
        """The shift's interval at ``confidence``; infinite sides when the data cannot bound it."""
        _check_confidence(confidence)
        tail = (1.0 - confidence) / 2.0
        if self.cdf is not None:
            k = int(np.searchsorted(self.cdf, tail, side="right"))  # cdf[k-1] <= tail < cdf[k]
        else:
            k = max(0, int(math.floor(self.mean - _sps.norm.ppf(1.0 - tail) * self.sd + 0.5)))
        k = min(k, self.total // 2)
        if k < 1:
            return -math.inf, math.inf
        return float(self.d[k - 1]), float(self.d[self.total - k])

    def _count(self, op: str, x: float) -> int:
        side = "right" if op in ("<=", ">") else "left"
        below = int(np.searchsorted(self.d, x, side=side))
        return below if op in ("<=", "<") else self.total - below

    def p_beyond(self, lower: float, upper: float) -> float:
        """Two-sided p that the shift lies beyond [lower, upper]: the smallest 1 - confidence at
        which the interval lies wholly above ``upper`` or wholly below ``lower``."""
        return min(1.0, 2.0 * min(self.lower_cdf(self._count("<=", upper)),
                                  self.lower_cdf(self._count(">=", lower))))

    def p_within(self, lower: float, upper: float) -> float:
        """Two-sided p that the shift lies within [lower, upper] (two one-sided tests): the
        smallest 1 - confidence at which the interval lies wholly inside."""
        return min(1.0, 2.0 * max(self.lower_cdf(self._count("<", lower)),
                                  self.lower_cdf(self._count(">", upper))))


def _rank_test(d: np.ndarray, cdf_of: Callable[[], np.ndarray], var: float) -> RankTest:
    d = np.sort(d)
    total = d.size
    cdf = cdf_of() if total <= EXACT_LIMIT else None
    middle = (float(d[(total - 1) // 2]) + float(d[total // 2])) / 2.0  # the median of sorted d
    return RankTest(d, middle, cdf, total / 2.0, math.sqrt(var))


@functools.lru_cache(maxsize=NULLS_KEPT)
def _cdf(kind: str, sizes: tuple) -> np.ndarray:
    """P(U <= j) of a kept null: "signed-rank" of strata of ``sizes`` values, or "mann-whitney"
    of (m, n) strata."""
    pmf = _signed_rank_sum_null(sizes) if kind == "signed-rank" else _mwu_sum_null(sizes)
    return _frozen(np.cumsum(pmf))


@functools.lru_cache(maxsize=NULLS_KEPT)
def _walsh_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) for i <= j < n: the pairs whose averages are the Walsh averages of n values."""
    i, j = np.triu_indices(n)
    return _frozen(i), _frozen(j)


def stratified_shift_test(strata: Sequence[tuple[Sequence[float], Sequence[float]]]) -> RankTest:
    """The shift of new against base over strata (new, base) that share one shift but not one
    level (a machine's modes): the rank-sum test summed over strata, as van Elteren's, inverted.
    Only differences within a stratum count, so a level that moves between strata adds nothing
    to the width; the sum's null is the convolution of each stratum's exact Mann-Whitney null.
    A stratum missing either side is left out."""
    pairs = _strata(strata, "a shift interval")
    sizes = [(x.size, y.size) for x, y in pairs]
    d = np.concatenate([(x[:, None] - y[None, :]).ravel() for x, y in pairs])
    return _rank_test(d, lambda: _cdf("mann-whitney", tuple(sorted(sizes))), _mwu_sum_sd(sizes) ** 2)


def stratified_signed_rank_test(strata: Sequence[Sequence[float]]) -> RankTest:
    """The centre of paired differences (one sample per stratum, e.g. log ratios of A/B pairs
    grouped by whether both worlds ran in one machine mode), from Wilcoxon's signed-rank test
    summed over strata and inverted: the Walsh averages (x_i + x_j) / 2, i <= j, of each
    stratum, against the convolution of each stratum's exact null. Valid when each stratum's
    differences are symmetric about the shift, which randomized A/B order gives under no change;
    using magnitudes, not only signs, it needs fewer pairs than the sign test. An empty stratum
    is left out."""
    arrays = [_array(x, "paired differences") for x in strata if len(x)]
    if not arrays:
        raise ValueError("a signed-rank interval needs at least one paired difference")
    walsh = []
    for x in arrays:
        i, j = _walsh_pairs(x.size)
        walsh.append((x[i] + x[j]) / 2.0)
    ns = tuple(x.size for x in arrays)
    return _rank_test(np.concatenate(walsh), lambda: _cdf("signed-rank", tuple(sorted(ns))),
                      sum(n * (n + 1) * (2 * n + 1) / 24.0 for n in ns))


def _strata(strata: Sequence[tuple[Sequence[float], Sequence[float]]], what: str
            ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (new, base) strata with values on both sides, as arrays; none left is an error."""
    pairs = [(_array(x, "new values"), _array(y, "base values")) for x, y in strata
             if len(x) and len(y)]
    if not pairs:
        raise ValueError(f"{what} needs a stratum with values on both sides")
    return pairs


def stratified_mann_whitney_p(strata: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float:
    """Two-sided p that (new, base) strata share no shift: the Mann-Whitney counts of the
    strata summed (ties count half), against the sum's exact null up to 10000 pairs in all and
    its normal approximation above. One stratum: ``mann_whitney_p``."""
    pairs = _strata(strata, "a p-value")
    if len(pairs) == 1:
        return mann_whitney_p(pairs[0][1], pairs[0][0])
    u = sum(float(np.sum(x[:, None] > y[None, :]) + 0.5 * np.sum(x[:, None] == y[None, :]))
            for x, y in pairs)
    sizes = [(x.size, y.size) for x, y in pairs]
    total = sum(m * n for m, n in sizes)
    if total > 10000:
        return float(min(1.0, 2.0 * _sps.norm.sf(abs(u - total / 2.0) / _mwu_sum_sd(sizes))))
    cdf = _cdf("mann-whitney", tuple(sorted(sizes)))
    low = cdf[int(math.floor(u))]  # P(U <= u)
    high = 1.0 - (cdf[int(math.ceil(u)) - 1] if u >= 1 else 0.0)  # P(U >= u)
    return float(min(1.0, 2.0 * min(low, high)))


def shift_ci(new: Sequence[float], base: Sequence[float], confidence: float = 0.95
             ) -> tuple[float, float, float]:
    """(estimate, low, high) of the shift of ``new`` against ``base`` (new - base), from the
    Mann-Whitney test inverted (Hodges-Lehmann): distribution-free, two independent samples.
    Too few values for the confidence give an infinite side (the data cannot bound it)."""
    return stratified_shift_ci([(_array(new, "new values"), _array(base, "base values"))], confidence)


def stratified_shift_ci(strata: Sequence[tuple[Sequence[float], Sequence[float]]],
                        confidence: float = 0.95) -> tuple[float, float, float]:
    """``stratified_shift_test``'s (estimate, low, high) at ``confidence``."""
    _check_confidence(confidence)
    t = stratified_shift_test(strata)
    return (t.estimate, *t.interval(confidence))


def sign_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the sign test's distribution-free interval of the median of paired
    differences; infinite sides when there are too few pairs for the confidence."""
    _check_confidence(confidence)
    a = np.sort(_array(values))
    n = a.size
    est = float(np.median(a))
    # [a[k], a[n-1-k]] covers the median with probability 1 - 2 P(B <= k), B ~ Binomial(n, 1/2).
    k = int(_sps.binom.ppf((1.0 - confidence) / 2.0, n, 0.5))
    while k >= 0 and 2 * _sps.binom.cdf(k - 1, n, 0.5) > 1.0 - confidence:
        k -= 1
    if k < 1:
        return est, -math.inf, math.inf
    return est, float(a[k - 1]), float(a[n - k])


def paired_ratio_ci(num: Sequence[float], den: Sequence[float], confidence: float = 0.95
                    ) -> tuple[float, float, float]:
    """(ratio, low, high) of num/den from pairs measured side by side: the geometric mean of
    the per-pair ratios with a t interval on their logs (few pairs: the t quantile widens it,
    and one pair gives no interval: low and high are NaN)."""
    _check_confidence(confidence)
    a, b = _array(num, "numerators"), _array(den, "denominators")
    if a.size != b.size:
        raise ValueError(f"paired ratios need as many numerators as denominators, got {a.size} and {b.size}")
    logs = np.log(a / b)
    mean = float(np.mean(logs))
    if logs.size < 2:
        return math.exp(mean), math.nan, math.nan
    half = float(_sps.t.ppf(0.5 + confidence / 2.0, logs.size - 1) * np.std(logs, ddof=1) / math.sqrt(logs.size))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)
