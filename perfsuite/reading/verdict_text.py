"""The only place a verdict becomes words: the one-line description, the terminal table, the
rows of the Markdown/HTML report, the A/B table's cells and the family's guarantee. Verdicts
hold a reason code and numbers (``model.Verdict``); what they say is made here when shown, so
a change of wording reaches every face and every stored file alike (pyperf's habit: one
``format_value``, one ``CompareResult``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import bench
from ..records.model import MIRRORS, VERDICT_ORDER, Tolerance, Verdict

UNBOUNDED = "unbounded"

def short(metric: str) -> str:
    """A metric's short name, as its benchmark's record declares it (``BenchmarkSpec.short_names``)."""
    return bench.short_names().get(metric, metric)


def number(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def percent(x: float | None) -> str:
    """A change as a signed percentage; an open side is 'unbounded'."""
    if x is None:
        return "n/a"
    if math.isinf(x):
        return UNBOUNDED
    return f"{x:+.1%}"


def ratio(change: float | None) -> str:
    """A change as the ratio new/reference (B/A), three decimals."""
    if change is None:
        return "n/a"
    if math.isinf(change):
        return UNBOUNDED
    return f"{1 + change:.3f}"


def tolerance(tol: Tolerance | dict | None) -> str:
    """'+-3%' for a symmetric tolerance, '-10%/+5%' otherwise."""
    if tol is None:
        return ""
    lo, hi = (tol["lower"], tol["upper"]) if isinstance(tol, dict) else (tol.lower, tol.upper)
    return f"+-{hi:.0%}" if math.isclose(-lo, hi) else f"{lo:+.0%}/{hi:+.0%}"


def interval(v: Verdict, as_ratio: bool = False) -> str:
    if v.low is None:
        return ""
    f = ratio if as_ratio else percent
    return f"[{f(v.low)}, {f(v.high)}]"


def mirrored(v: Verdict) -> str:
    """The reciprocal metric's change, '(busbw -23.1%)', when the verdict has one."""
    other = v.mirror or (MIRRORS.get(v.metric) if v.facts.get("mirror") else None)
    if not other or v.change is None or math.isinf(v.change) or v.change <= -1:
        return ""
    return f" ({short(other)} {percent(1 / (1 + v.change) - 1)})"


def _units(v: Verdict, n: int) -> str:
    what = "pair" if v.test == "paired" else "round"
    return f"{n} {what}{'' if n == 1 else 's'}"


