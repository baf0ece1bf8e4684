"""Environments built from commits: the venv an A/B arm or a bisect step runs a commit in,
built once and kept, as asv keeps one environment per commit.

The repository is perfsuite's own or a user's project (its benchmarks declared with
``perfsuite.benchmark`` and registered by its entry point): either way the commit's tree is a
Python project, and the distribution it installs is named by its ``pyproject.toml`` (``[project]
name``; else ``setup.cfg`` or ``setup.py``). A commit's venv sees the running Python's packages
after its own (``overlay``: a .pth of ``site.addsitedir`` lines, so their own .pth files,
editable installs and path hooks, are read too) and the commit's tree is ``pip install``ed into
it with the extras named (default: those of that distribution installed here). What the commit
requires and the running environment already has is satisfied without a download, so a build
takes seconds and works offline; what the commit changed (its own package, a requirement it
raised) is installed into the venv and comes first on its ``sys.path``, which the build checks:
the distribution resolves inside the venv, and perfsuite imports there (the commit's own where
the repository is perfsuite, else the running one's through the overlay). The venv is keyed by
the commit, the extras and the environment it stands on (prefix, Python, the distributions it
holds): a change to any of them builds a new one (the commit fixes the distribution's name). A
stamp written last says a build is complete; a folder without one (a build interrupted) is
rebuilt.
"""
from __future__ import annotations

import ast
import configparser
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import site
import re
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..store import formats
from ..records.errors import ConfigError, FormatError, LaunchError
from .world import run_command

ENV_DIR_ENV = "PERFSUITE_ENV_DIR"
STAMP = "perfsuite-env.json"
PIP_TIMEOUT_S = 900.0  # a commit that raised a requirement may download and build it
#: The wheel an MPI library comes in: where it lies in the running environment, a commit's venv
#: is given its library and launcher (mpi4py looks for it under its own sys.prefix).
LAUNCHER_PROGRAMS = ("mpiexec", "mpirun", "mpicc", "mpicxx")


@dataclass(frozen=True)
class CommitEnv:
    """A built environment: ``python`` runs ``commit`` (named ``ref`` by the user)."""
    ref: str
    commit: str
    path: str
    cached: bool
    seconds: float

    @property
    def python(self) -> str:
        return str(Path(self.path) / "bin" / "python")

    def describe(self) -> str:
        return f"{self.ref} ({self.commit[:10]})"


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


def default_env_dir(repo: str | os.PathLike) -> Path:
    return Path(os.environ.get(ENV_DIR_ENV) or Path(repo) / ".perfsuite" / "envs")


def project_name(repo: str | os.PathLike, commit: str, ref: str | None = None) -> str:
    """The distribution ``commit``'s tree installs: ``[project] name`` of its pyproject.toml (or
    ``[tool.poetry] name``), else ``[metadata] name`` of its setup.cfg, else a literal ``name=``
    in its setup.py's ``setup()`` call. One line (ConfigError) where its tree is no project."""
    what = f"ref {ref or commit[:10]!r} ({commit[:10]})"
    top = set(_git(repo, "ls-tree", "--name-only", commit, what=f"{what}: git ls-tree").splitlines())
    if not top & {"pyproject.toml", "setup.cfg", "setup.py"}:
        raise ConfigError(f"{what} is not a Python project: its tree has no pyproject.toml, setup.cfg or "
                          "setup.py at the repository's top (a commit's environment pip-installs it)")

    def show(name: str) -> str:
        return _git(repo, "show", f"{commit}:{name}", what=f"{what}: git show {name}")

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


