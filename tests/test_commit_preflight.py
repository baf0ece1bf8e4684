"""``ab`` and ``bisect`` by commits check before the first world, in a user's own repository
(tests/userproj.py): every ref resolves, each arm's tree holds the benchmark (a file that only
one ref has is the first pull request's ``new`` cases, not 200 failed worlds; bisect from a ref
without it is one line), each commit builds (a tree that does not is one line quoting pip's
own error) and its environment loads an MPI library (the one the launching Python loaded,
wherever it lives; else one line naming it). A project in a subfolder builds from there, and
environments live in the user's cache, not in their working tree.

The injected faults of issue 51 these rows stand for, each asserted by exit status, one line
and a generous bound on the seconds: a commit whose tree does not build, a commit env that
cannot load libmpi, a benchmark missing at one ref.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfsuite.faces.cli.ab import ab_status
from perfsuite.experiments import ab
from perfsuite.launch import envs
from perfsuite.records.errors import ConfigError
from perfsuite.records.model import Case, Metric, Sample

from conftest import SWITCHES, said
from userproj import MINE, TEMPLATE, commit, git, harmless, mine_case, tinyproj_repo, user_env, write_mine

SCRIPTS = Path(__file__).resolve().parents[1] / "recipes" / "perf"
#: "In seconds": a pre-flight refusal takes 1-4 s here (a build of tinyproj ~3 s); this bound is
#: for a loaded 2-core machine, never for the check itself.
SECONDS = 60


def cli(python: str, *args: str, cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """``perfsuite ARGS`` run by ``python`` (the user's environment) without the test's own
    switches or MPICH settings, plus ``env``; and its seconds."""
    clean = {k: v for k, v in os.environ.items() if k not in SWITCHES and not k.startswith("MPIR_CVAR_")}
    started = time.monotonic()
    got = subprocess.run([python, "-P", "-m", "perfsuite.faces.cli", *args], cwd=cwd, env={**clean, **env},
                         capture_output=True, text=True, timeout=600)
    return got, time.monotonic() - started


def errors(got: subprocess.CompletedProcess) -> list[str]:
    """stderr's lines that are not progress ("# ...")."""
    return [line for line in got.stderr.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def first_pr(tmp_path_factory):
    """(repo, the user's Python, shas): tinyproj's base, then the head that adds
    benchmarks/test_mine.py (rows 32 and 64), checked out: the first pull request of a user."""
    root = tmp_path_factory.mktemp("first-pr")
    repo = tinyproj_repo(root / "tinyproj")
    shas = {"base": git(repo, "rev-parse", "HEAD")}
    shas["mine"] = write_mine(repo, [32, 64], "a benchmark of my own")
    return repo, user_env(root / "venv", repo), shas


@pytest.mark.world
def test_the_pr_gate_passes_a_head_that_adds_a_benchmark_with_its_cases_new(first_pr, tmp_path,
                                                                             no_leftover_ranks):
    repo, python, shas = first_pr
    clean = {k: v for k, v in os.environ.items()
             if k not in SWITCHES and not k.startswith(("MPIR_CVAR_", "PERF_", "GITHUB_"))}
    results = tmp_path / "results"
    started = time.monotonic()
    got = subprocess.run(["bash", str(SCRIPTS / "pr-gate.sh")], cwd=repo, capture_output=True, text=True,
                         timeout=600, env={**clean, "PATH": f"{Path(python).parent}{os.pathsep}{clean['PATH']}",
                                           "PERF_BASE": shas["base"], "PERF_BENCHMARKS": MINE,
                                           "PERF_ARGS": "--timeout 120", "PERF_ENV_DIR": str(tmp_path / "envs"),
                                           "PERF_RESULTS": str(results)})
    seconds = time.monotonic() - started
    assert got.returncode == 0 and not got.stderr.strip(), said(got)
    assert got.stdout.splitlines()[-1].endswith("no regression; 2 new case(s) measured at B only (nothing at A "
                                                "to compare them with)"), said(got)
    rows = [line for line in got.stdout.splitlines() if line.startswith("mine[")]
    assert len(rows) == 2 and all("new (only B's tree declares it" in r for r in rows), said(got)
    rep = json.loads((results / "ab.json").read_text())
    assert rep["new"] == [mine_case(32), mine_case(64)] and rep["missing"] == [] and rep["verdicts"] == [], rep
    for case in rep["new"]:
        (values,) = rep["values"][case].values()
        assert values["a"] == [] and len(values["b"]) == ab.NEW_ONLY_PAIRS and min(values["b"]) > 0, values
    # Arm A's tree has no benchmark: nothing was built for it, no world of it ran.
    assert rep["arms"]["a"]["python"] is None and len(list((tmp_path / "envs").glob(f"*/{envs.STAMP}"))) == 1
    assert seconds < SECONDS, seconds


@pytest.mark.parametrize("body, ab_status, status", [
    ({"verdicts": [], "new": ["c"], "missing": []}, 3, 0),  # ab --strict's 3, for new cases alone
    ({"verdicts": [{"case": "d", "kind": "SAME"}], "new": ["c"], "missing": []}, 3, 0),
    ({"verdicts": [{"case": "d", "kind": "UNKNOWN"}], "new": ["c"], "missing": []}, 3, 3),
    ({"verdicts": [{"case": "d", "kind": "SAME"}], "new": ["c"], "missing": ["e"]}, 3, 3),  # a removed case
    ({"verdicts": [{"case": "d", "kind": "DIFFERENT"}], "new": ["c"], "missing": []}, 1, 1),
    ({"verdicts": [], "new": [], "missing": ["e"]}, 3, 3),
], ids=["new", "new-and-same", "new-and-unknown", "new-and-missing", "new-and-regression", "missing"])
def test_the_gates_pass_new_cases_and_nothing_else_undecided(tmp_path, body, ab_status, status):
    code = (f'source "{SCRIPTS}/lib.sh"; echo "the table" > "$PERF_RESULTS/ab.txt"; '
            f"echo '{json.dumps(body)}' > \"$PERF_RESULTS/ab.json\"; perf_judge {ab_status} \"perfsuite ab: A vs B\"")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERF_", "GITHUB_"))}
    got = subprocess.run(["bash", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={**env, "PERF_BENCHMARKS": "x"})
    assert got.returncode == status, said(got)
    assert ("1 new case(s) measured at B only" in got.stdout) == (status == 0), said(got)


def test_a_benchmark_missing_at_a_ref_bisect_or_both_arms_need_is_one_line_and_exit_2(first_pr, tmp_path):
    repo, python, shas = first_pr
    env_dir = tmp_path / "envs"
    got, seconds = cli(python, "bisect", "--benchmarks", MINE, "--good", shas["base"], "--bad", "HEAD",
                       "--env-dir", str(env_dir), cwd=repo)
    assert got.returncode == 2 and errors(got) == got.stderr.strip().splitlines() and len(errors(got)) == 1, said(got)
    assert (f"--good {shas['base']} ({shas['base'][:10]}) has no {MINE} in its tree" in errors(got)[0]
            and f"give a --good at or after {shas['mine'][:10]}, the commit that added it" in errors(got)[0]), said(got)
    assert seconds < SECONDS, seconds
    got, seconds = cli(python, "ab", "--benchmarks", MINE, "--a-ref", shas["base"], "--b-ref", "HEAD~1",
                       "--env-dir", str(env_dir), cwd=repo)
    assert got.returncode == 2 and len(errors(got)) == 1 == len(got.stderr.strip().splitlines()), said(got)
    assert f"nor --b-ref HEAD~1 ({shas['base'][:10]}) has {MINE} in its tree" in errors(got)[0], said(got)
    assert seconds < SECONDS, seconds
    assert not env_dir.exists(), "nothing is built before the refs and their trees are checked"


@pytest.mark.world
def test_a_case_only_b_declares_is_new_and_one_only_a_declares_is_missing(first_pr, tmp_path, no_leftover_ranks):
    repo, python, shas = first_pr
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    write_mine(clone, [64, 128], "rows: 64 and 128, no more 32")
    write_mine(clone, [32, 64, 128])  # the working tree (uncommitted) selects all three
    got, seconds = cli(python, "ab", "--benchmarks", MINE, "--a-ref", "HEAD~1", "--b-ref", "HEAD", "--max-pairs",
                       "4", "--timeout", "120", "--env-dir", str(tmp_path / "envs"),
                       "--json", str(tmp_path / "ab.json"), cwd=clone)
    assert got.returncode == 0 and not errors(got), said(got)
    assert "# A/B: 1 case(s), 1 new (only B's tree declares them), 1 missing (only A's tree declares them)" \
        in got.stdout, said(got)
    rep = json.loads((tmp_path / "ab.json").read_text())
    assert (rep["new"], rep["missing"]) == ([mine_case(128)], [mine_case(32)]), rep
    # one case compared, on its step time and on its peak memory
    assert sorted((v["case"], v["metric"]) for v in rep["verdicts"]) == [
        (mine_case(64), "peak_mem_MiB"), (mine_case(64), "step_us")] and sorted(rep["values"]) == [
        mine_case(128), mine_case(64)], rep
    row = {line.split()[0]: line for line in got.stdout.splitlines() if line.startswith("mine[")}
    assert "new (only B's tree" in row[mine_case(128)] and "missing (only A's tree" in row[mine_case(32)], said(got)
    assert seconds < 240, seconds


def test_a_commit_whose_tree_does_not_build_is_one_line_quoting_pips_error(tmp_path):
    repo = tinyproj_repo(tmp_path / "tinyproj")
    commit(repo, "pyproject.toml", lambda t: t.replace('packages = ["tinyproj"]', 'packages = ["tinyproj", "gone"]'),
           "packaging: a folder that is not there")
    got, seconds = cli(sys.executable, "ab", "--a-ref", "HEAD", "--b-ref", "HEAD~1", "--env-dir",
                       str(tmp_path / "envs"), cwd=repo)
    assert got.returncode == 2 and len(errors(got)) == 1, said(got)
    assert errors(got)[0].endswith("does not install: error: package directory 'gone' does not exist"), said(got)
    assert "ref 'HEAD'" in errors(got)[0] and seconds < SECONDS, (said(got), seconds)
    assert not any((tmp_path / "envs").glob("*/*")), "a failed build leaves no folder"


#: pip 23's output for a tree built without isolation by setuptools 65.5 with no ``wheel``: what
#: every ``ab --a-ref`` in a plain ``python3 -m venv`` met (issue 51), pip's last line a hint.
PLAIN_VENV_PIP = """\
Processing ./src
  Preparing metadata (pyproject.toml): started
  Preparing metadata (pyproject.toml): finished with status 'error'
  error: subprocess-exited-with-error

  × Preparing metadata (pyproject.toml) did not run successfully.
  │ exit code: 1
  ╰─> [3 lines of output]
      running dist_info
      creating '/tmp/pip-modern-metadata-7nl2gy44/tinyproj-0.1.0.dist-info'
      error: invalid command 'bdist_wheel'
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: metadata-generation-failed

× Encountered error while generating package metadata.
╰─> See above for output.

note: This is an issue with the package mentioned above, not pip.
hint: See above for details.
"""


@pytest.mark.parametrize("output, line", [
    (PLAIN_VENV_PIP, "error: invalid command 'bdist_wheel'"),
    ("  Traceback (most recent call last):\n    x\n  ZeroDivisionError: division by zero\n"
     "error: subprocess-exited-with-error\nhint: See above for details.\n", "ZeroDivisionError: division by zero"),
    ("ERROR: Could not find a version that satisfies the requirement wheel (from versions: none)\n"
     "ERROR: No matching distribution found for wheel\n", "ERROR: No matching distribution found for wheel"),
])
def test_a_failed_install_is_said_by_pips_own_error_line_not_its_hint(output, line):
    assert envs._pip_error(output) == line


def test_a_tree_whose_build_needs_what_this_environment_lacks_is_built_in_isolation(tmp_path):
    def tree(name: str, requires: list[str], backend: str = "setuptools.build_meta", **files: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        (where / "pyproject.toml").write_text(
            f'[build-system]\nrequires = {json.dumps(requires)}\nbuild-backend = "{backend}"\nbackend-path = ["."]\n'
            f'[project]\nname = "{name}"\nversion = "1"\n')
        for file, text in files.items():
            (where / file).write_text(text)
        return where

    assert envs.unmet_build_requirements(sys.executable, tree("have", ["setuptools>=40"])) == []
    assert envs.unmet_build_requirements(sys.executable, tree("newer", ["setuptools>=9999"])) == ["setuptools>=9999"]
    # What setuptools before 70.1 does: its backend asks for wheel at build time (PEP 517's hook).
    asks = "from setuptools.build_meta import *\ndef get_requires_for_build_wheel(config_settings=None):\n" \
           "    return ['perfsuite-no-such-backend-helper']\n"
    assert envs.unmet_build_requirements(sys.executable, tree("hook", ["setuptools"], "asking", **{"asking.py": asks})) \
        == ["perfsuite-no-such-backend-helper"]


def test_a_commit_env_that_cannot_load_libmpi_is_one_line_and_exit_2(tmp_path):
    repo = tinyproj_repo(tmp_path / "tinyproj")
    harmless(repo, 1)
    gone = tmp_path / "mpi" / "lib" / "libmpi.so.12"  # an MPI the user's setting names, since removed
    got, seconds = cli(sys.executable, "ab", "--a-ref", "HEAD~1", "--b-ref", "HEAD", "--env-dir",
                       str(tmp_path / "envs"), cwd=repo, MPI4PY_LIBMPI=str(gone))
    assert got.returncode == 2 and len(errors(got)) == 1, said(got)
    assert f"its environment cannot load the MPI library {gone}: RuntimeError: cannot load MPI library" \
        in errors(got)[0] and errors(got)[0].endswith("name the library its ranks should load with "
                                                      "MPI4PY_LIBMPI=/path/to/libmpi.so"), said(got)
    assert "ref 'HEAD~1'" in errors(got)[0] and seconds < SECONDS, (said(got), seconds)


def test_a_libmpi_reached_through_a_symlink_outside_the_venv_is_the_one_a_commit_env_loads(tmp_path):
    libmpi = envs.loaded_libmpi()
    if libmpi is None:
        pytest.skip("this environment's mpi4py loads no MPI library")
    # The user's venv: this environment's packages, and its MPI as a symlink in the venv's own lib
    # (where mpi4py looks first) to a library outside the venv, as a site's MPI is reached.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-P", "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                             check=True).stdout.strip()
    Path(purelib, "site.pth").write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in envs.site_dirs()))
    for entry in Path(libmpi).parent.iterdir():  # the library and what its $ORIGIN run path finds
        if not (venv / "lib" / entry.name).exists():
            (venv / "lib" / entry.name).symlink_to(entry)
    repo = tinyproj_repo(tmp_path / "tinyproj")
    env = {k: v for k, v in os.environ.items() if k not in ("MPI4PY_LIBMPI", "PYTHONPATH")}
    where = ("import mpi4py; mpi4py.rc.initialize = False\nfrom mpi4py import MPI\n"
             "print(next(line.split()[-1] for line in open('/proc/self/maps') if '/libmpi' in line))")
    mine = subprocess.run([str(venv / "bin" / "python"), "-P", "-c", where], capture_output=True, text=True,
                          env=env, check=True).stdout.strip()
    assert Path(mine) == Path(libmpi).resolve() and not Path(mine).is_relative_to(venv)
    build = ("import sys; from perfsuite.launch import envs\n"
             "print(envs.build(sys.argv[1], 'HEAD', env_dir=sys.argv[2]).python)")
    made = subprocess.run([str(venv / "bin" / "python"), "-P", "-c", build, str(repo), str(tmp_path / "envs")],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    theirs = subprocess.run([made.stdout.strip().splitlines()[-1], "-P", "-c", where], capture_output=True,
                            text=True, env=env, check=True).stdout.strip()
    assert theirs == mine


def test_a_project_in_a_subfolder_of_its_repository_builds_from_there(tmp_path, monkeypatch):
    repo = tmp_path / "mono"
    repo.mkdir()
    (repo / "README.md").write_text("a monorepo\n")
    shutil.copytree(TEMPLATE, repo / "train", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    assert envs.project_dir(repo, where=repo / "train" / "tinyproj") == "train"
    assert envs.project_dir(repo, where=repo) == "" and envs.project_dir(repo, repo / "train") == "train"
    with pytest.raises(ConfigError, match="--project-dir .* is not inside the repository"):
        envs.project_dir(repo, tmp_path)
    built = envs.build(repo, "HEAD", env_dir=tmp_path / "envs", project="train")
    stamp = json.loads((Path(built.path) / envs.STAMP).read_text())
    assert (stamp["dist"], stamp["project"]) == ("tinyproj", "train")
    where = subprocess.run([built.python, "-P", "-c", "import tinyproj; print(tinyproj.__file__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(built.path), where
    # From the repository's top, where no project is, the one line says how to name it.
    got, seconds = cli(sys.executable, "ab", "--a-ref", "HEAD", "--env-dir", str(tmp_path / "envs"), cwd=repo)
    assert got.returncode == 2 and len(errors(got)) == 1 and "--project-dir" in errors(got)[0], said(got)


def test_commit_environments_live_in_the_users_cache_a_folder_per_repository(tmp_path, monkeypatch):
    monkeypatch.delenv(envs.ENV_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    one, two = envs.default_env_dir(tmp_path / "a" / "proj"), envs.default_env_dir(tmp_path / "b" / "proj")
    assert one.parent == two.parent == tmp_path / "cache" / "perfsuite" / "envs" and one != two
    assert one.name.startswith("proj-") and envs.default_env_dir(tmp_path / "a" / "proj") == one
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert envs.default_env_dir(tmp_path).is_relative_to(Path.home() / ".cache" / "perfsuite" / "envs")
    monkeypatch.setenv(envs.ENV_DIR_ENV, str(tmp_path / "mine"))
    assert envs.default_env_dir(tmp_path) == tmp_path / "mine"


def _sample(case: Case, value: float) -> Sample:
    return Sample(case, {"step_us": Metric("step_us", value, "us", higher_is_better=False)})


def test_new_cases_ride_in_bs_worlds_and_are_shown_never_judged():
    cases = [Case("mine", "mpi", 2, variant=f"rows={r}") for r in (32, 64, 128)]
    cfg = ab.ABConfig(ab.Arm("A", "mpi"), ab.Arm("B", "mpi"), tuple(cases), tuple(cases), max_pairs=10, seed=1,
                      judged=("step_us",))
    split = ab.split_declared(cfg, lambda c: c.variant != "rows=128", lambda c: c.variant != "rows=32")
    assert [c.variant for c in split.cases_a] == ["rows=64"] and [c.variant for c in split.new] == ["rows=128"]
    assert [c.variant for c in split.missing] == ["rows=32"] and split.max_pairs == 10
    seen = []

    def runner(arm, run_cases):
        seen.append((arm.name, tuple(c.variant for c in run_cases)))
        return [_sample(c, 10.0 if arm.name == "A" else 10.0 * (1 + 0.001 * len(seen))) for c in run_cases]

    rep = ab.run(split, runner)
    assert set(seen) == {("A", ("rows=64",)), ("B", ("rows=64", "rows=128"))}
    assert [v.case for v in rep.verdicts] == [split.cases_a[0].name]
    d = rep.to_dict()
    assert d["new"] == [cases[2].name] and d["missing"] == [cases[0].name]
    assert d["values"][cases[2].name]["step_us"]["a"] == [] and len(d["values"][cases[2].name]["step_us"]["b"]) == rep.pairs
    text = ab.format_report(rep)
    assert f"{cases[2].name}" in text and "new (only B's tree declares it" in text and "missing (only A's" in text
    assert ab_status(rep, strict=False) in (0, 1) and ab_status(rep, strict=True) != 0
    only_new = ab.split_declared(cfg, lambda c: False, lambda c: True)
    assert only_new.cases_a == () and len(only_new.new) == 3 and only_new.max_pairs == ab.NEW_ONLY_PAIRS
    rep = ab.run(only_new, runner)
    assert rep.pairs == ab.NEW_ONLY_PAIRS and rep.verdicts == [] and (ab_status(rep, False), ab_status(rep, True)) == (0, 3)
    with pytest.raises(ConfigError, match="neither arm declares any of the 3 case"):
        ab.split_declared(cfg, lambda c: False, lambda c: False)
