"""asv history: the recorder writes through asv's own API, several runners merge, the lock keeps
two recorders apart, ``perfsuite history`` and asv's own regressions page flag a busbw drop, and
the published page renders in headless Chromium."""
from __future__ import annotations

import functools
import http.server
import inspect
import itertools
import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import ALLREDUCE_BENCH
from perfsuite import bench
from perfsuite.faces import cli
from perfsuite.verdicts import history, rounds, stragglers
from perfsuite.records import stats
from perfsuite.bench import asv_view as layout
from perfsuite.asv import record
from perfsuite.faces import asv_offline as offline
from perfsuite.faces import asv_run as asv_bench
from perfsuite.asv.project import RecordTarget
from perfsuite.records.errors import ConfigError
from perfsuite.kernels.collectives.allreduce import busbw_factor, summarize
from perfsuite.launch.commands import run_command
from perfsuite.store.formats import WorldOutcome
from perfsuite.records.model import Case, Metric, Result, round_values

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
ENTRY = "allreduce.Allreduce.track_inv_busbw('mpi', 2, '1MiB', 'float32', 'python', 'none', 'sum')"


# --- helpers ------------------------------------------------------------------------------

def git(repo: Path, *args: str, env: dict | None = None) -> str:
    return run_command(["git", "-C", str(repo), *args], timeout=30, env=env).stdout.strip()


