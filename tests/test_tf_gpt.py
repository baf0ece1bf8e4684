"""gpt-tiny in Keras for tf-epoch: the same GPT-2 as torch-epoch's (parameters, batch, FLOPs),
a causal model whose first loss is ln(vocab), the input options refused where they fit no chosen
model, and real worlds on each of the seed study's transports reporting tokens/s with a finite,
falling loss."""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from perfsuite.faces import cli
from perfsuite import transports
from perfsuite.bench import Selection, get as get_benchmark
from perfsuite.bench.tf_epoch import cases as tf_epoch_cases
from perfsuite.records.errors import ConfigError
from perfsuite.kernels.models import catalogue, gpt_keras as tf_gpt, gpt_torch as gpt
from perfsuite.kernels.models.catalogue import MODELS
from perfsuite.kernels.models.keras_models import workload
from perfsuite.records.model import Case, WorldSpec

from test_tf_epoch import measured

HAS_TF = importlib.util.find_spec("tensorflow") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_tf = pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
TINY = {"iters": 4, "warmup": 1, "baseline": False}
#: gpt-tiny's parameters, tied head counted once: wte 2048x128 + wpe 64x128 + 2 blocks of 198,272
#: + ln_f 256.
GPT_TINY_PARAMS = 667_136


@pytest.fixture(scope="module")
def tf():
    from perfsuite.transports.tf.support import import_tf

    tf = import_tf()
    tf.config.set_visible_devices([], "GPU")  # a host test: the model's numbers, not a device's
    return tf


# --- the bad input: one line, exit 2, before any world starts ---------------------------------------

