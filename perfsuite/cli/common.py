"""What every command shares: exit statuses, printing, checked fractions, the gate's settings and
verdict table, and what a results file leaves out of the baselines."""
from __future__ import annotations

import argparse

from .. import formats, options, regress
from .. import verdict_text as vt
from ..errors import ConfigError

#: Exit statuses, the same for every command (docs/running.md's table).
EXIT_OK = 0          # nothing wrong
EXIT_REGRESSION = 1  # a comparison said DIFFERENT (a regression, or a gate tripped)
EXIT_USAGE = 2       # bad input, refused before any world starts
EXIT_UNKNOWN = 3     # --strict: some comparison could not be decided (UNKNOWN), nothing failed
EXIT_WORLD = 4       # a world failed or a case was invalid: infrastructure, not performance
EXIT_INTERRUPTED = 128  # + the signal's number: 130 Ctrl-C, 143 SIGTERM, 141 a closed pipe

#: When one command finds several things wrong, its status names the first of these it found.
#: A failed world (or an invalid case, or results that could not be kept) comes before a
#: regression: the comparison then lacks part of its evidence, and a rerun must come before
#: anyone reads its verdicts; a regression comes before an undecided case. An interrupted
#: command says so above all (128+N), and bad input (2) stops a command before any of these.
PRECEDENCE = (EXIT_WORLD, EXIT_REGRESSION, EXIT_UNKNOWN)


def exit_status(*found: int) -> int:
    """The one status for everything a command found wrong (``PRECEDENCE``); 0 for nothing."""
    stopped = [s for s in found if s > EXIT_INTERRUPTED]
    if stopped:
        return stopped[0]
    return next((s for s in PRECEDENCE if s in found), EXIT_OK)


def say(text: str = "") -> None:
    print(text, flush=True)


def fraction(text: str, what: str) -> float:
    """A number given as --WHAT (a fraction such as 0.05), refused with the option's name."""
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--{what} {text!r} takes a fraction, e.g. 0.05") from None


def gate_settings(args: argparse.Namespace):
    """(tolerance or None, alpha): the gate's settings, refused before any world runs."""
    tol = regress.parse_tolerance(args.tolerance) if getattr(args, "tolerance", None) else None
    return tol, regress.parse_alpha(getattr(args, "alpha", None))


def add_canary_shift(p: argparse.ArgumentParser) -> None:
    """--max-canary-shift for the commands that judge stored results (run has it as an option)."""
    p.add_argument("--max-canary-shift", metavar="F",
                   help="compare rounds whose canaries agree within F only; off: every round [default: 0.15]")


def canary_shift(args: argparse.Namespace) -> float | None:
    return options.canary_limit(getattr(args, "max_canary_shift", None) or "0.15")


def verdict_status(verdicts: list, strict: bool) -> int:
    """4 for an invalid result (a wrong sum is no measurement), 1 for a regression (under
    ``strict`` an improvement too: the baseline wants refreshing), 3 under ``strict`` for a
    case left UNKNOWN, else 0; an expected failure (xfail) is none of these."""
    found = [EXIT_WORLD if v.status == "invalid" else EXIT_REGRESSION for v in regress.failing(verdicts, strict)]
    if strict and any(v.status == "unknown" for v in verdicts):
        found.append(EXIT_UNKNOWN)
    return exit_status(*found)


def print_verdicts(verdicts: list, strict: bool) -> int:
    """The table, a line per failure and per UNKNOWN; the status ``verdict_status`` gives."""
    say(vt.table(verdicts))
    for v in regress.failing(verdicts, strict):
        say(f"{v.status.upper()}: {vt.line(v)}")
    for text in vt.undecided(verdicts):
        say(text)
    return verdict_status(verdicts, strict)


def not_recorded(run: formats.SuiteRun, allow_partial: bool) -> list[str]:
    """A line for each world or case of a results file that is not recorded, and why."""
    lines = []
    for o in run.failures:
        kept = len(o.samples())
        what = (f"its {kept} measured case(s) recorded (--allow-partial)" if kept and allow_partial
                else f"its {kept} measured case(s) left out (--allow-partial records them)" if kept
                else "nothing measured")
        lines.append(f"# not recorded: {o.world} failed: {o.why}; {what}")
    for o in run.skipped:
        lines.append(f"# not recorded: {o.world} was skipped: {o.skipped}")
    for s in run.samples():
        if not s.valid:
            lines.append(f"# not recorded: {s.case.name} did not validate (wrong sum)")
    return lines
