"""The counts the docs state ("the seven collectives", "four stalls", "16 commands") are the
code's: a collective, a stall or a command added without its sentence fails here."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfsuite import collectives
from perfsuite.faces import cli
from perfsuite.stalls import stash

ROOT = Path(__file__).resolve().parents[1]
#: Pages a user reads about perfsuite: measurements.md is the lab notebook, whose counts are of
#: their day, and designs.md counts the papers' stalls, not perfsuite's.
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md",
         *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in ("measurements.md", "designs.md"))]
WORDS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                    "thirteen fourteen fifteen sixteen seventeen eighteen".split())}
COUNTED = {"collectives": len(collectives.NAMES), "stalls": len(stash.STALLS), "commands": len(cli.COMMANDS)}
#: A count of something else that the same noun ends ("the two commands" of the README's set-up).
OTHER = re.compile(r"two commands|\d+ transports")


def claims() -> list[tuple[str, str, int, str]]:
    found = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for m in re.finditer(rf"\b(?:all |the )?(\d+|{'|'.join(WORDS)}) ({'|'.join(COUNTED)})\b", line, re.I):
                if not OTHER.search(m.group(0)):
                    count = int(m.group(1)) if m.group(1).isdigit() else WORDS[m.group(1).lower()]
                    found.append((f"{page.relative_to(ROOT)}:{n}", m.group(0), count, m.group(2).lower()))
    return found


@pytest.mark.parametrize("where, said, count, noun", claims(), ids=lambda v: str(v))
def test_a_count_in_the_docs_is_the_codes(where, said, count, noun):
    assert count == COUNTED[noun], f"{where} says {said!r}; the code has {COUNTED[noun]} {noun}"


def test_the_docs_state_such_counts():
    """The scanner finds what it is for (docs/stalls.md's "four stalls"), so the test above is
    not vacuously green."""
    assert "stalls" in {noun for *_, noun in claims()}
