"""docs/glossary.md defines the words perfsuite's output uses, and every user page links each main
word, at its first use, to its definition (issue 56), so a newcomer who meets "round" or "arm"
on any page is one click from what it means.

A use is the word in prose: not in code, a heading, a link's address or the text of a link to
elsewhere, and not in one of its everyday senses listed in OTHER_SENSES ("round-robin", "looks
like", a process's session)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
#: The pages not checked: the developers' three, the glossary itself, and the generated references.
NOT_CHECKED = {"design.md", "measurements.md", "designs.md", "glossary.md", "options.md", "cli.md"}
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in NOT_CHECKED)]
#: The main terms (their glossary anchor) and the forms a page uses them in.
TERMS = {"world": r"worlds?", "transport": r"transports?", "round": r"rounds?", "session": r"sessions?",
         "arm": r"arms?", "family": r"family", "verdict": r"verdicts?", "canary": r"canary", "drift": r"drift",
         # the noun only ("the first look", "at 4 looks"), never the verb ("perfsuite looks first")
         "look": "(?:" + "|".join(f"(?<={w} )" for w in ("first", "each", "every", "its", "the", "one", "a",
                                                          "next", "later", "per", "that", "this", r"\d"))
                 + ")looks?"}
#: Everyday senses of those words, which are not the term.
OTHER_SENSES = {
    "round": r"round-robin|round[ -]trip|rounds? (?:each|every|it|them|down|up)\b"
             r"|(?:may|might|to|than|not|can|will)\s+round\b",
    "session": r"process sessions?|sessions? of (?:its|their) own",
    "look": r"looks? (?:like|up|for)\b",
}
#: Every word the glossary must define (its ### headings), issue 56's list.
REQUIRED = ("world", "world_size", "rank", "transport", "case", "size", "algbw, busbw", "round", "session",
            "sitting", "arm", "pair", "look", "family", "alpha", "verdict", "tolerance", "drift", "prior",
            "canary", "machine mode", "contention", "yardstick", "span", "baseline", "system", "stall",
            "straggler", "capture, replay", "gate", "strict")

#: Fenced blocks, and inline code (which may run over a line break, not over a blank line).
CODE = re.compile(r"```.*?```|`(?:[^`\n]|\n(?!\s*\n))+`", re.S)
LIST_ITEM = re.compile(r"^( *)(?:[-*+]|\d+\.) +")


def indented_code(text: str) -> list[tuple[int, int]]:
    """Markdown's indented code blocks: after a blank line, lines indented 4 more than the prose
    they follow (a list item's text, or the margin)."""
    spans, pos, base, blank_before = [], 0, 0, True
    in_block = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if not stripped:
            blank_before = True
        elif (in_block or blank_before) and indent >= base + 4:
            spans.append((pos, pos + len(line)))
            in_block, blank_before = True, False
        else:
            item = LIST_ITEM.match(line)
            base = item.end() if item else indent
            in_block = blank_before = False
        pos += len(line)
    return spans


LINK = re.compile(r"\[([^\]\n]*)\]\(([^)\s]*)\)")


def glossary_target(page: Path, term: str) -> str:
    return ("docs/glossary.md" if page.parent == ROOT else "glossary.md") + f"#{term}"


def masked(text: str) -> tuple[str, list[tuple[int, int, str]]]:
    """``text`` with what is not prose blanked (code, headings, link addresses, the text of links
    to anything but the glossary), and the glossary links as (start, end, target) of their text."""
    out = list(text)

    def blank(a: int, b: int) -> None:
        out[a:b] = " " * (b - a)

    for m in CODE.finditer(text):
        blank(m.start(), m.end())
    for a, b in indented_code(text):
        blank(a, b)
    for m in re.finditer(r"^ {0,3}#{1,6} .*$", text, re.M):
        blank(m.start(), m.end())
    glossary = []
    for m in LINK.finditer(text):
        blank(m.start(2), m.end(2))
        if "glossary.md#" in m.group(2):
            glossary.append((m.start(1), m.end(1), m.group(2).split("glossary.md#", 1)[1]))
        else:
            blank(m.start(1), m.end(1))
    return "".join(out), glossary


def first_uses(text: str) -> dict[str, re.Match]:
    """Each term's first use in prose, in its own sense."""
    prose, _ = masked(text)
    found = {}
    for term, form in TERMS.items():
        other = [(m.start(), m.end()) for m in re.finditer(OTHER_SENSES[term], prose, re.I)] \
            if term in OTHER_SENSES else []
        for m in re.finditer(rf"\b{form}\b", prose, re.I):
            if not any(a <= m.start() < b for a, b in other):
                found[term] = m
                break
    return found


def unlinked(page: Path) -> list[str]:
    text = page.read_text()
    _, glossary = masked(text)
    out = []
    for term, m in first_uses(text).items():
        if not any(a <= m.start() < b and target == term for a, b, target in glossary):
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"line {line}: {m.group(0)!r} (link it: [{m.group(0)}]({glossary_target(page, term)}))")
    return out


def test_the_glossary_defines_every_word_it_must():
    headings = re.findall(r"^### (.+)$", GLOSSARY.read_text(), re.M)
    assert [w for w in REQUIRED if w not in headings] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_main_word_is_linked_to_the_glossary_at_its_first_use(page):
    assert not unlinked(page), f"{page.relative_to(ROOT)}: first uses not linked to the glossary: {unlinked(page)}"


def test_first_uses_skip_code_headings_other_links_and_everyday_senses():
    text = ("# Worlds\n`world` [the world](running.md) in round-robin order; it looks like a world\n"
            "and a [round](glossary.md#round), then a look.\n")
    uses = first_uses(text)
    assert set(uses) == {"world", "round", "look"}
    assert text[uses["world"].start():].startswith("world\nand")
    assert text[uses["round"].start():].startswith("round](glossary")
    assert text[uses["look"].start():].startswith("look.")
    assert [u.split(":")[0] for u in unlinked_text(text)] == ["line 2", "line 3"]


def unlinked_text(text: str) -> list[str]:
    """``unlinked`` of a page holding ``text`` in docs/."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        page = Path(d) / "page.md"
        page.write_text(text)
        return unlinked(page)