@pytest.mark.parametrize("argv, says", [
    (["--models", "gpt-tiny", "--image-size", "32"],
     "image size 32 does not apply to gpt-tiny, a language model; its input is set by the sequence length "
     "(--seq-len)"),
    (["--models", "small-cnn", "--seq-len", "32"],
     "sequence length 32 does not apply to small-cnn, an image model; choose a language model "
     "(gpt-tiny, gpt2-small) or set --image-size"),
    (["--models", "gpt-tiny", "--seq-len", "1"],
     "sequence length 1 for gpt-tiny must be a whole number >= 2 (tokens per sequence), e.g. 64"),
])
def test_an_input_size_that_fits_no_chosen_model_is_one_line(argv, says, capsys):
    assert cli.main(["run", "--benchmarks", "tf-epoch", "--transports", "mpi", "--world-sizes", "2", *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"perfsuite run: error: {says}"]


def test_a_run_of_both_kinds_gives_each_its_own_size():
    sel = Selection(benchmark="tf-epoch", transports=("mpi",), world_sizes=(2,),
                    values={"models": "small-cnn,gpt-tiny", "image_size": 48, "seq_len": 32})
    assert [(c.model, c.batch) for c in tf_epoch_cases(sel)] == [("small-cnn", 32), ("gpt-tiny", 8)]
    assert workload("gpt-tiny", 48, None, 32).seq_len == 32 and workload("small-cnn", 48, None, 32).image == 48
    with pytest.raises(ConfigError, match="^image size 4 for small-cnn must be a whole number >= 8"):
        tf_epoch_cases(Selection(benchmark="tf-epoch", transports=("mpi",),
                                 values={"models": "small-cnn,gpt-tiny", "image_size": 4}))


def test_seq_len_is_one_option_of_both_training_benchmarks():
    tf_opts = {o.name: o for o in get_benchmark("tf-epoch").options}
    torch_opts = {o.name: o for o in get_benchmark("torch-epoch").options}
    assert tf_opts["seq-len"] is torch_opts["seq-len"] and tf_opts["seq-len"].knob == "seq_len"


# --- the model: torch's GPT-2 in Keras ---------------------------------------------------------------

@needs_tf
def test_keras_gpt_tiny_is_torchs_gpt_tiny(tf):
    """The same parameters tensor for tensor (the head tied to the token embedding in both), the
    same FLOPs per token and the same batch."""
    model = tf_gpt.build_gpt(tf, "gpt-tiny", 64)
    sizes = sorted(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert sum(sizes) == GPT_TINY_PARAMS and len(sizes) == 28
    facts = workload("gpt-tiny").facts(model)
    spec = MODELS["gpt-tiny"]
    assert facts == {"params": GPT_TINY_PARAMS, "classes": 2048, "seq_len": 64, "vocab": 2048,
                     "architecture": "GPT-2 decoder in Keras, 2 blocks x 128, 4 heads, vocab 2048, tied head",
                     "flops_per_token": catalogue.flops_per_token(GPT_TINY_PARAMS, 64 * 128, spec.lm, 64)}
    x, y = tf_gpt.synthetic_tokens(tf, 4, 64, 2048, seed=7)
    tokens = catalogue.zipf_tokens(4, 64, 2048, seed=7)
    assert x.dtype == tf.int32 and np.array_equal(x.numpy(), tokens[:, :-1])
    assert np.array_equal(y.numpy(), tokens[:, 1:])
    if HAS_TORCH:
        import torch

        torch_model = gpt.build_gpt(torch, "gpt-tiny", 64)
        assert sorted(p.numel() for p in torch_model.parameters()) == sizes
        tx, _ = gpt.synthetic_tokens(torch, 4, 64, 2048, seed=7)
        assert np.array_equal(tx.numpy(), x.numpy())


@needs_tf
def test_keras_gpt_is_causal_and_starts_at_ln_vocab(tf):
    # Keras draws the init from its global generator, which whatever ran before in this process
    # has moved (CI's xdist workers run tests in any order): the init is seeded here.
    tf.keras.utils.set_random_seed(3)
    model = tf_gpt.build_gpt(tf, "gpt-tiny", 64)
    x, y = tf_gpt.synthetic_tokens(tf, 2, 64, 2048, seed=3)
    logits = model(x)
    assert logits.shape == (2, 64, 2048) and logits.dtype == tf.float32
    # GPT-2's init (std 0.02) gives near-uniform logits: the first loss is ln(vocab), within the
    # few hundredths an init moves it by (docs/measurements.md); a model whose logits are not
    # near-uniform at init is tenths off.
    loss = float(tf.reduce_mean(tf_gpt.lm_loss(tf)(y, logits)))
    assert abs(loss - math.log(2048)) < 0.1, loss
    # Token 40 onwards changed: positions before 40 see nothing of it.
    changed = tf.concat([x[:, :40], (x[:, 40:] + 1) % 2048], axis=1)
    again = model(changed)
    assert np.allclose(again[:, :40].numpy(), logits[:, :40].numpy(), atol=1e-5)
    assert not np.allclose(again[:, 40:].numpy(), logits[:, 40:].numpy(), atol=1e-5)


# --- real worlds: 2 ranks, a few steps, on each of the seed study's transports -------------------------

@pytest.mark.tf
@pytest.mark.world
@needs_tf
@pytest.mark.parametrize("transport", ["mpi", "grpc", "horovod"])
def test_gpt_tiny_trains_on_each_tf_transport_and_reports_tokens_per_s(transport, no_leftover_ranks):
    reason = transports.unavailable_reason(transport, "tf-epoch")
    if reason:
        pytest.skip(reason)
    case = Case("tf-epoch", transport, 2, model="gpt-tiny", batch=4)
    res = measured(WorldSpec("tf-epoch", transport, 2, (case,), {**TINY, "seq_len": 32}))
    (s,) = res.samples
    assert s.valid and s.metrics["tokens_per_s"].value > 0 and "img_per_s" not in s.metrics
    assert s.info["seq_len"] == 32 and s.info["vocab"] == 2048 and s.info["weights_identical"] is True
    # Position table 32 x 128 instead of 64 x 128.
    assert s.info["params"] == GPT_TINY_PARAMS - 32 * 128
    assert s.info["loss_finite"] and s.info["loss_falling"] and s.info["loss_last"] < s.info["loss_first"]
    # Each transport reports the per-token mean (gRPC's step sums over the world's tokens).
    assert abs(s.info["loss_first"] - math.log(2048)) < 0.05, s.info["loss_first"]
    text = get_benchmark("tf-epoch").table(res)
    assert "tokens/s" in text and "gpt-tiny batch 4: loss " in text and "finite yes, falling yes" in text, text
    if transport == "horovod":
        assert res.extra["keras"].startswith("tf_keras")  # the same model on Keras 2
