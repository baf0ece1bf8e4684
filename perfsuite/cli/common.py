"""What every command shares: exit statuses, printing, the gate's settings and verdict table."""
from __future__ import annotations

import argparse

from .. import regress

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def say(text: str = "") -> None:
    print(text, flush=True)


def gate_settings(args: argparse.Namespace):
    """(tolerance or None, alpha): the gate's settings, refused before any world runs."""
    tol = regress.parse_tolerance(args.tolerance) if getattr(args, "tolerance", None) else None
    return tol, regress.parse_alpha(getattr(args, "alpha", None))


def print_verdicts(verdicts: list, strict: bool) -> int:
    say(regress.verdict_table(verdicts))
    bad = regress.failing(verdicts, strict)
    for v in bad:
        say(f"{v.status.upper()}: {v.note}")
    return EXIT_FAIL if bad else EXIT_OK
