"""What every command shares: printing, checked fractions, the gate's settings for the commands
that judge stored results (``compare``, ``report``), and its verdict lines."""
from __future__ import annotations

import argparse

from .. import decision, options
from ..errors import ConfigError
from ..status import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, EXIT_UNKNOWN, EXIT_USAGE, EXIT_WORLD, exit_status  # noqa: F401



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
    tol = decision.parse_tolerance(args.tolerance) if getattr(args, "tolerance", None) else None
    return tol, decision.parse_alpha(getattr(args, "alpha", None))


def add_canary_shift(p: argparse.ArgumentParser) -> None:
    """--max-canary-shift for the commands that judge stored results (run has it as an option)."""
    p.add_argument("--max-canary-shift", metavar="F",
                   help="compare rounds whose canaries agree within F only; off: every round [default: 0.15]")


def canary_shift(args: argparse.Namespace) -> float | None:
    return options.canary_limit(getattr(args, "max_canary_shift", None) or "0.15")


