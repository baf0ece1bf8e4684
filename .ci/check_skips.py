"""Fail CI when a test skipped that .ci/expected-skips does not expect on this machine kind.

    python .ci/check_skips.py SECTION JUNIT_XML [JUNIT_XML ...] [--list .ci/expected-skips]

Each JUNIT_XML (one section's pytest runs: .ci/run runs the unmarked tests and the world tests
apart) is pytest's ``--junitxml`` report written with ``-o junit_family=xunit1`` (whose
testcases keep their ``file``, from which the node id is rebuilt). A skip that no entry of
SECTION matches is unexpected: one line names them all, exit 1. Entries of SECTION that matched
no skip are one informational line (a stale entry, or something that now runs), exit unchanged.
A list or report that cannot be read is one line, exit 2.

Why: .ci/run installs Chromium, the asv page's scripts, Slurm and actionlint, and only warns when
one fails; the tests that need them then skip, and a skip is green. Comparing the skips with a
short list of those expected here turns a failed install into a failed CI.
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

DEFAULT_LIST = Path(__file__).with_name("expected-skips")
EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE = 0, 1, 2


class BadInput(Exception):
    """A list or report that cannot be read: one line for the user."""


@dataclass(frozen=True)
class Entry:
    """One expected skip: a glob over node ids, optionally one over the reason."""

    node: str
    reason: str = "*"

    def matches(self, node_id: str, reason: str) -> bool:
        return fnmatch.fnmatchcase(node_id, self.node) and fnmatch.fnmatchcase(reason, self.reason)

    def __str__(self) -> str:
        return self.node if self.reason == "*" else f"{self.node} | {self.reason}"


def read_list(text: str, where: str = "expected-skips") -> dict[str, list[Entry]]:
    """Sections of entries. An entry must follow a comment (since the last blank line): the
    list is short on purpose, and each skip on it says why it is expected here."""
    sections: dict[str, list[Entry]] = {}
    current: list[Entry] | None = None
    commented = False
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            commented = False
        elif line.startswith("#"):
            commented = True
        elif line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), [])
            commented = False
        elif current is None:
            raise BadInput(f"{where}:{n}: an entry before any [section]: {line!r}")
        elif not commented:
            raise BadInput(f"{where}:{n}: {line!r} has no comment above it saying why it is expected")
        else:
            node, _, reason = line.partition(" | ")
            current.append(Entry(node.strip(), reason.strip() or "*"))
    return sections


def _node_id(case: ET.Element) -> str:
    """The pytest node id of a junit testcase: ``file``, then the classes inside the module
    (``classname`` less the module's dotted path), then the name with its parameters."""
    file, classname, name = case.get("file"), case.get("classname", ""), case.get("name", "")
    if not file:
        raise BadInput(f"testcase {classname}.{name} has no file attribute; run pytest with "
                       "-o junit_family=xunit1")
    if not classname:  # skipped while collecting its module: the node is the file
        return file
    module = file.removesuffix(".py").replace("/", ".")
    inner = classname[len(module):].strip(".").split(".") if classname.startswith(module) else []
    return "::".join([file, *filter(None, inner), name])


def _reason(skipped: ET.Element) -> str:
    message = skipped.get("message", "")
    if message != "collection skipped":
        return message
    try:  # str() of the collector's (path, line, "Skipped: why")
        return str(ast.literal_eval(skipped.text or "")[2]).removeprefix("Skipped: ")
    except (ValueError, SyntaxError, IndexError, TypeError):
        return (skipped.text or message).strip()


def read_skips(path: Path) -> list[tuple[str, str]]:
    """(node id, reason) of every skip in a junit report; xfails are not skips."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise BadInput(f"cannot read the junit report {path}: {exc}") from None
    skips = []
    for case in root.iter("testcase"):
        for skipped in case.findall("skipped"):
            if skipped.get("type") != "pytest.xfail":
                skips.append((_node_id(case), _reason(skipped)))
    return skips


def check(section: str, skips: list[tuple[str, str]], entries: list[Entry]) -> tuple[int, list[str]]:
    """(exit status, lines to print): the unexpected skips in one line; then, informational,
    the entries that matched nothing."""
    unexpected = [(node, why) for node, why in skips if not any(e.matches(node, why) for e in entries)]
    unused = [e for e in entries if not any(e.matches(node, why) for node, why in skips)]
    lines = []
    if unexpected:
        lines.append(f"check-skips {section}: {len(unexpected)} unexpected skip(s): "
                     + "; ".join(f"{node} ({' '.join(why.split())})" for node, why in unexpected))
    else:
        lines.append(f"check-skips {section}: {len(skips)} skip(s), all expected on this machine kind")
    if unused:
        lines.append(f"check-skips {section}: expected but did not skip (informational): "
                     + "; ".join(map(str, unused)))
    return (EXIT_UNEXPECTED if unexpected else EXIT_OK), lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("section", help="the list's [section] for this pytest run (main, openmpi)")
    p.add_argument("junit", type=Path, nargs="+", help="pytest --junitxml reports (-o junit_family=xunit1)")
    p.add_argument("--list", type=Path, default=DEFAULT_LIST, help=f"[default: {DEFAULT_LIST}]")
    args = p.parse_args(argv)
    try:
        try:
            sections = read_list(args.list.read_text(), str(args.list))
        except OSError as exc:
            raise BadInput(f"cannot read the expected-skip list {args.list}: {exc.strerror}") from None
        if args.section not in sections:
            raise BadInput(f"{args.list} has no [{args.section}] section (it has: "
                           f"{', '.join(sections) or 'none'})")
        skips = [skip for report in args.junit for skip in read_skips(report)]
        status, lines = check(args.section, skips, sections[args.section])
    except BadInput as exc:
        print(f"check-skips: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(lines), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
