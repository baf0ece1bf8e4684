"""perfsuite ab: the ABBA loop and its verdicts over a fake runner (no world), and its bad input."""
from __future__ import annotations

import numpy as np
import pytest

from perfsuite.cli import main
from perfsuite.errors import RankFailure
from perfsuite.experiments import ab
from perfsuite.model import Case, Metric, Sample

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
    by = {v.metric: v for v in rep.verdicts}
    assert by["latency_us"].status == "regression" and by["busbw_GBps"].status == "regression"
    assert 1.05 < 1 + by["latency_us"].low and 1 + by["latency_us"].high < 1.15
    assert rep.pairs < 30  # stopped when decided
    same = ab.run(config(), fake(1.0))
    assert all(v.kind in ("SAME", "UNKNOWN") for v in same.verdicts)
    assert "A/A" not in ab.format_report(rep) and ab.ABConfig(ab.Arm("A", "mpi"), ab.Arm("B", "mpi"),
                                                               (CASE,), (CASE,)).identical


def test_a_failed_world_fails_its_pair_only_and_a_contended_pair_is_dropped():
    rep = ab.run(config(max_pairs=8), fake(1.10, fail_at=3))
    assert rep.failures and "pair 2, arm" in rep.failures[0] and "boom" in rep.failures[0]
    assert all(v.rounds == 7 for v in rep.verdicts)  # 8 pairs, one failed
    busy = fake(1.0)

    def contended(arm, cases):
        return [Sample(s.case, s.metrics, info={"contention": 0.5}) for s in busy(arm, cases)]

    rep = ab.run(config(max_pairs=4), contended)
    assert all(v.status == "unknown" and v.dropped == 4 and v.rounds == 0 for v in rep.verdicts)


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
    (["--a-transport", "mpi,ring"], "must name one transport"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle, capsys):
    assert main(["ab", "--sizes", "4", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_a_pair_whose_worlds_ran_in_different_machine_modes_is_dropped():
    same = fake(1.0)
    calls = {"n": 0}

    def moded(arm, cases):  # every third world in the slow mode: most pairs straddle modes
        calls["n"] += 1
        canary = 165.0 if calls["n"] % 3 == 0 else 100.0
        return [Sample(s.case, s.metrics, info={"contention": 0.0, "canary_us": canary})
                for s in same(arm, cases)]

    rep = ab.run(config(max_pairs=8), moded)
    assert all(v.rounds + v.dropped == 8 and v.dropped > 0 for v in rep.verdicts)
    rep = ab.run(config(max_pairs=8, canary_shift=None), moded)
    assert all(v.rounds == 8 and v.dropped == 0 for v in rep.verdicts)
