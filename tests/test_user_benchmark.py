"""A user's own distributed benchmark in ten lines (docs/your-code.md): the page's example runs
as copied, under pytest with 2 ranks, and its pytest-benchmark entries carry every rank's times
and the straggler field; the same file runs under ``perfsuite run``; a wrong result fails its
world (exit 4); a bad declaration is one line."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfsuite import bench
from perfsuite.records import userbench
from perfsuite.records.errors import ConfigError
from perfsuite.kernels.user import step as user
from perfsuite.records.model import Case

from conftest import SWITCHES, perfsuite, said

DOC = Path(__file__).resolve().parents[1] / "docs" / "your-code.md"


def first_example() -> str:
    """The first Python block of docs/your-code.md, as a user copies it."""
    return re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)


def test_the_example_is_ten_lines_or_fewer():
    lines = [line for line in first_example().splitlines() if line.strip()]
    assert len(lines) <= 10, lines


def pytest_run(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    clean = {k: v for k, v in os.environ.items() if k not in SWITCHES and not k.startswith("MPIR_CVAR_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=folder,
                          env={**clean, **env}, capture_output=True, text=True, timeout=600)


@pytest.mark.world
def test_the_docs_example_runs_under_pytest_with_every_ranks_times_and_the_straggler_field(
        tmp_path, no_leftover_ranks):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "test_mine.py").write_text(first_example())
    r = pytest_run(tmp_path, "benchmarks/test_mine.py", "--benchmark-only", "--benchmark-json=out.json")
    assert r.returncode == 0, said(r)
    assert "2 passed" in r.stdout, said(r)
    entries = json.loads((tmp_path / "out.json").read_text())["benchmarks"]
    assert sorted(e["name"] for e in entries) == ["test_allreduce_sum[mpi-n2-n=1000000]",
                                                 "test_allreduce_sum[mpi-n2-n=1000]"]
    for e in entries:
        info = e["extra_info"]
        assert info["case"].startswith("allreduce_sum[mpi-n2-n=") and info["valid"] is True
        times = info["rank_times_us"]
        assert len(times) == 2 and len(times[0]) == len(times[1]) == info["iters"] >= 10
        assert "straggler" in info and info["straggler_measure"] == "arrival"
        assert info["params"]["n"] in (1000, 1000000)
        # pytest-benchmark's rows are the world's steps (the slowest rank of each), not a world start
        world = np.max(np.array(times), axis=0)
        assert e["stats"]["rounds"] == info["iters"]
        assert e["stats"]["median"] == pytest.approx(float(np.median(world)) / 1e6, rel=1e-3)
    big = next(e for e in entries if "1000000" in e["name"])["stats"]["median"]
    small = next(e for e in entries if e["name"].endswith("n=1000]"))["stats"]["median"]
    assert big > 10 * small  # a million doubles take longer to sum than a thousand


USER_FILE = '''
import numpy as np
from mpi4py import MPI
import perfsuite


@perfsuite.benchmark(world_sizes=[2], max_time=0.2)
def checked_sum(world):
    """Sums a vector over the world and checks the sum."""
    buf = np.full(1000, float(world.rank + 1))

    def step():
        buf[:] = world.rank + 1
        world.comm.Allreduce(MPI.IN_PLACE, buf)

    return step, lambda: bool(np.all(buf == world.world_size * (world.world_size + 1) / 2))
'''


@pytest.mark.world
def test_perfsuite_run_takes_the_file_and_a_wrong_result_fails_the_world_with_exit_4(tmp_path, no_leftover_ranks):
    (tmp_path / "mine.py").write_text(USER_FILE)
    r = perfsuite("run", "--benchmarks", "mine.py", "--json", "r.json", cwd=tmp_path)
    assert r.returncode == 0, said(r)
    assert re.search(r"^# checked_sum  transport=mpi  world_size=2  step mine.checked_sum", r.stdout, re.M), said(r)
    sample = json.loads((tmp_path / "r.json").read_text())["results"][0]["samples"][0]
    assert sample["valid"] and sample["info"]["iters"] >= 10
    wrong = perfsuite("run", "--benchmarks", "mine.py", cwd=tmp_path, PERFSUITE_TEST_FAULT="corrupt@1")
    assert wrong.returncode == 4, said(wrong)
    assert "INVALID: checked_sum[mpi-n2]" in wrong.stdout + wrong.stderr, said(wrong)
    assert "rank" in wrong.stdout + wrong.stderr


def test_the_step_check_and_the_per_rank_summary_are_pure():
    case = Case("mine", "mpi", 2, variant="n=3")
    times = np.array([[1e-3, 2e-3], [1e-3, 3e-3], [2e-3, 2e-3]])
    s = user.summarize(case, {"n": 3}, times, 2, {"contention": 0.0}, ["a", "b"])
    assert s.valid and s.times_s == (2e-3, 3e-3, 2e-3)
    assert s.metrics[userbench.METRIC].value == pytest.approx(2000.0)
    assert s.info["rank_times_us"] == [[1000.0, 1000.0, 2000.0], [2000.0, 3000.0, 2000.0]]
    assert s.info["rank_median_us"] == pytest.approx([1000.0, 2000.0])
    assert s.info["nodes"] == ["a", "b"] and "rank_blocks" in s.info
    bad = user.summarize(case, {"n": 3}, times, 2, {}, ["a", "b"], invalid={1: "the check returned False"})
    assert not bad.valid and bad.info["invalid_ranks"] == [1]
    assert bad.info["invalid_reason"] == "the check returned False"


def step_at_module_level(world, n):
    return None


@pytest.fixture
def declaring():
    """Declarations made by the test leave no benchmark behind in the registry."""
    bench.all_specs()
    saved = dict(userbench.DECLARED), dict(bench.REGISTRY), dict(bench._users)
    yield
    for live, kept in zip((userbench.DECLARED, bench.REGISTRY, bench._users), saved):
        live.clear()
        live.update(kept)


@pytest.mark.parametrize("axes, says", [
    ({"world_sizes": [0]}, "world size 0 must be a whole number >= 1"),
    ({"world_sizes": []}, "world size is empty"),
    ({"transports": ["ring"]}, "transport 'ring' is not one a user benchmark runs over"),
    ({"device": "tpu"}, "device 'tpu' must be one of cpu, cuda"),
    ({"max_time": 0}, "max_time 0 must be seconds > 0"),
    ({"params": {"world": [1]}}, "parameter 'world' must be a Python name other than 'world'"),
    ({"params": {"n": []}}, "parameter 'n' has no values"),
    ({"params": {"n": ["a b"]}}, "parameter value 'a b' cannot name a case"),
    ({"params": {"m": [1]}}, "cannot be called as step_at_module_level(world, m=...)"),
])
def test_a_bad_declaration_is_one_line_naming_the_value(axes, says, declaring):
    with pytest.raises(ConfigError) as e:
        userbench.benchmark(step_at_module_level, **{"params": {"n": [1]}, **axes})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_local_function_or_a_builtin_name_is_refused(declaring):
    def local(world):
        return None

    with pytest.raises(ConfigError, match="module-level function"):
        userbench.benchmark(local)
    userbench.benchmark(step_at_module_level, name="allreduce", params={"n": [1]})
    with pytest.raises(ConfigError, match="takes the name of a built-in benchmark"):
        bench.get("allreduce")


def test_cases_come_from_the_declaration_and_the_users_world_sizes_replace_them(declaring):
    userbench.benchmark(step_at_module_level, name="ub-cases", world_sizes=[2, 4],
                        transports=["mpi", "torch-gloo"], params={"n": [1, 2]})
    spec = bench.get("ub-cases")
    assert spec.kernel == "perfsuite.kernels.user.step" and spec.judged == (userbench.METRIC, "peak_mem_MiB")
    sel = bench.Selection("ub-cases", transports=("mpi",), world_sizes=(2,))
    assert [c.id for c in spec.cases(sel)] == ["mpi-n2-n=1", "mpi-n2-n=2", "mpi-n4-n=1", "mpi-n4-n=2"]
    given = bench.Selection("ub-cases", transports=("mpi", "torch-gloo"), world_sizes=(3,), world_sizes_given=True)
    assert [c.id for c in spec.cases(given)] == ["mpi-n3-n=1", "mpi-n3-n=2", "torch-gloo-n3-n=1",
                                                "torch-gloo-n3-n=2"]
    [world] = bench.plan(spec.cases(sel)[:1])
    assert world.options["user_benchmark"]["qualname"] == "step_at_module_level"


TORCH_FILE = '''
import perfsuite


@perfsuite.benchmark(world_sizes=[2], transports=["torch-gloo"], max_time=0.2, params={"n": [64]})
def torch_sum(world, n):
    import torch

    t = torch.ones(n)

    def step():
        t.fill_(1.0)
        world.dist.all_reduce(t)

    return step, lambda: bool((t == world.world_size).all())
'''


@pytest.mark.world
@pytest.mark.torch
def test_a_torch_transport_hands_the_step_a_started_group(tmp_path, no_leftover_ranks):
    pytest.importorskip("torch")
    (tmp_path / "tmine.py").write_text(TORCH_FILE)
    r = perfsuite("run", "--benchmarks", "tmine.py", "--json", "r.json", cwd=tmp_path)
    assert r.returncode == 0, said(r)
    result = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert result["transport"] == "torch-gloo" and result["extra"]["transport_facts"]["torch_backend"] == "gloo"
    assert result["samples"][0]["valid"] and result["samples"][0]["case"]["variant"] == "n=64"


def test_a_commits_environment_runs_its_own_benchmark_file_never_the_working_trees(tmp_path, monkeypatch):
    mine = tmp_path / "tree" / "bench_here.py"
    mine.parent.mkdir()
    mine.write_text("X = 1\n")
    env = tmp_path / "env"
    (env / "src").mkdir(parents=True)
    (env / user.COMMIT_STAMP).write_text("{}")
    monkeypatch.setattr(sys, "prefix", str(env))
    source = {"name": "b", "module": "bench_here_not_importable", "qualname": "X", "file": str(mine),
              "relfile": "bench_here.py"}
    with pytest.raises(ConfigError, match="this commit's tree .* has no bench_here.py"):
        user.find(source)  # the working tree's file is there, and still not taken
    (env / "src" / "bench_here.py").write_text("X = 2\n")
    assert user.find(source) == 2


def test_transports_the_step_was_not_declared_for_are_one_line_not_a_silent_empty_run(tmp_path):
    (tmp_path / "mine.py").write_text(USER_FILE)
    r = perfsuite("run", "--benchmarks", "mine.py", "--transports", "torch-gloo", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "perfsuite run: error: checked_sum has no case on the transports torch-gloo: it declares mpi "
        "(@perfsuite.benchmark(transports=...)); name one of them, e.g. --transports mpi"], said(r)