def make_project(tmp: Path, n_commits: int) -> tuple[str, list[str]]:
    """A git repo with ``n_commits`` empty commits (a second apart) and an asv.conf.json whose
    results and html live in ``tmp``; the benchmarks are this repository's."""
    repo = tmp / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commits = []
    for i in range(n_commits):
        when = f"2024-01-01T00:00:{i:02d}"
        git(repo, "-c", "user.email=ci@example.org", "-c", "user.name=ci", "commit", "-q",
            "--allow-empty", "-m", f"c{i}",
            env={"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when})
        commits.append(git(repo, "rev-parse", "HEAD"))
    conf = {"version": 1, "project": "perfsuite-test", "repo": ".", "dvcs": "git",
            "branches": ["main"], "environment_type": "existing",
            "benchmark_dir": str(REPO / "benchmarks" / "asv_bench"),
            "results_dir": str(tmp / "results"), "html_dir": str(tmp / "html")}
    path = repo / "asv.conf.json"
    path.write_text(json.dumps(conf))
    return str(path), commits


def synthetic(case: Case, busbw_gbps: float, rng: np.random.Generator, iters: int = 40,
              noise: float = 0.01):
    """A Sample made by the real kernel summary from per-iteration times of a world whose
    busbw is ``busbw_gbps`` with ``noise`` relative jitter."""
    t = case.size_bytes * busbw_factor(case.world_size) / (busbw_gbps * 1e9)
    times = t * (1 + noise * rng.standard_normal((iters, case.world_size)))
    return summarize(case, np.abs(times), True, iters, 0, False)


def mpi_case(size: int = MIB, transport: str = "mpi") -> Case:
    return Case("allreduce", transport, 2, size)


def asv(*args: str) -> str:
    return run_command([sys.executable, "-m", "asv", *args], timeout=300).stdout


def publish(conf: str) -> Path:
    asv("publish", "--config", conf)
    return Path(json.loads(Path(conf).read_text())["html_dir"])


# --- pure pieces -------------------------------------------------------------------------

def test_direction_every_number_is_lower_is_better():
    m = bench.asv_layout("allreduce").metric("track_inv_busbw")
    assert m.transform([10.0, 0.0, -1.0, float("nan"), 8.5]) == [0.1, 1 / 8.5]
    assert m.metric_change((1 / 8.5) / (1 / 10.0)) == pytest.approx(-0.15)
    lat = bench.asv_layout("allreduce").metric("track_latency")
    assert lat.transform([57.0]) == [pytest.approx(57e-6)] and lat.unit == "seconds"
    g = layout.generic_metric(Metric("img_per_s", 100.0, "img/s", True))
    assert (g.method, g.unit, g.inverse) == ("track_inv_img_per_s", "s/img (1/img_per_s)", True)
    assert layout.generic_metric(Metric("epoch_ms", 3.0, "ms", False)).scale == 1e-3
    assert layout.inverse_unit("GB/s") == "s/GB" and layout.inverse_unit("x") == "1/(x)"


def test_thin_keeps_min_max_and_median():
    values = list(np.random.default_rng(0).permutation(1001).astype(float))
    kept = stats.thin(values, cap=101)
    assert len(kept) == 101 and kept[0] == 0 and kept[-1] == 1000 and kept[50] == 500
    assert stats.thin([3.0, 1.0], cap=5) == [3.0, 1.0]


def test_recorder_and_asv_discovery_describe_the_same_benchmarks():
    """benchmarks/asv_bench (what `asv run` discovers) and the recorder's own descriptions agree
    on everything publish keys on, for the same case matrix (pins asv_runner's repr ids)."""
    from asv_runner._aux import update_sys_path
    from asv_runner.discovery import disc_benchmarks

    root = str(REPO / "benchmarks" / "asv_bench")
    update_sys_path(root)
    found = {b.name: b for b in disc_benchmarks(root)}
    layout = bench.asv_layout("allreduce")
    cases = asv_bench.bench_cases("allreduce", {})
    ids = [[repr(v) for v in axis] for axis in layout.params(cases)]
    for m in layout.metrics:
        ours = record.describe(layout, m, ids)
        theirs = found[layout.name(m)]
        for key in ("name", "type", "unit", "version", "param_names", "params"):
            assert ours[key] == getattr(theirs, key), key
        # asv calls setup and the method with one argument per axis, after setup_cache's cache
        for method in (theirs.func, theirs.func.__self__.setup):
            assert tuple(inspect.signature(method).parameters)[1:] == layout.axes, method
    combos = set(itertools.product(*ids))
    assert all(set(layout.all_ids(c)) <= combos for c in cases)
    # A measured mpi case is recorded under the loop that timed it, which asv's params hold.
    mpi = next(c for c in cases if c.transport == "mpi")
    assert layout.param_ids(mpi, {"timing": "native"}) in combos
    assert layout.param_ids(mpi, {})[-3:] == ("'python'", "'none'", "'sum'")  # before timings, stragglers, ops


def test_asv_benchmarks_follow_the_perfsuite_options_from_the_environment():
    env = {"PERFSUITE_ASV_SIZES": "4,1MiB", "PERFSUITE_ASV_TRANSPORTS": "mpi",
           "PERFSUITE_ASV_WORLD_SIZES": "1,2"}
    cases = asv_bench.bench_cases("allreduce", env)
    assert sorted(c.id for c in cases) == ["mpi-n1-1MiB", "mpi-n1-4B", "mpi-n2-1MiB", "mpi-n2-4B"]
    with pytest.raises(ConfigError, match="'lots'"):
        asv_bench.bench_cases("allreduce", {"PERFSUITE_ASV_SIZES": "lots"})


def test_history_steps_on_pure_series():
    rng = np.random.default_rng(7)
    commits = [f"{i:02x}" + "c" * 38 for i in range(20)]

    def series(factor_from_12: float) -> list[history.Point]:
        return [history.Point(c, 0.1 * (factor_from_12 if i >= 12 else 1) * (1 + 0.01 * rng.standard_normal()))
                for i, c in enumerate(commits)]

    (step,) = history.find_steps(series(1 / 0.85))
    assert (step.before, step.after, step.kind, step.active) == (commits[11], commits[12], "regression", True)
    assert step.change == pytest.approx(1 / 0.85 - 1, abs=0.03)
    (better,) = history.find_steps(series(0.8))
    assert better.kind == "improvement" and not better.active
    assert history.find_steps(series(1.0)) == []
    assert history.threshold_for("a.b(x)", {"a\\.": 0.1, ".*": 0.05}) == 0.1
    assert history.resolve_since(commits, commits[3][:6]) == commits[3]
    with pytest.raises(ValueError, match="matches several"):
        history.resolve_since(commits, "0")


def test_lock_makes_a_second_recorder_wait_then_give_up(tmp_path):
    now = [0.0]
    with record.results_lock(str(tmp_path)):
        with pytest.raises(record.RecordError, match="stayed locked for 2 s by pid"):
            with record.results_lock(str(tmp_path), timeout=2, clock=lambda: now[0],
                                         sleep=lambda s: now.__setitem__(0, now[0] + 1)):
                pass
    with record.results_lock(str(tmp_path), timeout=0):  # released: free again
        pass


# --- recorder against real asv files ---------------------------------------------------------

@pytest.fixture(scope="module")
def histories(tmp_path_factory):
    """20 commits recorded through the recorder for two machines: 'drop-box' loses 15% busbw
    at commit 12, 'clean-box' does not; 1% noise on both. Published with asv's own publish."""
    tmp = tmp_path_factory.mktemp("hist")
    conf, commits = make_project(tmp, 20)
    rng = np.random.default_rng(2024)
    for i, c in enumerate(commits):
        for machine, drop in (("drop-box", 0.15), ("clean-box", 0.0)):
            level = 10.0 * (1 - drop if i >= 12 else 1) * (1 + 0.01 * rng.standard_normal())
            sample = synthetic(mpi_case(), level, rng)
            record.record([sample], RecordTarget(conf, machine, c), bench.asv_layout, fp={})
    return conf, commits, publish(conf)


def test_history_flags_the_drop_at_its_commit_range(histories, capsys):
    conf, commits, _ = histories
    rc = cli.main(["history", "--asv-config", conf, "--asv-machine", "drop-box",
                   "-k", "inv_busbw", "--compare"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert f"{ENTRY} on drop-box:" in out
    line = next(x for x in out.splitlines() if "REGRESSION" in x)
    assert f"commits {commits[11][:8]}..{commits[12][:8]}" in line and "[active]" in line
    assert "busbw_GBps -1" in line  # about -15% busbw, said in the metric's own terms
    # the regression started at commit 12: new after commit 11, not after commit 12
    assert cli.main(["history", "--asv-config", conf, "--asv-machine", "drop-box",
                     "--since", commits[11][:10], "--compare"]) == 1
    assert cli.main(["history", "--asv-config", conf, "--asv-machine", "drop-box",
                     "--since", commits[12], "--compare"]) == 0


def test_clean_history_is_not_flagged(histories, capsys):
    conf, _, _ = histories
    rc = cli.main(["history", "--asv-config", conf, "--asv-machine", "clean-box", "--compare"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "REGRESSION" not in out and "# 0 regressions" in out


def test_history_k_is_pytests_expression_and_a_gate_that_compared_nothing_is_3(histories, capsys):
    """-k "inv_busbw and mpi and not 64MiB" keeps drop-box's mpi series (and its regression);
    "not mpi" keeps none: nothing compared, which is no pass under --strict (3), as in every
    command that judges; without --compare history only lists (0)."""
    conf, _, _ = histories
    base = ["history", "--asv-config", conf, "--asv-machine", "drop-box"]
    assert cli.main([*base, "-k", "inv_busbw and mpi and not 64MiB", "--compare"]) == 1
    assert f"{ENTRY} on drop-box:" in capsys.readouterr().out
    assert cli.main([*base, "-k", "inv_busbw and not mpi", "--compare"]) == 0
    assert "# history: 0 series" in capsys.readouterr().out
    assert cli.main([*base, "-k", "inv_busbw and not mpi", "--compare", "--strict"]) == 3
    assert "NOTHING COMPARED: no series in the asv history matches -k" in capsys.readouterr().out
    assert cli.main([*base, "-k", "inv_busbw"]) == 0  # a regression listed, not judged


def test_asv_regressions_page_lists_the_drop(histories):
    conf, commits, html = histories
    regressions = json.loads((html / "regressions.json").read_text())["regressions"]
    index = json.loads((html / "index.json").read_text())
    to_hash = {int(k): v for k, v in index["revision_to_hash"].items()}
    hits = [r for r in regressions if r[0] == ENTRY]
    on_drop = [r for r in hits if "machine-drop-box" in r[1]]
    assert on_drop and not [r for r in hits if "machine-clean-box" in r[1]], hits
    (jump,) = on_drop[0][6]
    assert to_hash[jump[1]] == commits[12]  # asv's range ends at the first slower commit
    assert jump[0] is None or to_hash[jump[0]] == commits[11]
    assert jump[3] / jump[2] == pytest.approx(1 / 0.85, rel=0.04)


def test_the_asv_history_is_where_verdicts_read_a_machines_drift(histories):
    """Each recorded commit is one earlier run: ``drift_history`` hands verdicts a case's level
    per commit, so a one-session baseline on 'clean-box' (1% between runs) judges with that
    drift instead of deciding only beyond the x4 span, and a 15% drop is decided."""
    from perfsuite.verdicts import regress
    from perfsuite.asv.read import drift_history

    conf, _, _ = histories
    levels = drift_history(RecordTarget(conf, "clean-box"), bench.asv_layout)
    rng = np.random.default_rng(7)
    sample = rounds.pool_rounds([synthetic(mpi_case(), 10.0 * (1 + 0.01 * rng.standard_normal()), rng)
                                 for _ in range(6)])
    got = levels(sample, "busbw_GBps")
    assert len(got) == 20 and all(9.0 < x < 11.0 for x in got)  # GB/s, from asv's 1/busbw
    base = regress.baseline_from_sample(sample, "busbw_GBps", session="today")
    slower = rounds.pool_rounds([synthetic(mpi_case(), 8.5 * (1 + 0.01 * rng.standard_normal()), rng)
                                 for _ in range(6)])
    alone = regress.verdict(mpi_case().name, "busbw_GBps", slower, base)
    [told] = regress.compare([slower], {(mpi_case().name, "busbw_GBps"): base}, history=levels,
                             judged=lambda s: ["busbw_GBps"])
    assert alone.facts["drift_from"] == "span" and alone.status == "unknown"
    assert told.facts["drift_from"] == "asv" and told.facts["df"] == 20
    assert told.status == "regression"
    assert drift_history(RecordTarget(conf, "nobody-here"), bench.asv_layout)(sample, "busbw_GBps") == []


def test_runners_merge_and_concurrent_recorders_lose_nothing(tmp_path):
    conf, (commit,) = make_project(tmp_path, 1)
    rng = np.random.default_rng(1)
    first = [synthetic(mpi_case(4), 1e-3, rng, iters=30), synthetic(mpi_case(), 5.0, rng, iters=30)]
    record.record(first, RecordTarget(conf, "box", commit), bench.asv_layout, fp={})
    # two runners at once: one re-measures mpi 1MiB, the other measures ring
    again = [synthetic(mpi_case(), 5.0, rng, iters=20)]
    ring = [synthetic(mpi_case(MIB, "ring"), 6.0, rng, iters=25)]
    threads = [threading.Thread(target=record.record,
                                args=(s, RecordTarget(conf, "box", commit), bench.asv_layout, {}))
               for s in (again, ring)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    from asv.results import Results

    files = list((tmp_path / "results" / "box").glob(f"{commit[:8]}-*.json"))
    assert len(files) == 1
    res = Results.load(str(files[0]))
    described = json.loads((tmp_path / "results" / "benchmarks.json").read_text())
    name = "allreduce.Allreduce.track_inv_busbw"
    params = described[name]["params"]
    assert params[0] == ["'mpi'", "'ring'"] and params[2] == ["'4B'", "'1MiB'"]
    stats = res.get_result_stats(name, params)
    combos = [tuple(c) for c in itertools.product(*params)]
    repeat = {c: (s or {}).get("repeat") for c, s in zip(combos, stats)}
    # one value per round: the case measured in two runs of the commit has both rounds
    assert repeat[("'mpi'", "2", "'1MiB'", "'float32'", "'python'", "'none'", "'sum'")] == 1 + 1  # pooled, nothing lost
    assert repeat[("'mpi'", "2", "'4B'", "'float32'", "'python'", "'none'", "'sum'")] == 1
    assert repeat[("'ring'", "2", "'1MiB'", "'float32'", "'python'", "'none'", "'sum'")] == 1
    assert not list(tmp_path.glob(".recording-*"))


def test_wrong_results_are_left_out(tmp_path):
    conf, (commit,) = make_project(tmp_path, 1)
    rng = np.random.default_rng(3)
    good = synthetic(mpi_case(), 5.0, rng)
    bad = synthetic(mpi_case(4), 1e-3, rng)
    bad = type(bad)(bad.case, bad.metrics, False, bad.times_s, bad.info)
    summary = record.record([good, bad], RecordTarget(conf, "box", commit), bench.asv_layout, fp={})
    assert summary.entries == 2 and summary.left_out == ["allreduce[mpi-n2-4B] (wrong result)"]


# --- asv's samples are rounds, not iterations --------------------------------------------------

KEY = ("'mpi'", "2", "'1MiB'", "'float32'", "'python'", "'none'", "'sum'")


def stored(conf: str, commit: str, machine: str = "box") -> dict[str, dict[tuple, tuple]]:
    """Per benchmark, per param ids: (samples, value, stats) as asv's own Results reader sees them."""
    from asv.results import Results

    (path,) = (Path(conf).parent.parent / "results" / machine).glob(f"{commit[:8]}-*.json")
    res = Results.load(str(path))
    out = {}
    for name in res.get_all_result_keys():
        params = res.get_result_params(name)
        combos = [tuple(c) for c in itertools.product(*params)]
        out[name] = {c: (smp, v, st) for c, smp, v, st in zip(
            combos, res.get_result_samples(name, params), res.get_result_value(name, params),
            res.get_result_stats(name, params)) if v is not None}
    return out


def five_rounds(rng: np.random.Generator, levels=(10.0, 9.6, 10.3, 9.9, 10.1), contention=None):
    """One case pooled over rounds of 200 iterations each, as ``suite.run_one`` hands it on."""
    each = [synthetic(mpi_case(), level, rng, iters=200) for level in levels]
    if contention is not None:
        each = [type(s)(s.case, s.metrics, s.valid, s.times_s, {**s.info, "contention": c})
                for s, c in zip(each, contention)]
    return rounds.pool_rounds(each, rounds.DEFAULT_MAX_CONTENTION), each


def test_asv_stores_one_value_per_round(tmp_path):
    """5 rounds of 200 iterations: asv's samples are the 5 round values (time-like), its value
    their median, and its CI that of 5 replicates, not of 1000 correlated calls."""
    conf, (commit,) = make_project(tmp_path, 1)
    pooled, each = five_rounds(np.random.default_rng(5))
    assert len(pooled.metrics["busbw_GBps"].samples) == 1000  # what was recorded before
    record.record([pooled], RecordTarget(conf, "box", commit), bench.asv_layout, fp={})
    got = stored(conf, commit)
    samples, value, st = got["allreduce.Allreduce.track_inv_busbw"][KEY]
    busbw = [s.metrics["busbw_GBps"].value for s in each]
    assert round_values(pooled, "busbw_GBps") == busbw
    assert samples == pytest.approx([1 / b for b in busbw])
    assert value == pytest.approx(np.median([1 / b for b in busbw]))
    assert st["repeat"] == 5
    lat, _, _ = got["allreduce.Allreduce.track_latency"][KEY]
    assert lat == pytest.approx([s.metrics["latency_us"].value * 1e-6 for s in each])
    # The rounds differ by up to 7%; a CI from the iterations would be far narrower than that.
    assert np.isfinite([st["ci_99_a"], st["ci_99_b"]]).all()
    assert st["ci_99_b"] - st["ci_99_a"] > 0.02 * value


def test_plain_sample_stores_one_value_and_runs_of_a_commit_append_rounds(tmp_path):
    conf, (commit,) = make_project(tmp_path, 1)
    rng = np.random.default_rng(6)
    plain = synthetic(mpi_case(), 10.0, rng, iters=200)
    record.record([plain], RecordTarget(conf, "box", commit), bench.asv_layout, fp={})
    samples, value, st = stored(conf, commit)["allreduce.Allreduce.track_inv_busbw"][KEY]
    assert samples == [pytest.approx(1 / plain.metrics["busbw_GBps"].value)] and value == samples[0]
    assert st["ci_99_b"] == float("inf")  # one round: no interval, so history weighs it as the median point
    pooled, _ = five_rounds(rng)
    record.record([pooled], RecordTarget(conf, "box", commit), bench.asv_layout, fp={})
    samples, _, st = stored(conf, commit)["allreduce.Allreduce.track_inv_busbw"][KEY]
    assert st["repeat"] == 6 and samples[0] == pytest.approx(1 / plain.metrics["busbw_GBps"].value)


def test_contended_rounds_are_not_recorded(tmp_path):
    """Rounds the policy set aside are not asv samples; a sample whose every round was contended
    is left out, as verdicts give it no weight (UNKNOWN), and the summary says so."""
    conf, (commit,) = make_project(tmp_path, 1)
    rng = np.random.default_rng(7)
    some, each = five_rounds(rng, contention=[0.0, 0.5, 0.0, 0.0, 0.3])
    assert some.info["rounds_dropped"] == 2 and not some.info["contended"]
    everyone, _ = five_rounds(rng, contention=[0.5] * 5)
    everyone = type(everyone)(Case("allreduce", "ring", 2, MIB), everyone.metrics, True,
                              everyone.times_s, everyone.info)
    assert everyone.info["contended"]
    summary = record.record([some, everyone], RecordTarget(conf, "box", commit), bench.asv_layout, fp={})
    assert summary.entries == 2  # mpi's two metrics; nothing of ring
    assert summary.left_out == ["allreduce[ring-n2-1MiB] (machine contended in every round)"]
    samples, _, _ = stored(conf, commit)["allreduce.Allreduce.track_inv_busbw"][KEY]
    assert samples == pytest.approx([1 / each[i].metrics["busbw_GBps"].value for i in (0, 2, 3)])


def test_old_per_iteration_entries_are_replaced_not_pooled(tmp_path):
    """A results file of this commit written under the previous layout version (samples were
    iterations then) is not appended to: asv keeps rounds and iterations apart by version."""
    import dataclasses

    conf, (commit,) = make_project(tmp_path, 1)
    rng = np.random.default_rng(8)
    real = bench.asv_layout("allreduce")
    old = dataclasses.replace(real, version="perfsuite-allreduce-2")
    record.record([five_rounds(rng)[0]], RecordTarget(conf, "box", commit), lambda name: old, fp={})
    plain = synthetic(mpi_case(), 10.0, rng, iters=200)
    record.record([plain], RecordTarget(conf, "box", commit), lambda name: real, fp={})
    samples, _, st = stored(conf, commit)["allreduce.Allreduce.track_inv_busbw"][KEY]
    assert st["repeat"] == 1 and samples == [pytest.approx(1 / plain.metrics["busbw_GBps"].value)]
    assert real.version != old.version


def judged_rounds(case: Case, rng: np.random.Generator, late: float, n: int = 3):
    """``case`` pooled over ``n`` rounds, each world judged by the straggler rule as the suite
    does (``stragglers.annotate``): rank 1 arrives ``late`` times after the others, in both
    rank orders (1.0: nobody late)."""
    def calls() -> np.ndarray:
        t = 1e-4 * (1 + 0.01 * np.abs(rng.standard_normal((200, case.world_size))))
        t[:, 1] *= late
        return t

    each = [summarize(case, calls(), True, 200, 0, False, reordered=calls()) for _ in range(n)]
    return rounds.pool_rounds([stragglers.annotate(Result(case.benchmark, case.transport, case.world_size,
                                                          (s,))).samples[0] for s in each])


def test_a_world_that_named_a_straggler_draws_its_own_line(tmp_path):
    conf, (commit,) = make_project(tmp_path, 1)
    rng = np.random.default_rng(11)
    late, clean = judged_rounds(mpi_case(), rng, 1.5), judged_rounds(mpi_case(4), rng, 1.0)
    assert late.info["straggler"]["rank"] == 1 and clean.info["straggler"] is None
    record.record([late, clean], RecordTarget(conf, "box", commit), bench.asv_layout, fp={})
    got = stored(conf, commit)["allreduce.Allreduce.track_inv_busbw"]
    assert set(got) == {(*KEY[:-2], "'named'", "'sum'"), ("'mpi'", "2", "'4B'", "'float32'", "'python'", "'none'", "'sum'")}
    # the training benchmarks' (generic) layout has the axis too
    epoch = bench.asv_layout("tf-epoch")
    case = Case("tf-epoch", "tf-grpc", 2, variant="resnet")
    assert epoch.param_ids(case, {"straggler": late.info["straggler"]})[-1] == "'named'"
    assert epoch.param_ids(case, {})[-1] == "'none'"


def test_a_store_of_the_previous_layout_version_is_migrated_in_place(tmp_path):
    """A results folder written under perfsuite-allreduce-4 (no op axis): asv reads a result
    only under its benchmark's version and by the product of its params, so the recorder
    rewrites every stored result to the current layout, each old point at op "sum", values,
    samples and stats untouched; new points land beside them."""
    import dataclasses

    from perfsuite.asv.project import load_project
    from perfsuite.asv.read import read_history

    conf, commits = make_project(tmp_path, 2)
    rng = np.random.default_rng(12)
    real = bench.asv_layout("allreduce")
    old = dataclasses.replace(real, version="perfsuite-allreduce-4", axes=real.axes[:-1],
                              measured=real.measured[:-1], migrations=())
    for machine in ("box", "other-box"):
        for c in commits:
            record.record([five_rounds(rng)[0]], RecordTarget(conf, machine, c), lambda name: old, fp={})
    before = stored(conf, commits[0])
    name = "allreduce.Allreduce.track_inv_busbw"

    summary = record.record([judged_rounds(mpi_case(), rng, 1.5), synthetic(mpi_case(), 10.0, rng)],
                            RecordTarget(conf, "box", commits[1]), bench.asv_layout, fp={})
    assert summary.migrated == 2 * 2 * 2  # two metrics in each of two commits on two machines
    assert "migrated 8 stored results" in summary.line()
    described = json.loads((tmp_path / "results" / "benchmarks.json").read_text())[name]
    assert described["version"] == real.version and described["param_names"] == list(real.axes)
    assert described["params"][-2:] == [["'none'", "'named'"], ["'sum'"]]
    # the untouched commit reads as before, at op "sum"
    assert stored(conf, commits[0]) == {k: {(*ids, "'sum'"): v for ids, v in per.items()}
                                        for k, per in before.items()}
    # the measured commit: the clean run pooled its round with the migrated five, the late one beside
    now = stored(conf, commits[1])[name]
    assert now[KEY][2]["repeat"] == 5 + 1 and now[(*KEY[:-2], "'named'", "'sum'")][2]["repeat"] == 3
    # asv's own reader (by benchmarks.json's versions and params) sees both commits on both machines
    series, _ = read_history(load_project(conf))
    points = {(s.machine, s.entry): len(s.points) for s in series if s.name == name}
    assert points == {("box", f"{name}({', '.join(KEY)})"): 2,
                      ("other-box", f"{name}({', '.join(KEY)})"): 2,
                      ("box", f"{name}({', '.join(KEY[:-2])}, 'named', 'sum')"): 1}
    again = record.record([synthetic(mpi_case(), 10.0, rng)], RecordTarget(conf, "box", commits[0]),
                          bench.asv_layout, fp={})
    assert again.migrated == 0 and "migrated" not in again.line()


def test_asv_run_tracks_the_median_over_rounds(monkeypatch):
    """``asv run``'s cache holds the same number the recorder stores: the median of the round
    values; an all-contended case is skipped with why."""
    calm, each = five_rounds(np.random.default_rng(9))
    contended, _ = five_rounds(np.random.default_rng(10), contention=[0.5] * 5)
    cases = [mpi_case(), mpi_case(4)]
    by_case = {cases[0]: calm, cases[1]: type(contended)(cases[1], contended.metrics, True,
                                                          contended.times_s, contended.info)}

    def run_one(spec, cfg):
        return WorldOutcome(spec, result=Result(spec.benchmark, spec.transport, spec.world_size,
                                                tuple(by_case[c] for c in spec.cases)))

    monkeypatch.setattr(asv_bench.suite, "run_one", run_one)
    cache = asv_bench.measure(cases, {})
    values = {k[0]: v for k, v in cache["values"].items()}
    assert values["track_inv_busbw"] == pytest.approx(
        np.median([1 / s.metrics["busbw_GBps"].value for s in each]))
    assert "contended" in cache["skipped"][("'mpi'", "2", "'4B'", "'float32'", "'python'", "'none'", "'sum'")]


@pytest.mark.parametrize("args,needle", [
    (["--asv-machine", "x"], "--asv-machine needs --asv"),
    (["--asv", "--asv-config", "/nonexistent/asv.conf.json"], "does not exist"),
    (["--asv", "--asv-machine", "a b"], "asv machine name 'a b'"),
])
def test_bad_asv_options_are_usage_errors(args, needle, capsys):
    assert cli.main(["run", "--transports", "mpi", "--sizes", "4", *args]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("corrupt", ["benchmarks.json", "box/{commit8}-existing-py.json"])
def test_corrupt_asv_store_stops_the_run_before_any_world(corrupt, tmp_path, capsys, monkeypatch):
    conf, (commit,) = make_project(tmp_path, 1)
    record.record([synthetic(mpi_case(), 5.0, np.random.default_rng(1))],
                  RecordTarget(conf, "box", commit), bench.asv_layout, fp={})
    stored = sorted((tmp_path / "results").rglob("*.json"))
    path = tmp_path / "results" / corrupt.format(commit8=commit[:8])
    if not path.exists():  # the commit's results file: whatever asv named it
        path = next(p for p in stored if p.name.startswith(commit[:8]))
    path.write_bytes(b"\x00\x01 not json")
    launched = []
    monkeypatch.setattr("perfsuite.suite.run", lambda *a, **k: launched.append(a))
    rc = cli.main(["run", "--transports", "mpi", "--sizes", "4", "--asv", "--asv-config", conf,
                   "--asv-machine", "box", "--asv-commit", commit])
    err = capsys.readouterr().err
    assert rc == 2 and not launched
    assert path.name in err or commit[:8] in err, err
    assert len(err.strip().splitlines()) == 1, err


# --- perfsuite run --asv on two commits, asv publish, headless Chromium ----------------------

@pytest.fixture(scope="module")
def measured_site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    conf, commits = make_project(tmp, 2)
    for c in commits:
        # Contention off: on a loaded runner every round may be contended, and those are (rightly)
        # not recorded; this tests the way to the page, test_contended_rounds_are_not_recorded the rule.
        rc = cli.main(["run", "--transports", "mpi", "--sizes", "4,1MiB", "--iters", "30",
                       "--warmup", "3", "--max-contention", "off",
                       "--asv", "--asv-config", conf, "--asv-commit", c])
        assert rc == 0
    return conf, commits, publish(conf)


@pytest.mark.world
def test_run_asv_on_two_commits_publishes_both_points(measured_site):
    conf, commits, html = measured_site
    index = json.loads((html / "index.json").read_text())
    revs = {v: int(k) for k, v in index["revision_to_hash"].items()}
    bench = index["benchmarks"]["allreduce.Allreduce.track_inv_busbw"]
    from conftest import native_build  # fails where CI requires the native loop and it did not build

    loop = "'python'" if native_build().why else "'native'"  # the loop that timed the runs
    j = [tuple(c) for c in itertools.product(*bench["params"])].index(
        ("'mpi'", "2", "'1MiB'", "'float32'", loop, "'none'", "'sum'"))
    (graph,) = [p for p in html.glob("graphs/**/allreduce.Allreduce.track_inv_busbw.json")
                if "summary" not in p.parts]
    points = {rev: values[j] for rev, values in json.loads(graph.read_text())}
    assert set(points) == {revs[commits[0]], revs[commits[1]]}
    assert all(v is not None and v > 0 for v in points.values())
    # peak memory per rank is a graph of its own, in MiB, with both commits' points
    memory = index["benchmarks"]["allreduce.Allreduce.track_peak_mem"]
    assert memory["unit"] == "MiB"
    (mem_graph,) = [p for p in html.glob("graphs/**/allreduce.Allreduce.track_peak_mem.json")
                    if "summary" not in p.parts]
    mem_points = {rev: values[j] for rev, values in json.loads(mem_graph.read_text())}
    assert set(mem_points) == set(points) and all(v is not None and v > 10 for v in mem_points.values())


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    return path


@pytest.fixture
def served(measured_site):
    """The published site made offline (no CDN here) and served over http on 127.0.0.1."""
    _, _, html = measured_site
    try:
        offline.make_offline(str(html))
    except ConfigError as exc:
        pytest.skip(str(exc))
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # keep the test output to what failed
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(html)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def headless(url: str, *args: str) -> str:
    """Load ``url`` in headless Chromium (a fresh profile, 10 s of virtual time for asv's scripts)
    with ``args`` saying what to do with the page; its stdout."""
    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        return run_command([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                            "--no-first-run", "--disable-background-networking",
                            "--disable-component-update", "--disable-sync",
                            f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                            *args, url], timeout=120).stdout
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def dump_dom(url: str) -> str:
    return headless(url, "--dump-dom")


@pytest.mark.world
def test_published_page_renders_list_and_graph_in_chromium(served):
    _chromium()
    listing = dump_dom(f"{served}/index.html#/summarylist")
    assert "Can not determine continental origin of swallow" not in listing  # asv's JS-failure page
    body = listing[listing.index('id="summarylist-body"'):]
    for name in ("allreduce.Allreduce.track_inv_busbw", "allreduce.Allreduce.track_latency"):
        assert name in body
    graph = dump_dom(f"{served}/index.html#allreduce.Allreduce.track_inv_busbw")
    main = graph[graph.index('id="main-graph"'):]
    assert main.split(">", 1)[1].lstrip().startswith('<canvas class="flot-base"'), main[:300]
    assert "flot-tick-label" in main  # axes were laid out from the loaded data


#: The graph page as docs/quickstart.md shows it: one line (mpi, 2 ranks, 1 MiB) of the two commits.
GRAPH = ("index.html#allreduce.Allreduce.track_inv_busbw?p-transport='mpi'&p-world_size=2"
         "&p-size='1MiB'&p-dtype='float32'&p-straggler='none'")
#: Peak memory per rank, drawn beside time (issue: memory is a result too).
MEMORY_GRAPH = GRAPH.replace("track_inv_busbw", "track_peak_mem")


def colours(image) -> int:
    """How many distinct colours an RGB image holds (65536 standing for that many or more)."""
    found = image.getcolors(maxcolors=1 << 16)
    return 1 << 16 if found is None else len(found)


@pytest.mark.world
@pytest.mark.parametrize("graph,name", [(GRAPH, "asv-page.png"), (MEMORY_GRAPH, "asv-memory-page.png")],
                         ids=["busbw", "peak-memory"])
def test_published_graph_page_screenshot_is_a_real_image(served, tmp_path, graph, name):
    """What a person sees: the graph page drawn to a PNG by headless Chromium, not a blank or
    one-colour frame; PERFSUITE_SCREENSHOT_DIR=docs/img keeps it as docs/img/asv-page.png (and
    the peak-memory graph as docs/img/asv-memory-page.png)."""
    from PIL import Image  # matplotlib's own dependency

    png = tmp_path / name
    headless(f"{served}/{graph}", "--hide-scrollbars", "--window-size=1000,560", f"--screenshot={png}")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as image:
        assert image.size == (1000, 560)
        rgb = image.convert("RGB")
    assert colours(rgb) > 50, f"{colours(rgb)} colours: a blank page"
    # the plot (right of asv's settings and parameters) is drawn, not only the page around it
    plot = rgb.crop((rgb.width // 2, rgb.height // 4, rgb.width - 20, rgb.height - 40))
    assert colours(plot) > 10, f"{colours(plot)} colours where the graph should be"
    keep = os.environ.get("PERFSUITE_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        # a 256-colour palette: the page is flat colours and text, and the file stays small in git
        rgb.quantize(256).save(Path(keep) / png.name, optimize=True)


@pytest.mark.world
def test_pytest_perf_asv_records_the_session(pytester, tmp_path):
    conf, (commit,) = make_project(tmp_path, 1)
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    r = pytester.runpytest_subprocess(
        "--benchmark-only", "--perf-transports", "mpi", "--perf-sizes", "4,1MiB", "--perf-iters", "20",
        "--perf-warmup", "2", "--perf-max-contention", "off",  # recorded on a loaded runner too
        "-p", "no:cacheprovider", "--perf-asv", "--perf-asv-config", conf,
        "--perf-asv-commit", commit, "--perf-asv-machine", "pytest-box")
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines([f"# asv: recorded 6 entries of 3 benchmarks for commit {commit[:8]} on machine pytest-box*"])
    from asv.results import Results

    (path,) = (tmp_path / "results" / "pytest-box").glob(f"{commit[:8]}-perfsuite.json")
    res = Results.load(str(path))
    assert sorted(res.get_all_result_keys()) == ["allreduce.Allreduce.track_inv_busbw",
                                                 "allreduce.Allreduce.track_latency",
                                                 "allreduce.Allreduce.track_peak_mem"]
    assert res.get_result_params("allreduce.Allreduce.track_latency")[2] == ["'4B'", "'1MiB'"]


@pytest.mark.world
def test_recorded_runs_and_asv_run_share_one_graph_line(tmp_path, monkeypatch):
    """A graph line is keyed by machine fields and ``python``. The recorder once wrote the
    Python version and fingerprint fields while ``asv run --environment existing:same`` writes
    the interpreter's path and its own machine entry, so one benchmark drew two lines. Now the
    recorder takes both from asv: one line, holding both runners' points."""
    conf, (commit,) = make_project(tmp_path, 1)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # asv's ~/.asv-machine.json, for both runners
    env = {"PERFSUITE_ASV_SIZES": "4", "PERFSUITE_ASV_TRANSPORTS": "mpi",
           "PERFSUITE_ASV_ITERS": "20", "PERFSUITE_ASV_WARMUP": "2", "PERFSUITE_ASV_MAX_CONTENTION": "off"}
    asv = [sys.executable, "-m", "asv"]
    run_command([*asv, "machine", "--yes", "--machine", "shared-box", "--config", conf], timeout=60)
    assert cli.main(["run", "--transports", "mpi", "--sizes", "4", "--iters", "20", "--warmup", "2",
                     "--max-contention", "off", "--asv", "--asv-config", conf, "--asv-commit", commit,
                     "--asv-machine", "shared-box"]) == 0
    run_command([*asv, "run", "--config", conf, "--environment", "existing:same", "--set-commit-hash",
                 commit, "--machine", "shared-box", "--quick"], timeout=300, env=env)
    from asv.results import Results

    files = sorted((tmp_path / "results" / "shared-box").glob(f"{commit[:8]}-*.json"))
    assert len(files) == 2, files  # perfsuite's and asv run's own
    params = [Results.load(str(f)).params for f in files]
    assert params[0] == params[1], params
    run_command([*asv, "publish", "--config", conf], timeout=120)
    lines = sorted((tmp_path / "html" / "graphs" / "branch-main" / "machine-shared-box").iterdir())
    assert len(lines) == 1, lines


def test_machine_fields_come_from_asv_only_for_that_very_machine(tmp_path, monkeypatch):
    """asv returns its only machine entry for the host's own name whatever that entry is
    called; the recorder must not file this host's results under another machine's fields."""
    import platform

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".asv-machine.json").write_text(json.dumps(
        {"other-box": {"machine": "other-box", "cpu": "elsewhere"}, "version": 1}))
    fp = {"os": "Linux", "machine": "x86_64", "cpu_model": "here", "cpu_count": 2, "memory_bytes": 1}
    host = platform.node()
    assert record.machine_info(fp, host) == {"machine": host, "os": "Linux", "arch": "x86_64",
                                             "cpu": "here", "num_cpu": "2", "ram": "1"}
    assert record.machine_info(fp, "other-box") == {"machine": "other-box", "cpu": "elsewhere"}


def test_asv_private_names_behave_as_perfsuite_expects(tmp_path):
    """perfsuite.asv.compat wraps the asv names that are not public API; an asv release that
    changes one must fail here, not in a history read. The graph weight of a point is
    2 / (width of its 99% CI), and unknown without a finite interval."""
    from perfsuite.asv.compat import ci_weight

    assert ci_weight({"ci_99_a": 1.0, "ci_99_b": 1.5}) == pytest.approx(4.0)
    assert ci_weight({"ci_99_a": 1.0, "ci_99_b": float("inf")}) is None
    assert ci_weight(None) is None and ci_weight({"ci_99_a": 1.0}) is None
    # A stored result moved under other params and version keeps its values, samples and stats
    # through asv's save and load.
    from asv.results import Results
    from asv.runner import BenchmarkResult

    from perfsuite.asv.compat import relayout_result

    res = Results({"machine": "box"}, {}, "a" * 40, 0, "py", "env", {})
    key, params = "m.S.track_x", [["1", "2"]]
    res.add_result({"name": key, "version": "1", "params": params},
                   BenchmarkResult([1.0, 2.0], [[1.0, 1.2], [2.0]], [1, 1], 0, "", None), record_samples=True)
    wider = [*params, ["'none'"]]
    relayout_result(res, key, wider, "2")
    res.save(str(tmp_path))
    (path,) = (tmp_path / "box").glob("*.json")
    back = Results.load(str(path))
    assert back.benchmark_version[key] == "2" and back.get_result_params(key) == wider
    assert back.get_result_value(key, wider) == res.get_result_value(key, wider) == [1.1, 2.0]
    assert back.get_result_samples(key, wider) == [[1.0, 1.2], [2.0]]
    assert back.get_result_stats(key, wider)[0]["repeat"] == 2
