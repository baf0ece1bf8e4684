"""The asv project perfsuite records into: asv.conf.json, its git repository, and where one
run's results go (``RecordTarget``). The options that name a target (the CLI's ``--asv*``,
pytest's ``--perf-asv*``) live with every other option, in ``perfsuite.faces.options``."""
from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..records.errors import ConfigError, LaunchError

DEFAULT_CONFIG = "asv.conf.json"
DEFAULT_ENV_NAME = "perfsuite"  # results file <commit8>-perfsuite.json next to asv run's own
LOCK_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class AsvProject:
    """Paths of an asv project, resolved the way asv does (relative to the conf file)."""

    config_path: str
    root: str
    results_dir: str
    html_dir: str
    benchmark_dir: str
    repo_dir: str
    branches: tuple[str, ...]
    thresholds: dict[str, float]
    conf: Any  # asv.config.Config


def load_project(config_path: str = DEFAULT_CONFIG) -> AsvProject:
    from asv import util as asv_util
    from asv.config import Config

    if not os.path.isfile(config_path):
        raise ConfigError(f"asv config {config_path!r} does not exist; pass --asv-config PATH "
                          f"or run from the repository root (it holds {DEFAULT_CONFIG})")
    try:
        conf = Config.load(config_path)
    except asv_util.UserError as exc:
        raise ConfigError(f"asv config {config_path!r}: {exc}") from None
    root = os.path.dirname(os.path.abspath(config_path))
    repo = str(conf.repo)
    repo_dir = os.path.join(root, repo) if os.path.isdir(os.path.join(root, repo)) else root
    thresholds = {}
    for regex, value in (conf.regressions_thresholds or {}).items():
        try:
            thresholds[regex] = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{config_path}: regressions_thresholds[{regex!r}] = {value!r} "
                              "must be a number such as 0.05") from None
    return AsvProject(os.path.abspath(config_path), root,
                      os.path.join(root, conf.results_dir), os.path.join(root, conf.html_dir),
                      os.path.join(root, conf.benchmark_dir), repo_dir,
                      tuple(b for b in conf.branches if b), thresholds, conf)


def _git(project: AsvProject, *args: str) -> str:
    from ..launch.commands import run_command  # the one room that starts processes

    return run_command(["git", "-C", project.repo_dir, *args], timeout=30).stdout.strip()


_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def resolve_commit(project: AsvProject, commit: str | None = None) -> str:
    """The full hash of ``commit`` (default HEAD) in the project's repository. A full 40-hex
    hash that git does not know (results measured for another checkout) is taken as is."""
    try:
        return _git(project, "rev-parse", "--verify", f"{commit or 'HEAD'}^{{commit}}")
    except LaunchError as exc:
        if commit and _HEX40.match(commit.lower()):
            return commit.lower()
        what = f"commit {commit!r}" if commit else "HEAD"
        raise ConfigError(f"{what} is not a commit of {project.repo_dir} ({exc}); "
                          "pass --asv-commit with a full 40-hex hash") from None


def commit_date_ms(project: AsvProject, commit: str) -> int:
    """The commit's author date in ms (what asv stores), or now when git does not know it."""
    try:
        return int(_git(project, "log", "-1", "--format=%at", commit)) * 1000
    except (LaunchError, ValueError):
        return int(time.time() * 1000)


def commit_order(project: AsvProject, commits: Iterable[str],
                 dates: Mapping[str, int] | None = None) -> list[str]:
    """Commits in asv's revision order (``git rev-list --all --date-order --reverse``, as
    ``asv publish`` numbers them); commits git does not know go by recorded date."""
    commits = set(commits)
    dates = dates or {}
    try:
        listed = _git(project, "rev-list", "--all", "--date-order", "--reverse").splitlines()
    except LaunchError:
        listed = []
    pos = {c: i for i, c in enumerate(listed) if c in commits}
    known = sorted(pos, key=pos.__getitem__)
    unknown = sorted(commits - set(pos), key=lambda c: (dates.get(c, 0), c))
    return known + unknown


@dataclass(frozen=True)
class RecordTarget:
    config: str = DEFAULT_CONFIG
    machine: str | None = None  # None: fingerprint.system_name
    commit: str | None = None  # None: HEAD of the asv repo
    env_name: str = DEFAULT_ENV_NAME
    lock_timeout: float = LOCK_TIMEOUT_S
