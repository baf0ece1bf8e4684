"""Peak memory per rank: read on the rank (``kernels.memory``), summarised per world
(``records.memory``), judged like time against a stored baseline and between A/B arms, with its
own tolerance and a declared drift, never set aside as contended; its error rates by simulation
through the same code."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from perfsuite.experiments import ab
from perfsuite.kernels.memory import Watch
from perfsuite.records import memory, stats
from perfsuite.records.model import ROUNDS_KEY, Case, Metric, Sample
from perfsuite.verdicts import decision, regress

CASE = Case("torch-epoch", "torch-gloo", 2, model="gpt-tiny", batch=8)
MIB = 1 << 20


def sample(rounds: list[float], contended: bool = False, case: Case = CASE) -> Sample:
    info = {ROUNDS_KEY: {memory.METRIC: list(rounds)}, **({"contended": True} if contended else {})}
    return Sample(case, {memory.METRIC: Metric(memory.METRIC, stats.median(rounds), "MiB", False)}, True, (), info)


def baseline(rounds: list[float], session: str = "2026-12-07T07:00:00"):
    return regress.baseline_from_sample(sample(rounds), memory.METRIC, recorded=session, session=session)


def verdict(base_rounds: list[float], rounds: list[float], contended: bool = False):
    (v,) = regress.compare([sample(rounds, contended)], {(CASE.name, memory.METRIC): baseline(base_rounds)})
    return v


# --- on the rank -------------------------------------------------------------------------------

def test_watch_reads_the_spans_own_peak_not_the_imports():
    big = np.ones(96 * MIB // 8)  # a peak before the span: the imports' or the setup's
    del big
    w = Watch().start()
    held = np.ones(48 * MIB // 8)  # touched: resident
    fig = w.stop()
    del held
    assert fig["host_span"] == "timed", "this Linux refused the peak's reset"
    assert fig["host_growth_B"] >= 47 * MIB
    # the 96 MiB freed before the span is not the span's peak, but is the process's
    assert fig["host_peak_B"] < fig["host_process_peak_B"]
    assert fig["host_peak_B"] >= fig["host_start_B"] + 47 * MIB


def test_a_world_reports_its_largest_rank_and_where():
    figs = [{"host_peak_B": 100 * MIB, "host_span": "timed"}, {"host_peak_B": 300 * MIB, "host_span": "timed"}]
    metrics, info = memory.summarize(figs)
    assert metrics[memory.METRIC].value == pytest.approx(300.0) and not metrics[memory.METRIC].higher_is_better
    assert memory.peak_rank(info) == 1 and info["peak_mem_where"] == "host"
    assert memory.column(info) == "300.0 r1"
    # a GPU rank is judged on its allocator's peak; the host's stays beside it
    gpu = [dict(f, device="cuda:0", device_peak_B=(2 - r) * 1000 * MIB) for r, f in enumerate(figs)]
    metrics, info = memory.summarize(gpu)
    assert metrics[memory.METRIC].value == pytest.approx(2000.0) and memory.peak_rank(info) == 0
    assert info["peak_mem_where"] == "device" and info["host_peak_mem_MiB"] == pytest.approx(300.0)
    # a rank that read nothing: no world peak (a maximum over some ranks is none)
    assert memory.summarize([figs[0], None]) == ({}, {})


def test_sharding_prediction_is_the_replicated_state_over_the_ranks():
    ddp = {"parameters": 400, "gradients": 400, "optimizer": 800}
    assert memory.state_prediction(ddp, 4) == 400
    assert memory.state_prediction({"parameters": 400, "gradients": None, "optimizer": 0}, 2) == 200


# --- judged against a stored baseline --------------------------------------------------------

BASE = [400.1, 400.3, 400.2, 400.0, 400.2]


def test_one_session_of_baseline_decides_a_memory_change():
    doubled = verdict(BASE, [800.3, 800.1, 800.2])
    assert doubled.status == "regression" and doubled.facts["drift_from"] == "declared"
    assert doubled.tolerance == memory.TOLERANCE
    from perfsuite.reading import verdict_text

    assert verdict_text.line(doubled).endswith("regression (memory's drift between sessions taken as 1%, declared, "
                                               "not learned)")
    assert verdict(BASE, [400.2, 400.1, 400.3]).status == "same"
    assert verdict(BASE, [480.0, 481.0, 479.0]).status == "regression"  # +20%: what fails at scale
    assert verdict(BASE, [300.0, 300.2, 299.9]).status == "improvement"
    # one round cannot bound the rounds' own error: no verdict from it
    assert verdict(BASE, [800.0]).status == "unknown"


def test_contention_sets_no_memory_round_aside():
    assert verdict(BASE, [800.3, 800.1, 800.2], contended=True).status == "regression"


def test_memory_is_left_out_of_the_machines_drift_of_time():
    """Two sessions of a near-constant memory level would teach the machine a drift of nearly
    none, and every time verdict would then read the machine's spells as changes."""
    mem = {(CASE.name, memory.METRIC): regress.baseline_from_sample(
        sample(BASE), memory.METRIC, recorded="2026-12-07T07:00:00", session="2026-12-07T07:00:00",
        previous=baseline(BASE, "2026-12-06T07:00:00"), add=True)}
    assert regress.machine_drift(mem) is None