def line(v: Verdict) -> str:
    """The one line a face prints for a verdict: what was decided, and from how much."""
    name = f"{v.case} {short(v.metric)}"
    f = v.facts
    if "text" in f and not v.reason:  # a verdict stored before reasons were codes
        return str(f["text"])
    if v.reason == "missing":
        return f"{name}: baseline on {v.system or 'this system'} but no result (case not run, skipped or failed)"
    if v.reason == "invalid":
        # every benchmark's check, not only a collective's sum (a user's step has its own)
        return f"{name}: result failed its check (wrong results), so its timing means nothing"
    if v.reason == "new":
        return f"{name} {number(v.value)} {v.unit}: new, no baseline on {v.system or 'this system'}"
    if v.reason == "timing":
        return (f"{name}: the baseline was timed by {f['baseline_timing']}, this run by {f['timing']}; "
                f"no verdict across timings (re-record the baseline, or time this run by "
                f"{f['baseline_timing']}: --host-timing / --device-timing)")
    if v.reason == "contended":
        return (f"{name}: machine contended ({f.get('contention', 0):.0%} run-queue wait in the least "
                f"contended of {v.rounds} round(s)); no verdict rests on contended rounds")
    if v.reason == "no-pairs":
        return f"{name}: no pair to judge ({v.dropped} dropped: contended)"
    ref = "A" if v.test == "paired" else "baseline"
    unit = f" {v.unit}" if v.unit else ""
    system = f" on {v.system}" if v.system else ""
    text = (f"{name} {number(v.value)}{unit} vs {ref} {number(v.baseline)}{unit}{system}: "
            f"{percent(v.change)} {interval(v)}{mirrored(v)}, tolerance {tolerance(v.tolerance) or 'n/a'}, "
            f"{_units(v, v.rounds)}")
    if v.dropped:
        text += f" ({v.dropped} left out: contended or in another machine mode)"
    text += f": {v.status}"
    if v.reason == "straddles":
        text += " (the interval straddles the tolerance)"
    if "machine_sessions" in f and v.reason in ("straddles", "unbounded"):
        text += (f" (this machine's drift between runs, SD {f['drift']:.1%} for this case, learned from "
                 f"{f['machine_sessions']} session(s) of {f['machine_cases']} case(s))")
    elif v.reason == "unbounded":
        text += f" (too few {'pairs' if v.test == 'paired' else 'rounds'} to bound the change)"
    elif v.reason == "span":
        text += (f" (this machine's drift between runs is not learned yet, from {f.get('sessions', 1)} "
                 f"session(s): only a change beyond x{f['span']:.1f}, the prior, is decided until "
                 "--baseline-add records another session or --session-drift states it)")
    elif v.reason == "beyond-span":
        text += f" (beyond x{f['span']:.1f}, the most this machine moves between runs on its own)"
    elif v.reason == "other-mode":
        text += (f" (machine in another mode than the baseline: canary {f['canary_us']:.0f} us now, "
                 f"{f['base_in_mode']} of {f['base_rounds']} baseline rounds within +-{f['limit']:.0%} "
                 f"of it (median {f['base_canary_us']:.0f} us); across modes only a change beyond "
                 f"x{f['span']:.1f} is decided)")
    elif v.reason == "across-modes":
        text += f" (across machine modes: beyond x{f['span']:.1f}, the widest spread between them)"
    if f.get("drift_from") == "declared" and v.test == "stored" and "drift" in f:
        # not learned from this machine's sessions: say what it rests on
        text += f" (memory's drift between sessions taken as {f['drift']:.0%}, declared, not learned)"
    if (v.test == "stored" and v.kind == "DIFFERENT" and not f.get("confirmed")
            and f.get("drift_from") not in ("assumed", "declared")
            and int(f.get("sittings") or 0) < int(f.get("confirm_sittings") or 0)):
        text += (f" (from {f['sittings']} sitting(s): a machine that keeps one state for longer than a sitting "
                 "can read so; --confirm decides it by an A/B against the baseline's commit)")
    if f.get("confirmed"):
        was = (f" {percent(f['stored_change'])} [{percent(f.get('stored_low'))}, {percent(f.get('stored_high'))}]"
               if f.get("stored_change") is not None else "")
        ab_ = f"an interleaved A/B against the commit that measured the baseline (perfsuite {f['confirmed']})"
        read = str(f.get("stored_status") or "unknown").upper()
        few = (f" from {f['sittings']} sitting(s)" if read != "UNKNOWN" and f.get("sittings") else "")
        stored = f"against the stored baseline it was {read}{was}{few}"
        text += (f" (confirmed by {ab_}; {stored})" if v.status != "unknown"
                 else f" ({stored}, and {ab_} could not decide it either)")
    if f.get("futile"):
        text += "; more rounds cannot decide it"
    if v.xfail:
        text += f" [expected failure: {v.xfail}]"
    return text


def canary(v: Verdict) -> str:
    """An A/B case's canary line: its own B/A, and what that did to the grouping of pairs."""
    f = v.facts
    if "canary_ba" not in f:
        return ""
    hi = UNBOUNDED if math.isinf(f["canary_high"]) else f"{f['canary_high']:.3f}"
    head = f"canary B/A {v.case}: {f['canary_ba']:.3f} [{f['canary_low']:.3f}, {hi}]"
    if "straddling" not in f:
        grouped = "pairs are not grouped by machine mode (--max-canary-shift off)"
    else:
        grouped = (f"{f['straddling']} of {v.rounds} pair(s) straddle two machine modes and are "
                   "ranked apart from the rest; none is dropped for it")
    if f.get("canary_moved"):
        return f"{head}: the arms move the canary, so it does not tell the machine's modes; {grouped}"
    return f"{head}: the arms do not move it; {grouped}"


