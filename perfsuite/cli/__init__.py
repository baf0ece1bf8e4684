"""``perfsuite``: the command-line face. Thin: parse, call the suite or an experiment, print
what ``report`` formats.

Each command is a pair in a module's ``COMMANDS``: ``add_<name>(parser)`` declares its
arguments and ``do_<name>(args) -> exit status`` runs it, so tests call a command as a function
(asv's ``commands/*.py`` habit). Exit status: 0 when everything that could run here ran and
validated, 1 when a world failed or a result was wrong (or a gate tripped), 2 on bad usage.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import ConfigError, PerfsuiteError
from . import ab, experiments, run, show
from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE

COMMANDS = {**run.COMMANDS, **show.COMMANDS, **experiments.COMMANDS, **ab.COMMANDS}
__all__ = ["COMMANDS", "EXIT_FAIL", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]


DESCRIPTION = ("perfsuite: performance regression suite for distributed deep learning (MPI worlds, "
               "allreduce per transport, TensorFlow epochs, baselines, asv history, stalls)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfsuite", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (add, handler, help) in COMMANDS.items():
        p = sub.add_parser(name, help=help, description=help)
        add(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()  # registers PERFSUITE_BENCHMARKS: a bad one is a usage error
    except ConfigError as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as exc:
        print(f"perfsuite {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PerfsuiteError as exc:
        print(f"perfsuite {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print(f"perfsuite {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader (| head) went away: stop quietly, as cat would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAIL


