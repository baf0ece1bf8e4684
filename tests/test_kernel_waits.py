"""The allreduce kernel's world-wide steps outside the timed loop, on a fake communicator (no MPI):
while rank 0 measures a copy bandwidth the other ranks wait without spinning, the tests' switch
turns that measurement off, and the ranks whose sum was wrong survive pooling."""
from __future__ import annotations

import time

import pytest

from perfsuite.kernels.collectives import allreduce
from perfsuite.kernels.context import RankContext
from perfsuite.records.model import Case, Metric, Sample
from perfsuite.verdicts.rounds import pool_rounds


class FakeRequest:
    def __init__(self, log: list, polls: int):
        self.log, self.polls = log, polls

    def Test(self) -> bool:
        self.log.append("Test")
        self.polls -= 1
        return self.polls < 0


class FakeComm:
    """Records the collectives one rank calls; a nonblocking barrier completes on its third test."""

    def __init__(self, rank: int, log: list):
        self.rank, self.log = rank, log

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return 2

    def gather(self, obj, root=0):
        self.log.append("gather")
        return [obj, obj] if self.rank == root else None

    def bcast(self, obj, root=0):
        return obj

    def Barrier(self) -> None:
        self.log.append("Barrier")

    def Ibarrier(self) -> FakeRequest:
        self.log.append("Ibarrier")
        return FakeRequest(self.log, 2)


def run_rank(monkeypatch, rank: int, options: dict, device_copy: float | None = None) -> tuple[list, dict]:
    """The kernel's ``run`` with no cases on one rank of a fake 2-rank world: (its calls, extra)."""
    log: list[str] = []

    class Transport:
        native, host_buffers = None, device_copy is None

        def __init__(self, comm, options):
            pass

        def describe(self) -> dict:
            return {}

        def copy_bandwidth(self) -> float | None:
            log.append("device copy")
            return device_copy

        def close(self) -> None:
            pass

    def host_copy() -> float:
        log.append("host copy")
        return 7.0

    monkeypatch.setattr(allreduce, "load_transport", lambda name, *kind: Transport)
    monkeypatch.setattr(allreduce, "copy_bandwidth", host_copy)
    monkeypatch.setattr(time, "sleep", lambda s: log.append("sleep"))
    ctx = RankContext(FakeComm(rank, log), rank, 2, "mpi", [], options, emit=lambda d: None)
    return log, allreduce.run(ctx)


def test_the_other_ranks_wait_without_spinning_while_rank_0_copies(monkeypatch):
    log, extra = run_rank(monkeypatch, 1, {"copy_bw": True})
    assert "host copy" not in log and "device copy" not in log
    # One quiet wait per copy (the device's before the cases, the host's after), each polled
    # between sleeps; a blocking barrier, which spins in MPI's progress loop, only after both.
    assert log.count("Ibarrier") == 2, log
    first_block = log.index("Barrier") if "Barrier" in log else len(log)
    assert first_block > max(i for i, c in enumerate(log) if c == "Ibarrier"), log
    assert log[log.index("Ibarrier"):].index("sleep") < log[log.index("Ibarrier"):].index("Ibarrier", 1), log
    assert "host_copy_GBps" not in extra


def test_rank_0_copies_before_it_joins_the_wait(monkeypatch):
    log, extra = run_rank(monkeypatch, 0, {"copy_bw": True}, device_copy=900.0)
    waits = [i for i, c in enumerate(log) if c == "Ibarrier"]
    assert len(waits) == 2 and log.index("device copy") < waits[0] < log.index("host copy") < waits[1], log
    assert extra["host_copy_GBps"] == 7.0 and extra["device_copy_GBps"] == 900.0


def test_no_copy_no_wait(monkeypatch):
    for rank in (0, 1):
        log, extra = run_rank(monkeypatch, rank, {"copy_bw": False})
        assert log == ["gather", "Barrier"] and "host_copy_GBps" not in extra


def test_the_tests_switch_turns_the_copy_off_unless_a_world_asks(monkeypatch):
    monkeypatch.setenv(allreduce.NO_COPY_BW_ENV, "1")
    assert not allreduce.copy_wanted({}) and allreduce.copy_wanted({"copy_bw": True})
    monkeypatch.delenv(allreduce.NO_COPY_BW_ENV)
    assert allreduce.copy_wanted({}) and not allreduce.copy_wanted({"copy_bw": False})


def _round(invalid_ranks: list[int] | None) -> Sample:
    info = {"invalid_ranks": invalid_ranks} if invalid_ranks is not None else {}
    return Sample(Case("allreduce", "mpi", 3, size_bytes=4), {"latency_us": Metric("latency_us", 1.0, "us", False)},
                  not invalid_ranks, (1e-6,), info)


@pytest.mark.parametrize("max_contention", [None, 0.5])
def test_pooled_rounds_name_every_rank_that_was_wrong_in_any_round(max_contention):
    pooled = pool_rounds([_round([2]), _round([0, 2]), _round([])], max_contention)  # the last round: clean
    assert not pooled.valid and pooled.info["invalid_ranks"] == [0, 2]
    assert pool_rounds([_round([]), _round([])], max_contention).info["invalid_ranks"] == []
    assert "invalid_ranks" not in pool_rounds([_round(None), _round(None)], max_contention).info