def test_a_stored_memory_difference_is_not_sent_to_confirm():
    assert regress.to_confirm([verdict(BASE, [800.3, 800.1, 800.2])]) == []


# --- between A/B arms ------------------------------------------------------------------------

def test_ab_judges_memory_beside_time_with_its_own_tolerance():
    log_t = ab.PairLog("step_us", "us", False)
    log_m = ab.PairLog(memory.METRIC, "MiB", False)
    rng = np.random.default_rng(1)
    for _ in range(14):
        a, b = rng.lognormal(0, 0.3), rng.lognormal(0, 0.3)  # time: a spell each, no change
        log_t.add(a, b)
        log_m.add(113.0, 177.0 * (1 + rng.normal(0, 1e-4)))  # a cache grown by 64 MiB
    cfg_looks = decision.paired_looks(16, decision.DEFAULT_ALPHA, 2)
    assert cfg_looks[0] <= 14, "the first look comes after the pairs memory needs"
    vs = {v.metric: v for v in ab.judge_logs({"c": log_t, ("c", memory.METRIC): log_m},
                                             tolerance=ab.DEFAULT_TOLERANCE, alpha=decision.DEFAULT_ALPHA,
                                             share=1 / len(cfg_looks), canary_shift=None)}
    assert vs[memory.METRIC].status == "regression" and vs[memory.METRIC].tolerance == memory.TOLERANCE
    assert vs["step_us"].kind != "DIFFERENT"


# --- error rates by simulation, through regress ------------------------------------------------

