"""``perfsuite``: the command-line face. Thin: parse, call the suite or an experiment, print
what ``report`` formats.

Each command is one module (``cli/run.py`` is ``perfsuite run``) and a pair in its ``COMMANDS``: ``add_<name>(parser)`` declares its
arguments and ``do_<name>(args) -> exit status`` runs it, so tests call a command as a function
(asv's ``commands/*.py`` habit). Exit status: 0 when everything that could run here ran and
validated, 1 when a world failed or a result was wrong (or a gate tripped), 2 on bad usage
(checked before any world starts), 3 for ``--strict`` with a verdict left UNKNOWN, 128+N when
signal N stopped it (130 Ctrl-C, 143 SIGTERM; ``run`` keeps what finished).
"""
from __future__ import annotations

import argparse
import os
import sys

from .. import interrupts
from ..errors import ConfigError, FormatError, PerfsuiteError
from . import (ab, asv_offline, baseline, bisect, compare, detection_power, history, overhead, report,
               run, stalls, study, transports, validity)
from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE

#: One module per command, in the order ``perfsuite --help`` lists them: measure and judge,
#: show, then the experiments.
MODULES = (run, baseline, compare, transports, report, history, asv_offline, detection_power, validity,
           overhead, stalls, ab, bisect, study)
COMMANDS = {name: command for m in MODULES for name, command in m.COMMANDS.items()}
__all__ = ["COMMANDS", "EXIT_FAIL", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]


DESCRIPTION = ("perfsuite: performance regression suite for distributed deep learning (MPI worlds, "
               "allreduce per transport, TensorFlow epochs, baselines, asv history, stalls)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfsuite", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (add, handler, help) in COMMANDS.items():
        p = sub.add_parser(name, help=help, description=help)
        add(p)
        p.set_defaults(handler=handler)
    return parser


def _version() -> str:
    """The installed distribution's version (the one pip reports), else the package's own."""
    from importlib import metadata

    from .. import __version__

    try:
        return metadata.version("perfsuite")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return __version__


#: Arguments that name where a command writes: checked before it measures anything.
OUTPUT_FILES = ("json", "png")
OUTPUT_DIRS = ("report", "out")


def check_outputs(args: argparse.Namespace) -> None:
    from ..formats import check_output_dir, check_output_file

    for name in OUTPUT_FILES:
        if getattr(args, name, None):
            check_output_file(getattr(args, name), f"--{name}")
    for name in OUTPUT_DIRS:
        if getattr(args, name, None):
            check_output_dir(getattr(args, name), f"--{name}")
    if getattr(args, "baseline_update", None):
        check_output_dir(getattr(args, "baseline_dir", None) or "baselines", "--baseline-dir")


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()  # registers PERFSUITE_BENCHMARKS: a bad one is a usage error
    except ConfigError as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        check_outputs(args)
        with interrupts.handled():  # SIGTERM unwinds like Ctrl-C: every world is killed and reaped
            return args.handler(args)
    except (ConfigError, FormatError) as exc:  # a file the user named is as bad as an option
        print(f"perfsuite {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PerfsuiteError as exc:
        print(f"perfsuite {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt as exc:  # before or after the worlds ran (run keeps what finished)
        print(f"perfsuite {args.command}: interrupted", file=sys.stderr)
        return getattr(exc, "status", 130)
    except BrokenPipeError:  # the reader (| head) went away: stop quietly, as cat would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAIL


