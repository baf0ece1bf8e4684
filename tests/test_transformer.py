"""The transformer workload of torch-epoch: GPT-2 in torch.nn at the catalogue's shapes, DDP
against FSDP2, float32 against bf16, tokens/s and MFU, the loss and shard checks, and each
collective's exposed time from a profiled window. Pure parts without torch; worlds are real
(2 ranks over gloo)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from conftest import perfsuite, said
from perfsuite import suite
from perfsuite.bench import get as get_benchmark
from perfsuite.bench.torch_epoch import torch_cases
from perfsuite.records.errors import ConfigError
from perfsuite.kernels.training import exposure, peaks
from perfsuite.kernels.models import catalogue, gpt_torch as gpt
from perfsuite.kernels.models.catalogue import MODELS, check_image_size, check_seq_len
from perfsuite.kernels.training.loop import loss_checks, parallel_amp, summarize, training_variant
from perfsuite.records.model import Case

from test_torch import TINY, measured, needs_torch


# --- pure: the axes, the checks, the counts ------------------------------------------------------

def test_parallelism_and_precision_are_case_axes_and_old_names_hold():
    assert [training_variant(p, a) for p in ("ddp", "fsdp") for a in ("off", "bf16")] == \
        ["", "bf16", "fsdp", "fsdp-bf16"]
    for v in ("", "bf16", "fsdp", "fsdp-bf16"):
        assert training_variant(*parallel_amp(v)) == v
    cases = torch_cases(["torch-gloo"], [2], "small-cnn,gpt-tiny", None, ("ddp", "fsdp"), ("off", "bf16"))
    names = [c.name for c in cases]
    assert "torch-epoch[torch-gloo-n2-small-cnn-b32]" in names  # a CNN's name from before the axes
    assert "torch-epoch[torch-gloo-n2-gpt-tiny-b8-fsdp-bf16]" in names  # the model's own batch, 8
    assert len({c.world_key for c in cases}) == 8  # DDP and FSDP, off and bf16: worlds of their own


def test_bad_axes_and_sizes_get_one_line():
    from perfsuite.bench.torch_epoch import parse_amp, parse_parallel

    with pytest.raises(ConfigError, match=r"^parallelism 'zero3' is unknown; choose from ddp, fsdp"):
        parse_parallel("ddp,zero3")
    with pytest.raises(ConfigError, match=r"^precision \(amp\) 'fp8' is unknown; choose from off, bf16"):
        parse_amp("fp8")
    with pytest.raises(ConfigError, match=r"^image size 64 does not apply to gpt-tiny, a language model"):
        check_image_size("gpt-tiny", 64)
    with pytest.raises(ConfigError, match=r"^sequence length '1' for gpt-tiny must be a whole number >= 2"):
        check_seq_len("gpt-tiny", "1")
    with pytest.raises(ConfigError, match=r"^sequence length 64 does not apply to small-cnn, an image model"):
        check_seq_len("small-cnn", 64)


def test_loss_checks_say_finite_and_falling():
    assert loss_checks([7.6, 7.0, 6.1, 5.0, 4.2, 3.9]) | {} == {
        "loss_finite": True, "loss_falling": True, "loss_first": 7.6, "loss_last": 3.9}
    assert loss_checks([7.6, 7.6, 7.7, 7.6, 7.7, 7.8])["loss_falling"] is False
    nan = loss_checks([7.6, 6.0, float("nan"), 5.0])
    assert nan["loss_finite"] is False and nan["loss_falling"] is False
    assert loss_checks([])["loss_finite"] is False
    short = loss_checks([7.6, 7.7])  # too few steps to say: not judged on it, never invalid for it
    assert short["loss_finite"] is True and short["loss_falling"] is None


def test_a_language_model_is_timed_in_tokens_per_second():
    case = Case("torch-epoch", "torch-gloo", 2, model="gpt-tiny", batch=8)
    times = np.full((5, 2), 0.05)
    s = summarize(case, times, None, [0.04] * 5, {"seq_len": 64})
    assert "img_per_s" not in s.metrics and s.metrics["tokens_per_s"].unit == "tokens/s"
    assert s.info["tokens_per_s"] == pytest.approx(2 * 8 * 64 / 0.05)
    assert s.info["plain_tokens_per_s"] == pytest.approx(8 * 64 / 0.04)
    assert s.info["scaling_efficiency"] == pytest.approx(0.8)


def test_flops_per_token_counts_as_torchtitan():
    shape = MODELS["gpt2-small"].lm
    d, n_layer, vocab, seq = shape.d_model, shape.n_layer, shape.vocab, 1024
    params = vocab * d + seq * d + n_layer * (12 * d * d + 13 * d) + 2 * d  # GPT-2 small, head tied
    assert params == 124_439_808  # the 124M of the GPT-2 paper's smallest model
    f = catalogue.flops_per_token(params, seq * d, shape, seq)
    assert f == 6 * (params - seq * d) + 12 * n_layer * d * seq


@needs_torch
def test_the_torch_gpt_has_the_catalogues_shape():
    import torch

    for name, expected in (("gpt-tiny", None), ("gpt2-small", 124_439_808)):
        model = gpt.build_gpt(torch, name, MODELS[name].seq_len)
        n = sum(p.numel() for p in model.parameters())
        shape = MODELS[name].lm
        d, seq = shape.d_model, MODELS[name].seq_len
        assert n == shape.vocab * d + seq * d + shape.n_layer * (12 * d * d + 13 * d) + 2 * d
        assert expected is None or n == expected
        assert model.lm_head.weight is model.wte.weight and len(model.blocks()) == shape.n_layer
    x, y = gpt.synthetic_tokens(torch, 4, 16, 2048, seed=1)
    assert x.shape == y.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])
    logits = gpt.build_gpt(torch, "gpt-tiny", 16)(x)
    assert logits.shape == (4, 16, 2048)
    assert math.isclose(gpt.lm_loss(torch)(logits, y).item(), math.log(2048), rel_tol=0.05)  # untrained


def test_peaks_are_known_by_gpu_name_and_precision_and_never_guessed():
    assert peaks.peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989.4e12
    assert peaks.peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12
    assert peaks.peak_flops("NVIDIA H200", "off") == 66.9e12
    assert peaks.peak_flops("NVIDIA GH200 480GB", "bf16") == 989.4e12
    assert peaks.peak_flops(None, "bf16") is None and peaks.peak_flops("Tesla T4", "bf16") is None
    assert peaks.mfu(1e5, 1e9, 2, 1e14) == pytest.approx(0.5)
    assert peaks.mfu(1e5, 1e9, 2, None) is None


def test_exposed_time_is_what_no_compute_covers():
    compute = [(0, 10), (5, 20), (30, 40)]
    assert exposure.merged(compute) == [(0, 20), (30, 40)]
    assert exposure.covered(15, 35, exposure.merged(compute)) == 10
    table = exposure.exposure([("all_gather", 15_000, 35_000), ("all_gather", 40_000, 50_000),
                               ("reduce_scatter", 0, 5_000)], [(0, 20_000), (30_000, 40_000)], steps=2)
    assert table == {"all_gather": {"calls": 1.0, "ms": 15.0, "exposed_ms": 10.0},
                     "reduce_scatter": {"calls": 0.5, "ms": 2.5, "exposed_ms": 0.0}}


def test_gloo_work_is_named_by_the_call_that_launched_it():
    launches = [("all_gather", 0), ("reduce_scatter", 10), ("all_gather", 20), ("reduce_scatter", 30)]
    works = [("all_gather", 1, 2), ("all_reduce", 11, 12), ("all_gather", 21, 22), ("all_reduce", 31, 32)]
    assert [n for n, _, _ in exposure.named_host_work(launches, works)] == \
        ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter"]
    assert [n for n, _, _ in exposure.named_host_work([("allreduce", 0)], [("all_reduce", 1, 2)])] == ["allreduce"]


# --- real worlds ------------------------------------------------------------------------------

@needs_torch
@pytest.mark.world
def test_gpt_tiny_under_ddp_and_fsdp_checks_and_breaks_down_its_collectives(no_leftover_ranks):
    worlds = suite.plan(torch_cases(["torch-gloo"], [2], "gpt-tiny", "4", ("ddp", "fsdp")),
                        {**TINY, "iters": 8, "profile_steps": 2})
    by = {}
    for world in worlds:
        res = measured(world)
        (s,) = res.samples
        by[s.info["parallel"]] = (s, res)
    for parallel, (s, res) in by.items():
        assert s.valid and s.metrics["tokens_per_s"].value > 0 and s.info["seq_len"] == 64
        assert s.info["loss_finite"] and s.info["loss_falling"] and s.info["loss_last"] < s.info["loss_first"]
        assert s.info["weights_identical"] is True and s.info["vs_plain_loop"] > 0
        assert s.info["flops_per_token"] > 6 * s.info["params"] * 0.9 and "mfu" not in s.info  # no peak on a CPU
        table = s.info["collectives_per_step"]
        for row in table.values():
            assert 0 <= row["exposed_ms"] <= row["ms"] + 1e-9 and row["calls"] > 0
        text = get_benchmark("torch-epoch").table(res)
        assert re.search(r"gpt-tiny\S* batch 4: loss \d+\.\d+ -> \d+\.\d+, finite yes, falling yes", text), text
    assert set(by["ddp"][0].info["collectives_per_step"]) == {"allreduce"}
    assert set(by["fsdp"][0].info["collectives_per_step"]) == {"all_gather", "reduce_scatter"}
    fsdp = by["fsdp"][0]
    assert fsdp.info["shards_consistent"] is True and fsdp.info["transport_facts"]["fsdp_units"] == 3
    assert fsdp.info["straggler_measure"] == "compute"  # each rank's compute, from the profiled steps


@needs_torch
@pytest.mark.world
def test_bf16_runs_on_the_host_under_ddp_and_fsdp(no_leftover_ranks):
    worlds = suite.plan(torch_cases(["torch-gloo"], [2], "gpt-tiny", "4", ("ddp", "fsdp"), ("bf16",)),
                        {**TINY, "profile_steps": 0, "yardsticks": False})
    for world in worlds:
        (s,) = measured(world).samples
        assert s.valid and s.info["amp"] == "bf16" and s.info["loss_falling"]
        assert "collectives_per_step" not in s.info  # profile_steps 0: no breakdown


@needs_torch
@pytest.mark.world
def test_a_nan_in_one_rank_fails_the_world_with_exit_4(tmp_path, no_leftover_ranks):
    r = perfsuite("run", "--benchmarks", "torch-epoch", "--transports", "torch-gloo", "--models", "gpt-tiny",
                  "--parallel", "fsdp", "--world-sizes", "2", "--batches", "2", "--iters", "4", "--warmup", "1",
                  "--yardsticks", "off", "--profile-steps", "0", "--json", "r.json", cwd=tmp_path,
                  PERFSUITE_TEST_FAULT="corrupt@1")
    assert r.returncode == 4, said(r)
    assert ("INVALID: torch-epoch[torch-gloo-n2-gpt-tiny-b2-fsdp] did not measure what it claims (the loss was "
            "not finite on some step): a failed world, not a measurement") in r.stdout, said(r)


def test_fsdp_over_ddp_and_bf16_over_float32_are_paired_by_round():
    from perfsuite.bench.training import axis_lines
    from perfsuite.records.model import ROUNDS_KEY

    def sample(variant: str, rounds: list[float]):
        case = Case("torch-epoch", "torch-gloo", 2, model="gpt-tiny", batch=8, variant=variant)
        s = summarize(case, np.full((4, 2), 0.05), None, None, {"seq_len": 64})
        s.info[ROUNDS_KEY] = {"tokens_per_s": rounds}
        return s

    lines = axis_lines([sample("", [100.0, 110.0, 90.0]), sample("fsdp", [60.0, 66.0, 54.0]),
                        sample("bf16", [200.0, 220.0, 180.0]), sample("fsdp-bf16", [120.0, 132.0, 108.0])],
                       "torch-epoch")
    assert "# tokens/s(fsdp)/tokens/s(ddp) = 0.60 [0.60, 0.60] 95% over 3 interleaved rounds  (torch-gloo, " \
           "gpt-tiny, off, batch 8, 2 workers: 60.0 vs 100.0 tokens/s)" in lines
    assert any("(torch-gloo, gpt-tiny, fsdp, batch 8, 2 workers: 120.0 vs 60.0 tokens/s)" in line for line in lines)
    assert sum("tokens/s(bf16)/tokens/s(off) = 2.00 [2.00, 2.00]" in line for line in lines) == 2
    assert sum("tokens/s(fsdp)/tokens/s(ddp) = 0.60" in line for line in lines) == 2
    assert any(re.match(r"# tokens/s 99\.\d \[\d+\.\d, \d+\.\d\] 95% over 3 rounds \(torch-gloo, gpt-tiny, "
                        r"batch 8, 2 workers; geometric mean\)", line) for line in lines), lines


def test_both_frameworks_say_why_an_epoch_is_invalid_in_one_rule():
    from perfsuite.kernels.training.loop import invalid_why, world_checks

    ok = world_checks([loss_checks([7.0, 6.0, 5.0]), loss_checks([7.0, 6.1, 5.1])])
    assert invalid_why(ok, True, is_lm=True) is None
    flat = world_checks([loss_checks([7.0, 7.1, 7.2]), loss_checks([7.0, 6.0, 5.0])])
    assert invalid_why(flat, True, is_lm=True) == "the loss did not fall over the epoch (7.000 -> 7.200)"
    assert invalid_why(flat, True, is_lm=False) is None  # an image model's labels may be noise
    nan = world_checks([loss_checks([7.0, float("nan")]), loss_checks([7.0, 6.0])])
    assert invalid_why(nan, True, is_lm=False) == "the loss was not finite on some step"
    assert invalid_why(ok, False, is_lm=True) == "the replicas differ after the epoch"
    assert invalid_why(ok, False, is_lm=True, sharded=True).startswith("the parameters gathered from the shards")
    short = world_checks([loss_checks([7.0, 7.2]), loss_checks([7.0, 7.3])])
    assert short["loss_falling"] is None and invalid_why(short, True, is_lm=True) is None
