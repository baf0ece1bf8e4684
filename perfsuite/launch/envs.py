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
takes seconds and works offline (built without isolation where this environment holds the
build backend the tree asks for; else isolated, pip fetching it, as the user's own pip install
did: a plain ``python3 -m venv`` has no ``wheel``); what the commit changed (its own package, a
requirement it raised) is installed into the venv and comes first on its ``sys.path``, which
the build checks: the distribution resolves inside the venv, and perfsuite imports there (the
commit's own where the repository is perfsuite, else the running one's through the overlay).
The venv is keyed by
the commit, the extras and the environment it stands on (prefix, Python, the distributions it
holds): a change to any of them builds a new one (the commit fixes the distribution's name). A
stamp written last says a build is complete; a folder without one (a build interrupted) is
rebuilt. Environments live in the user's cache (``default_env_dir``), never in the working tree.
Before an environment is used its mpi4py must load an MPI library (the one this Python loaded,
handed on wherever it lives): else one line names it. The repository itself is read by
``commits`` (git: refs, the project's folder and name, a file in a commit's tree).
"""
from __future__ import annotations

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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..store import formats
from ..records.errors import ConfigError, FormatError, LaunchError
from .commands import run_command
# Reading the repository lives in commits.py; its names stay reachable here, as callers know them.
from .commits import (PROJECT_FILES, _git, added_by, commit_subject, commits_between, project_dir,  # noqa: F401
                      project_name, repo_root, resolve, tree_has)

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


def default_env_dir(repo: str | os.PathLike) -> Path:
    """``$PERFSUITE_ENV_DIR``, else the user's cache (``$XDG_CACHE_HOME/perfsuite/envs``, default
    ``~/.cache``): never the working tree, where a build would show as untracked files. A folder
    per repository (its name and a hash of its path), so two repositories never share one."""
    if os.environ.get(ENV_DIR_ENV):
        return Path(os.environ[ENV_DIR_ENV])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    top = Path(repo).resolve()
    return cache / "perfsuite" / "envs" / f"{top.name}-{hashlib.sha256(str(top).encode()).hexdigest()[:8]}"


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


def _key(commit: str, extras: Iterable[str], project: str = "") -> str:
    dists = sorted(n for d in site_dirs() for n in os.listdir(d) if n.endswith((".dist-info", ".egg-info")))
    # a project at the top keeps the key it had before --project-dir (environments built stay found)
    basis = json.dumps([commit, sorted(extras), os.path.realpath(sys.prefix), sys.version, dists]
                       + ([project] if project else []))
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
    if libmpi:
        # Wherever it lives: mpi4py searches the venv's own prefix first, so a library this
        # environment reached there (an MPI wheel, or a symlink to a system MPI) or anywhere the
        # venv's search does not look is lost unless named (MPI4PY_LIBMPI: mpi4py's own setting).
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


#: pip's own codes ("error: subprocess-exited-with-error", "error: metadata-generation-failed"):
#: they say that a build failed, not why.
_PIP_CODE = re.compile(r"error: [a-z]+(?:-[a-z]+)+")
_RAISED = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception): ")


def _pip_error(output: str) -> str:
    """The line of pip's output that says what went wrong: the build's own ``error: ...`` line
    (setuptools' ``error: invalid command 'bdist_wheel'``), else the exception a build raised,
    else pip's last ``ERROR:`` line, never its closing hint ("See above for details")."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    own = [line for line in lines if line.startswith("error: ") and not _PIP_CODE.fullmatch(line)]
    raised = [line for line in lines if _RAISED.match(line)]
    pips = [line for line in lines if line.startswith("ERROR:")]
    said = (own or raised or pips or lines or ["pip failed and said nothing"])[-1]
    return said if len(said) <= 300 else said[:297] + "..."


def build(repo: str | os.PathLike, ref: str, *, extras: Iterable[str] | None = (),
          env_dir: str | os.PathLike | None = None, progress: Callable[[str], None] | None = None,
          project: str = "") -> CommitEnv:
    """The environment that runs ``ref`` of ``repo``, built now or found built; ``extras``: the
    extras of the commit's distribution to install (None: those installed here); ``project``:
    the folder of the tree that holds it (``project_dir``). A ref that names no commit, whose
    tree is no Python project, does not install, or whose environment cannot load an MPI
    library, is one line (ConfigError: bad input)."""
    say = progress or (lambda m: None)
    commit = resolve(repo, ref)
    dist = project_name(repo, commit, ref, project)
    extras = tuple(sorted(installed_extras(dist) if extras is None else extras))
    folder = Path(env_dir or default_env_dir(repo)).resolve() / _key(commit, extras, project)
    started = time.monotonic()
    with _locked(folder.parent / f".{folder.name}.lock"):
        if _complete(folder, commit):
            say(f"{ref} ({commit[:10]}): environment {folder} (built before)")
            # asked every time, not only at the build: the library may have moved since
            check_mpi(str(folder / "bin" / "python"), f"ref {ref!r} ({commit[:10]})")
            return CommitEnv(ref, commit, str(folder), True, time.monotonic() - started)
        installs = f"{dist}[{','.join(extras)}]" if extras else dist
        say(f"{ref} ({commit[:10]}): building its environment ({installs}) in {folder} ...")
        if folder.exists():  # an interrupted build: start again
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        try:
            _build_into(folder, repo, ref, commit, dist, extras, project, say)
            check_mpi(str(folder / "bin" / "python"), f"ref {ref!r} ({commit[:10]})")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        seconds = time.monotonic() - started
        formats.write_json(folder / STAMP, formats.stamp(formats.COMMIT_ENV, {
            "ref": ref, "commit": commit, "dist": dist, "extras": list(extras), "project": project,
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


#: Run by the built environment's Python in the project's folder: the build requirements of the
#: tree (PEP 518's ``requires``, then PEP 517's ``get_requires_for_build_wheel`` of its backend)
#: that this environment lacks, as JSON. setuptools before 70.1 asks for ``wheel`` there, which a
#: venv made by ``python3 -m venv`` (setuptools 65.5) does not have.
_UNMET = r"""
import contextlib, importlib, json, os, re, sys, tomllib
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    Requirement = None

def unmet(texts):
    out = []
    for text in texts:
        try:
            req = Requirement(text) if Requirement else None
        except Exception:
            out.append(text)
            continue
        name = req.name if req else re.split(r"[\s<>=!~;\[(]", text.strip())[0]
        if req and req.marker and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            out.append(text)
            continue
        if req and req.specifier and not req.specifier.contains(version, prereleases=True):
            out.append(text)
    return out

os.chdir(sys.argv[1])
try:
    with open("pyproject.toml", "rb") as f:
        system = tomllib.load(f).get("build-system", {})
except FileNotFoundError:
    system = {}
missing = unmet(system.get("requires", ["setuptools>=40.8.0"]))
if not missing:
    module, _, attr = system.get("build-backend", "setuptools.build_meta:__legacy__").partition(":")
    sys.path[:0] = [os.path.abspath(p) for p in system.get("backend-path", [])]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            backend = importlib.import_module(module)
            for part in filter(None, attr.split(".")):
                backend = getattr(backend, part)
            hook = getattr(backend, "get_requires_for_build_wheel", None)
            missing = unmet(hook() if hook else [])
    except Exception:  # noqa: BLE001 - a tree that fails here fails pip's build too, which says why
        missing = []
print(json.dumps(missing))
"""


def unmet_build_requirements(python: str, project: Path) -> list[str]:
    """What the tree at ``project`` needs to build that ``python``'s environment lacks."""
    out = run_command([python, "-P", "-c", _UNMET, str(project)], timeout=120, check=False)
    try:
        return list(json.loads(out.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return []  # the probe itself failed: pip's build without isolation says why


def _build_into(folder: Path, repo, ref: str, commit: str, dist: str, extras: tuple[str, ...],
                project: str = "", say: Callable[[str], None] = lambda m: None) -> None:
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
    tree = src / project if project else src
    target = f"{tree}[{','.join(extras)}]" if extras else str(tree)
    # pip is the running environment's, seen through the overlay. Without build isolation where
    # this environment has what the tree's build asks for: that backend builds it without an
    # index, in seconds. Else pip builds it isolated, fetching the backend as the user's own
    # pip install did.
    unmet = unmet_build_requirements(python, tree)
    isolation = [] if unmet else ["--no-build-isolation"]
    if unmet:
        say(f"{ref} ({commit[:10]}): its build asks for {', '.join(unmet)}, which this environment lacks: "
            "built in isolation (pip fetches them)")
    try:
        out = run_command([python, "-P", "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                           *isolation, "--no-warn-script-location", target], timeout=PIP_TIMEOUT_S, check=False)
    except LaunchError as exc:  # pip did not finish in time
        raise ConfigError(f"ref {ref!r} ({commit[:10]}) does not install: {exc}") from None
    if out.returncode != 0:
        why = _pip_error(f"{out.stdout}\n{out.stderr}")
        if unmet:
            why += f" (its build asks for {', '.join(unmet)}: install them here, or give pip an index)"
        raise ConfigError(f"ref {ref!r} ({commit[:10]}) does not install: {why}")
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


#: Run by a commit environment's Python: whether its mpi4py loads an MPI library, as its ranks
#: will (without MPI_Init), and which one it was handed (MPI4PY_LIBMPI, set by the overlay).
_MPI = r"""
import json, os, sys
out = {"libmpi": os.environ.get("MPI4PY_LIBMPI"), "error": None}
try:
    import mpi4py
    mpi4py.rc.initialize = False
    from mpi4py import MPI  # noqa: F401
except Exception as exc:
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    out["error"] = f"{type(exc).__name__}: {lines[0] if lines else ''}" + (f" ({lines[1]})" if len(lines) > 1 else "")
print(json.dumps(out))
"""


def check_mpi(python: str, what: str) -> None:
    """One line, before the first world, where ``python`` (a commit's environment) cannot load
    the MPI library its ranks need: which library, and the setting that names another."""
    out = run_command([python, "-P", "-c", _MPI], timeout=120, check=False)
    try:
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ConfigError(f"{what}: its environment's Python does not start: "
                          f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}") from None
    if found["error"]:
        lib = found["libmpi"] or "the one its mpi4py searches for (none was handed on: this Python loads none)"
        raise ConfigError(f"{what}: its environment cannot load the MPI library {lib}: {found['error']}; "
                          "name the library its ranks should load with MPI4PY_LIBMPI=/path/to/libmpi.so")


#: Run by a commit environment's Python: what its tree declares of a user benchmark (found as its
#: ranks find it, ``kernels.user.find``): transports and case variants; "missing" where the tree
#: does not declare it; "broken" (file:line and the error) where its module does not import.
_DECLARED = r"""
import json, os, sys, traceback
source = json.loads(sys.argv[1])
try:
    from perfsuite.kernels.user.step import find
    from perfsuite.records.errors import ConfigError
except ImportError as exc:  # a perfsuite without user benchmarks: nothing to tell
    print(json.dumps({"unknown": str(exc)}))
    sys.exit(0)
src = os.path.join(sys.prefix, "src") + os.sep
def where(path, line):
    return f"{path.removeprefix(src)}:{line}" if path else "?"
try:
    declared = find(source)
except (ConfigError, AttributeError) as exc:
    out = {"missing": str(exc).splitlines()[0]}
except SyntaxError as exc:
    out = {"broken": f"{where(exc.filename, exc.lineno)}: SyntaxError: {exc.msg}"}
except Exception as exc:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    out = {"broken": f"{where(frame.filename, frame.lineno)}: {type(exc).__name__}: {exc}".splitlines()[0]}
else:
    if not hasattr(declared, "combinations"):
        out = {"missing": f"{source.get('qualname')} is not declared with @perfsuite.benchmark there"}
    else:
        out = {"transports": list(declared.transports),
               "variants": [declared.variant(v) for v in declared.combinations()]}
print(json.dumps(out))
"""


def declared_at(env: CommitEnv, source: dict) -> dict:
    """What ``env``'s commit declares of the user benchmark ``source`` (its job options'
    ``user_benchmark``): ``{"transports": [...], "variants": [...]}``, ``{"missing": why}``, or
    ``{}`` where its perfsuite cannot tell. One line (ConfigError) where its module is broken."""
    out = run_command([env.python, "-P", "-c", _DECLARED, json.dumps(source)], timeout=300, check=False)
    try:
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ConfigError(f"ref {env.describe()}: its environment cannot read benchmark {source.get('name')!r}: "
                          f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}") from None
    if "broken" in found:
        raise ConfigError(f"ref {env.describe()}: benchmark {source.get('name')!r} does not import there: "
                          f"{found['broken']}")
    return {} if "unknown" in found else found


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
