"""What a command says of itself, from its parser: ``--help`` (one screen: a short usage, its
main options with their help, the others by name), ``--help-all`` (every option with its help,
argparse's own page) and docs/cli.md, the reference of every command
(``python -m perfsuite.faces.cli.reference > docs/cli.md``; a test keeps the file fresh).
curl's ``--help`` against ``--help all`` is the model."""
from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Sequence

from ...records import status
from .. import options
from .common import help_text

#: Where the reference lives, as --help points to it.
DOC = "docs/cli.md"
#: The most lines a command's --help may take (a screen at COLUMNS=80; a test holds every command to it).
SCREEN = 40
#: The flags that print a command's help rather than set anything.
HELP_FLAGS = ("-h", "--help", "--help-all")


# --- one command's options --------------------------------------------------------------------

def shown(p: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options a command documents: not an old spelling (``options.Renamed``), not one it
    hides (an option only pytest takes), not the help flags themselves."""
    return [a for a in p._actions if a.option_strings and a.help is not argparse.SUPPRESS
            and not isinstance(a, options.Renamed) and not set(a.option_strings) & set(HELP_FLAGS)]


def positionals(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if not a.option_strings]


def metavar(a: argparse.Action) -> str:
    if a.metavar is not None:
        return str(a.metavar)
    return "{" + ",".join(map(str, a.choices)) + "}" if a.choices else a.dest.upper()


def spelled(a: argparse.Action) -> str:
    """An option as it is written: ``-o, --out DIR``, ``--compare``."""
    return ", ".join(a.option_strings) + ("" if a.nargs == 0 else f" {metavar(a)}")


def argument(a: argparse.Action) -> str:
    """A positional argument as usage writes it."""
    m = metavar(a)
    return {"+": f"{m} [{m} ...]", "*": f"[{m} ...]", "?": f"[{m}]"}.get(a.nargs, m)


def usage(p: argparse.ArgumentParser) -> str:
    """A short usage, ``perfsuite bisect --good REF --bad REF [options]``, not argparse's list
    of every option: the options are below it."""
    required = [f"{a.option_strings[-1]} {metavar(a)}" for a in shown(p) if a.required]
    return " ".join([p.prog, *required, "[options]", *(argument(a) for a in positionals(p))])


def anchor(command: str) -> str:
    return f"{DOC}#{command}"


# --- --help and --help-all ----------------------------------------------------------------------

def brief(p: argparse.ArgumentParser, main: Sequence[str] | None, command: str) -> str:
    """``--help``: the usage, the purpose, the arguments and ``main`` options (every option
    where ``main`` is None) with their help, the others by flag, and where every one is."""
    every = shown(p)
    first = every if main is None else sorted((a for a in every if set(a.option_strings) & set(main)),
                                              key=lambda a: min(main.index(s) for s in a.option_strings if s in main))
    rest = [a for a in every if a not in first]
    fmt = p.formatter_class(prog=p.prog)
    fmt.add_usage(p.usage, [], [])
    fmt.add_text(p.description)
    if positionals(p):
        fmt.start_section("arguments")
        fmt.add_arguments(positionals(p))
        fmt.end_section()
    fmt.start_section("main options" if rest else "options")
    fmt.add_arguments(first)
    fmt.end_section()
    width = shutil.get_terminal_size().columns - 2  # argparse's own width
    where = f"{p.prog} --help-all, or {anchor(command)}"
    if not rest:
        return fmt.format_help() + "\n" + fill(f"These with the exit statuses: {anchor(command)}", width) + "\n"
    return (fmt.format_help() + "\n" + fill(f"{len(rest)} more options (their help: {where}):", width) + "\n"
            + fill(", ".join(a.option_strings[-1] for a in rest), width, "  ") + "\n")


def fill(text: str, width: int, indent: str = "") -> str:
    """Wrapped at spaces only: a flag is never cut at its hyphen (--max-canary-/shift)."""
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)


class Formatter(argparse.HelpFormatter):
    """argparse's help, its lines wrapped at spaces only, as ``fill`` wraps: a flag or a value
    (--nproc-per-node, 4:64MiB) stays whole. The two methods are those argparse's own
    RawTextHelpFormatter overrides."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return fill(" ".join(text.split()), width, indent)


class BriefHelp(argparse.Action):
    """``-h``/``--help``: the command's one screen (``brief``)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, main: Sequence[str] | None = None,
                 command: str = "", **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="this screen: the main options, the others by name", **kwargs)
        self.main, self.command = main, command

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(brief(parser, self.main, self.command))
        parser.exit()


class AllHelp(argparse.Action):
    """``--help-all``: every option with its help, argparse's own page."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="every option with its help", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help()
        parser.exit()


def add_help(p: argparse.ArgumentParser, command: str, main: Sequence[str] | None) -> None:
    """A command's --help and --help-all, and its short usage (for both, and its errors)."""
    p.add_argument("-h", "--help", action=BriefHelp, main=main, command=command)
    p.add_argument("--help-all", action=AllHelp)
    p.usage = usage(p)


# --- docs/cli.md -------------------------------------------------------------------------------

def cell(text: str) -> str:
    """Text for a Markdown table cell: no pipe ends the cell, no <word> is taken for HTML."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def default_of(a: argparse.Action) -> str:
    said = options.stated_default(help_text(a))
    if a.required:
        return "required"
    if a.nargs == 0:
        return "off"
    if said:
        return cell(options.default_cell(said))
    return f"`{a.default}`" if a.default not in (None, [], argparse.SUPPRESS) else "-"


def exits(module, every: bool = False) -> list[tuple[str, str]]:
    """(status, meaning) of every status a command may end with: 0, 2, 4 and 128+N for every one
    (``cli.main``'s), 1 and 3 where its module's ``EXITS`` names them, in its words where it has
    them (``every``: each status, in status.py's words)."""
    own = getattr(module, "EXITS", {})
    codes = sorted(status.MEANING if every else
                   {status.EXIT_OK, status.EXIT_USAGE, status.EXIT_WORLD, status.EXIT_INTERRUPTED, *own})
    return [("128+N" if c == status.EXIT_INTERRUPTED else str(c), own.get(c, status.MEANING[c])) for c in codes]


def section(command: str, p: argparse.ArgumentParser, module) -> list[str]:
    """A command's part of docs/cli.md: what its --help says it does (the longer form of its line
    in the table above), its usage, arguments, options and exit statuses."""
    lines = [f"## {command}", "", cell(p.description), "", f"    {p.usage}", ""]
    if positionals(p):
        lines += ["| argument | meaning |", "| --- | --- |"]
        lines += [f"| `{argument(a)}` | {cell(help_text(a))} |" for a in positionals(p)]
        lines.append("")
    lines += ["| option | default | meaning |", "| --- | --- | --- |"]
    for a in shown(p):
        lines.append(f"| `{spelled(a)}` | {default_of(a)} | {cell(options.DEFAULT_RE.sub('', help_text(a)))} |")
    lines += ["", "| exit status | meaning |", "| --- | --- |"]
    lines += [f"| {code} | {cell(meaning)} |" for code, meaning in exits(module)]
    return lines + [""]


def old_spellings(parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """Every old spelling once (old -> now, and which commands take it): each still works for
    one release and says what it is now, so no command's table lists it."""
    found: dict[tuple[str, str], list[str]] = {}
    for command, p in parsers.items():
        for a in p._actions:
            if isinstance(a, options.Renamed):
                found.setdefault((a.option_strings[0], a.now), []).append(command)
    lines = ["## Old spellings", "",
             "Accepted for one release, each with one line on stderr saying what it is now.", "",
             "| old | now | commands |", "| --- | --- | --- |"]
    return lines + [f"| `{old}` | `{now}` | {', '.join(commands)} |" for (old, now), commands in sorted(found.items())]


def markdown() -> str:
    """docs/cli.md: every command's purpose, usage, arguments, options and exit statuses."""
    from . import COMMANDS, MODULE_OF, build_parser, subparsers

    parsers = subparsers(build_parser())
    lines = ["# Command-line reference", "",
             "Generated by `python -m perfsuite.faces.cli.reference > docs/cli.md` from the commands' own",
             "parsers; a test fails when this file and the code disagree. `perfsuite COMMAND --help` shows a",
             "command's main options, `--help-all` every one. The options `perfsuite run` shares with pytest",
             "(`--perf-NAME`, ini `perf_NAME`) and asv are in [options.md](options.md).", "",
             "| command | what it does |", "| --- | --- |"]
    lines += [f"| [{c}](#{c}) | {cell(COMMANDS[c][2])} |" for c in parsers]
    lines += ["", "## Exit statuses", "",
              "The same for every command (`perfsuite/records/status.py`); each command's table below says",
              "which it may end with, and when. Where a command finds several things wrong, its status is the",
              "first of " + ", ".join(map(str, status.PRECEDENCE)) + " it found; an interrupted command says so above all.", "",
              "| exit status | meaning |", "| --- | --- |"]
    lines += [f"| {code} | {cell(meaning)} |" for code, meaning in exits(None, every=True)]
    lines.append("")
    for command, p in parsers.items():
        lines += section(command, p, MODULE_OF[command])
    lines += old_spellings(parsers)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
