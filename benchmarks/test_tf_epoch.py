"""Short TensorFlow training epochs per transport: `pytest benchmarks --benchmark-only -k tf`.

Parametrized model x transport x world size x per-worker batch (--perf-models, --perf-transports,
--perf-world-sizes, --perf-batches). One world per transport, world size and model runs every
selected batch; pytest-benchmark shows the per-step times (the slowest rank of each step), and
extra_info carries img_per_s and scaling_efficiency (against one worker on a plain loop,
measured in the same world).
"""
import pytest


@pytest.mark.perf_benchmark("tf-epoch")
def test_tf_epoch(benchmark, perf_case, perf_measure):
    sample = perf_measure(benchmark)
    assert sample.info["model"] == perf_case.model and sample.info["batch"] == perf_case.batch
    assert sample.info["img_per_s"] > 0
