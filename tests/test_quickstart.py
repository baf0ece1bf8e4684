"""docs/quickstart.md stays a newcomer's one page: five sections of ten lines or fewer, every
``perfsuite`` command in it one this tree's parsers take (a renamed flag cannot leave it behind),
its pytest line collects, its picture is the browser test's real PNG, and README leads to it."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.faces import cli

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "docs" / "quickstart.md"
SECTIONS = ("On a laptop in a minute", "On a GPU runner", "Gating a pull request", "A nightly on Slurm",
            "Reading the asv page")
MAX_LINES = 10


def sections() -> dict[str, list[str]]:
    """Each ``## `` section's lines that say something: prose and commands, not blank lines or
    the fences around the commands."""
    out: dict[str, list[str]] = {}
    name = None
    for line in QUICKSTART.read_text().splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            out[name] = []
        elif name and line.strip() and not line.lstrip().startswith("```"):
            out[name].append(line)
    return out


def command_lines() -> list[list[str]]:
    """Every command of the page as argv: the fenced lines (continuations joined, comments off)
    and the inline code that starts with ``perfsuite ``."""
    text = QUICKSTART.read_text()
    argvs = [shlex.split(m.group(1)) for m in re.finditer(r"`(perfsuite [^`]+)`", text)]
    for block in re.findall(r"^```\w*\n(.*?)^```", text, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                argvs.append(argv)
    return argvs


def perfsuite_commands() -> list[list[str]]:
    """What follows ``perfsuite`` in each command (also after ``salloc ...`` or ``&&``)."""
    out = []
    for argv in command_lines():
        for i, word in enumerate(argv):
            if word == "perfsuite" or word.endswith("/perfsuite"):
                rest = argv[i + 1:]
                end = rest.index("&&") if "&&" in rest else len(rest)
                out.append(rest[:end])
    return out


def test_five_sections_of_ten_lines_or_fewer():
    found = sections()
    assert tuple(found) == SECTIONS
    long = {name: len(lines) for name, lines in found.items() if len(lines) > MAX_LINES}
    assert not long, f"sections over {MAX_LINES} lines: {long}"


def test_each_section_says_first_what_it_needs():
    """A newcomer learns what to have before the commands that fail without it (issue 56): the
    Slurm nightly needs a venv every node sees, an asv config and baselines recorded first."""
    found = sections()
    late = [name for name, lines in found.items() if not lines[0].startswith("Needs: ")]
    assert not late, f"sections that do not start with what they need: {late}"
    slurm = " ".join(" ".join(found["A nightly on Slurm"]).split())
    for needle in ("filesystem every node sees", "`asv.conf.json`", "baselines recorded first", "--baseline-update"):
        assert needle in slurm, needle
    assert "(install.md)" in found["On a laptop in a minute"][0]  # not on PyPI: where it comes from


def test_the_page_names_each_commands_and_recipes_a_newcomer_needs():
    found = {name: "\n".join(lines) for name, lines in sections().items()}
    for name, needles in {
        "On a laptop in a minute": ("pip install -e .", "perfsuite run", "pytest benchmarks --benchmark-only"),
        "On a GPU runner": ("'.[gpu]'", "--transports nccl"),
        "Gating a pull request": ("--a-ref origin/main --b-ref HEAD --strict", "recipes/workflows/perf-pr.yml"),
        "A nightly on Slurm": ("--launcher srun", "recipes/workflows/perf-nightly.yml", "nightly.sh"),
        "Reading the asv page": ("--asv", "asv publish", "perfsuite asv-offline", "img/asv-page.png",
                                 "test_published_graph_page_screenshot_is_a_real_image"),
    }.items():
        for needle in needles:
            assert needle in found[name], f"{name!r} lost {needle!r}"


@pytest.mark.parametrize("argv", perfsuite_commands(), ids=" ".join)
def test_every_perfsuite_command_parses(argv, capsys):
    try:
        args = cli.build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"perfsuite {shlex.join(argv)}: {capsys.readouterr().err.strip()}")
    assert args.command == argv[0]


def test_the_pytest_line_collects():
    """The pytest command as written, collecting only: its options exist and its values parse."""
    (argv,) = [a for a in command_lines() if a[0] == "pytest"]
    r = subprocess.run([sys.executable, "-m", *argv, "--collect-only", "-q", "-p", "no:cacheprovider"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "test_allreduce[mpi-n2-" in r.stdout, r.stdout[-2000:]


def test_the_picture_is_the_browser_tests_png():
    png = QUICKSTART.parent / "img" / "asv-page.png"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 300_000
    assert "](img/asv-page.png)" in QUICKSTART.read_text()


def test_readme_leads_to_the_quickstart_and_stays_short():
    readme = (ROOT / "README.md").read_text()
    setup = readme[readme.index("## Set-up"):readme.index("\n## ", readme.index("## Set-up") + 1)]
    assert "(docs/quickstart.md)" in setup
    assert len(readme.encode()) <= 12 * 1024, f"README is {len(readme.encode())} bytes"
    # the GPU machines perfsuite was tried on are measurements.md's, not a newcomer's first page
    assert not re.search(r"\b(H100|H200|lent)\b", readme)
