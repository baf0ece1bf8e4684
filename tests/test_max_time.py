"""The time budget per size (``--max-time``, pytest-benchmark's ``max_time``): each size's
iterations are the budget over the warm-up's time per call, between the floor and the by-size
default, the same on every rank; ``--iters`` stays exact. What decided a sample's count is in
its info (``iters_by``)."""
from __future__ import annotations

import pytest

from perfsuite.faces import cli, options
from perfsuite import suite
from perfsuite.bench.allreduce import allreduce_cases
from perfsuite.records.errors import ConfigError
from perfsuite.kernels.collectives.allreduce import DEVICE_SAMPLES, MIN_BATCH_CALLS, MIN_ITERS, MIN_WARMUP, WARMUP_SHARE, budget_iters, default_iters, iters_floor, warm_up
from perfsuite.launch.launchers import LaunchConfig
from perfsuite.launch.world import run_world
from perfsuite.transports.base import AllreduceTransport
from perfsuite.collectives import SIZE_MAX_TIME_S
from perfsuite.records.userbench import DEFAULT_MAX_TIME_S

# --- the choice: a pure function ----------------------------------------------------------------


def test_a_fast_call_keeps_the_by_size_count():
    """OMB's counts stand wherever they fit the budget: mpi and ring here keep every count."""
    for size in (4, 8192, 1 << 20, 64 << 20):
        default, _ = default_iters(size)
        assert budget_iters(1.0, 1.0 / default, default) == (default, "default")
        assert budget_iters(1.0, 1e-6, default) == (default, "default")


def test_a_slow_call_gets_what_the_budget_holds():
    assert budget_iters(1.0, 2e-3, 1000) == (500, "max_time")  # a 2 ms call: 500 fit in 1 s
    assert budget_iters(0.5, 2e-3, 1000) == (250, "max_time")
    assert budget_iters(1.0, 1.0 / 999.5, 1000) == (999, "max_time")


def test_never_fewer_than_the_floor():
    assert budget_iters(1.0, 0.5, 1000) == (MIN_ITERS, "max_time")
    assert budget_iters(1e-9, 1e-3, 1000) == (MIN_ITERS, "max_time")
    # At the floor already (64 MiB), the default decides: the budget has nothing to cut.
    assert budget_iters(1.0, 0.3, MIN_ITERS) == (MIN_ITERS, "default")


def test_no_estimate_keeps_the_default():
    assert budget_iters(1.0, None, 1000) == (1000, "default")
    assert budget_iters(1.0, 0.0, 1000) == (1000, "default")


class _Timed(AllreduceTransport):
    """A transport on a fake clock: each call advances it by ``per_call`` (the first by
    ``first``, a new size's setup) and counts; ``sync`` is free."""

    def __init__(self, per_call: float, first: float | None = None):
        super().__init__(None)
        self.now, self.per_call, self.first, self.calls = 0.0, per_call, first, 0

    def allreduce(self, send, recv):
        self.now += self.first if (self.calls == 0 and self.first is not None) else self.per_call
        self.calls += 1

    def clock(self) -> float:
        return self.now


class _Agree:
    """The ranks' agreement (max over ranks) as one rank sees it: records each call."""

    def __init__(self, others: float = 0.0):
        self.others, self.asked = others, []

    def __call__(self, x: float) -> float:
        self.asked.append(x)
        return max(x, self.others)


def test_the_warm_up_estimates_a_call_without_the_first():
    t = _Timed(2e-3, first=0.5)  # a TensorFlow trace on the first call of a size
    barriers = []
    calls, per_call = warm_up(t, None, None, 100, _Agree(), barrier=lambda: barriers.append(1), clock=t.clock)
    assert per_call == pytest.approx(2e-3) and calls == t.calls == len(barriers)  # each call after one


def test_the_warm_up_stops_at_its_share_of_the_budget():
    t = _Timed(2e-3)
    calls, _ = warm_up(t, None, None, 100, _Agree(), max_time=1.0, clock=t.clock)
    assert calls == t.calls == MIN_WARMUP + int(WARMUP_SHARE * 1.0 / 2e-3)  # 2 + 50
    fast = _Timed(1e-6)
    assert warm_up(fast, None, None, 100, _Agree(), max_time=1.0, clock=fast.clock)[0] == 100
    slow = _Timed(1.0)
    assert warm_up(slow, None, None, 100, _Agree(), max_time=1.0, clock=slow.clock)[0] == MIN_WARMUP


