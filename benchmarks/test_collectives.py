"""The other collectives per transport, as allreduce's: `pytest benchmarks --benchmark-only -k
all_gather` (or reduce_scatter, alltoall, broadcast, "test_reduce and not scatter"). Each case is one message size
in one world; sizes and counts are nccl-tests' (an all_gather's size is the gathered buffer's),
and every rank's result is checked against the exact expected values."""
import pytest


@pytest.mark.perf_benchmark("all_gather")
def test_all_gather(benchmark, perf_case, perf_measure):
    assert perf_measure(benchmark).info["op"] == "none"


@pytest.mark.perf_benchmark("reduce_scatter")
def test_reduce_scatter(benchmark, perf_case, perf_measure):
    assert perf_measure(benchmark).info["count"] > 0


@pytest.mark.perf_benchmark("alltoall")
def test_alltoall(benchmark, perf_case, perf_measure):
    assert perf_measure(benchmark).info["count"] > 0


@pytest.mark.perf_benchmark("broadcast")
def test_broadcast(benchmark, perf_case, perf_measure):
    assert perf_measure(benchmark).info["inplace"]  # one buffer, as MPI_Bcast's


@pytest.mark.perf_benchmark("reduce")
def test_reduce(benchmark, perf_case, perf_measure):
    assert "root" in perf_measure(benchmark).info
