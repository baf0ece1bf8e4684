"""Allreduce microbenchmarks per transport: `pytest benchmarks --benchmark-only -k allreduce`.

Each case is one message size in one world (transport x world size); the world runs once for all
of its selected sizes, and the numbers pytest-benchmark shows are the ranks' per-iteration times.
"""
import pytest


@pytest.mark.perf_benchmark("allreduce")
def test_allreduce(benchmark, perf_case, perf_measure):
    sample = perf_measure(benchmark)
    assert sample.info["size_bytes"] == perf_case.size_bytes
