"""A job's captured communication, replayed (docs/replay.md): `pytest benchmarks --benchmark-only
-k replay --perf-trace DIR`, DIR from `perfsuite capture`. One case per transport, on a world of
the trace's ranks; its time is the window's per iteration, every call's result checked. Without
--perf-trace the cases are skipped with the reason."""
import pytest


@pytest.mark.perf_benchmark("replay")
def test_replay(benchmark, perf_case, perf_measure):
    assert perf_measure(benchmark).info["calls_per_window"] > 0
