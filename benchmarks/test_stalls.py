"""Stash stall breakdown as pytest-benchmark entries: `pytest benchmarks --perf-stalls small-cnn
--perf-emulated-network 1gbit --benchmark-only -k stall` (root for the network and cold-cache runs).

The five epochs run once per session (``perfsuite.stalls.experiment.run_stalls``, the same call
as ``perfsuite stalls``); each part (compute and the four stalls, ms per step, lower is better)
is its own entry, whose rounds are that part's per-step values, so pytest-benchmark's
statistics show its spread. A part that could not be measured here is skipped with the reason.
"""
import os
import tempfile

import pytest

from perfsuite.stalls import dataset
from perfsuite.stalls import stash as stalls
from perfsuite.stalls.experiment import StallConfig, run_stalls
from perfsuite.records.model import Sample
from perfsuite.suite import SuiteConfig

PARTS = ("compute",) + tuple(stalls.STALLS)
BATCH, STEPS, WARMUP, IMAGE = 8, 8, 2, 32


@pytest.fixture(scope="session")
def stall_breakdown(perf_state):
    model = perf_state.values.get("stalls")
    if not model:
        pytest.skip("stall breakdown not asked for (--perf-stalls MODEL)")
    cfg = perf_state.suite_config
    n = (perf_state.selection("tf-epoch").world_sizes or (2,))[0]
    count = n * (WARMUP + STEPS) * BATCH
    data_dir = os.path.join(tempfile.gettempdir(), f"perfsuite-jpeg-{count}x{IMAGE * 2}")
    dataset.ensure_dataset(data_dir, dataset.DatasetSpec(count=count, image_px=IMAGE * 2))
    sc = StallConfig(model=model, world_size=max(n, 2), batch=BATCH, network=cfg.network,
                     data_dir=data_dir, options={"iters": STEPS, "warmup": WARMUP, "image_size": IMAGE})
    return run_stalls(sc, SuiteConfig(cfg.launch, cfg.timeout, {}, cfg.workdir))


@pytest.mark.parametrize("part", PARTS)
def test_stall(benchmark, stall_breakdown, perf_state, perf_record, part):
    sample = stall_breakdown.sample
    assert sample.valid, sample.info.get("invalid_reason", "the breakdown's sample did not validate")
    name = "compute_ms" if part == "compute" else stalls.metric_name(part)
    if name not in sample.metrics:
        pytest.skip(sample.info["breakdown"]["stalls"][part]["status"])
    metric = sample.metrics[name]
    bd = stall_breakdown.breakdown
    per_step = (bd.runs["T0"]["median_ms"],) if part == "compute" else bd.stalls[part].per_step_ms
    # pytest-benchmark replays durations: a step's stall below 0 is noise and replays as 0.
    times = tuple(max(0.0, v) / 1e3 for v in (metric.samples or per_step))
    perf_record(benchmark, Sample(sample.case, {name: metric}, sample.valid, times,
                                  {"part": part, "status": "compute" if part == "compute"
                                   else bd.stalls[part].status}))
    if part == "compute":  # the whole breakdown sample, once, for baselines and asv
        perf_state.samples.append(sample)
