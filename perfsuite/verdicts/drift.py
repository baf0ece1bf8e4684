"""How far a machine's levels move between sessions with nothing changed, learned from everything
the machine recorded: every case of every benchmark in its baseline folder (and a case's asv
history), not from one case's own few sessions. Pure over ``model.Baseline`` records.

A session's shift is mostly the machine's state, shared by every case measured in it; the rest
is each case's own. With x the log level of case c in session s::

    x[c, s] = mu[c] + delta[s] + e[c, s]        Var delta = shared, Var e = own (per case)

What a verdict needs is a case's drift between two sessions, Var(delta + e), and how many degrees
of freedom its estimate has:

* **Pooled**: each case's levels about its own mean, pooled over the cases (``pooled_var``),
  estimate shared + own whatever the split. The cases are not independent (they share delta), so
  the pooled figure's degrees of freedom are Satterthwaite's over the two parts: about S - 1 (the
  sessions) where the shared part dominates, up to sum(n_c - 1) where each case drifts on its own.
  The split comes from an additive fit over the sessions that several cases share.
* **Per case**: cases do not drift alike (a 4 B latency moves with a machine's states, a compute step
  hardly does), so each case's own variance is moderated toward the machine's (Smyth's empirical
  Bayes, limma's ``squeezeVar``: prior variance and degrees of freedom fitted to the cases' own
  variances; the prior's degrees of freedom at most one less than the cases it was fitted to),
  its degrees of freedom never counted past the pooled figure's (the cases' variances are
  correlated through delta, which the fit would take for agreement). Fewer than three cases
  cannot show how their variances differ: their pooled figure is the prior.

Four sessions of thirty cases that drift on their own thus tell far more than four sessions of
one; four sessions of thirty cases that move together tell what four sessions tell.

**Sittings.** Sessions that start less than SITTING_GAP apart are one sitting: a machine's state
outlasts them (a machine can keep a state for minutes, and sessions recorded back to back then
all show it), so they tell one level, their mean, not several. A session named otherwise than by
when it started counts as a sitting of its own.
"""
from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..records.model import MIRRORS, Baseline
from ..records import stats


#: Sessions that start closer together than this are one sitting (``sittings``).
SITTING_GAP = _dt.timedelta(minutes=10)


def _started(label: object) -> _dt.datetime | None:
    if not isinstance(label, str):
        return None
    try:
        t = _dt.datetime.fromisoformat(label)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def sittings(labels: Iterable[object], gap: _dt.timedelta = SITTING_GAP) -> dict[object, object]:
    """Each session label -> the label of its sitting (the first session of a run of sessions
    each starting less than ``gap`` after the one before); a label that is no start time is a
    sitting of its own."""
    labels = list(dict.fromkeys(labels))
    timed = sorted((t, lab) for lab in labels if (t := _started(lab)) is not None)
    out: dict[object, object] = {lab: lab for lab in labels}
    first, last = None, None
    for t, lab in timed:
        if last is None or t - last >= gap:
            first = lab
        out[lab] = first
        last = t
    return out


def by_sitting(series: Mapping[object, Sequence[tuple[object, float]]]
               ) -> dict[object, list[tuple[object, float]]]:
    """``series`` with each case's sessions of one sitting as one level (their mean)."""
    sitting = sittings(lab for v in series.values() for lab, _ in v)
    out: dict[object, list[tuple[object, float]]] = {}
    for key, levels in series.items():
        got: dict[object, list[float]] = {}
        for lab, x in levels:
            got.setdefault(sitting[lab], []).append(x)
        out[key] = [(lab, float(np.mean(xs))) for lab, xs in got.items()]
    return out