def simulate(change: float, runs: int, seed: int, session_sd: float = 0.005, round_sd: float = 0.002) -> float:
    """The share of stored verdicts that say DIFFERENT: the baseline one session of 10 rounds,
    the candidate one of 3, each session's level drifting by ``session_sd`` (log) and each round
    by ``round_sd``, the candidate ``change`` away. The unit of replication is the session."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(runs):
        base_level, new_level = rng.normal(0, session_sd, 2)
        base = list(400 * np.exp(base_level + rng.normal(0, round_sd, 10)))
        new = list(400 * (1 + change) * np.exp(new_level + rng.normal(0, round_sd, 3)))
        hits += verdict(base, new).kind == "DIFFERENT"
    return hits / runs


def test_memory_rule_false_and_true_rates_by_simulation():
    """The drift declared (1%) against sessions that drift by half of it, the widest measured
    here (docs/measurements.md, "Memory"): no change is called DIFFERENT at most alpha of the
    time (the upper end of its interval), and a 20% growth is found nearly always."""
    runs = 400
    false = simulate(0.0, runs, seed=5)
    lo, hi = stats.rate_ci(round(false * runs), runs)
    assert hi <= decision.DEFAULT_ALPHA, f"false DIFFERENT {false:.3f} [{lo:.3f}, {hi:.3f}]"
    found = simulate(0.20, 200, seed=6)
    f_lo, _ = stats.rate_ci(round(found * 200), 200)
    assert f_lo >= 0.95, f"a 20% growth found {found:.2f} [{f_lo:.3f}, ...] of the time"


def test_stalls_name_the_memory_of_the_parts_two_runs_tell_apart():
    from perfsuite.stalls import stash

    info = {"T0_info": {"peak_mem_MiB": 500.0, "peak_mem_where": "host"}, "T1_info": {"peak_mem_MiB": 520.0},
            "T3_info": {"peak_mem_MiB": 600.5}, "T4_info": {"peak_mem_MiB": None}, "skipped": {}}
    line = stash.memory_line(info)
    assert line.startswith("# peak memory per run (largest rank, resident): T0 500.0 MiB, T1 520.0 MiB, T3 600.5 MiB")
    assert "workers (T1-T0) +20.0 MiB" in line and "input pipeline (T3-T1) +80.5 MiB" in line
    assert stash.memory_line({"T0_info": {"step_ms_p50": 3.0}}) is None  # measured before memory was


def test_the_users_tolerance_is_their_times_memory_keeps_its_own():
    from perfsuite.records.model import Tolerance

    (v,) = regress.compare([sample([440.0, 441.0, 442.0])], {(CASE.name, memory.METRIC): baseline(BASE)},
                           tolerance=Tolerance(-0.5, 0.5))
    assert v.tolerance == memory.TOLERANCE


# --- real worlds -------------------------------------------------------------------------------

CACHED_STEP = '''import os
import numpy as np
import perfsuite


@perfsuite.benchmark(world_sizes=[2], transports=["mpi"], max_time=0.2)
def cached(world):
    cache = np.ones(int(os.environ.get("CACHE_MIB", "64")) * (1 << 20) // 8)  # kept and touched: resident
    def step():
        cache[0] += 1
    return step
'''


@pytest.mark.world
def test_a_step_that_keeps_twice_the_cache_is_flagged_on_memory_by_ab_and_by_one_stored_session(
        tmp_path, no_leftover_ranks):
    """The cache doubles (64 -> 128 MiB) and the step's time does not move: ab's first look calls
    its memory DIFFERENT, and one session of stored baseline flags it too (exit 1, its own line)."""
    from conftest import perfsuite, said

    (tmp_path / "steps.py").write_text(CACHED_STEP)
    got = perfsuite("ab", "--benchmarks", "steps.py", "--b-env", "CACHE_MIB=128", "--max-pairs", "16",
                    "--json", "ab.json", cwd=tmp_path, PERFSUITE_BENCHMARKS="")
    assert got.returncode == 1, said(got)
    rep = json.loads((tmp_path / "ab.json").read_text())
    mem = next(v for v in rep["verdicts"] if v["metric"] == memory.METRIC)
    assert mem["status"] == "regression", said(got)
    # decided at the first look, though the step's time may keep the pairs going
    assert f"# {rep['looks'][0]} pairs: " in got.stderr + got.stdout and re.search(
        rf"# {rep['looks'][0]} pairs: .*cached\[mpi-n2\] peak_mem DIFFERENT", got.stderr + got.stdout), said(got)
    assert 1.4 < 1 + mem["change"] < 1.7, said(got)  # ~113 -> ~177 MiB a rank: the cache's 64 MiB
    assert any(line.startswith("cached[mpi-n2]") and "peak_mem" in line and "DIFFERENT (regression)" in line
               for line in got.stdout.splitlines()), said(got)
    # one stored session
    rec = perfsuite("run", "--benchmarks", "steps.py", "--baseline-update", cwd=tmp_path)
    assert rec.returncode == 0, said(rec)
    same = perfsuite("run", "--benchmarks", "steps.py", "--compare", cwd=tmp_path)
    # memory SAME; the step's time is judged too (a busy runner may move it), so the exit is the time's
    row = next(x for x in same.stdout.splitlines() if x.split()[1:3] == ["cached[mpi-n2]", "peak_mem"])
    assert row.startswith("same "), said(same)
    assert same.returncode in (0, 1) and not any(x.startswith("REGRESSION: cached[mpi-n2] peak_mem")
                                                 for x in same.stdout.splitlines()), said(same)
    grown = perfsuite("run", "--benchmarks", "steps.py", "--compare", cwd=tmp_path, CACHE_MIB="128")
    assert grown.returncode == 1, said(grown)
    assert any(x.startswith("REGRESSION: cached[mpi-n2] peak_mem ") for x in grown.stdout.splitlines()), said(grown)


@pytest.mark.world
@pytest.mark.torch
@pytest.mark.timeout(300)
def test_fsdp_holds_the_model_state_sharding_predicts(tmp_path, no_leftover_ranks):
    """gpt-tiny at 2 ranks: each FSDP rank's parameters, gradients and optimizer state are its
    shard, together DDP's replica; its peak memory is measured on every rank."""
    pytest.importorskip("torch")
    from perfsuite import suite
    from perfsuite.bench.torch_epoch import torch_cases

    cfg = suite.SuiteConfig(timeout=240, options={"iters": 3, "warmup": 1, "yardsticks": False, "profile_steps": 0})
    state = {}
    for spec in suite.plan(torch_cases(["torch-gloo"], [2], "gpt-tiny", None, ("ddp", "fsdp")), cfg.options):
        outcome = suite.run_one(spec, cfg)
        assert outcome.failure is None and outcome.skipped is None, outcome.failure or outcome.skipped
        (s,) = outcome.samples()
        figs = s.info[memory.KEY]
        assert len(figs) == 2 and all(f["host_span"] == "timed" and f["host_peak_B"] > 100 * MIB for f in figs)
        assert s.metrics[memory.METRIC].value == pytest.approx(max(f["host_peak_B"] for f in figs) / MIB)
        state[s.info["parallel"]] = [f["model_state_B"] for f in figs]
    ddp, fsdp = state["ddp"], state["fsdp"]
    assert ddp[0] == ddp[1], state
    for kind in ("parameters", "gradients"):  # the shards are the replica, byte for byte
        assert sum(f[kind] for f in fsdp) == ddp[0][kind] > 0, state
    # AdamW's moments are sharded with their parameters; its step counts (a scalar per parameter)
    # are every rank's own: a few bytes over the replica's, no more
    assert 0 <= sum(f["optimizer"] for f in fsdp) - ddp[0]["optimizer"] <= 1024, state
    predicted = memory.state_prediction(ddp[0], 2)
    assert all(abs(sum(f.values()) / predicted - 1) < 0.01 for f in fsdp), state


