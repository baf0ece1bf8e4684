"""What the docs say about perfsuite's stored formats and asv layouts is read from the code that
writes them, so a version bumped in the code fails here until the docs say it too (issue 56:
the docs named baseline version 2, result v1 and asv layout 4 long after the code wrote more).

Generic where it can be: every "`perfsuite-NAME` vN" / "version N" the docs write beside a
format's name must be that format's current version."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfsuite.records import trace
from perfsuite.store import formats

ROOT = Path(__file__).resolve().parents[1]
#: Every page that states facts about the code. The lab notebook (measurements.md) is left out:
#: its entries say what was true on their date, older versions included.
PAGES = [ROOT / "README.md", ROOT / "baselines" / "README.md",
         *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "measurements.md")]

#: Each stored format's current version, as the code writes it.
CURRENT = {**formats.VERSIONS, trace.MANIFEST_FORMAT: trace.MANIFEST_VERSION}

#: A format's name followed, within a short clause, by the version the sentence gives it:
#: "`perfsuite-study` v1", "format `perfsuite-capture`, version 1",
#: `{"format": "perfsuite-baseline", "version": 4}`, "`"format": "perfsuite-run"`, `"version": 2`".
STATED = re.compile(r"(perfsuite-[a-z][a-z-]*[a-z])[`\"]*(?:[,:]?[\s`\"]*)"
                    r"(?:\"version\"[`\"]*:\s*|version\s+|v)(\d+)\b")


def stated_versions() -> list[tuple[str, str, int]]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in STATED.finditer(text):
            out.append((page.relative_to(ROOT).as_posix(), m.group(1), int(m.group(2))))
    return out


def test_the_pattern_finds_the_docs_version_statements():
    """The check below cannot pass by finding nothing: the pages state these formats' versions."""
    named = {fmt for _, fmt, _ in stated_versions()}
    assert {formats.BASELINE, formats.RESULT, formats.RUN, formats.STUDY, formats.STUDY_PLAN,
            formats.DATASET, trace.MANIFEST_FORMAT} <= named, named


@pytest.mark.parametrize("page, fmt, version", stated_versions(), ids=lambda x: str(x))
def test_every_stated_format_version_is_the_one_the_code_writes(page, fmt, version):
    assert fmt in CURRENT, f"{page} names a format the code does not have: {fmt}"
    assert version == CURRENT[fmt], (f"{page} says {fmt} version {version}; the code writes version "
                                     f"{CURRENT[fmt]} (perfsuite/store/formats.py VERSIONS)")
