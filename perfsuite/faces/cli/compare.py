"""``perfsuite compare OLD.json NEW.json``: one results file judged against another with the
baseline verdict logic."""
from __future__ import annotations

import argparse

from ...store import formats
from ... import gate
from ...verdicts import regress
from ...reading import verdict_text as vt
from ...records.errors import ConfigError
from .common import EXIT_OK, EXIT_REGRESSION, EXIT_UNKNOWN, EXIT_WORLD, add_canary_shift, add_gating, alpha_help, canary_shift, exit_status, gate_settings, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("judge one results file against another with the baseline verdict logic")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_REGRESSION: "a case of NEW DIFFERENT from OLD (--fail-on-improvement: an improvement too)",
         EXIT_UNKNOWN: "--strict: a case left UNKNOWN, or no case compared",
         EXIT_WORLD: "NEW holds a failed or interrupted world, or an invalid case"}


def add_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", metavar="OLD.json", help="results file taken as the baseline")
    p.add_argument("new", metavar="NEW.json", help="results file judged against it")
    p.add_argument("--tolerance", metavar="TOL", help="0.05 or LOWER:UPPER [default: per metric]")
    add_gating(p)
    # One meaning of --alpha, run's: compare judges NEW's cases as one family (decision.judge, Holm),
    # so it is the chance that any of them wrongly says DIFFERENT, not one interval's confidence.
    p.add_argument("--alpha", metavar="P", help=alpha_help("Holm over the cases, as run's --alpha"))
    add_canary_shift(p)


def _holds(run: formats.SuiteRun) -> str:
    worlds = sorted({o.world for o in run.outcomes})
    return ", ".join(worlds[:6]) + (f" and {len(worlds) - 6} more" if len(worlds) > 6 else "") or "no world"


def _cases(run: formats.SuiteRun) -> set[str]:
    return {c.name for o in run.outcomes for c in o.spec.cases} | {s.case.name for s in run.samples()}


def do_compare(args: argparse.Namespace) -> int:
    old, new = formats.load_run(args.old), formats.load_run(args.new)
    tol, alpha = gate_settings(args)
    if not _cases(old) & _cases(new):
        raise ConfigError(f"{args.old} and {args.new} share no case ({args.old}: {_holds(old)}; "
                          f"{args.new}: {_holds(new)}); compare two runs of the same benchmarks and transports")
    ref = {(s.case.name, m): regress.baseline_from_sample(s, m)
           for s in old.samples() if s.valid for m in s.metrics}
    verdicts = regress.compare(new.samples(), ref, tolerance=tol, alpha=alpha, system=args.old,
                               canary_shift=canary_shift(args))
    say(f"# {args.new} against {args.old}")
    for text, _ in gate.verdict_lines(verdicts, args.strict, invalid=False, improvements=args.fail_on_improvement):
        say(text)
    code = gate.verdict_status(verdicts, args.strict, args.fail_on_improvement)
    for s in new.samples():  # the line every command gives a wrong result: its case and ranks
        if not s.valid:
            say(vt.invalid_sample(s))
    for o in old.failures:
        n = len(o.samples())
        say(f"# note: {o.world} failed in {args.old}: {o.why}; " + (
            f"its {n} measured case(s) are the reference, its other cases have none" if n
            else "its cases have no reference"))
    for o in new.skipped:
        say(f"# note: {o.world} was skipped in {args.new}: {o.skipped}")
    # A failed world in the new run fails the comparison (4, before any regression: part of its
    # evidence is missing) even where its partial cases compare well; so does an interrupted run.
    for o in new.failures:
        say(f"FAILED: {o.world} failed in {args.new}: {o.why}")
    if new.interrupted:
        say(f"FAILED: {args.new} is a run interrupted by {new.interrupted}; it holds only what finished")
    return exit_status(code, EXIT_WORLD if new.failures or new.interrupted else EXIT_OK)


COMMANDS["compare"] = (add_compare, do_compare, "judge one results file against another, as the gate does")