def test_the_reports_throughput_plot_draws_peak_memory_beside_the_rate(tmp_path):
    from perfsuite.reading import plots
    from perfsuite.records.model import Result

    def world(transport: str, rate: float, mem: float) -> Result:
        s = Sample(Case("torch-epoch", transport, 2, model="gpt-tiny", batch=8),
                   {"tokens_per_s": Metric("tokens_per_s", rate, "tokens/s", True),
                    memory.METRIC: Metric(memory.METRIC, mem, "MiB", False)}, info={"seq_len": 64})
        return Result("torch-epoch", transport, 2, (s,))

    plot = plots.throughput_plot([("", world("torch-gloo", 18000.0, 750.0))], tmp_path / "t.png")
    assert plot.file is not None and plot.title.endswith("(and peak memory)") and "peak memory" in plot.caption


def test_an_arm_without_memory_leaves_that_question_unasked_and_another_metric_is_refused():
    """An arm whose perfsuite predates memory (an older image, another Python) measures no peak:
    ab compares the time it has; a metric of one arm that is not memory means another kernel."""
    from perfsuite.records.errors import ConfigError

    case = Case("mine", "mpi", 2)
    cfg = ab.ABConfig(ab.Arm("A", "mpi"), ab.Arm("B", "mpi"), (case,), (case,))
    step = Metric("step_us", 4.0, "us", False)
    old = Sample(case, {"step_us": step}, info={"timing": "python"})
    new = Sample(case, {"step_us": step, memory.METRIC: Metric(memory.METRIC, 113.0, "MiB", False)},
                 info={"timing": "python"})
    logs: dict = {}
    ab._add_pair(cfg, [case.name], {"a": {case: old}, "b": {case: new}}, logs)
    assert list(logs) == [case.name] and logs[case.name].metric == "step_us"
    other = Sample(case, {"step_us": step, "bw_GBps": Metric("bw_GBps", 1.0, "GB/s", True)}, info={"timing": "python"})
    with pytest.raises(ConfigError, match="bw_GBps"):
        ab._add_pair(cfg, [case.name], {"a": {case: old}, "b": {case: other}}, {})
