"""An A/B arm runs its own code: ranks start with -P, rank 0 records what it imported, and two
Pythons whose ranks loaded the same files are refused as two versions."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import small_world

import perfsuite
from perfsuite.faces.cli import main
from perfsuite.records.errors import ConfigError
from perfsuite.experiments import ab, provenance
from perfsuite.store.fingerprint import IMPORTS_KEY, imported
from perfsuite.launch import envs
from perfsuite.records.model import Case, Metric, Sample

ROOT = Path(__file__).resolve().parents[1]
CASE = Case("allreduce", "mpi", 2, size_bytes=4)
WORLD = small_world(warmup=2)


def files(perfsuite_file: str, numpy_file: str = "/venv/numpy/__init__.py") -> dict:
    return {"perfsuite": {"version": "0.1.0", "file": perfsuite_file},
            "numpy": {"version": "2.0", "file": numpy_file},
            "mpi": {"version": "MPICH Version: 4.2", "file": "/venv/lib/libmpi.so.12"}}


def test_a_rank_records_the_files_it_imported_and_imports_nothing_new():
    mpi = SimpleNamespace(Get_library_version=lambda: "Open MPI v5.0.3, package: Open MPI\n more\0")
    fake = {"perfsuite": SimpleNamespace(__version__="9.9", __file__="/x/perfsuite/__init__.py"),
            "numpy": SimpleNamespace(__file__="/x/numpy/__init__.py"), "mpi4py.MPI": mpi}
    assert imported(fake, libmpi=["/x/lib/libmpi.so.40"]) == {
        "perfsuite": {"version": "9.9", "file": "/x/perfsuite/__init__.py"},
        "numpy": {"version": None, "file": "/x/numpy/__init__.py"},
        "mpi": {"version": "Open MPI v5.0.3, package: Open MPI", "file": "/x/lib/libmpi.so.40"}}
    before = set(sys.modules)
    here = imported()
    assert here["perfsuite"]["file"] == perfsuite.__file__
    assert set(sys.modules) == before and ("tensorflow" in here) == ("tensorflow" in before)


def test_two_pythons_that_loaded_the_same_files_are_refused_and_real_differences_are_not():
    a, b = ab.Arm("A", "mpi", python="/v1/bin/python"), ab.Arm("B", "mpi", python="/v2/bin/python")
    same = files("/src/perfsuite/__init__.py")
    why = provenance.same_code(a, b, same, same)
    assert why and "/src/perfsuite/__init__.py" in why and "MPI library, numpy" in why
    assert "/v1/bin/python, /v2/bin/python" in why and "not pip install -e" in why
    # Launcher arguments do not change what a rank imports: still one version.
    assert provenance.same_code(a, ab.Arm("B", "mpi", python="/v2/bin/python", launcher_args=("-v",)), same, same)
    assert provenance.same_code(a, b, same, files("/other/perfsuite/__init__.py")) is None
    assert provenance.same_code(a, b, same, files("/src/perfsuite/__init__.py", "/v2/numpy/__init__.py")) is None
    # Arms that do not claim two venvs, or that differ in what they compare, share code freely.
    assert provenance.same_code(ab.Arm("A", "mpi"), ab.Arm("B", "mpi", env=(("X", "1"),)), same, same) is None
    assert provenance.same_code(a, ab.Arm("B", "ring", python="/v2/bin/python"), same, same) is None
    assert provenance.same_code(a, a, same, same) is None
    assert provenance.same_code(a, b, {}, same) is None  # a perfsuite that records nothing


def test_two_commits_that_ran_the_same_files_are_told_to_name_the_users_benchmark():
    """ab --a-ref/--b-ref in a user's repository without --benchmarks ran perfsuite's allreduce,
    which imports nothing of the user's: the line says to name their benchmark, not to reinstall."""
    a = ab.Arm("A", "mpi", python="/e1/bin/python", ref="HEAD~1 (abc1234567)")
    b = ab.Arm("B", "mpi", python="/e2/bin/python", ref="HEAD (def7654321)")
    same = files("/venv/perfsuite/__init__.py")
    why = provenance.same_code(a, b, same, same)
    assert why.startswith("arms A (commit HEAD~1 (abc1234567)) and B (commit HEAD (def7654321)) loaded the same files")
    assert why.endswith("name your benchmark with --benchmarks (its name, module or .py file)")
    assert "pip install -e" not in why


