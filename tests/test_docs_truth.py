"""What the docs say about perfsuite's stored formats and asv layouts is read from the code that
writes them, so a version bumped in the code fails here until the docs say it too (issue 56:
the docs named baseline version 2, result v1 and asv layout 4 long after the code wrote more).

Generic where it can be: every "`perfsuite-NAME` vN" / "version N" the docs write beside a
format's name must be that format's current version."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perfsuite import bench
from perfsuite.bench.asv_view import generic_layout
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


# --- asv: the layouts' parameters and versions (docs/asv.md) ----------------------------------

ASV_MD = ROOT / "docs" / "asv.md"


def bullet(title: str) -> str:
    """The text of docs/asv.md's bullet that starts with **title**, joined into one line."""
    text = ASV_MD.read_text()
    start = text.index(f"- **{title}")
    end = text.find("\n- ", start + 1)
    return " ".join(text[start:end if end > 0 else None].split())


def tuples(text: str) -> list[tuple[str, ...]]:
    return [tuple(w.strip() for w in m.group(1).split(",")) for m in re.finditer(r"`\(([^`]+)\)`", text)]


def layouts() -> dict[str, object]:
    return {layout.benchmark: layout for layout in bench.asv_layouts()}


def test_asv_md_gives_each_layouts_parameters_in_the_codes_order():
    allreduce, collectives, generic = tuples(bullet("Parameters"))[:3]
    found = layouts()
    assert allreduce == found["allreduce"].axes
    optional = {"op", "root", "splits"}
    for name, layout in found.items():
        if name != "allreduce":
            # the doc's tuple less the optional axes this collective lacks
            assert tuple(a for a in collectives if a not in optional or a in layout.axes) == layout.axes, name
    assert generic == generic_layout("mine").axes


def test_asv_md_names_the_current_layout_versions_and_what_is_migrated():
    versions = bullet("Layout versions")
    found = layouts()
    assert found["allreduce"].version in versions
    others = {re.sub(rf"^perfsuite-{re.escape(n)}-", "perfsuite-<collective>-", lay.version)
              for n, lay in found.items() if n != "allreduce"}
    assert len(others) == 1 and others <= set(re.findall(r"perfsuite-<collective>-\d+", versions)), others
    generic = generic_layout("bench").version.replace("perfsuite-bench-", "perfsuite-<bench>-")
    assert generic in versions
    # the oldest version each layout migrates from, and every axis a migration added with its value
    migrated = bullet("Older versions are migrated")
    for layout, shown in ((found["allreduce"], "perfsuite-allreduce-"), (generic_layout("bench"), "perfsuite-<bench>-")):
        oldest = min(layout.migrations, key=lambda m: int(m.old.rsplit("-", 1)[1]))
        assert f"`{shown}{oldest.old.rsplit('-', 1)[1]}` and later" in migrated, oldest
        for m in layout.migrations:
            assert f"`{m.axis}` `{m.value}`" in migrated, m


def test_no_page_names_an_asv_layout_version_the_code_has_not_reached():
    """A page may tell a layout's history, never a version beyond the current one."""
    current = {lay.version.rsplit("-", 1)[0]: int(lay.version.rsplit("-", 1)[1]) for lay in bench.asv_layouts()}
    current["perfsuite-<bench>"] = int(generic_layout("bench").version.rsplit("-", 1)[1])
    for page in PAGES:
        for prefix, n in re.findall(r"`(perfsuite-(?:<bench>|[a-z_]+))-(\d+)`", page.read_text()):
            if prefix in current:
                assert int(n) <= current[prefix], f"{page.name} names {prefix}-{n}; the code writes {current[prefix]}"


def test_asv_md_says_the_exit_statuses_history_compare_strict_gives(tmp_path, capsys):
    """Run, not read: `history --compare --strict` over a history with no series exits 3, and
    over no history at all (no benchmarks.json) 2; the page's sentence gives both."""
    from perfsuite.faces import cli

    results = tmp_path / "results"
    conf = tmp_path / "asv.conf.json"
    conf.write_text(json.dumps({"version": 1, "project": "p", "repo": str(tmp_path), "results_dir": str(results),
                                "html_dir": str(tmp_path / "html"), "environment_type": "existing"}))
    argv = ["history", "--asv-config", str(conf), "--compare", "--strict"]
    no_history = cli.main(argv)
    results.mkdir()
    (results / "benchmarks.json").write_text(json.dumps({"version": 2}))
    no_series = cli.main(argv)
    assert "NOTHING COMPARED" in capsys.readouterr().out
    said = bullet("`perfsuite history`")
    assert f"with `--strict`, exit {no_series} when no series was compared" in said, said
    assert "No asv history at all (no `benchmarks.json`" in said and f"is bad input, exit {no_history}" in said, said


# --- study.md: the plan's vectors ----------------------------------------------------------------

NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def test_study_md_lists_the_vectors_the_plan_reads_and_counts_them_right():
    """The vectors table holds exactly the plan code's vectors; the sentences that count them
    (a plan's vectors, the seed paper's) give the code's counts."""
    from perfsuite.experiments import study_plan

    text = (ROOT / "docs" / "study.md").read_text()
    table = text[text.index("| vector | keys |"):]
    table = table[:table.index("\n\n")]
    rows = re.findall(r"^\| `([a-z-]+)` \|", table, re.M)
    assert rows == list(study_plan.VECTORS)
    (plan_row,) = re.findall(r"^\| `\[vectors\.NAME\]` \|.*$", text, re.M)
    counted = re.search(r"one or more of the (\w+) below", plan_row)
    assert counted and NUMBERS[counted.group(1)] == len(study_plan.VECTORS), plan_row
    paper = re.findall(r"the seed paper's (\w+) vectors", text)
    assert paper and {NUMBERS[w] for w in paper} == {len(study_plan.IMAGE_VECTORS)}, paper


# --- perfsuite is not on PyPI ---------------------------------------------------------------------

FROM_INDEX = re.compile(r"pip install (?:-[-\w]+ )*[\"']?perfsuite(?:\[[\w,-]+\])?[\"']?(?=[\s`;)]|$)(?! *@)")


def test_no_page_or_recipe_installs_perfsuite_from_a_package_index():
    """`pip install perfsuite` finds nothing (docs/install.md): every page and recipe installs it
    from a clone, a git URL, a wheel (`perfsuite[EXTRA] @ URL`), never by bare name, except the
    sentence that says so."""
    files = [*PAGES, *sorted((ROOT / "recipes").rglob("*.sh")), *sorted((ROOT / "recipes").rglob("*.yml")),
             *sorted((ROOT / "perfsuite").rglob("*.py"))]  # its own messages: a skip reason's hint
    found = [f"{f.relative_to(ROOT)}:{n}: {line.strip()}" for f in files
             for n, line in enumerate(f.read_text().splitlines(), 1)
             if FROM_INDEX.search(line) and "finds nothing" not in line]
    assert not found, found
    assert FROM_INDEX.search("pip install perfsuite mpich") and FROM_INDEX.search("pip install 'perfsuite[gpu]'")
    assert not FROM_INDEX.search('pip install "perfsuite[torch] @ git+https://x/perfsuite.git@v1"')
    assert not FROM_INDEX.search("pip install perfsuite-0.1.0-py3-none-any.whl")


def _glossary_entry(term: str) -> str:
    text = (ROOT / "docs" / "glossary.md").read_text()
    start = text.index(f"### {term}\n")
    end = text.find("\n### ", start + 1)
    return " ".join(text[start:end if end > 0 else None].split())


def _pct(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def test_the_glossarys_figures_are_the_codes():
    """The glossary restates defaults and rules in figures (x4, 2 sittings, 10 minutes, +-2%):
    each is read here from the constant the code decides with, so a change to one fails until
    the glossary says it."""
    from perfsuite.experiments.ab import DEFAULT_TOLERANCE as AB_TOLERANCE
    from perfsuite.faces.options import COMMON
    from perfsuite.kernels.collectives.allreduce import CANARY_BYTES
    from perfsuite.verdicts import decision, drift, regress
    from perfsuite.verdicts.judging import COMPARE_MAX_ROUNDS

    contention = float(next(o.default for o in COMMON if o.name == "max-contention"))
    stored_looks = ", ".join(map(str, decision.stored_looks(3, COMPARE_MAX_ROUNDS)))
    expected = {
        "prior": [f"x{regress.PRIOR_SPAN:g}"],
        "span": [f"x{regress.PRIOR_SPAN:g}"],
        "sitting": [f"{int(drift.SITTING_GAP.total_seconds() // 60)} minutes", f"from {regress.MIN_SESSIONS} sittings"],
        "drift": [f"has {regress.MIN_SESSIONS} sittings"],
        "canary": [f"{CANARY_BYTES // 1024} KiB"],
        "contention": [f"({_pct(contention)})"],
        "alpha": [f"{decision.DEFAULT_ALPHA:g} by default"],
        "tolerance": [f"+-{_pct(AB_TOLERANCE.upper)} by default", f"+-{_pct(bench.get('allreduce').tolerances['latency_us'].upper)} for latency",
                      f"+-{_pct(decision.DEFAULT_TOLERANCE.upper)} for other", f"at most {_pct(regress.MAX_NOISE_TOLERANCE)}"],
        "look": [", ".join(map(str, decision.paired_looks(200)[:4])), stored_looks.replace(", 12", " and 12")],
    }
    wrong = {term: [f for f in figures if f not in _glossary_entry(term)] for term, figures in expected.items()}
    assert not any(wrong.values()), f"docs/glossary.md lacks what the code says: {wrong}"