def installed_extras(dist: str = "perfsuite") -> tuple[str, ...]:
    """The extras of ``dist`` whose every requirement is installed here: what a commit's venv
    installs by default, so both arms hold what this environment holds."""
    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return ()
    have = {}
    for extra in d.metadata.get_all("Provides-Extra") or []:
        # 'tensorflow>=2.16; extra == "tf"': a requirement of that extra (a platform marker
        # beside it may leave it out here: then it is not needed here either)
        needs = [_NAME.match(r).group(0) for r in d.requires or []
                 if re.search(rf"""extra\s*==\s*['"]{re.escape(extra)}['"]""", r)]
        have[extra] = bool(needs) and all(_installed(n) for n in needs)
    return tuple(sorted(e for e, ok in have.items() if ok))


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def check_extras(text: str | None) -> tuple[str, ...] | None:
    """``--extras tf,test``: names of the extras of the project a commit installs (checked when
    the commit is built); None where none are named: ``build`` takes those of that
    distribution installed here."""
    if text is None:
        return None
    names = tuple(sorted({e.strip() for e in text.split(",") if e.strip()}))
    bad = [e for e in names if not e.replace("-", "").replace("_", "").isalnum()]
    if bad:
        raise ConfigError(f"extras {text!r}: {bad[0]!r} is not an extra's name; give names such as test,tf")
    return names


def site_dirs() -> list[str]:
    """The running environment's site folders, as ``overlay`` adds them."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()] if hasattr(site, "getsitepackages") else []
    dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return [d for d in dict.fromkeys(os.path.realpath(d) for d in dirs) if os.path.isdir(d)]


def _key(commit: str, extras: Iterable[str]) -> str:
    dists = sorted(n for d in site_dirs() for n in os.listdir(d) if n.endswith((".dist-info", ".egg-info")))
    basis = json.dumps([commit, sorted(extras), os.path.realpath(sys.prefix), sys.version, dists])
    return f"{commit[:12]}-{hashlib.sha256(basis.encode()).hexdigest()[:8]}"


def loaded_libmpi() -> str | None:
    """The MPI library this environment's mpi4py loads (without ``MPI_Init``), or None."""
    try:
        import mpi4py

        mpi4py.rc.initialize = False
        from mpi4py import MPI  # noqa: F401
    except Exception:  # noqa: BLE001 - no mpi4py or no MPI library: nothing to hand on
        return None
    with open("/proc/self/maps") as maps:
        return next((f for f in (line.split()[-1] for line in maps if line.strip())
                     if "/libmpi" in f and ".so" in f), None)


def overlay(venv: str | os.PathLike) -> list[str]:
    """Let ``venv`` see this environment's packages after its own, and the MPI library this
    environment's mpi4py loads from its own prefix (an MPI wheel in a venv), with its launcher
    and compiler wrappers beside the venv's Python, where perfsuite looks for them. Returns what
    it did, a line each."""
    venv = Path(venv).resolve()
    ours = Path(run_command([str(venv / "bin" / "python"), "-P", "-c",
                             "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    theirs = [d for d in site_dirs() if not Path(d).is_relative_to(venv)]
    lines = ["# this environment's packages, after the venv's own (perfsuite.launch.envs.overlay)"]
    lines += [f"import site; site.addsitedir({d!r})" for d in theirs]
    said = [f"sees the packages of {', '.join(theirs)} after its own in {ours}"]
    libmpi = loaded_libmpi()
    if libmpi and Path(libmpi).resolve().is_relative_to(Path(sys.prefix).resolve()):
        lines.append(f"import os; os.environ.setdefault('MPI4PY_LIBMPI', {libmpi!r})")
        for name in LAUNCHER_PROGRAMS:
            program, wrapper = Path(sys.executable).parent / name, venv / "bin" / name
            if program.is_file() and not wrapper.exists():
                formats.atomic_write(wrapper, f'#!/bin/sh\nexec {str(program)!r} "$@"\n')
                wrapper.chmod(0o755)
        said.append(f"uses the MPI library {libmpi} and its launcher {Path(sys.executable).parent / 'mpiexec'}")
    formats.atomic_write(ours / "_perfsuite_overlay.pth", "\n".join(lines) + "\n")
    return said


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder per environment: a second waits for the first and finds its build."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _complete(folder: Path, commit: str) -> bool:
    try:
        stamp = formats.read_stamp(folder / STAMP, formats.COMMIT_ENV)
    except (OSError, FormatError):
        return False
    return stamp.get("commit") == commit and (folder / "bin" / "python").exists()


def _pip_error(exc: LaunchError) -> str:
    """The line of pip's output that says what went wrong."""
    text = str(exc)
    errors = [p.strip() for p in text.split(" | ") if p.strip().startswith("ERROR")]
    return errors[-1] if errors else text.split(" | ")[-1].strip()


def build(repo: str | os.PathLike, ref: str, *, extras: Iterable[str] | None = (),
          env_dir: str | os.PathLike | None = None, progress: Callable[[str], None] | None = None) -> CommitEnv:
    """The environment that runs ``ref`` of ``repo``, built now or found built; ``extras``: the
    extras of the commit's distribution to install (None: those installed here). A ref that
    names no commit, whose tree is no Python project, or does not install, is one line
    (ConfigError: bad input)."""
    say = progress or (lambda m: None)
    commit = resolve(repo, ref)
    dist = project_name(repo, commit, ref)
    extras = tuple(sorted(installed_extras(dist) if extras is None else extras))
    folder = Path(env_dir or default_env_dir(repo)).resolve() / _key(commit, extras)
    started = time.monotonic()
    with _locked(folder.parent / f".{folder.name}.lock"):
        if _complete(folder, commit):
            say(f"{ref} ({commit[:10]}): environment {folder} (built before)")
            return CommitEnv(ref, commit, str(folder), True, time.monotonic() - started)
        installs = f"{dist}[{','.join(extras)}]" if extras else dist
        say(f"{ref} ({commit[:10]}): building its environment ({installs}) in {folder} ...")
        if folder.exists():  # an interrupted build: start again
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        try:
            _build_into(folder, repo, ref, commit, dist, extras)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        seconds = time.monotonic() - started
        formats.write_json(folder / STAMP, formats.stamp(formats.COMMIT_ENV, {
            "ref": ref, "commit": commit, "dist": dist, "extras": list(extras),
            "base_prefix": os.path.realpath(sys.prefix), "python": sys.version.split()[0],
            "built_s": round(seconds, 1)}))
        say(f"{ref} ({commit[:10]}): built in {seconds:.0f} s")
        return CommitEnv(ref, commit, str(folder), False, seconds)


#: Run by the built environment's Python: where its distribution, that distribution's top-level
#: modules and perfsuite are found (as its ranks will find them, PYTHONPATH included).
_WHERE = """
import importlib.util, json, sys
from importlib import metadata
out = {"dist": None, "modules": {}, "perfsuite": None}
try:
    d = metadata.distribution(sys.argv[1])
except metadata.PackageNotFoundError:
    d = None
if d is not None:
    out["dist"] = str(d.locate_file(""))
    for name in (d.read_text("top_level.txt") or "").split():
        spec = importlib.util.find_spec(name) if name.isidentifier() else None
        out["modules"][name] = spec.origin if spec and spec.origin else None
spec = importlib.util.find_spec("perfsuite")
out["perfsuite"] = spec.origin if spec else None
print(json.dumps(out))
"""


def _build_into(folder: Path, repo, ref: str, commit: str, dist: str, extras: tuple[str, ...]) -> None:
    tar = folder / "src.tar"
    _git(repo, "archive", "--format=tar", "-o", str(tar), commit, what=f"ref {ref!r}: git archive")
    src = folder / "src"
    with tarfile.open(tar) as t:
        t.extractall(src, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    tar.unlink()
    run_command([sys.executable, "-m", "venv", "--without-pip", str(folder)], timeout=120)
    # The overlay is this environment's view, computed where it is: in this environment's Python.
    run_command([sys.executable, "-P", "-m", "perfsuite.launch.envs", "overlay", str(folder)], timeout=120)
    python = str(folder / "bin" / "python")
    target = f"{src}[{','.join(extras)}]" if extras else str(src)
    try:
        # pip is the running environment's, seen through the overlay; no build isolation: the
        # build backend it already has builds the tree without an index.
        run_command([python, "-P", "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                     "--no-build-isolation", "--no-warn-script-location", target], timeout=PIP_TIMEOUT_S)
    except LaunchError as exc:
        raise ConfigError(f"ref {ref!r} ({commit[:10]}) does not install: {_pip_error(exc)}") from None
    _check_own(folder, python, ref, commit, dist)


def _check_own(folder: Path, python: str, ref: str, commit: str, dist: str) -> None:
    """The built environment runs the commit's own install: ``dist`` (and each of its top-level
    modules) resolves inside ``folder``, not in the running environment nor a PYTHONPATH entry;
    and perfsuite imports there (inside ``folder`` too where the repository is perfsuite)."""
    what = f"ref {ref!r} ({commit[:10]}): its environment {folder}"
    hint = " (PYTHONPATH comes first on every Python's sys.path: unset it)" if os.environ.get("PYTHONPATH") else ""
    where = run_command([python, "-P", "-c", _WHERE, dist], timeout=120, check=False)
    try:
        found = json.loads(where.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ConfigError(f"{what} does not start: {where.stderr.strip()[-200:]}") from None

    def inside(path: str | None) -> bool:
        return bool(path) and Path(path).resolve().is_relative_to(folder)

    if not inside(found["dist"]):
        raise ConfigError(f"{what} finds the distribution {dist} in {found['dist'] or 'no folder'}, not its "
                          f"own install{hint}")
    for module, origin in found["modules"].items():
        if origin is not None and not inside(origin):
            raise ConfigError(f"{what} imports {module} from {origin}, not its own install of {dist}{hint}")
    if re.sub(r"[-_.]+", "-", dist).lower() == "perfsuite":  # perfsuite's own repository
        if not inside(found["perfsuite"]):
            raise ConfigError(f"{what} imports perfsuite from {found['perfsuite']}, not its own install{hint}")
    elif found["perfsuite"] is None:
        raise ConfigError(f"{what} finds no perfsuite (the running environment's, which its overlay should "
                          "show it)")


def main(argv: list[str]) -> int:
    """``python -m perfsuite.launch.envs overlay VENV`` (the bring-up script and ``build``)."""
    if len(argv) != 2 or argv[0] != "overlay":
        print("usage: python -m perfsuite.launch.envs overlay VENV", file=sys.stderr)
        return 2
    for line in overlay(argv[1]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def check_python(path: str, modules: Sequence[str] = ("mpi4py", "perfsuite")) -> None:
    """One line, before anything runs, when an arm's Python cannot run a rank: it is not a
    program, or one of ``modules`` cannot be found there (found, not imported: TensorFlow
    takes seconds to import)."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ConfigError(f"python {path!r} is not an executable file; give the python of a venv "
                          f"that has {', '.join(modules)} installed")
    find = ("import importlib.util, sys; missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]; "
            "print(' '.join(missing)); sys.exit(1 if missing else 0)")
    # -P as the ranks start (launchers.worker_argv): without it the current directory, a
    # checkout, would lend its perfsuite to a venv that has none.
    probe = run_command([path, "-P", "-c", find, *modules], timeout=60, check=False)
    if "-P" in probe.stderr and probe.returncode == 2:
        raise ConfigError(f"python {path!r} is older than 3.11 (it has no -P, which keeps the current "
                          "directory off the ranks' sys.path); give the python of a 3.11+ venv")
    if probe.returncode != 0:
        missing = probe.stdout.strip() or (probe.stderr.strip().splitlines() or ["?"])[-1]
        raise ConfigError(f"python {path!r} cannot run a rank (no module {missing}); install "
                          f"{', '.join(modules)} into that venv")
