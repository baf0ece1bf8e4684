"""Adding a benchmark is one new file plus its registration (docs/design.md): a toy benchmark
whose kernel sleeps a fixed time per iteration, written outside perfsuite, runs end to end
through the CLI and through pytest without any perfsuite module being edited, and the time the
harness reports is the time the kernel slept."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from perfsuite import bench
from perfsuite.bench.asv_view import metrics_for

SLEEP_US = 2000

TOY = f'''"""toy-sleep: every iteration sleeps {SLEEP_US} us; the harness must report that, not less."""
import time

import numpy as np

from perfsuite.bench import BenchmarkSpec, register
from perfsuite.records.model import Case, Metric, Sample

SLEEP_S = {SLEEP_US} / 1e6


def cases(sel):
    return [Case("toy-sleep", t, n, variant="sleep") for t in sel.transports for n in sel.world_sizes]


def run(ctx):
    iters = int(ctx.options.get("iters") or 20)
    for case in ctx.cases:
        times = np.empty(iters)
        for i in range(iters):
            ctx.comm.Barrier()
            t0 = time.perf_counter()
            ctx.fault("timed", case)
            time.sleep(SLEEP_S)
            times[i] = time.perf_counter() - t0
        gathered = ctx.comm.gather(times, root=0)
        if ctx.is_root:
            world = np.stack(gathered, axis=1).max(axis=1)  # per iteration, the slowest rank
            us = tuple(float(t) * 1e6 for t in world)
            ctx.emit(Sample(case, {{"sleep_us": Metric("sleep_us", float(np.median(us)), "us", False, us)}},
                            True, tuple(float(t) for t in world), {{"iters": iters}}).to_dict())
    return {{"sleep_s": SLEEP_S}}


register(BenchmarkSpec("toy-sleep", "sleeps a fixed time per iteration", kernel=__name__, cases=cases,
                       transport_set="allreduce"))
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy's one file, importable here and in every rank (PYTHONPATH), and registered."""
    (tmp_path / "toy_sleep.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    yield tmp_path
    bench.REGISTRY.pop("toy-sleep", None)
    sys.modules.pop("toy_sleep", None)


def test_a_registered_toy_gets_the_generic_table_and_asv_layout(toy):
    import toy_sleep  # noqa: F401  registers on import

    assert "toy-sleep" in bench.names()
    layout = bench.asv_layout("toy-sleep")
    assert layout.axes == ("transport", "world_size", "case", "straggler") and layout.module == "toy_sleep"
    from perfsuite.records.model import Case, Metric, Sample

    s = Sample(Case("toy-sleep", "mpi", 2, variant="sleep"), {"sleep_us": Metric("sleep_us", 2e3, "us", False)})
    (m,) = metrics_for(layout, s)
    assert (m.method, m.unit, m.scale) == ("track_sleep_us", "seconds", 1e-6)


@pytest.mark.world
def test_toy_runs_through_the_cli(toy, no_leftover_ranks):
    out = toy / "toy.json"
    env = {**os.environ, "PERFSUITE_BENCHMARKS": "toy_sleep", "CI": "true"}
    r = subprocess.run([sys.executable, "-m", "perfsuite.faces.cli", "run", "--benchmarks", "toy-sleep",
                        "--transports", "mpi", "--world-sizes", "2", "--iters", "20", "--json", str(out)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "toy-sleep[mpi-n2-sleep]: sleep_us=" in r.stdout  # the generic table: no table registered
    (result,) = json.loads(out.read_text())["results"]
    (sample,) = result["samples"]
    assert result["benchmark"] == "toy-sleep" and len(sample["times_s"]) == 20
    median = sample["metrics"]["sleep_us"]["value"]
    # sleep() never returns early, so less than the sleep is a harness that lost time. A busy
    # machine can delay a wake-up by milliseconds; 10x still tells an iteration from the whole
    # 20-iteration loop or the world's start, which a harness timing the wrong thing would report.
    assert SLEEP_US <= median < 10 * SLEEP_US, median
    r = subprocess.run([sys.executable, "-m", "perfsuite.faces.cli", "run", "--benchmarks", "toy-sleep,nope"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "benchmark 'nope' is unknown; choose from" in r.stderr
    assert "toy-sleep" in r.stderr


@pytest.mark.world
def test_toy_runs_through_pytest(toy, pytester, no_leftover_ranks):
    pytester.makeconftest("import toy_sleep  # noqa: F401  registers the toy benchmark\n")
    pytester.makepyfile(test_toy='''
import pytest

@pytest.mark.perf_benchmark("toy-sleep")
def test_toy(benchmark, perf_case, perf_measure):
    sample = perf_measure(benchmark)
    assert sample.case.benchmark == "toy-sleep"
''')
    out = pytester.path / "b.json"
    r = pytester.runpytest_subprocess("--benchmark-only", "--perf-transports", "mpi", "--perf-world-sizes", "2",
                                      "--perf-iters", "20", f"--benchmark-json={out}", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)
    (entry,) = json.loads(out.read_text())["benchmarks"]
    assert entry["name"] == "test_toy[mpi-n2-sleep]" and entry["stats"]["rounds"] == 20
    assert SLEEP_US <= entry["stats"]["median"] * 1e6 < 10 * SLEEP_US, entry["stats"]


def test_a_benchmark_module_that_cannot_be_imported_is_one_line(pytester, monkeypatch):
    monkeypatch.setenv("PERFSUITE_BENCHMARKS", "no_such_benchmark_module")
    r = subprocess.run([sys.executable, "-m", "perfsuite.faces.cli", "transports"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "perfsuite: error: PERFSUITE_BENCHMARKS names 'no_such_benchmark_module', which cannot be "
        "imported (No module named 'no_such_benchmark_module'); name importable modules or .py files, comma separated"]
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["ERROR: PERFSUITE_BENCHMARKS names 'no_such_benchmark_module'*"])
    assert "Traceback" not in r.stdout.str() + r.stderr.str()


def test_a_benchmark_measured_by_its_own_experiment_is_not_selected_case_by_case():
    from perfsuite import suite
    from perfsuite.records.errors import ConfigError

    assert "stalls" in bench.names(runnable=False) and "stalls" not in bench.names()
    with pytest.raises(ConfigError, match="'stalls' is not selected case by case.*perfsuite stalls"):
        suite.select_cases(bench.Selection("stalls", ("mpi",), (2,)))


def test_a_builtin_world_names_no_kernel_and_a_rank_finds_a_moved_one():
    """Arms of another perfsuite version run their own worker (``ab --a-ref``, images, venvs):
    a built-in benchmark's job names no kernel, so such a rank runs its own registry's wherever
    that version keeps it; a job from a launcher that still names a kernel by its name before
    issue 53's move is run with the kernel where it is now."""
    from perfsuite import worker
    from perfsuite.kernels.collectives import allreduce as kernel
    from perfsuite.records.model import Case
    from perfsuite.store import formats

    (spec,) = bench.plan([Case("allreduce", "mpi", 2, size_bytes=4)])
    assert spec.kernel == "" and formats.job(spec, "f", "o", 0.0)["kernel"] == ""
    assert worker._kernel({"benchmark": "allreduce", "kernel": ""}) is kernel
    assert worker._kernel({"benchmark": "allreduce", "kernel": "perfsuite.kernels.allreduce"}) is kernel
    for old, new in worker.MOVED_KERNELS.items():
        assert importlib.util.find_spec(new) is not None, (old, new)
