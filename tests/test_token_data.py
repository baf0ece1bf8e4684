"""A language model's real data: token shards written by ``perfsuite.stalls.dataset`` (deterministic,
versioned, ids inside the vocabulary, something to learn), each rank's shard of them, read by
PyTorch's DataLoader (``torch_input.TokenFeed``) in a real gpt-tiny epoch, and ``perfsuite
stalls --models gpt-tiny`` end to end; wrong input (no folder, a JPEG folder, an image size for a
language model, a TensorFlow transport) is one line and exit 2."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from perfsuite.stalls import dataset
from perfsuite import suite, transports
from perfsuite.records.errors import ConfigError, FormatError
from perfsuite.kernels.training.input_files import TOKEN_DTYPE, check_token_file, list_images, list_tokens, shard

needs_torch = pytest.mark.skipif(not transports.has_module("torch"),
                                 reason="PyTorch is not installed (pip install torch torchvision: perfsuite's torch extra)")


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


# --- the writer ---------------------------------------------------------------------------------

def test_token_shards_are_deterministic_versioned_and_inside_the_vocabulary(tmp_path):
    spec = dataset.TokenSpec(count=12, seq_len=16, vocab=300, seed=5)
    m = dataset.ensure_dataset(tmp_path / "a", spec)
    assert (m["format"], m["version"], m["kind"]) == ("perfsuite-dataset", 2, "tokens")
    assert (m["count"], m["seq_len"], m["vocab"], m["tokens_per_file"]) == (12, 16, 300, 17)
    files = list_tokens(tmp_path / "a")
    assert [os.path.basename(f) for f in files[:2]] == ["tokens-000000.u16", "tokens-000001.u16"]
    assert all(os.path.getsize(f) == 2 * 17 for f in files) and m["bytes"] == 12 * 34
    ids = np.concatenate([np.fromfile(f, dtype=TOKEN_DTYPE) for f in files])
    assert ids.max() < 300
    # The same seed writes the same bytes; another seed other ones.
    dataset.ensure_dataset(tmp_path / "b", spec)
    assert all(open(f, "rb").read() == open(g, "rb").read() for f, g in zip(files, list_tokens(tmp_path / "b")))
    other = dataset.token_stream(12 * 17, 300, 6)
    assert not np.array_equal(other, ids)
    # The files are one stream cut into sequences, little-endian uint16 as the readers expect.
    assert np.array_equal(ids, dataset.token_stream(12 * 17, 300, 5))
    assert open(files[0], "rb").read()[:2] == int(ids[0]).to_bytes(2, "little")
    # Reused, not rewritten; another spec in the folder is refused; so is a vocabulary uint16 cannot hold.
    mtime = os.path.getmtime(files[0])
    assert dataset.ensure_dataset(tmp_path / "a", spec) == m and os.path.getmtime(files[0]) == mtime
    with pytest.raises(ConfigError, match=r"holds another dataset \(12 token files of 17 tokens, vocab 300\)"):
        dataset.ensure_dataset(tmp_path / "a", dataset.TokenSpec(count=12, seq_len=32, vocab=300, seed=5))
    with pytest.raises(ConfigError, match="uint16"):
        dataset.TokenSpec(count=1, seq_len=8, vocab=70000)
    with pytest.raises(ConfigError, match="sequence length 1"):
        dataset.TokenSpec(count=1, seq_len=1, vocab=10)
    assert dataset.warm(tmp_path / "a") == m["bytes"]


def test_the_token_stream_has_something_to_learn():
    """Below uniform: a Zipf-like unigram (what a GPT learns in its first steps), and the
    previous token says more still (the repeated phrases: what it learns after)."""
    vocab = 64  # small, so the bigram table (64 x 64) is well filled by 200k tokens
    t = dataset.token_stream(200_000, vocab, 3).astype(np.int64)
    assert t.size == 200_000 and t.dtype == np.int64 and 0 <= t.min() and t.max() < vocab
    unigram = _entropy(np.bincount(t, minlength=vocab).astype(float))
    pairs = np.bincount(t[:-1] * vocab + t[1:], minlength=vocab * vocab).astype(float)
    conditional = _entropy(pairs) - _entropy(np.bincount(t[:-1], minlength=vocab).astype(float))
    assert unigram < np.log(vocab) - 0.3, unigram
    assert conditional < unigram - 0.3, (conditional, unigram)


def test_an_old_jpeg_manifest_is_read_as_version_2(tmp_path):
    """DATASET 1 held JPEGs only: its folder is still reused, named kind 'jpeg'."""
    m = dataset.ensure_dataset(tmp_path / "j", dataset.DatasetSpec(count=2, image_px=16))
    assert m["kind"] == "jpeg" and m["version"] == 2
    old = {k: v for k, v in m.items() if k != "kind"} | {"version": 1}
    (tmp_path / "j" / dataset.MANIFEST).write_text(json.dumps(old))
    assert dataset.read_manifest(tmp_path / "j")["kind"] == "jpeg"
    assert dataset.ensure_dataset(tmp_path / "j", dataset.DatasetSpec(count=2, image_px=16))["count"] == 2
    (tmp_path / "j" / dataset.MANIFEST).write_text(json.dumps(old | {"version": 99}))
    with pytest.raises(FormatError, match="version 99 is not supported.*reads version 2"):
        dataset.read_manifest(tmp_path / "j")


# --- listing, checking and sharding -------------------------------------------------------------

def test_token_listing_and_checks_say_what_is_wrong_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^no dataset of token shards in '.*missing' \(it does not exist\): "
                                          r"write one with .*TokenSpec.*perfsuite stalls --models gpt-tiny"):
        list_tokens(tmp_path / "missing")
    dataset.ensure_dataset(tmp_path / "jpeg", dataset.DatasetSpec(count=2, image_px=16))
    with pytest.raises(ConfigError, match=r"it holds img-\*\.jpg files, another model kind's dataset"):
        list_tokens(tmp_path / "jpeg")
    dataset.ensure_dataset(tmp_path / "tok", dataset.TokenSpec(count=2, seq_len=8, vocab=50))
    with pytest.raises(ConfigError, match=r"it holds tokens-\*\.u16 files"):
        list_images(tmp_path / "tok")
    first = list_tokens(tmp_path / "tok")[0]
    check_token_file(first, 8, 50)
    with pytest.raises(ConfigError, match="holds 9 tokens; sequences of 64 need 65"):
        check_token_file(first, 64, 50)
    top = int(np.fromfile(first, dtype=TOKEN_DTYPE).max())
    with pytest.raises(ConfigError, match=f"holds id {top}, outside the model's vocabulary of {top}"):
        check_token_file(first, 8, top)


def test_token_shards_split_across_ranks_as_jpegs_do(tmp_path):
    dataset.ensure_dataset(tmp_path / "t", dataset.TokenSpec(count=2 * (1 + 3) * 4, seq_len=8, vocab=50))
    files = list_tokens(tmp_path / "t")
    split = [shard(files, r, 2, 1, 3, 4) for r in range(2)]
    seen = [f for warm, timed in split for f in warm + timed]
    assert sorted(seen) == files  # every file read once, by one rank
    assert split[0][0] == files[0:8:2] and split[1][1] == files[9::2][:12]
    with pytest.raises(ConfigError, match="need 40"):
        shard(files, 0, 2, 1, 4, 4)


# --- the bad input of the stalls command ------------------------------------------------------

@pytest.mark.parametrize("argv, says", [
    (["--image-size", "32"], "image size '32' does not apply to gpt-tiny, a language model"),
    (["--transports", "mpi"], "gpt-tiny is a language model: its file runs read token shards on torch-epoch only"),
    (["--seq-len", "1"], "sequence length '1' for gpt-tiny must be a whole number >= 2"),
])
def test_stalls_refuses_what_a_language_model_cannot_take(argv, says, capsys):
    from perfsuite.faces.cli import main

    assert main(["stalls", "--models", "gpt-tiny", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


def test_stalls_refuses_a_jpeg_folder_for_a_language_model(tmp_path, capsys):
    from perfsuite.faces.cli import main

    dataset.ensure_dataset(tmp_path / "jpeg", dataset.DatasetSpec(count=2, image_px=16))
    assert main(["stalls", "--models", "gpt-tiny", "--data-dir", str(tmp_path / "jpeg")]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds another dataset (2 JPEG files of 16 px)" in err and len(err.splitlines()) == 1, err
    assert main(["stalls", "--models", "small-cnn", "--seq-len", "64"]) == 2
    assert "sequence length '64' does not apply to small-cnn" in capsys.readouterr().err


# --- real worlds: gpt-tiny reads token shards -----------------------------------------------------

TINY = {"iters": 6, "warmup": 2, "baseline": False, "plain_ddp": False, "profile_steps": 0, "prep_threads": 1}


@needs_torch
@pytest.mark.world
def test_gpt_tiny_trains_on_token_shards_through_a_dataloader(tmp_path, no_leftover_ranks):
    """Two ranks of torch-gloo: every step's batch a new slice of token files, and the loss
    still finite and falling (the epoch's own validity checks), as on its synthetic batch."""
    from perfsuite.bench.torch_epoch import torch_cases
    from perfsuite.launch.launchers import LaunchConfig
    from perfsuite.verdicts.rounds import RoundsPolicy

    dataset.ensure_dataset(tmp_path / "tok", dataset.TokenSpec(count=2 * 8 * 8, seq_len=64, vocab=2048))
    (world,) = suite.plan(torch_cases(["torch-gloo"], [2], "gpt-tiny", "8"),
                          {**TINY, "data": "files", "data_dir": str(tmp_path / "tok")})
    cfg = suite.SuiteConfig(launch=LaunchConfig(), timeout=180, rounds=RoundsPolicy(max_contention=None, retries=0))
    out = suite.run_one(world, cfg)
    assert out.failure is None and out.skipped is None, out.failure or out.skipped
    (s,) = out.result.samples
    assert s.valid, s.info
    assert s.info["data"] == "files" and s.info["input"] == "token shards" and s.info["files_per_rank_timed"] == 48
    assert s.info["loss_finite"] and s.info["loss_falling"], s.info
    assert np.isfinite(s.info["loss_last"]) and s.info["loss_last"] < s.info["loss_first"]
    assert s.info["seq_len"] == 64 and s.info["input_wait_ms_mean"] is not None and s.info["tokens_per_s"] > 0


@needs_torch
@pytest.mark.world
def test_a_token_shard_of_another_length_fails_the_world_with_its_reason(tmp_path, no_leftover_ranks):
    from perfsuite.bench.torch_epoch import torch_cases
    from perfsuite.launch.launchers import LaunchConfig
    from perfsuite.verdicts.rounds import RoundsPolicy

    dataset.ensure_dataset(tmp_path / "tok", dataset.TokenSpec(count=2 * 8 * 8, seq_len=32, vocab=2048))
    (world,) = suite.plan(torch_cases(["torch-gloo"], [2], "gpt-tiny", "8"),
                          {**TINY, "data": "files", "data_dir": str(tmp_path / "tok")})
    cfg = suite.SuiteConfig(launch=LaunchConfig(), timeout=180, rounds=RoundsPolicy(max_contention=None, retries=0))
    out = suite.run_one(world, cfg)
    assert out.failure is not None and "holds 33 tokens; sequences of 64 need 65" in str(out.failure)


@needs_torch
@pytest.mark.world
def test_stalls_on_gpt_tiny_read_token_shards(tmp_path, monkeypatch, capsys, no_leftover_ranks):
    """``perfsuite stalls --models gpt-tiny`` end to end on torch-gloo: T0, T1 and both token-file
    runs measured, the breakdown printed and written. The cold run's page-cache drop is
    replaced here (it would slow every process on the machine; the measured run in the docs
    drops it for real): this test is the plumbing, not the size of the fetch stall."""
    from perfsuite.store import formats
    from perfsuite.faces.cli import main
    from perfsuite.stalls import experiment as stall_runs

    monkeypatch.setattr(stall_runs, "DROP_CACHES", ["true"])
    monkeypatch.setattr(stall_runs.fingerprint, "is_root", lambda: True)
    data = tmp_path / "tok"
    rc = main(["stalls", "--models", "gpt-tiny", "--batches", "4", "--steps", "6", "--warmup", "1",
               "--prep-threads", "1", "--data-dir", str(data), "--json", str(tmp_path / "s.json"),
               "--png", str(tmp_path / "s.png"), "--timeout", "120"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert f"# dataset {data}: 56 token files of 65 tokens, vocab 2048" in text
    assert "# stall breakdown gpt-tiny b4 torch-gloo n2" in text and "token files, cold page cache" in text
    run = formats.load_run(tmp_path / "s.json")
    (sample,) = run.outcomes[0].result.samples
    assert sample.info["framework"] == "torch-epoch"
    assert sample.info["T3_info"]["data"] == "files" and sample.info["T2_info"]["data"] == "files"
    assert sample.info["T3_info"]["seq_len"] == 64
    assert {"T0", "T1", "T2", "T3"} <= set(sample.info["breakdown"]["runs"])
