"""``perfsuite``: the command-line face. Thin: parse, call the gate or one experiment, print what
``reading`` formats.

Each command is one module (``cli/run.py`` is ``perfsuite run``) and a pair in its
``COMMANDS``: ``add_<name>(parser)`` declares its arguments and ``do_<name>(args) -> exit
status`` runs it, so tests call a command as a function (asv's ``commands/*.py`` habit).

Exit statuses, the same for every command and the gate, are ``records/status.py``'s (its table
is docs/running.md's); a command that finds several things wrong returns ``exit_status`` of them.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from ... import interrupts
from ...records.errors import ConfigError, FormatError, PerfsuiteError
from . import ab, asv_offline, baseline, bisect, capture, compare, detection_power, history, nodes, overhead, report, run, stalls, study, transports, validity
from .common import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, EXIT_UNKNOWN, EXIT_USAGE, EXIT_WORLD, exit_status

#: One module per command, in the order ``perfsuite --help`` lists them: measure and judge,
#: show, then the experiments.
MODULES = (run, baseline, compare, transports, report, history, asv_offline, detection_power, validity,
           overhead, stalls, ab, bisect, study, nodes, capture)
COMMANDS = {name: command for m in MODULES for name, command in m.COMMANDS.items()}
#: The module of each command: its ``DESCRIPTION`` (what its --help says it does, where that is
#: more than its line in ``perfsuite --help``), ``BRIEF`` (the main options its --help shows with
#: their help; every option where it has none) and ``EXITS`` (what its statuses mean for it,
#: 1 and 3 only where it names them), read by ``reference``.
MODULE_OF = {name: m for m in MODULES for name in m.COMMANDS}
__all__ = ["COMMANDS", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_REGRESSION", "EXIT_UNKNOWN", "EXIT_USAGE",
           "EXIT_WORLD", "MODULE_OF", "build_parser", "exit_status", "main", "subparsers"]


DESCRIPTION = ("perfsuite: performance regression suite for distributed deep learning (MPI worlds, "
               "allreduce per transport, TensorFlow epochs, baselines, asv history, stalls)")


class Parser(argparse.ArgumentParser):
    """argparse's own refusals (a value not among the choices, an unknown flag, a missing
    argument) as the one line, exit 2, that every other bad value gets, not usage then the line."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import reference  # here, not on import: python -m perfsuite.faces.cli.reference runs it as __main__

    parser = Parser(prog="perfsuite", description=DESCRIPTION, formatter_class=reference.Formatter,
                    epilog=f"perfsuite COMMAND --help: its main options; --help-all: every one; {reference.DOC}: "
                           "every command, option and exit status")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (add, handler, help) in COMMANDS.items():
        p = sub.add_parser(name, help=help, description=getattr(MODULE_OF[name], "DESCRIPTION", help),
                           add_help=False, formatter_class=reference.Formatter)
        add(p)
        reference.add_help(p, name, getattr(MODULE_OF[name], "BRIEF", None))
        p.set_defaults(handler=handler)
    return parser


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's parser, by name, in ``perfsuite --help``'s order."""
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _version() -> str:
    """The installed distribution's version (the one pip reports), else the package's own."""
    from importlib import metadata

    from ... import __version__

    try:
        return metadata.version("perfsuite")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return __version__


#: Arguments that name where a command writes: checked before it measures anything.
OUTPUT_FILES = ("json", "png")
OUTPUT_DIRS = ("report", "out")


def check_outputs(args: argparse.Namespace) -> None:
    from ...store.formats import check_output_dir, check_output_file

    for name in OUTPUT_FILES:
        if getattr(args, name, None):
            check_output_file(getattr(args, name), f"--{name}")
    for name in OUTPUT_DIRS:
        if getattr(args, name, None):
            check_output_dir(getattr(args, name), f"--{name}")
    # The baseline folder of a recording is the gate's to check (gate.Gate.prepare): it knows
    # the system, whose folder the baselines go to.


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
    except PerfsuiteError as exc:  # a world that failed or could not start (RankFailure, LaunchError,
        # Unavailable), asv results that stayed locked: infrastructure, not performance
        print(f"perfsuite {args.command}: {exc}", file=sys.stderr)
        return EXIT_WORLD
    except KeyboardInterrupt as exc:  # before or after the worlds ran (run keeps what finished)
        print(f"perfsuite {args.command}: interrupted", file=sys.stderr)
        return getattr(exc, "status", 130)
    except BrokenPipeError:  # the reader (| head) went away: stop quietly, with cat's status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_INTERRUPTED + signal.SIGPIPE


