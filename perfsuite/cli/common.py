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
EXIT_FAIL = EXIT_REGRESSION  # until every command tells the two apart


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


def print_verdicts(verdicts: list, strict: bool) -> int:
    """The table, a line per failure and per UNKNOWN; exit 1 on a failure, else 3 when strict
    and something is UNKNOWN, else 0."""
    say(vt.table(verdicts))
    bad = regress.failing(verdicts, strict)
    for v in bad:
        say(f"{v.status.upper()}: {vt.line(v)}")
    unknown = [v for v in verdicts if v.status == "unknown"]
    for v in unknown:
        say(f"UNKNOWN: {vt.line(v)}")
    if bad:
        return EXIT_FAIL
    return EXIT_UNKNOWN if strict and unknown else EXIT_OK


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
