"""What a repository's commits hold, read with git: the commit a ref names, the commits between
two, the folder and the name of the Python project a commit installs (a monorepo's is a
subfolder: the one the user works in, or ``--project-dir``), and whether a commit's tree holds a
file (a benchmark the user names). ``envs`` builds environments from what this finds; reading
the repository is apart from it, and costs no build.
"""
from __future__ import annotations

import ast
import configparser
import os
import tomllib
from pathlib import Path

from ..records.errors import ConfigError, LaunchError
from .commands import run_command


def _git(repo: str | os.PathLike, *args: str, what: str) -> str:
    try:
        return run_command(["git", "-C", str(repo), *args], timeout=60).stdout.strip()
    except LaunchError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def repo_root(where: str | os.PathLike = ".") -> Path:
    """The git repository ``where`` lies in: refs are commits of it."""
    return Path(_git(where, "rev-parse", "--show-toplevel",
                     what=f"{os.path.abspath(where)} is not inside a git repository (a ref names a commit "
                          "of the repository perfsuite runs in: run it in a clone)"))


def resolve(repo: str | os.PathLike, ref: str) -> str:
    """The full commit ``ref`` names, or one line saying it names none."""
    if not ref or ref.startswith("-"):
        raise ConfigError(f"ref {ref!r} is not a git ref; give a commit, branch or tag (HEAD~1, main, v1.2)")
    found = run_command(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", "--end-of-options",
                         f"{ref}^{{commit}}"], timeout=60, check=False)
    if found.returncode != 0 or not found.stdout.strip():
        raise ConfigError(f"ref {ref!r} names no commit of {repo}; give a commit, branch or tag "
                          "(git log --oneline lists them)")
    return found.stdout.strip()


def commits_between(repo: str | os.PathLike, good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to and including ``bad``, oldest first, on the path between
    them (git bisect's candidates for a first-parent-free history)."""
    if _git(repo, "merge-base", good, bad, what="merge-base") != good:
        raise ConfigError(f"good commit {good[:10]} is not an ancestor of bad commit {bad[:10]}; "
                          "give --good an older commit on the bad one's history")
    out = _git(repo, "rev-list", "--reverse", "--ancestry-path", f"{good}..{bad}", what="rev-list")
    return out.split()


def commit_subject(repo: str | os.PathLike, commit: str) -> str:
    return _git(repo, "log", "-1", "--format=%s", commit, what="git log")


PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")


def project_dir(repo: str | os.PathLike, given: str | os.PathLike | None = None, where: str | os.PathLike = ".") -> str:
    """The folder of ``repo`` that holds the project a commit installs, relative to its top ("" for
    the top; "train" in a monorepo): ``given`` (``--project-dir``, a path from here), else the
    nearest folder from ``where`` up to the top that holds a pyproject.toml, setup.cfg or
    setup.py (the project the user works in), else the top."""
    top = Path(repo).resolve()
    if given is not None:
        folder = Path(given).resolve()
        if not folder.is_relative_to(top):
            raise ConfigError(f"--project-dir {given} is not inside the repository {top}; give the folder of "
                              "it that holds your pyproject.toml")
        return _inside(folder, top)
    here = Path(where).resolve()
    if here.is_relative_to(top):
        for folder in (here, *here.parents):
            if any((folder / name).is_file() for name in PROJECT_FILES):
                return _inside(folder, top)
            if folder == top:
                break
    return ""


def _inside(folder: Path, top: Path) -> str:
    rel = folder.relative_to(top).as_posix()
    return "" if rel == "." else rel


def project_name(repo: str | os.PathLike, commit: str, ref: str | None = None, project: str = "") -> str:
    """The distribution ``commit``'s tree installs: ``[project] name`` of its pyproject.toml (or
    ``[tool.poetry] name``), else ``[metadata] name`` of its setup.cfg, else a literal ``name=``
    in its setup.py's ``setup()`` call; in the folder ``project`` of the tree (``project_dir``).
    One line (ConfigError) where that folder is no project."""
    what = f"ref {ref or commit[:10]!r} ({commit[:10]})"
    at = f"{project}/" if project else ""
    place = f"in {project}/" if project else "at the repository's top"
    listed = run_command(["git", "-C", str(repo), "ls-tree", "--name-only", f"{commit}:{project}"],
                         timeout=60, check=False)
    top = set(listed.stdout.split()) if listed.returncode == 0 else set()
    if not top & set(PROJECT_FILES):
        hint = ("; run perfsuite in your project's folder, or name it with --project-dir" if not project
                else "; --project-dir names the folder that holds your project")
        raise ConfigError(f"{what} is not a Python project: its tree has no pyproject.toml, setup.cfg or "
                          f"setup.py {place} (a commit's environment pip-installs it){hint}")

    def show(name: str) -> str:
        return _git(repo, "show", f"{commit}:{at}{name}", what=f"{what}: git show {at}{name}")

    if "pyproject.toml" in top:
        try:
            data = tomllib.loads(show("pyproject.toml"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{what} does not install: its pyproject.toml is not TOML ({exc})") from None
        for table in (data.get("project"), data.get("tool", {}).get("poetry")):
            if isinstance(table, dict) and isinstance(table.get("name"), str) and table["name"].strip():
                return table["name"].strip()
    if "setup.cfg" in top:
        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read_string(show("setup.cfg"))
        except configparser.Error:
            pass
        else:
            if cfg.get("metadata", "name", fallback="").strip():
                return cfg.get("metadata", "name").strip()
    if "setup.py" in top:
        try:
            tree = ast.parse(show("setup.py"))
        except SyntaxError:
            tree = ast.Module(body=[], type_ignores=[])
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup":
                for kw in node.keywords:
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                        return kw.value.value.strip()
    raise ConfigError(f"{what} names no distribution: give its pyproject.toml a [project] name "
                      "(or setup.cfg's [metadata] name, or a literal setup(name=...) in setup.py)")

def tree_has(repo: str | os.PathLike, commit: str, path: str) -> bool:
    """Whether ``commit``'s tree holds the file ``path`` (relative to the repository's top)."""
    return run_command(["git", "-C", str(repo), "cat-file", "-e", f"{commit}:{path}"], timeout=60,
                       check=False).returncode == 0


def added_by(repo: str | os.PathLike, commit: str, path: str) -> str | None:
    """The first commit on ``commit``'s history that added ``path``, or None."""
    out = run_command(["git", "-C", str(repo), "log", "--diff-filter=A", "--format=%H", "--reverse", commit,
                       "--", path], timeout=60, check=False).stdout.split()
    return out[0] if out else None
