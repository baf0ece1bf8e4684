"""perfsuite shipped like a library: a wheel that builds from the tree and runs from outside it,
``python -m perfsuite`` as the ``perfsuite`` script, a LICENSE that is the one pyproject names,
and a CHANGELOG whose format versions and renamed options are the code's."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from perfsuite import bench
from perfsuite.bench.asv_view import generic_layout
from perfsuite.faces import cli, options
from perfsuite.records import trace
from perfsuite.store import formats

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()


def _table(heading: str) -> dict[str, str]:
    """First column -> second of the CHANGELOG table under ``heading`` (code spans unwrapped)."""
    section = CHANGELOG.split(heading, 1)[1]
    rows = {}
    for line in section.splitlines():
        if line.startswith("#"):
            break
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2 and not set(cells[0]) <= {"-", " "}:
            rows[cells[0]] = cells[1]
    return rows


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel ``pip wheel`` builds from this tree, as docs/install.md builds it."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # The build backend's own warnings (a deprecated pyproject key) are builds that stop working.
    warned = re.findall(r"\w+Warning: .*", done.stdout + done.stderr)
    assert not warned, f"pip wheel warns: {warned}"
    (whl,) = out.glob("perfsuite-*.whl")
    return whl


def _tracked(under: str) -> list[str]:
    listed = subprocess.run(["git", "ls-files", under], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    return [p for p in listed.stdout.split() if (ROOT / p).is_file()]


def test_the_wheel_holds_every_file_of_the_package_and_the_license(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [p for p in _tracked("perfsuite") if p not in names]
    assert not missing, f"the wheel leaves out {missing}: name them in pyproject's package-data"
    assert any(n.endswith("/LICENSE") for n in names), "the wheel carries no LICENSE"
    assert f"perfsuite-{PROJECT['version']}-py3-none-any.whl" == wheel.name


def test_the_installed_wheel_runs_from_another_folder(wheel, tmp_path):
    """Installed (not editable) into a folder of its own, and run from a folder that is not the
    tree: the package, its data and the ``perfsuite`` script all come from the wheel."""
    target, elsewhere = tmp_path / "site", tmp_path / "project"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(target)}

    def run(*argv: str) -> str:
        got = subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
        assert got.returncode == 0, f"{argv}: {got.stderr[-2000:]}"
        return got.stdout

    where = run(sys.executable, "-c", "import perfsuite, pathlib; print(pathlib.Path(perfsuite.__file__).parent)")
    assert Path(where.strip()) == target / "perfsuite", f"perfsuite imported from {where.strip()}, not the wheel"
    assert (target / "perfsuite" / "launch" / "native" / "c" / "native_loop.c").is_file()
    assert run(sys.executable, "-m", "perfsuite", "--version").strip() == f"perfsuite {PROJECT['version']}"
    assert "mpi" in run(str(target / "bin" / "perfsuite"), "transports")


def test_python_m_perfsuite_is_the_perfsuite_command():
    got = subprocess.run([sys.executable, "-m", "perfsuite", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0 and got.stdout.startswith("usage: perfsuite"), got.stderr


def test_the_license_is_the_one_pyproject_names():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "Apache-2.0" in str(PROJECT["license"])


def test_the_changelog_heads_with_this_version():
    assert re.search(rf"^## {re.escape(PROJECT['version'])}\b", CHANGELOG, re.M), \
        f"CHANGELOG.md has no section for version {PROJECT['version']} (pyproject.toml)"


def test_the_changelog_gives_every_stored_format_at_its_current_version():
    shown = _table("### Stored formats")
    current = {**formats.VERSIONS, trace.MANIFEST_FORMAT: trace.MANIFEST_VERSION}
    wrong = {f: (shown.get(f), v) for f, v in current.items() if shown.get(f) != str(v)}
    assert not wrong, f"CHANGELOG.md's formats (shown, code): {wrong}"


def test_the_changelog_gives_every_asv_benchmark_version():
    shown = set(re.findall(r"`(perfsuite-[^`]+)`", CHANGELOG.split("asv benchmark versions", 1)[1]))
    for layout, word in [*((lay, "<collective>") for lay in bench.asv_layouts()),
                         (generic_layout("BENCH"), "<benchmark>")]:
        general = layout.version.replace(f"-{layout.benchmark}-", f"-{word}-")
        assert layout.version in shown or general in shown, f"CHANGELOG.md lacks asv version {layout.version}"


def test_the_changelog_lists_every_old_spelling():
    (sub,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    shown = _table("### Renamed options")
    for name, parser in sub.choices.items():
        for action in parser._actions:
            if isinstance(action, options.Renamed):
                for old in action.option_strings:
                    assert old in shown.get(name, "").replace("`", ""), \
                        f"CHANGELOG.md's renamed options lack perfsuite {name} {old}"
