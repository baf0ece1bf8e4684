"""What every command shares: printing, checked fractions, the gate's settings for the commands
that judge stored results (``compare``, ``report``), and the flags' one spelling: the old
spellings kept for a release (``renamed``), an axis of which a command takes one value
(``one_value``), the gating flags (``add_gating``) and ``--alpha``'s one meaning."""
from __future__ import annotations

import argparse
from typing import Any

from ...verdicts import decision, rounds
from .. import options
from ...records.errors import ConfigError
from ...records.status import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, EXIT_UNKNOWN, EXIT_USAGE, EXIT_WORLD, exit_status  # noqa: F401


def help_text(action: argparse.Action, prog: str = "perfsuite") -> str:
    """An option's help as argparse prints it: ``%(default)s`` and its kin filled in, one line."""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    if action.choices is not None:
        params["choices"] = ", ".join(map(str, action.choices))
    return " ".join((action.help % params).split())


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


# --- one spelling per idea (docs/running.md, "One spelling per idea") -------------------------

def renamed(p: argparse.ArgumentParser, old: str, now: str, dest: str, *, flag: bool = False,
            **also: Any) -> None:
    """Accept a command's old spelling ``old`` as ``now`` for one release: hidden from --help,
    it prints one line on stderr (``options.Renamed``, the same mechanism as the shared options').
    ``also``: the values the old spelling implies besides its own (report's --baselines DIR is
    --compare --baseline-dir DIR)."""
    options.add_renamed(p.add_argument, old, now, dest, flag=flag, also=also)


def one_value(text: Any, flag: str, command: str, example: str) -> str:
    """The value of an axis a command takes one of: the flag is the plural every command spells
    (``--transports``), and several values (or 'all') are refused in one line."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if len(parts) == 1 and parts[0] != "all":
        return parts[0]
    named = "none" if not parts else "every one" if parts == ["all"] else f"{len(parts)} values"
    raise ConfigError(f"{flag} {text!r} names {named}; perfsuite {command} takes one value, e.g. {flag} {example}")


def alpha_help(how: str, default: str = f"{decision.DEFAULT_ALPHA:g}") -> str:
    """``--alpha`` of every command that judges: one meaning, the whole family's false-alarm rate
    (``default``: where the command's argparse default is another, ``%(default)s``)."""
    return ("false-alarm rate of the whole judged family: the chance that any verdict of the command "
            f"wrongly says DIFFERENT ({how}) [default: {default}]")


def add_gating(p: argparse.ArgumentParser, *, improvements: bool = True) -> None:
    """--strict (and --fail-on-improvement) with the help every judging command gives them."""
    p.add_argument("--strict", action="store_true", help="a gate that must decide: a verdict left UNKNOWN, "
                   "or nothing compared, exits 3")
    if improvements:
        p.add_argument("--fail-on-improvement", action="store_true", help="an improvement beyond tolerance "
                       "exits 1 too, as a regression does: a prompt to refresh the reference")


def add_canary_shift(p: argparse.ArgumentParser) -> None:
    """--max-canary-shift for the commands that judge stored results (run has it as an option)."""
    p.add_argument("--max-canary-shift", metavar="F", default=f"{rounds.DEFAULT_CANARY_SHIFT:g}",
                   help="compare rounds whose canaries agree within F only; off: every round [default: %(default)s]")


def canary_shift(args: argparse.Namespace) -> float | None:
    return options.canary_limit(args.max_canary_shift)