def runner_loading(by_arm: dict):
    def runner(arm, cases):
        value = 3.0 if arm.name == "A" else 3.3
        return [Sample(c, {"latency_us": Metric("latency_us", value, "us", False)},
                       info={"contention": 0.0, IMPORTS_KEY: by_arm[arm.name]}) for c in cases]
    return runner


def test_the_ab_loop_refuses_one_code_at_its_first_pair_and_records_each_arms_code():
    a, b = ab.Arm("A", "mpi", python="/v1/bin/python"), ab.Arm("B", "mpi", python="/v2/bin/python")
    cfg = ab.ABConfig(a, b, (CASE,), (CASE,), max_pairs=4, seed=0)
    calls = []
    same = runner_loading({"A": files("/src/perfsuite/__init__.py"), "B": files("/src/perfsuite/__init__.py")})
    with pytest.raises(ConfigError, match="loaded the same files"):
        ab.run(cfg, lambda arm, cases: calls.append(arm.name) or same(arm, cases))
    assert len(calls) == 2  # refused after one world of each arm, before a second pair
    other = files("/other/perfsuite/__init__.py")
    rep = ab.run(cfg, runner_loading({"A": files("/src/perfsuite/__init__.py"), "B": other}))
    assert rep.to_dict()["imports"]["b"] == other
    assert rep.to_dict()["imports"]["a"]["perfsuite"]["file"] == "/src/perfsuite/__init__.py"


def test_an_arms_python_is_probed_as_its_ranks_start_without_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "only_here_mod").mkdir()
    (tmp_path / "only_here_mod" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="no module only_here_mod"):
        envs.check_python(sys.executable, ("only_here_mod",))


def wrapper(path: Path, pythonpath: Path | None = None) -> str:
    env = f"PYTHONPATH={pythonpath} " if pythonpath else ""
    path.write_text(f'#!/bin/sh\n{env}exec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return str(path)


def perfsuite_file(python: str, *flags: str, cwd: Path) -> str:
    return subprocess.run([python, *flags, "-c", "import perfsuite; print(perfsuite.__file__)"], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.world
def test_arm_b_runs_its_own_perfsuite_from_inside_a_checkout(tmp_path, monkeypatch, no_leftover_ranks):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "perfsuite", copy / "perfsuite", ignore=shutil.ignore_patterns("__pycache__"))
    init = copy / "perfsuite" / "__init__.py"
    init.write_text(init.read_text() + '\n__version__ = "0.0.0+arm-b"\n')
    b_python = wrapper(tmp_path / "b-python", pythonpath=copy)
    own = perfsuite_file(sys.executable, "-P", cwd=tmp_path)  # arm A's venv's own perfsuite
    # Why the ranks need -P: from the checkout's root, the checkout shadows arm B's PYTHONPATH.
    assert perfsuite_file(b_python, cwd=ROOT) == str(ROOT / "perfsuite" / "__init__.py")
    assert perfsuite_file(b_python, "-P", cwd=ROOT) == str(init)
    monkeypatch.chdir(ROOT)
    out = tmp_path / "ab.json"
    assert main(["ab", *WORLD, "--max-pairs", "2", "--b-python", b_python, "--json", str(out)]) in (0, 1)
    imports = json.loads(out.read_text())["imports"]
    assert imports["a"]["perfsuite"] == {"version": perfsuite.__version__, "file": own}
    assert imports["b"]["perfsuite"] == {"version": "0.0.0+arm-b", "file": str(init)}
    assert imports["a"]["mpi4py"] == imports["b"]["mpi4py"] and imports["a"]["mpi"]["version"]


@pytest.mark.world
def test_two_pythons_of_one_tree_are_refused_in_one_line(tmp_path, monkeypatch, capsys, no_leftover_ranks):
    a_python, b_python = wrapper(tmp_path / "a-python"), wrapper(tmp_path / "b-python")
    monkeypatch.chdir(ROOT)
    assert main(["ab", *WORLD, "--max-pairs", "2", "--a-python", a_python, "--b-python", b_python]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    own = perfsuite_file(sys.executable, "-P", cwd=tmp_path)
    assert len(err) == 1 and f"loaded the same files (perfsuite from {own}" in err[0], err
