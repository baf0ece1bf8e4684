"""``ab --a-ref/--b-ref`` and ``bisect`` in a user's own repository, not perfsuite's: the tiny
project tests/data/userproj (package ``tinyproj``, its benchmark ``normalise_rows`` registered by
its ``perfsuite.benchmarks`` entry point) gets a history whose one slowing commit makes its own
code normalise row by row in a Python loop (x3 on the step, against the +-2% ab judges at),
beside harmless ones. Each commit's environment installs that commit's tinyproj and imports
perfsuite from the running environment; ab flags the slowing commit, bisect names it. A ref whose
tree is no Python project, or an ab naming two benchmarks, is one line and exit 2.

The user's environment is a venv over this one (``perfsuite.launch.envs overlay``, as the bring-up
script makes one) with tinyproj installed editable into it (``pip install -e``, offline: no
dependencies, the build backend this environment has): the parent finds the benchmark by its
entry point, as a user's ``perfsuite`` finds it, and nothing is installed into this environment
(tests/userproj.py makes the repository and the environment; tests/test_recipes.py uses them too).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import perfsuite
from perfsuite.records.errors import ConfigError
from perfsuite.launch import envs

from conftest import SWITCHES, said
from userproj import BENCH, CASE, SLOWING, commit, git, harmless, new_repo, slow_down, tinyproj_repo, user_env

#: x3 (the row loop: 0.3 ms a step against 0.95 ms, the allreduce of one double a small part)
#: against +-2%: every ab, and every bisect step (its midpoints judged at +-x1.7, halfway to the
#: bad end's x3), decided at the first look, 10 pairs, in 3 runs of each on the 2-core VM while
#: other worlds ran beside them; 30 pairs leave room for a noisy spell. Each world times its step
#: for 0.2 s (the declaration's max_time).
WORLD = ["--timeout", "120", "--max-pairs", "30"]


def cli(python: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``perfsuite ARGS`` run by ``python`` (the user's environment), without the test's own
    switches or MPICH settings."""
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES and not k.startswith("MPIR_CVAR_")}
    return subprocess.run([python, "-P", "-m", "perfsuite.faces.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def user_repo(tmp_path_factory):
    """(repo, the user's Python, the environments' folder, shas): base, two harmless commits,
    the slowing one, one harmless more (oldest first): four commits after the good end, so the
    bisect judges the bad end and two midpoints (one good, one bad)."""
    root = tmp_path_factory.mktemp("user")
    repo = tinyproj_repo(root / "tinyproj")
    shas = {"base": git(repo, "rev-parse", "HEAD")}
    shas["h1"] = harmless(repo, 1)
    shas["h2"] = commit(repo, "tinyproj/bench.py", lambda t: t + "\n# a comment\n", "bench: a comment")
    shas["slow"] = slow_down(repo)
    shas["h4"] = commit(repo, "tinyproj/__init__.py", lambda t: t + "# after the slow one\n", "a comment")
    python = user_env(root / "venv", repo)
    return repo, python, root / "envs", shas


@pytest.mark.world
def test_ab_by_commits_of_a_users_repo_flags_the_commit_that_slowed_its_code(user_repo, tmp_path,
                                                                              no_leftover_ranks):
    repo, python, env_dir, shas = user_repo
    got = cli(python, "ab", "--benchmarks", BENCH, *WORLD, "--a-ref", "HEAD~2", "--b-ref", "HEAD~1",
              "--env-dir", str(env_dir), "--json", str(tmp_path / "ab.json"), cwd=repo)
    assert got.returncode == 1, said(got)
    # the step's row (its peak memory has a row of its own, unchanged by the commit)
    row = next(line for line in got.stdout.splitlines() if line.startswith(CASE) and " step " in line)
    assert "DIFFERENT (regression)" in row, said(got)
    rep = json.loads((tmp_path / "ab.json").read_text())
    assert rep["arms"]["a"]["ref"].startswith(f"HEAD~2 ({shas['h2'][:10]}")
    assert rep["arms"]["b"]["ref"].startswith(f"HEAD~1 ({shas['slow'][:10]}")
    # Each arm ran its commit's own tinyproj, and the running environment's perfsuite.
    mine = {side: rep["imports"][side]["tinyproj"]["file"] for side in ("a", "b")}
    assert mine["a"] != mine["b"] and all(f.startswith(str(env_dir.resolve())) for f in mine.values()), mine
    assert {rep["imports"][side]["perfsuite"]["file"] for side in ("a", "b")} == {perfsuite.__file__}
    stamps = [json.loads(p.read_text()) for p in env_dir.glob(f"*/{envs.STAMP}")]
    assert {(s["dist"], tuple(s["extras"])) for s in stamps} == {("tinyproj", ())}, stamps


@pytest.mark.world
def test_bisect_in_a_users_repo_names_the_commit_that_slowed_its_code(user_repo, no_leftover_ranks):
    repo, python, env_dir, shas = user_repo
    # 60 pairs, as the bisect of tests/test_commit_envs.py: a midpoint is judged halfway to the
    # bad end's change, and the simulation there leaves up to 1 step in 4 undecided at 30 (a CI
    # run here left a harmless midpoint UNKNOWN at 30, 21 of its pairs straddling two modes).
    got = cli(python, "bisect", "--benchmarks", BENCH, *WORLD[:-2], "--max-pairs", "60", "--good", shas["base"], "--bad", "HEAD",
              "--env-dir", str(env_dir), cwd=repo)
    assert got.returncode == 1, said(got)
    assert f"first bad commit: {shas['slow'][:10]} {SLOWING}" in got.stdout, said(got)
    assert CASE in got.stdout.split("first bad commit")[1], said(got)


def test_a_ref_whose_tree_is_no_python_project_is_one_line_and_exit_2(tmp_path):
    repo = new_repo(tmp_path / "notes", {"README.md": "just notes\n"})
    commit(repo, "README.md", lambda t: t + "more\n", "more notes")
    for args in (["ab", "--a-ref", "HEAD~1", "--b-ref", "HEAD"], ["bisect", "--good", "HEAD~1", "--bad", "HEAD"]):
        got = cli(sys.executable, *args, "--env-dir", str(tmp_path / "envs"), cwd=repo)
        errors = [line for line in got.stderr.splitlines() if not line.startswith("#")]
        assert got.returncode == 2 and len(errors) == 1, said(got)
        assert "is not a Python project" in errors[0] and "no pyproject.toml" in errors[0], errors
    assert not (tmp_path / "envs").exists() or not any((tmp_path / "envs").iterdir())


def test_ab_runs_one_benchmark_and_says_so_in_one_line(tmp_path):
    repo = new_repo(tmp_path / "r", {"README.md": "x\n"})
    got = cli(sys.executable, "ab", "--benchmarks", "allreduce,broadcast", "--a-ref", "HEAD", cwd=repo)
    assert got.returncode == 2 and "names 2 benchmarks (allreduce, broadcast); perfsuite ab takes one value" in got.stderr, said(got)
    got = cli(sys.executable, "bisect", "--benchmarks", "no-such", "--good", "HEAD", "--bad", "HEAD", cwd=repo)
    assert got.returncode == 2 and "benchmark 'no-such' is unknown" in got.stderr, said(got)


@pytest.mark.parametrize("files, name", [
    ({"pyproject.toml": '[project]\nname = "tinyproj"\nversion = "1"\n'}, "tinyproj"),
    ({"pyproject.toml": '[tool.poetry]\nname = "po-proj"\n'}, "po-proj"),
    ({"pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n',
      "setup.cfg": "[metadata]\nname = cfg-proj\n"}, "cfg-proj"),
    ({"setup.py": 'from setuptools import setup\nsetup(name="py-proj", version="1")\n'}, "py-proj"),
])
def test_the_distribution_a_commit_installs_is_named_by_its_project_files(tmp_path, files, name):
    repo = new_repo(tmp_path / "p", files)
    assert envs.project_name(repo, git(repo, "rev-parse", "HEAD"), "HEAD") == name


@pytest.mark.parametrize("files, says", [
    ({"setup.py": "import setuptools\nsetuptools.setup(name=NAME)\n"}, "names no distribution"),
    ({"pyproject.toml": "[project\n"}, "does not install: its pyproject.toml is not TOML"),
    ({"README.md": "x\n"}, "is not a Python project"),
])
def test_a_tree_that_names_no_distribution_is_one_line(tmp_path, files, says):
    repo = new_repo(tmp_path / "p", files)
    with pytest.raises(ConfigError, match=says) as err:
        envs.project_name(repo, git(repo, "rev-parse", "HEAD"), "HEAD")
    assert "\n" not in str(err.value) and "ref 'HEAD'" in str(err.value)


def test_a_commits_environment_holds_its_own_install_and_a_pythonpath_hiding_it_is_one_line(
        user_repo, tmp_path, monkeypatch):
    repo, _, _, shas = user_repo
    built = envs.build(repo, "HEAD", extras=None, env_dir=tmp_path / "envs")
    stamp = json.loads((Path(built.path) / envs.STAMP).read_text())
    assert (stamp["dist"], stamp["extras"]) == ("tinyproj", [])  # no extra of tinyproj installed here
    where = subprocess.run([built.python, "-P", "-c", "import tinyproj, perfsuite; print(tinyproj.__file__); "
                            "print(perfsuite.__file__)"], capture_output=True, text=True, check=True).stdout.split()
    assert where == [f"{built.path}/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages/"
                     "tinyproj/__init__.py", perfsuite.__file__], where
    monkeypatch.setenv("PYTHONPATH", str(repo))  # the checkout's tinyproj first, in every commit's env
    with pytest.raises(ConfigError, match=r"imports tinyproj from .*not its own install of tinyproj "
                                          r"\(PYTHONPATH") as err:
        envs.build(repo, shas["h1"], extras=None, env_dir=tmp_path / "envs")
    assert "\n" not in str(err.value)
