"""Short PyTorch DDP training epochs per transport: `pytest benchmarks --benchmark-only -k torch`.

Parametrized model x transport x world size x per-worker batch (--perf-models, --perf-transports,
--perf-world-sizes, --perf-batches), as the TensorFlow epochs are. pytest-benchmark shows the
per-step times (the slowest rank of each step); extra_info carries img_per_s, scaling_efficiency
(against one worker on a plain loop) and vs_plain_ddp (against a plain DDP loop in the same world).
"""
import pytest


@pytest.mark.perf_benchmark("torch-epoch")
def test_torch_epoch(benchmark, perf_case, perf_measure):
    sample = perf_measure(benchmark)
    assert sample.info["model"] == perf_case.model and sample.info["batch"] == perf_case.batch
    assert sample.info["img_per_s"] > 0