def test_the_slowest_rank_decides_for_every_rank():
    """Each rank's estimate goes through the agreement, and what comes back is used: a rank
    whose own calls were fast still cuts as the slowest rank does (a disagreement would hang)."""
    t = _Timed(1e-6)
    agree = _Agree(others=2e-3)
    calls, per_call = warm_up(t, None, None, 100, agree, max_time=1.0, clock=t.clock)
    assert per_call == 2e-3 and calls == MIN_WARMUP + 50 and len(agree.asked) == 2


def test_a_given_warm_up_is_exact_and_iters_given_measures_nothing():
    t = _Timed(1.0)
    assert warm_up(t, None, None, 7, _Agree(), max_time=None, clock=t.clock) == (7, pytest.approx(1.0))
    u = _Timed(1.0)
    assert warm_up(u, None, None, 7, None, clock=u.clock) == (7, None) and u.calls == 7
    assert warm_up(_Timed(1.0), None, None, 0, _Agree()) == (0, None)


def test_a_device_batch_keeps_its_calls_under_the_budget():
    class Device(_Timed):
        timing = "batch"

    floor = iters_floor(Device(1.0))
    assert floor == DEVICE_SAMPLES * MIN_BATCH_CALLS and iters_floor(_Timed(1.0)) == MIN_ITERS
    assert budget_iters(1.0, 1.0, 1000, floor) == (floor, "max_time")


def test_max_time_is_one_word_with_the_user_benchmarks():
    """One word, two scopes: a collective's budget is per size (13 a world), a user step's per
    benchmark as pytest-benchmark's."""
    assert options.max_time("0.25") == 0.25
    cfg = options.suite_config({"max_time": "0.5"})
    assert cfg.options["max_time"] == 0.5
    assert "max_time" not in options.suite_config({}).options  # the kernel's default
    assert SIZE_MAX_TIME_S == 0.5 and DEFAULT_MAX_TIME_S == 1.0


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "soon"])
def test_a_bad_max_time_is_one_line_and_exit_2(bad, capsys):
    with pytest.raises(ConfigError, match=f"max time '{bad}' must be seconds"):
        options.suite_config({"max_time": bad})
    assert cli.main(["run", "--transports", "mpi", "--max-time", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max time" in err[0], err


# --- a real world --------------------------------------------------------------------------------

SIZES = [4, 65536]  # both 1000 calls by default


def _world(**opts):
    (spec,) = suite.plan(allreduce_cases(["mpi"], [2], SIZES), {"copy_bw": False, "canary": 0, **opts})
    res = run_world(spec, LaunchConfig(), timeout=120)
    assert all(s.valid for s in res.samples)
    return [s.info for s in res.samples]


@pytest.mark.world
def test_a_world_cuts_iterations_to_the_budget_and_iters_stays_exact(no_leftover_ranks):
    """A budget no call fits (1 us per size) leaves the floor and the least warm-up; a budget
    every call fits leaves OMB's counts; --iters is exact whatever the budget. Counts and
    fields only: no wall time is asserted."""
    cut = _world(max_time=1e-6)
    assert [(i["iters"], i["iters_by"], i["warmup"]) for i in cut] == [(MIN_ITERS, "max_time", MIN_WARMUP)] * 2
    assert all(i["max_time"] == 1e-6 and i["warmup_call_us"] > 0 for i in cut)
    kept = _world(max_time=1e6, warmup=3)
    assert [(i["iters"], i["iters_by"], i["warmup"]) for i in kept] == [(1000, "default", 3)] * 2
    exact = _world(max_time=1e-6, iters=7)
    assert [(i["iters"], i["iters_by"], i["warmup"]) for i in exact] == [(7, "iters", 100)] * 2
    assert all("max_time" not in i and "warmup_call_us" not in i for i in exact)
