"""The one scanner of the perfsuite command lines that people read and run: the docs (fenced
blocks, code spans, indented blocks), the recipes, the scripts, perfsuite's own workflows and
.ci/run. tests/test_flags.py holds every flag found to the commands' parsers, and
tests/test_workflows.py asks it what each workflow gives its commands."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from perfsuite.faces import cli, options

ROOT = Path(__file__).resolve().parents[1]


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def flags(p: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    """(every flag the command's parser has, the old spellings among them)."""
    every = {s for a in p._actions for s in a.option_strings}
    old = {s for a in p._actions if isinstance(a, options.Renamed) for s in a.option_strings}
    return every, old


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = [*sorted((ROOT / "recipes").rglob("*.sh")), *sorted((ROOT / "recipes").rglob("*.yml")),
         *sorted((ROOT / "scripts").glob("*.sh")), *sorted((ROOT / ".github" / "workflows").glob("*.yml")),
         ROOT / ".ci" / "run"]
COMMAND = re.compile(r"(?<![\w.-])perfsuite ([a-z][a-z-]*)(.*)")
FLAG = re.compile(r"(?:^|(?<=\s))(--[a-z][a-z0-9-]*)")  # a word, not a value (--launcher-args=--mpi)


def _command_flags(line: str, commands: set[str], bare: bool = False) -> list[tuple[str, str]]:
    """(command, flag) for each ``perfsuite CMD ... --flag`` of one shell line or code span; with
    ``bare``, a span written as ``CMD --flag`` (the docs' shorthand) too."""
    m = COMMAND.search(line)
    if m is None and bare:
        m = re.match(r"\s*([a-z][a-z-]*)( .*)", line)
    if m is None or m.group(1) not in commands:
        return []
    # the command's own words (after `--`: the job perfsuite capture runs, not perfsuite's)
    rest = re.split(r"\s#|\||;|&&|>|\)|`|\s--(?:\s|$)", m.group(2))[0]
    return [(m.group(1), f) for f in FLAG.findall(rest) if not f.startswith("--perf-")]


def written_flags() -> list[tuple[str, str, str]]:
    """(file, command, flag) for every perfsuite command line the docs, recipes and scripts hold:
    Markdown's fenced blocks and code spans, and the shell files' lines (continuations joined,
    bash arrays given as ``"${name[@]}"`` expanded)."""
    commands = set(cli.COMMANDS)
    found = []
    for path in DOCS:
        text = path.read_text()
        blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
        for block in blocks:
            for line in block.replace("\\\n", " ").splitlines():
                found += [(path.name, *cf) for cf in _command_flags(line, commands)]
        prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
        for span in re.findall(r"`([^`\n]+)`", prose):
            found += [(path.name, *cf) for cf in _command_flags(span, commands, bare=True)]
        for line in prose.replace("\\\n", " ").splitlines():  # indented code blocks
            if re.match(r"(?: {4}|\t)\s*(?:\$ |sudo )?\S*perfsuite ", line):
                found += [(path.name, *cf) for cf in _command_flags(line, commands)]
    for path in SHELL:
        for line in shell_lines(path.read_text(), sourced(path)):
            found += [(str(path.relative_to(ROOT)), *cf) for cf in _command_flags(line, commands)]
    return found


def sourced(path: Path) -> str:
    """The text of the files beside ``path`` that it sources (``source "$HERE/lib.sh"``)."""
    names = re.findall(r"^\s*(?:source|\.)\s+[^\n]*?(\w[\w.-]*\.sh)\b", path.read_text(), re.M)
    return "\n".join((path.parent / n).read_text() for n in names if (path.parent / n).is_file())


def shell_lines(text: str, sourced: str = "") -> list[str]:
    """A shell text's lines, continuations joined, comments left out, and each bash array a line
    gives (``"${args[@]}"``, made by ``args=(--opt ...)`` and ``args+=(...)``, here or in what it
    sources) written out."""
    live = lambda t: [line for line in t.replace("\\\n", " ").splitlines() if not line.lstrip().startswith("#")]  # noqa: E731
    lines = live(text)
    arrays: dict[str, str] = {}
    for name, items in re.findall(r"\b(\w+)\+?=\(([^)]*)\)", "\n".join(live(sourced) + lines)):
        arrays[name] = arrays.get(name, "") + " " + items

    def expand(line: str, seen: frozenset = frozenset()) -> str:
        for name in set(re.findall(r"\$\{(\w+)\[@\]\}", line)) - seen:
            line = line.replace(f'"${{{name}[@]}}"', arrays.get(name, "")).replace(f"${{{name}[@]}}", arrays.get(name, ""))
            line = expand(line, seen | {name})
        return line

    return [expand(line) for line in lines]