def case_line(verdicts: Sequence[Verdict]) -> str:
    """One line for a case with several verdicts: the worst one's."""
    order = {s: i for i, s in enumerate(VERDICT_ORDER)}

    def excess(v: Verdict) -> float:
        if v.change is None or v.tolerance is None:
            return 0.0
        return max(v.tolerance.lower - v.change, v.change - v.tolerance.upper)

    worst = sorted(verdicts, key=lambda v: (order.get(v.status, 9), -excess(v)))
    return line(worst[0]) if worst else ""


def family(verdicts: Sequence[Verdict]) -> str:
    """What the run's verdicts guarantee together, or '' when none was open to a decision."""
    judged = [v for v in verdicts if v.facts.get("family")]
    if not judged:
        return ""
    size = max(v.facts["family"] for v in judged)
    looks = max(int(v.facts.get("looks") or 1) for v in judged)
    alpha = max(float(v.facts.get("alpha") or 0) for v in judged)
    split = ("Holm over the cases" if any(v.test == "paired" for v in judged)
             else "Holm within each world, alpha shared across worlds by their cases")
    return (f"# family: {size} verdict(s); the chance that any of them wrongly says DIFFERENT "
            f"is at most {alpha:.2g} ({split}; each split over up to {looks} look(s))")


#: The verdict table's columns: (heading, least width, left-aligned).
TABLE_COLUMNS = (("status", 12, True), ("case", 34, True), ("metric", 16, True), ("value", 10, False),
                 ("ref", 10, False), ("change", 8, False), ("interval", 22, False), ("tol", 11, False),
                 ("rounds", 8, False))


def fitted(columns: Sequence[tuple[str, int, bool]], rows: Sequence[Sequence[str]]) -> list[str]:
    """A heading and ``rows`` as fixed-width lines, each column as wide as its least width or its
    longest cell and a gap (two spaces after a left-aligned cell, one before a right-aligned
    one): a long cell (a user's case id) widens its column instead of running into the next."""
    widths = [max([least] + [len(r[i]) + (2 if left else 1) for r in rows])
              for i, (_, least, left) in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        return "".join(f"{c:<{w}}" if left else f"{c:>{w}}" for c, w, (_, _, left) in zip(cells, widths, columns))

    return [line([name for name, _, _ in columns]), *(line(r) for r in rows)]


def table(verdicts: Sequence[Verdict]) -> str:
    """Every verdict as a terminal table, failures first, then a count per status, the
    family's guarantee and what the marks mean."""
    order = {s: i for i, s in enumerate(VERDICT_ORDER)}
    rows = sorted(verdicts, key=lambda v: (order.get(v.status, 9), v.case, v.metric))
    texts = []
    for v in rows:
        status = v.status.upper() if v.is_failure and not v.xfail else v.status
        if v.xfail and v.is_failure:
            status += "(x)"
        metric = short(v.metric) + (f"|{short(v.mirror)}" if v.mirror else "")
        rounds = f"{v.rounds}" + (f"-{v.dropped}" if v.dropped else "") if v.rounds else ""
        texts.append((status, v.case, metric, number(v.value), number(v.baseline),
                      "" if v.change is None else percent(v.change), interval(v), tolerance(v.tolerance), rounds))
    lines = fitted(TABLE_COLUMNS, texts)
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: order.get(kv[0], 9)))
                 or "no verdicts")
    if fam := family(verdicts):
        lines.append(fam)
    if any(v.mirror for v in verdicts):
        lines.append("# metric a|b: one test of a, with b its reciprocal (busbw = bytes / time)")
    if any(v.dropped for v in verdicts):
        lines.append("# rounds N-D: N rounds judged, D more left out as contended or in another "
                     "machine mode")
    if any(v.facts.get("confirmed") for v in verdicts):
        lines.append("# confirmed: UNKNOWN against the stored baseline, or DIFFERENT from too few sittings to "
                     "know the machine's states, then judged by an interleaved A/B against "
                     "the commit that measured it (value B, ref A, rounds = pairs); that A/B's alpha is its own, "
                     "so the run's chance of any wrong DIFFERENT is at most twice the family's")
    if any(v.status == "unknown" and v.test == "stored" for v in verdicts):
        # A stored baseline cannot be measured again; the arms of an A/B run can, side by side.
        lines.append("# unknown against a stored baseline: to decide, measure both sides now, "
                     "interleaved: perfsuite ab --a-ref REV, REV the commit the baseline was measured "
                     "at (perfsuite baseline show names it), or --a-env/--b-env for a setting")
    if any(v.test == "stored" and v.baseline is not None for v in verdicts):
        lines.append("# ref: the baseline's median over its rounds (every session it holds) in the "
                     "candidate's machine mode; value: the candidate's median")
    return "\n".join(lines)


