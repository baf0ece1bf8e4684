"""Every relative Markdown link with an #anchor in README.md and docs/*.md lands on a heading
that exists: a heading renamed (a date added to it) silently breaks the links into it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "baselines" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^()\s]*#[^()\s]+)\)")

#: Links whose target is still to be written, each with who writes it; an entry that resolves
#: fails the test, so it is removed once the section exists.
PENDING: dict[tuple[str, str], str] = {}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, each
    space a '-' (inline code and emphasis marks are punctuation too)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a file's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r" {0,3}#{1,6} +(.*?)(?: +#+)? *$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def links() -> list[tuple[Path, str]]:
    return [(doc, m.group(1)) for doc in DOCS for m in LINK.finditer(doc.read_text())
            if "://" not in m.group(1)]


def test_the_slug_follows_githubs_rules():
    assert slug("Baselines and the gate (2026-11-23)") == "baselines-and-the-gate-2026-11-23"
    assert slug("`perfsuite ab` (2026-11-23, later session)") == "perfsuite-ab-2026-11-23-later-session"
    assert slug("A GPU machine with no network") == "a-gpu-machine-with-no-network"
    assert slug("Which loop times the calls (`timing`)") == "which-loop-times-the-calls-timing"


@pytest.mark.parametrize("doc,target", links(), ids=lambda x: x.name if isinstance(x, Path) else x)
def test_every_anchor_link_lands_on_a_heading(doc, target):
    name, _, anchor = target.partition("#")
    path = (doc.parent / name) if name else doc
    assert path.is_file(), f"{doc.relative_to(ROOT)} links {target}: no file {name}"
    found = anchor in anchors(path)
    pending = PENDING.get((doc.name, target))
    if pending:
        assert not found, f"{target} exists now: remove it from PENDING"
        pytest.xfail(pending)
    assert found, (f"{doc.relative_to(ROOT)} links {target}, but {path.name} has no such heading; "
                   f"its anchors: {', '.join(sorted(anchors(path)))}")


#: A relative link to a file or picture, with or without an #anchor (not a web address).
TARGET = re.compile(r"\]\(([^()\s#]+)(?:#[^()\s]*)?\)")


#: Files linked before they exist, each with who writes it; an entry whose file exists fails the
#: test, so it is removed once the file is there.
PENDING_FILES: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_and_picture_lands_on_a_file(doc):
    targets = [m.group(1) for m in TARGET.finditer(doc.read_text()) if ":" not in m.group(1)]
    pending = [x for x in targets if (doc.name, x) in PENDING_FILES]
    for x in pending:
        assert not (doc.parent / x).exists(), f"{x} exists now: remove it from PENDING_FILES"
    missing = [x for x in targets if x not in pending and not (doc.parent / x).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links files that do not exist: {missing}"
    if pending:
        pytest.xfail(f"{doc.name} links {pending}, still to be written: {[PENDING_FILES[(doc.name, x)] for x in pending]}")