@dataclass(frozen=True)
class MachineDrift:
    """A machine's drift between sessions, learned from its cases' session levels.

    ``var``: pooled variance of a case's log level between sessions; ``df``: its degrees of
    freedom (Satterthwaite); ``shared``: the share of it common to a session (None where no two
    cases shared a session); ``prior_var``/``prior_df``: the moderation's prior (``prior_df``
    inf: the cases' variances agree with one figure); ``sessions`` (sittings), ``cases`` and
    ``levels``: what it was learned from."""

    var: float
    df: float
    shared: float | None
    prior_var: float
    prior_df: float
    sessions: int
    cases: int
    levels: int
    case_sd: tuple[float, float] = (0.0, 0.0)  # the least and the most of the cases' own (``for_case``)

    @property
    def sd(self) -> float:
        return math.sqrt(self.var)

    def for_case(self, levels: Sequence[float]) -> tuple[float, float]:
        """(SD in log units, degrees of freedom) of the drift of one case whose own session
        levels (log) are ``levels``: its own variance moderated toward the machine's."""
        own = len(levels) - 1
        s2 = float(np.var(levels, ddof=1)) if own > 0 else 0.0
        if self.prior_df + own <= 0:  # a case of its own on a machine of one case: the pool's
            return math.sqrt(self.prior_var), self.df
        var = (self.prior_df * self.prior_var + own * s2) / (self.prior_df + own)
        return math.sqrt(var), min(self.prior_df + own, self.df)

    def describe(self) -> str:
        shared = "" if self.shared is None else f", {self.shared:.0%} of it shared by the cases of a session"
        lo, hi = self.case_sd
        cases = (f"; per case {math.expm1(lo):.1%} to {math.expm1(hi):.1%}, each case's own moderated toward it"
                 if self.cases > 1 else "")
        return (f"drift between sittings SD {math.expm1(self.sd):.1%} pooled (log SD {self.sd:.3f}{shared}{cases}), "
                f"learned from {self.sessions} sitting(s) of {self.cases} case(s) ({self.levels} levels, "
                f"{self.df:.1f} degrees of freedom)")


def judged_series(baselines: Mapping[tuple[str, str], Baseline], primary: Iterable[str] = ()
                  ) -> dict[tuple[str, str], list[tuple[object, float]]]:
    """Each judged baseline's levels as (session label, log level): its sessions, then the levels
    of sessions an update replaced (labelled apart: nothing says which session they were). A
    metric that mirrors a judged one of its case (busbw beside latency) is one number seen twice
    and is left out."""
    primary = set(primary)
    out: dict[tuple[str, str], list[tuple[object, float]]] = {}
    for (case, metric), b in baselines.items():
        if any(MIRRORS.get(metric) == m and (case, m) in baselines for m in primary):
            continue
        levels: list[tuple[object, float]] = [(sid, _log(stats.median(r))) for sid, r in b.session_rounds().items()]
        levels += [((case, metric, "replaced", i), _log(h)) for i, h in enumerate(b.history) if h > 0]
        out[(case, metric)] = levels
    return out


def case_levels(b: Baseline, history: Sequence[float] = ()) -> list[float]:
    """One case's log levels, one per sitting: its sessions, the levels of sessions an update
    replaced, and ``history`` (its levels in earlier runs kept elsewhere, asv's)."""
    key = (b.case, b.metric)
    series = judged_series({key: b})[key] + [(("history", i), _log(h)) for i, h in enumerate(history) if h > 0]
    return [x for _, x in by_sitting({key: series})[key]]


def learn(series: Mapping[object, Sequence[tuple[object, float]]]) -> MachineDrift | None:
    """The machine's drift from its cases' session levels (``judged_series``), each sitting one
    level (``by_sitting``), or None while no case holds two sittings."""
    series = by_sitting(series)
    rows = {k: v for k, v in series.items() if len(v) >= 2}
    if not rows:
        return None
    own = {k: np.array([x for _, x in v]) for k, v in rows.items()}
    dfs = np.array([len(x) - 1 for x in own.values()], dtype=float)
    ss = np.array([float(np.sum((x - x.mean()) ** 2)) for x in own.values()])
    total_df = float(dfs.sum())
    var = float(ss.sum() / total_df)
    labels = {lab for v in rows.values() for lab, _ in v}
    n_sessions = max(len(v) for v in rows.values())
    own_var = _residual_var(rows)
    shared = None if own_var is None else (0.0 if var <= 0 else min(1.0, max(0.0, 1.0 - own_var / var)))
    df = _satterthwaite(var, 1.0 if shared is None else shared, len(rows), n_sessions, total_df)
    prior_var, prior_df = _squeeze(ss / dfs, dfs)
    # A prior fitted to C cases' variances holds no more than C - 1 degrees of freedom of them:
    # Smyth's fit, taken whole from a handful of cases that drift unalike, shrinks the case that
    # drifts most toward the rest, and its false alarms rise above alpha (perfsuite validity).
    prior_df = min(prior_df, float(len(rows) - 1))
    learned = MachineDrift(var=var, df=df, shared=shared, prior_var=prior_var, prior_df=prior_df,
                           sessions=len(labels), cases=len(series), levels=sum(len(v) for v in series.values()))
    own_sds = [learned.for_case([x for _, x in v])[0] for v in series.values()]
    return replace(learned, case_sd=(min(own_sds), max(own_sds)))


