"""The tiny user project tests/data/userproj (package ``tinyproj``, its benchmark ``normalise_rows``
registered by its ``perfsuite.benchmarks`` entry point) as a user's git repository, and the user's
environment that sees it: shared by tests/test_user_repo.py and tests/test_recipes.py.

The one slowing change (``slow_down``) makes tinyproj normalise row by row in a Python loop: x3
on the step, against the +-2% ab judges at, so an A/B across it is decided at its first look.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "data" / "userproj"
BENCH = "normalise_rows"
CASE = "normalise_rows[mpi-n2-rows=64]"
SLOWING = "work: normalise row by row"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def commit(repo: Path, path: str, change, message: str) -> str:
    """Commits ``change(text)`` of the file ``path``; its sha."""
    f = repo / path
    f.write_text(change(f.read_text()))
    git(repo, "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "HEAD")


def new_repo(where: Path, files: dict[str, str]) -> Path:
    where.mkdir(parents=True)
    for name, text in files.items():
        (where / name).write_text(text)
    git(where, "init", "-q")
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "base")
    return where


def tinyproj_repo(where: Path) -> Path:
    """A git repository of tinyproj at ``where``: one commit, "base", on its first branch."""
    shutil.copytree(TEMPLATE, where, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    git(where, "init", "-q")
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "base")
    return where


def harmless(repo: Path, n: int) -> str:
    """A commit that changes no code (a line of tinyproj's README)."""
    return commit(repo, "README.md", lambda text: text + f"\n<!-- harmless {n} -->\n", f"docs: a harmless change {n}")


def slow_down(repo: Path) -> str:
    """The commit that makes tinyproj's code x3 slower (and changes nothing else)."""
    sha = commit(repo, "tinyproj/work.py",
                 lambda t: t.replace("\nROW_BY_ROW = False\n", "\nROW_BY_ROW = True\n", 1), SLOWING)
    assert git(repo, "diff", "--name-only", f"{sha}~1", sha) == "tinyproj/work.py"
    return sha


#: A benchmark a user adds in a pull request: a file of their repository's benchmarks/ folder,
#: declared as docs/your-code.md shows, timing tinyproj's code for each number of rows.
MINE = "benchmarks/test_mine.py"
MINE_TEXT = '''import numpy as np

import perfsuite
from tinyproj.work import normalise


@perfsuite.benchmark(world_sizes=[2], params={{"rows": {rows}}}, max_time=0.1)
def mine(world, rows):
    x = np.random.default_rng(world.rank).random((rows, 64))
    return lambda: normalise(x)
'''


def mine_case(rows: int) -> str:
    return f"mine[mpi-n2-rows={rows}]"


def write_mine(repo: Path, rows: list[int], message: str | None = None) -> str | None:
    """benchmarks/test_mine.py declaring ``rows``; committed (its sha) where ``message`` is given."""
    (repo / "benchmarks").mkdir(exist_ok=True)
    (repo / MINE).write_text(MINE_TEXT.format(rows=rows))
    if message is None:
        return None
    git(repo, "add", MINE)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def user_env(venv: Path, repo: Path) -> str:
    """The user's environment: a venv over this one (``perfsuite.launch.envs overlay``, as the
    bring-up script makes one) with tinyproj installed editable from ``repo`` (offline: no
    dependencies, the build backend this environment has), and perfsuite's console script in its
    bin, as ``pip install`` of perfsuite puts it there. Its Python; nothing is installed here."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-P", "-m", "perfsuite.launch.envs", "overlay", str(venv)], check=True,
                   capture_output=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-P", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "-e", str(repo)], check=True, capture_output=True)
    script = venv / "bin" / "perfsuite"  # [project.scripts] perfsuite = "perfsuite.faces.cli:main"
    script.write_text(f"#!{python}\nimport sys\nfrom perfsuite.faces.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return python
