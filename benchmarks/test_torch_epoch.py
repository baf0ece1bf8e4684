"""Short PyTorch training epochs per transport: `pytest benchmarks --benchmark-only -k torch`.

Parametrized model x transport x world size x parallelism x precision x per-worker batch
(--perf-models, --perf-transports, --perf-world-sizes, --perf-parallel, --perf-amp, --perf-batches),
as the TensorFlow epochs are. pytest-benchmark shows the per-step times (the slowest rank of each
step); extra_info carries img_per_s (tokens_per_s for gpt-tiny, gpt2-small), scaling_efficiency
(against one worker on a plain loop) and vs_plain_loop (against a plain DDP or FSDP loop in the same world).
"""
import pytest

from perfsuite.kernels.training.loop import rate_of


@pytest.mark.perf_benchmark("torch-epoch")
def test_torch_epoch(benchmark, perf_case, perf_measure):
    sample = perf_measure(benchmark)
    assert sample.info["model"] == perf_case.model and sample.info["batch"] == perf_case.batch
    assert sample.info[rate_of(sample.info)[0]] > 0