def undecided(verdicts: Sequence[Verdict]) -> list[str]:
    """A line per UNKNOWN verdict saying why it did not decide: a passing case still tells."""
    return [f"UNKNOWN: {line(v)}" for v in verdicts if v.status == "unknown"]


# --- the report's rows (Markdown and HTML) ------------------------------------------------------

HEAD = ("status", "case", "metric", "value", "baseline", "change", "tolerance", "interval",
        "rounds", "note")


def rows(verdicts: Sequence[Verdict | dict] | None) -> list[dict[str, Any]]:
    """Verdicts (``model.Verdict`` or its ``to_dict``) as plain rows, regressions first; within
    a status, those an expected-failure marker excuses come after the real ones."""
    out = []
    for v in verdicts or ():
        v = v if isinstance(v, Verdict) else Verdict.from_dict(v)
        failed = v.is_failure
        out.append({"case": v.case, "metric": short(v.metric) + (f"|{short(v.mirror)}" if v.mirror else ""),
                    "status": v.status, "unit": v.unit, "value": v.value, "baseline": v.baseline,
                    "change": v.change, "interval": interval(v), "rounds": v.rounds or 0,
                    "tolerance": tolerance(v.tolerance), "xfail": v.xfail or "",
                    # red for a failure nobody expected; an expected one is marked, not hidden
                    "css": ("xfail" if v.xfail else "regression") if failed else v.status,
                    "note": (f"expected failure: {v.xfail}" if v.xfail else
                             line(v) if v.status in ("invalid", "missing", "unknown") else "")})
    rank = {s: i for i, s in enumerate(VERDICT_ORDER)}
    return sorted(out, key=lambda r: (rank.get(r["status"], len(rank)), bool(r["xfail"]), r["case"], r["metric"]))


def cells(r: dict) -> tuple[str, ...]:
    """One report row's cells, in HEAD's order."""
    value = f"{number(r['value'])} {r['unit']}".strip() if r["value"] is not None else ""
    return (r["status"].upper() if r["css"] == "regression" else r["status"], r["case"], r["metric"],
            value, "" if r["baseline"] is None else number(r["baseline"]),
            "" if r["change"] is None else percent(r["change"]), r["tolerance"], r["interval"],
            str(r["rounds"] or ""), r["note"])


def invalid(case: str, ranks: Sequence[int] | None = None, arm: str | None = None, *,
            at: str | None = None, why: str | None = None) -> str:
    """The one line for a case whose results were wrong (its world failed, whatever it timed):
    which arm (A/B), which case, on which rank(s) where the kernel could tell, and where in the
    command's worlds (``at``: "pair 3", "round 2"); ``why`` when the check was not of the sums
    (an emulated network the traffic did not cross, a user's own check that returned False):
    then it is the check named, never the exact expected values a built-in collective has."""
    on = (f" on rank{'s' if len(ranks) > 1 else ''} {', '.join(str(r) for r in ranks)}" if ranks
          else "")
    where = f" in {at}" if at else ""
    who = f"arm {arm}: " if arm else ""
    if why and not ranks:
        return f"INVALID: {who}{case}{where} did not measure what it claims ({why}): a failed world, not a measurement"
    checked = why or "checked against the exact expected values"
    return f"INVALID: {who}{case} returned wrong results{on}{where} ({checked}): a failed world, not a measurement"


def invalid_sample(sample: Any, arm: str | None = None, *, at: str | None = None) -> str:
    """``invalid`` for a ``model.Sample`` whose ``valid`` is False (its kernel may list the
    ranks that failed the check in ``info['invalid_ranks']``, or say why in
    ``info['invalid_reason']``)."""
    return invalid(sample.case.name, sample.info.get("invalid_ranks"), arm, at=at,
                   why=sample.info.get("invalid_reason"))