def _satterthwaite(var: float, shared: float, cases: int, sessions: int, total_df: float) -> float:
    """Degrees of freedom of the pooled variance ``var`` of ``cases`` series over up to
    ``sessions`` sessions (``total_df`` = sum of n_c - 1), a share ``shared`` of it common to a
    session: the balanced two-way layout's mean squares, the session part on S - 1 degrees of
    freedom, the cases' own on the rest."""
    s_df = max(1.0, float(sessions - 1))
    e_df = total_df - s_df
    a = var * (shared + (1.0 - shared) / cases)
    b = var * (1.0 - shared) * (cases - 1) / cases
    if e_df <= 0 or b <= 0:
        return min(s_df, total_df)
    if a <= 0:
        return e_df
    return float((a + b) ** 2 / (a * a / s_df + b * b / e_df))


def _residual_var(rows: Mapping[object, Sequence[tuple[object, float]]]) -> float | None:
    """The cases' own variance about an additive fit (case + session) over the sessions that two
    or more cases share; None where none is shared or the fit leaves no degrees of freedom."""
    count: dict[object, int] = {}
    for v in rows.values():
        for lab, _ in v:
            count[lab] = count.get(lab, 0) + 1
    cells = {k: {lab: x for lab, x in v if count[lab] >= 2} for k, v in rows.items()}
    cells = {k: c for k, c in cells.items() if len(c) >= 2}
    sessions = {lab for c in cells.values() for lab in c}
    n = sum(len(c) for c in cells.values())
    df = n - len(cells) - len(sessions) + 1
    if len(cells) < 2 or df <= 0:
        return None
    case_eff = {k: float(np.mean(list(c.values()))) for k, c in cells.items()}
    sess_eff = {lab: 0.0 for lab in sessions}
    for _ in range(50):  # alternating least squares: exact in one pass when balanced
        for lab in sessions:
            got = [c[lab] - case_eff[k] for k, c in cells.items() if lab in c]
            sess_eff[lab] = float(np.mean(got))
        for k, c in cells.items():
            case_eff[k] = float(np.mean([x - sess_eff[lab] for lab, x in c.items()]))
    rss = sum((x - case_eff[k] - sess_eff[lab]) ** 2 for k, c in cells.items() for lab, x in c.items())
    return rss / df


def _squeeze(s2: np.ndarray, df: np.ndarray) -> tuple[float, float]:
    """(prior variance, prior degrees of freedom) fitted to per-case variances ``s2`` on ``df``
    (Smyth 2004, limma's ``fitFDist``): a scaled inverse chi-square whose spread matches the
    cases'. Fewer than three cases cannot show a spread: their pooled variance, as one figure."""
    from scipy import special  # at the first verdict, not when a command starts

    if len(s2) < 3:
        return float(np.sum(s2 * df) / np.sum(df)), math.inf
    s2 = np.maximum(s2, 1e-5 * max(float(np.median(s2)), 1e-30))
    e = np.log(s2) - special.digamma(df / 2) + np.log(df / 2)
    emean = float(np.mean(e))
    evar = float(np.var(e, ddof=1) - np.mean(special.polygamma(1, df / 2)))
    if evar <= 0:
        return math.exp(emean), math.inf
    d0 = 2.0 * _trigamma_inverse(evar)
    return math.exp(emean + special.digamma(d0 / 2) - math.log(d0 / 2)), d0


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x (limma's Newton iteration)."""
    from scipy import special
    if x > 1e7:
        return 1.0 / math.sqrt(x)
    if x < 1e-6:
        return 1.0 / x
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = float(special.polygamma(1, y))
        dif = tri * (1 - tri / x) / float(special.polygamma(2, y))
        y += dif
        if -dif / y < 1e-8:
            break
    return y


def _log(x: float) -> float:
    return math.log(max(x, 1e-300))
