"""perfsuite ab: the ABBA loop and its verdicts over a fake runner (no world), and its bad input."""
from __future__ import annotations

import numpy as np
import pytest

from perfsuite.faces.cli import main
from perfsuite.records.errors import RankFailure
from perfsuite.experiments import ab
from perfsuite.records.model import Case, Metric, Sample

CASE = Case("allreduce", "mpi", 2, size_bytes=4)


def fake(b_factor: float, noise: float = 0.01, fail_at: int | None = None, drop_metric: bool = False):
    rng = np.random.default_rng(7)
    calls = {"n": 0}

    def runner(arm, cases):
        calls["n"] += 1
        if fail_at is not None and calls["n"] == fail_at:
            raise RankFailure("rank 1 raised InjectedFault: boom")
        value = 3.0 * (b_factor if arm.name == "B" else 1.0) * (1 + noise * rng.standard_normal())
        metrics = {"latency_us": Metric("latency_us", value, "us", False)}
        if not (drop_metric and arm.name == "B"):
            metrics["busbw_GBps"] = Metric("busbw_GBps", 4 / value / 1e3, "GB/s", True)
        return [Sample(c, metrics, info={"contention": 0.0}) for c in cases]

    return runner


def config(**kw):
    a, b = ab.Arm("A", "mpi"), ab.Arm("B", "mpi", env=(("X", "1"),))
    return ab.ABConfig(a, b, (CASE,), (CASE,), seed=0, **{"max_pairs": 30, **kw})


def test_a_ten_percent_slower_arm_is_different_and_identical_arms_never_are():
    rep = ab.run(config(), fake(1.10))
    [v] = rep.verdicts  # one test per case: latency, with busbw its reciprocal
    assert (v.metric, v.mirror, v.status) == ("latency_us", "busbw_GBps", "regression")
    assert 1.05 < 1 + v.low and 1 + v.high < 1.15
    assert config().looks == (10, 14, 18, 24, 30) and rep.pairs == 10  # stopped at the first look
    same = ab.run(config(), fake(1.0))
    assert all(v.kind in ("SAME", "UNKNOWN") for v in same.verdicts)
    text = ab.format_report(rep)
    assert "A/A" not in text and "latency|busbw" in text and "# family: 1 verdict(s)" in text
    assert ab.ABConfig(ab.Arm("A", "mpi"), ab.Arm("B", "mpi"), (CASE,), (CASE,)).identical


def test_stop_on_regression_ends_at_the_first_look_with_a_regression():
    """4 B is x1.5 in arm B; 1 MiB is too noisy for +-2% in 30 pairs. Without the stop the run
    spends every pair on 1 MiB; with it, it ends where 4 B is decided, 1 MiB UNKNOWN."""
    big = Case("allreduce", "mpi", 2, size_bytes=1 << 20)
    rng = np.random.default_rng(3)

    def runner(arm, cases):
        out = []
        for c in cases:
            factor, noise = (1.5, 0.01) if c.size_bytes == 4 else (1.0, 0.3)
            value = 3.0 * (factor if arm.name == "B" else 1.0) * (1 + noise * abs(rng.standard_normal()))
            out.append(Sample(c, {"latency_us": Metric("latency_us", value, "us", False)},
                              info={"contention": 0.0}))
        return out

    cases = (CASE, big)
    a, b = ab.Arm("A", "mpi"), ab.Arm("B", "mpi", env=(("X", "1"),))
    full = ab.run(ab.ABConfig(a, b, cases, cases, seed=0, max_pairs=30), runner)
    stopped = ab.run(ab.ABConfig(a, b, cases, cases, seed=0, max_pairs=30, stop_on_regression=True), runner)
    kinds = lambda rep: {v.case: v.kind for v in rep.verdicts}  # noqa: E731
    assert full.pairs == 30 and kinds(full)["allreduce[mpi-n2-1MiB]"] == "UNKNOWN"
    assert stopped.pairs < 30 and kinds(stopped) == {"allreduce[mpi-n2-4B]": "DIFFERENT",
                                                     "allreduce[mpi-n2-1MiB]": "UNKNOWN"}
    assert stopped.to_dict()["stop_on_regression"] is True


def test_a_failed_world_fails_its_pair_only_and_a_contended_pair_is_dropped():
    rep = ab.run(config(max_pairs=8), fake(1.10, fail_at=3))
    assert rep.failures and "pair 2, arm" in rep.failures[0] and "boom" in rep.failures[0]
    assert all(v.rounds == 7 for v in rep.verdicts)  # 8 pairs, one failed
    busy = fake(1.0)

    def contended(arm, cases):
        return [Sample(s.case, s.metrics, info={"contention": 0.5}) for s in busy(arm, cases)]

    rep = ab.run(config(max_pairs=4), contended)
    assert all(v.status == "unknown" and v.dropped == 4 and v.rounds == 0 and v.reason == "no-pairs"
               for v in rep.verdicts)


