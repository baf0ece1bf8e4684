"""Which code an A/B arm's ranks ran, and the refusal to compare two arms that ran the same.

Rank 0 records what it imported (``fingerprint.imported``: perfsuite, mpi4py, numpy, the MPI
library and, where loaded, CuPy, TensorFlow, Horovod, each as version and file) in its result's
``extra``. Two Pythons are two versions only if their ranks loaded other files: a second venv
with an editable install of the same tree, a wrapper around the same interpreter, or a
PYTHONPATH that names one tree for both arms all give two names for one code, and B/A then
measures the machine's noise while the user reads it as the change between versions.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from ..launch import envs
from ..records.errors import ConfigError, FormatError
from ..store.fingerprint import IMPORTS_KEY, git_head
from ..store.formats import COMMIT_ENV, read_stamp
from ..records.model import Result, Sample

if TYPE_CHECKING:  # ab imports this module
    from .ab import Arm

_NAMES = {"mpi": "MPI library"}  # how a recorded entry is named in the refusal


def stamped(result: Result) -> list[Sample]:
    """The world's samples, each carrying the imports its world recorded: the A/B runner hands
    on samples only, and this is how the arms' code reaches the loop that compares them."""
    imports = result.extra.get(IMPORTS_KEY)
    if not imports:
        return list(result.samples)
    imports = versioned(imports)
    return [replace(s, info={**s.info, IMPORTS_KEY: imports}) for s in result.samples]


#: What a package that has neither a version nor a commit is called.
UNVERSIONED = "unversioned"


def versioned(imports: Mapping[str, dict]) -> dict:
    """The imports, each package with a version to read: one without ``__version__`` (a user's
    own package, most often) by the commit it was loaded from ("commit 1a2b3c4d5e": the git
    repository its file is in, or the commit environment it was built into), else
    "unversioned"; never "None", which says nothing of which code ran."""
    out = {}
    for name, entry in imports.items():
        entry = dict(entry or {})
        if name != "mpi" and entry.get("version") is None and entry.get("file"):
            commit = commit_of(entry["file"])
            entry["version"] = f"commit {commit}" if commit else UNVERSIONED
        out[name] = entry
    return out


def commit_of(path: str) -> str | None:
    """The short sha of the commit ``path`` comes from: the commit environment (``launch.envs``)
    it lies in, else HEAD of the git repository it lies in (read from ``.git``, starting no
    process); None where it is in neither."""
    here = os.path.dirname(os.path.abspath(path))
    while True:
        if os.path.isfile(os.path.join(here, envs.STAMP)):
            try:
                commit = read_stamp(os.path.join(here, envs.STAMP), COMMIT_ENV).get("commit")
            except (OSError, FormatError):
                commit = None
            return str(commit)[:10] if commit else None
        if os.path.exists(os.path.join(here, ".git")):
            return git_head(os.path.join(here, ".git"))
        up = os.path.dirname(here)
        if up == here:
            return None
        here = up


def imports_of(samples: Iterable[Sample]) -> dict:
    """The imports recorded with a world's samples; {} from a perfsuite that recorded none."""
    return next((dict(s.info[IMPORTS_KEY]) for s in samples if s.info.get(IMPORTS_KEY)), {})


def same_code(a: Arm, b: Arm, imports_a: Mapping[str, dict], imports_b: Mapping[str, dict]) -> str | None:
    """Why the arms cannot be compared as two versions, or None.

    Only arms that differ in their Python (and perhaps launcher arguments, which cannot change
    what is imported) claim two versions; arms that differ in transport or environment compare
    those, whatever code they share. They are refused when every recorded file is the same: any
    other file (perfsuite, numpy, the MPI library) is a real difference worth measuring."""
    if a.python == b.python or a.transport != b.transport or a.env != b.env:
        return None
    if not imports_a or not imports_b or not (imports_a.get("perfsuite") or {}).get("file"):
        return None  # a perfsuite that recorded nothing is not this one: nothing to compare
    if _files(imports_a) != _files(imports_b):
        return None
    shared = imports_a["perfsuite"].get("file")
    others = sorted(_NAMES.get(n, n) for n in imports_a if n != "perfsuite")
    also = f", and the same {', '.join(others)}" if others else ""
    if a.ref and b.ref:  # two commits of the user's repository: their benchmark is not what ran
        return (f"arms {a.name} (commit {a.ref}) and {b.name} (commit {b.ref}) loaded the same files (perfsuite "
                f"from {shared}{also}): the benchmark imports nothing the two commits differ in; to time your "
                "own code, name your benchmark with --benchmarks (its name, module or .py file)")
    return (f"arms {a.name} and {b.name} name different Pythons ({a.python or sys.executable}, "
            f"{b.python or sys.executable}) whose ranks loaded the same files (perfsuite from {shared}"
            f"{also}): they run one version; install the other into arm {b.name}'s venv (pip install "
            "OTHER_TREE, not pip install -e of this one) and keep PYTHONPATH from naming a perfsuite tree")


def _files(imports: Mapping[str, dict]) -> dict[str, str | None]:
    return {name: entry.get("file") for name, entry in imports.items()}


def recorded(got: Mapping[str, Mapping[object, Sample]]) -> dict:
    """``{"a": imports, "b": imports}`` of a pair's two worlds (``got``: side -> case -> sample),
    or {} when neither recorded any."""
    imports = {side: imports_of(got[side].values()) for side in ("a", "b")}
    return imports if imports["a"] or imports["b"] else {}


def check_arms(a: Arm, b: Arm, got: Mapping[str, Mapping[object, Sample]]) -> dict:
    """``recorded(got)``, or ConfigError when the arms ran the same code under two names
    (``same_code``)."""
    imports = recorded(got)
    why = same_code(a, b, imports.get("a") or {}, imports.get("b") or {})
    if why:
        raise ConfigError(why)
    return imports


def section(imports: Mapping[str, dict]) -> dict:
    """The A/B file's record of each arm's code: ``{"imports": {"a": ..., "b": ...}}`` (one
    world of each arm, the first pair's), or nothing when no world recorded it."""
    return {"imports": {side: dict(imports[side]) for side in ("a", "b") if imports.get(side)}} if imports else {}
