"""Does the canary earn its place? Measured on the detection stream (``detection.py``).

The canary is a fixed memory-and-compute loop every rank times between blocks of the timed
loop (``kernels/allreduce.canary_us``). Two ways to use it are measured. Adjusting: a metric
in units of the canary (``windows.canary_adjusted``), which helps if slow spells lengthen the
canary and the call in proportion. Matching: comparing only worlds whose canaries agree
(``rounds.same_mode``), which helps if the machine has modes the canary tells apart. The rule
for building either: the spread of pair differences (log B/A of adjacent worlds) must fall by
at least a third.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

from ..verdicts import rounds
from ..records import stats
from .windows import _pairs, canary_adjusted, raw

#: The adjusted spread of pair differences must be at most this share of the raw one.
EARNS = 2.0 / 3.0


def _logs(worlds: Sequence, case: str, metric: str, value) -> np.ndarray:
    vals = [value(w, case, metric) for w in worlds]
    return np.log(np.array([v for v in vals if v and v > 0], dtype=float))


def _lag1(x: np.ndarray) -> float:
    if len(x) < 3:
        return math.nan
    return float(np.corrcoef(x[:-1], x[1:])[0, 1])


def _spread(x: np.ndarray) -> float:
    """Robust standard deviation (MAD x 1.4826) of log values: about the relative spread."""
    return float(stats.mad(x) * stats.MAD_TO_SIGMA) if len(x) > 2 else math.nan


def _pair_diffs(cfg, worlds, kind: str, case: str, metric: str, value, shift=None) -> np.ndarray:
    out = []
    for a, b in _pairs(worlds, kind):
        if (a.usable(cfg.max_contention) and b.usable(cfg.max_contention)
                and rounds.same_mode(a.canary(case), b.canary(case), shift)):
            va, vb = value(a, case, metric), value(b, case, metric)
            if va and vb:
                out.append(math.log(vb / va))
    return np.array(out)


def _shift(d: np.ndarray) -> float:
    return float(math.expm1(np.median(d))) if len(d) else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if b and b > 0 and not math.isnan(a) else math.nan


def study(cfg, worlds: Sequence) -> dict:
    """Per judged metric: correlation of metric and canary over clean worlds, lag-1
    autocorrelation and spread raw vs adjusted, and the pair differences of each pair kind."""
    clean = [w for w in worlds if w.slowdown == 0.0 and w.usable(cfg.max_contention)
             and all(w.canary(c) for c, _ in cfg.metrics)]
    out = {}
    for case, metric in cfg.metrics:
        key = f"{case} {metric}"
        x = _logs(clean, case, metric, raw)
        c = np.log(np.array([w.canary(case) for w in clean], dtype=float))
        adj = _logs(clean, case, metric, canary_adjusted)
        row = {"worlds": len(clean), "pearson": math.nan, "spearman": math.nan,
               "lag1_raw": _lag1(x), "lag1_adjusted": _lag1(adj), "lag1_canary": _lag1(c),
               "spread_raw": _spread(x), "spread_adjusted": _spread(adj), "pairs": {}}
        if len(x) > 2 and len(x) == len(c):
            row["pearson"] = float(sps.pearsonr(x, c)[0])
            row["spearman"] = float(sps.spearmanr(x, c)[0])
        adjusting = matching = True
        shift = cfg.canary_shift if cfg.canary_shift is not None else rounds.DEFAULT_CANARY_SHIFT
        for kind in ("A/A", "A/+small", "A/+large"):
            d_raw = _pair_diffs(cfg, worlds, kind, case, metric, raw)
            d_adj = _pair_diffs(cfg, worlds, kind, case, metric, canary_adjusted)
            d_one = _pair_diffs(cfg, worlds, kind, case, metric, raw, shift)
            p = {"pairs": len(d_raw), "spread_raw": _spread(d_raw), "spread_adjusted": _spread(d_adj),
                 "pairs_matched": len(d_one), "spread_matched": _spread(d_one),
                 "shift_raw": _shift(d_raw), "shift_adjusted": _shift(d_adj), "shift_matched": _shift(d_one)}
            p["ratio"] = _ratio(p["spread_adjusted"], p["spread_raw"])
            p["ratio_matched"] = _ratio(p["spread_matched"], p["spread_raw"])
            if kind != "A/+large":
                adjusting = adjusting and p["ratio"] <= EARNS
                matching = matching and p["ratio_matched"] <= EARNS
            row["pairs"][kind] = p
        row["earns"] = "matching" if matching else ("adjusting" if adjusting else "")
        out[key] = row
    return out


def format_study(result: dict, cfg) -> list[str]:
    lines = ["# canary: is a metric in units of the in-world canary steadier than the metric?",
             f"#   (log values; spread = robust SD; it earns its place if the pair-difference "
             f"spread falls to <= {EARNS:.0%} of raw for A/A and A/+{cfg.small_slowdown:.0%})"]
    for key, r in result.items():
        lines.append(f"{key}: {r['worlds']} clean worlds; corr(metric, canary) Pearson "
                     f"{r['pearson']:+.2f} Spearman {r['spearman']:+.2f}; lag-1 autocorrelation "
                     f"raw {r['lag1_raw']:+.2f}, adjusted {r['lag1_adjusted']:+.2f}, canary "
                     f"{r['lag1_canary']:+.2f}; world spread raw {r['spread_raw']:.1%}, adjusted "
                     f"{r['spread_adjusted']:.1%}")
        for kind, p in r["pairs"].items():
            what = {"A/A": "A/A", "A/+small": f"A/+{cfg.small_slowdown:.0%}",
                    "A/+large": f"A/+{cfg.large_slowdown:.0%}"}[kind]
            lines.append(f"  {what:<7} {p['pairs']:>4} pairs: pair-difference spread raw "
                         f"{p['spread_raw']:.2%}, adjusted {p['spread_adjusted']:.2%} "
                         f"(x{p['ratio']:.2f}), same mode {p['spread_matched']:.2%} "
                         f"(x{p['ratio_matched']:.2f}, {p['pairs_matched']} pairs); median shift raw "
                         f"{p['shift_raw']:+.1%}, adjusted {p['shift_adjusted']:+.1%}, same mode "
                         f"{p['shift_matched']:+.1%}")
        lines.append("  -> " + {"matching": "earns its place: compare worlds in one mode",
                                "adjusting": "earns its place: adjust by it",
                                "": "does not earn its place"}[r["earns"]])
    return lines