def test_a_metric_measured_by_one_arm_only_is_refused():
    with pytest.raises(ab.ConfigError, match="busbw_GBps measured by one arm only"):
        ab.run(config(), fake(1.0, drop_metric=True))


def test_one_transport_timed_by_two_loops_is_refused_and_older_python_loops_match():
    plain = fake(1.0)

    def timed(b_timing):
        def runner(arm, cases):
            t = b_timing if arm.name == "B" else "native"
            return [Sample(s.case, s.metrics, info={"contention": 0.0, **({"timing": t} if t else {})})
                    for s in plain(arm, cases)]
        return runner

    with pytest.raises(ab.ConfigError, match=r"arm A was timed by native, arm B by python; A/B "
                                             r"compares one timing .* pass --host-timing python"):
        ab.run(config(), timed("python"))
    # A perfsuite from before the native loop recorded "per-call" (or nothing): its Python loop.
    assert ab._loop({"timing": "per-call", "clock": "host"}) == ab._loop({}) == "python"
    assert ab._loop({"timing": "per-call", "clock": "cuda-events"}) == "per-call"
    assert ab.run(config(max_pairs=4), timed("native")).verdicts  # one loop: judged


@pytest.mark.parametrize("args,needle", [
    (["--b-env", "NOEQUALS"], "'NOEQUALS' must be NAME=VALUE"),
    (["--budget", "0"], "budget '0' must be a number of seconds > 0"),
    (["--max-pairs", "1"], "max pairs '1' must be a whole number >= 2"),
    (["--b-python", "/nonexistent/python"], "'/nonexistent/python' is not an executable file"),
    (["--a-transport", "mpi,ring"], "--a-transport 'mpi,ring' names 2 values; perfsuite ab takes one value"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle, capsys):
    assert main(["ab", "--sizes", "4", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def moded(b_factor: float, slow_every: int = 3, arm_moves_canary: float = 1.0, step: float = 1.65):
    """Worlds of a machine with a slow mode: every ``slow_every``-th world runs ``step`` slower,
    with its canary 1.65x; arm B may move the canary itself."""
    rng = np.random.default_rng(11)
    calls = {"n": 0}

    def runner(arm, cases):
        calls["n"] += 1
        slow = calls["n"] % slow_every == 0
        value = 3.0 * (b_factor if arm.name == "B" else 1.0) * (step if slow else 1.0) * (1 + 0.01 * rng.standard_normal())
        canary = (165.0 if slow else 100.0) * (arm_moves_canary if arm.name == "B" else 1.0)
        metrics = {"latency_us": Metric("latency_us", value, "us", False),
                   "busbw_GBps": Metric("busbw_GBps", 4 / value / 1e3, "GB/s", True)}
        return [Sample(c, metrics, info={"contention": 0.0, "canary_us": canary}) for c in cases]

    return runner


def test_pairs_across_machine_modes_are_kept_and_ranked_apart():
    """Every third world in the slow mode: two pairs in three straddle two modes. They are
    kept, ranked apart from the pairs of one mode, and the canary's own B/A is shown."""
    rep = ab.run(config(max_pairs=40), moded(1.0))
    [v] = rep.verdicts
    assert v.rounds == rep.pairs and v.dropped == 0
    assert 0 < v.facts["straddling"] < v.rounds and v.facts["canary_ba"] == pytest.approx(1.0, abs=0.5)
    assert v.kind != "DIFFERENT"
    text = ab.format_report(rep)
    assert "straddle two machine modes and are ranked apart" in text and "canary B/A" in text
    off = ab.run(config(max_pairs=8, canary_shift=None), moded(1.0))
    assert all(v.rounds == 8 and v.dropped == 0 and "straddling" not in v.facts for v in off.verdicts)


def test_a_twofold_difference_is_decided_whatever_the_modes_do():
    """x2 between the arms on a machine whose slow mode is x1.65 and whose modes change often:
    no pair is dropped for its modes, and the difference is DIFFERENT at the first look."""
    for every in (2, 3, 5):
        rep = ab.run(config(max_pairs=40), moded(2.0, slow_every=every))
        [v] = rep.verdicts
        assert v.status == "regression" and rep.pairs == config(max_pairs=40).looks[0], (every, v)


def test_when_the_arms_move_the_canary_it_is_said_and_no_pair_is_dropped():
    """Arm B moves the canary 1.3x: every pair's canaries differ by more than the mode limit,
    so every pair falls in one group (by the step's size, never its sign: the test stays
    exact) and none is dropped; the report says the canary cannot tell the modes here."""
    rep = ab.run(config(max_pairs=40), moded(1.0, slow_every=10 ** 6, arm_moves_canary=1.3))
    [v] = rep.verdicts
    assert v.facts["canary_moved"] and v.facts["canary_ba"] == pytest.approx(1.3, rel=0.05)
    assert v.facts["straddling"] == v.rounds and v.dropped == 0
    assert "the arms move the canary, so it does not tell the machine's modes" in ab.format_report(rep)


def test_a_wrong_sum_stops_the_run_at_its_pair_and_keeps_it_marked():
    """Arm B's sums go wrong on rank 1 from the 3rd pair: the run stops there (every later pair
    would be wasted), the pairs before it stay, the wrong one is kept marked invalid, never
    judged, and the command's status is 4 with one line naming the arm, case and rank."""
    from perfsuite.faces.cli.ab import ab_status

    clean = fake(1.0)
    calls = {"n": 0}

    def runner(arm, cases):
        calls["n"] += 1
        out = clean(arm, cases)
        if arm.name == "B" and calls["n"] > 4:  # pairs 1-2 are calls 1-4
            out = [Sample(s.case, s.metrics, False, info={**s.info, "invalid_ranks": [1]}) for s in out]
        return out

    rep = ab.run(config(max_pairs=30), runner)
    assert rep.pairs == 3 and calls["n"] == 6
    assert rep.invalid == [{"pair": 3, "arm": "B", "case": CASE.name, "ranks": [1], "reason": None}]
    assert not rep.verdicts  # stopped before the first look (10 pairs): nothing judged
    values = rep.to_dict()["values"][CASE.name]["latency_us"]
    assert len(values["a"]) == len(values["b"]) == 3 and values["invalid"] == [2] and values["contended"] == []
    lines = [line for line in ab.format_report(rep).splitlines() if line.startswith("INVALID")]
    assert lines == [f"INVALID: arm B: {CASE.name} returned wrong results on rank 1 in pair 3 (checked "
                     "against the exact expected values): a failed world, not a measurement"]
    assert ab_status(rep, strict=False) == 4


def test_an_invalid_pair_is_never_evidence_at_a_look():
    """The wrong pair lands on a look (pair 10): the run stops before judging it, and a
    judge over its log leaves it out (its ratio would be x10)."""
    clean = fake(1.0)
    calls = {"n": 0}

    def runner(arm, cases):
        calls["n"] += 1
        out = clean(arm, cases)
        if arm.name == "B" and calls["n"] > 18:
            out = [Sample(s.case, {k: Metric(k, m.value * 10, m.unit, m.higher_is_better) for k, m in s.metrics.items()},
                          False, info=s.info) for s in out]
        return out

    rep = ab.run(config(max_pairs=30), runner)
    assert rep.pairs == 10 and rep.invalid and not rep.verdicts
    log = ab.PairLog("latency_us", "us", False)
    for i, (a, b) in enumerate(zip(*(rep.values[CASE.name]["latency_us"][k] for k in "ab"))):
        log.add(a, b, invalid=i in rep.values[CASE.name]["latency_us"]["invalid"])
    [v] = ab.judge_logs({CASE.name: log}, tolerance=ab.DEFAULT_TOLERANCE, alpha=0.01, share=1.0, canary_shift=None)
    assert v.rounds == 9 and 1 + v.high < 1.5


def test_the_a_and_b_columns_come_from_the_pairs_b_over_a_comes_from():
    """Three pairs in five contended, their worlds x10 slower: B/A drops them, and so must the
    A and B columns (a median over every pair would print ~30 us beside a B/A of calm pairs)."""
    clean = fake(1.10)
    calls = {"n": 0}

    def runner(arm, cases):
        calls["n"] += 1
        busy = ((calls["n"] - 1) // 2) % 5 < 3  # both worlds of a pair alike
        return [Sample(s.case, {k: Metric(k, m.value * 10 if busy else m.value, m.unit, m.higher_is_better)
                                for k, m in s.metrics.items()}, info={"contention": 0.5 if busy else 0.0})
                for s in clean(arm, cases)]

    rep = ab.run(config(max_pairs=30), runner)
    [v] = rep.verdicts
    values = rep.values[CASE.name]["latency_us"]
    calm = [i for i in range(len(values["a"])) if i not in values["contended"]]
    assert v.dropped == len(values["contended"]) > len(calm) > 0  # dropped ones still counted
    assert v.baseline == pytest.approx(float(np.median([values["a"][i] for i in calm])))
    assert v.value == pytest.approx(float(np.median([values["b"][i] for i in calm])))
    assert 2.5 < v.baseline < 3.5 and v.value / v.baseline == pytest.approx(1 + v.change, rel=0.05)


def test_an_ab_4_file_reads_with_no_invalid_pair_and_its_contended_ones_unknown():
    from perfsuite.store import formats

    four = {"format": formats.AB, "version": 4, "arms": {"a": {"ref": None}, "b": {"ref": None}}, "verdicts": [],
            "stop_on_regression": False, "values": {CASE.name: {"latency_us": {"a": [3.0], "b": [3.1]}}}}
    d = formats.check_format(four, formats.AB, "ab.json")
    assert d["version"] == formats.VERSIONS[formats.AB] and d["invalid"] == []
    assert d["values"][CASE.name]["latency_us"] == {"a": [3.0], "b": [3.1], "contended": None, "invalid": []}
