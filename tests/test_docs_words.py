"""The pages a user reads speak the user's words, not the project's own: "floor" and "room" (the
layers of the code, docs/design.md), "face" (the pytest plugin and the CLI), "lent" and "first
contact" (how the project got its GPU machines) mean nothing to a newcomer (issue 56).

User pages: README.md, baselines/README.md and every docs/*.md except the developers' pages
(design.md, measurements.md, designs.md). A word inside inline code or a code block passes only
as part of a real identifier: a path that exists in this tree (`perfsuite/faces/asv_run.py`,
`scripts/gpu-first-contact.sh`) or a module that exists (`perfsuite.faces.options`)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEVELOPERS = {"design.md", "measurements.md", "designs.md"}
USER_PAGES = [ROOT / "README.md", ROOT / "baselines" / "README.md",
              *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in DEVELOPERS)]
PRIVATE = re.compile(r"\b(floors?|rooms?|faces?|lent|first[ -]contact)\b", re.I)
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)


def real_identifier(token: str) -> bool:
    """A path in this tree or an importable dotted module name (trailing punctuation dropped)."""
    token = token.strip("`'\"()[],:;")
    if (ROOT / token).exists():
        return True
    if re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", token):
        try:
            return importlib.util.find_spec(token) is not None
        except ModuleNotFoundError:
            return False
    return False


def private_words(text: str) -> list[str]:
    """Each private word of ``text`` with its line number, less those that are part of a real
    identifier inside code."""
    code = [(m.start(), m.end()) for m in CODE.finditer(text)]
    found = []
    for m in PRIVATE.finditer(text):
        if any(a <= m.start() < b for a, b in code):
            start = max(text.rfind(c, 0, m.start()) for c in " \n`(") + 1
            ends = [i for i in (text.find(c, m.end()) for c in " \n`)") if i >= 0]
            if real_identifier(text[start:min(ends) if ends else len(text)]):
                continue
        found.append(f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}")
    return found


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_private_word_on_a_user_page(page):
    found = private_words(page.read_text())
    assert not found, f"{page.relative_to(ROOT)} uses the project's own words: {found}"


def test_the_rule_catches_prose_and_passes_real_identifiers():
    assert private_words("in both faces, on the ground floor") == ["line 1: 'faces'", "line 1: 'floor'"]
    assert private_words("a machine lent for minutes; first contact") == ["line 1: 'lent'", "line 1: 'first contact'"]
    assert private_words("see `perfsuite/faces/asv_run.py` and `python -m perfsuite.faces.options`") == []
    assert private_words("`bash scripts/gpu-first-contact.sh all`") == []
    assert private_words("`the pytest face`") == ["line 1: 'face'"]  # code, but no identifier
    assert private_words("silent, talented, lentil, surfaces, classroom") == []
