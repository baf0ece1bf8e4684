"""The real-data input both training kernels read: the dataset's files (written by
``perfsuite/stalls/dataset.py``: JPEGs for an image model, token shards for a language model), each
rank's shard of them, and the input knobs. The frameworks' own pipelines (``tf_input``: tf.data;
``torch_input``: a DataLoader) read what this module lists; the names and the token layout are
defined here, once, for the writer and the readers alike.

Each rank reads its own shard (files r, r+n, ...); warm-up steps read one part of the shard and
the timed steps another, opened only after the warm-up, so a cold-cache run is cold for exactly
the timed steps (nothing read ahead during warm-up).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...records.errors import ConfigError
from ..context import whole_option

DATA_SOURCES = ("synthetic", "files")
DEFAULT_PREP_THREADS = 2
DEFAULT_PREFETCH = 2


def input_options(options: dict) -> dict[str, Any]:
    """The input knobs, checked (same on every rank)."""
    data = options.get("data", "synthetic")
    if data not in DATA_SOURCES:
        raise ConfigError(f"data source {data!r} is unknown; choose from {', '.join(DATA_SOURCES)}")
    if data == "files" and not options.get("data_dir"):
        raise ConfigError("data source 'files' needs data_dir (a folder written by perfsuite.stalls.dataset)")
    return {"data": data, "data_dir": options.get("data_dir"),
            "prep_threads": whole_option(options, "prep_threads", DEFAULT_PREP_THREADS, 1, "prep threads"),
            "prefetch": whole_option(options, "prefetch", DEFAULT_PREFETCH, 0, "prefetch batches"),
            # One worker's cores, the same in the 1-worker and N-worker runs (tf_threads: its old name).
            "compute_threads": whole_option(options, "compute_threads", None, 1, "compute threads per rank")
            or whole_option(options, "tf_threads", None, 1, "compute threads per rank")}


def shard(files: list[str], rank: int, world_size: int, warmup_steps: int, steps: int,
          batch: int) -> tuple[list[str], list[str]]:
    """(warm-up files, timed files) of one rank; pure, so the split is unit-tested."""
    mine = files[rank::world_size]
    need_w, need_t = warmup_steps * batch, steps * batch
    if len(mine) < need_w + need_t:
        raise ConfigError(f"dataset has {len(files)} files; {world_size} rank(s) x "
                          f"({warmup_steps} warm-up + {steps} timed steps) x batch {batch} need "
                          f"{world_size * (need_w + need_t)}: write a larger one")
    return mine[:need_w], mine[need_w:need_w + need_t]


IMAGE_GLOB = "img-*.jpg"
#: A token shard: one sequence of seq_len + 1 token ids (inputs and their next-token targets),
#: unsigned 16-bit little-endian, so any vocabulary up to 65536 ids (GPT-2's is 50257) fits
#: and a file is exactly 2 * (seq_len + 1) bytes. Its own prefix and suffix, so a JPEG folder
#: and a token folder can never be read for one another.
TOKEN_DTYPE = "<u2"
TOKEN_BYTES = 2
TOKEN_GLOB = "tokens-*.u16"


def file_name(index: int, label: int) -> str:
    """A dataset file's name carries its label: ``img-<index>-<label>.jpg``."""
    return f"img-{index:06d}-{label}.jpg"


def token_file_name(index: int) -> str:
    """A token shard's name: ``tokens-<index>.u16`` (the suffix is its element type)."""
    return f"tokens-{index:06d}.u16"


def _listed(folder: str | os.PathLike, pattern: str, other: str, what: str, how: str) -> list[str]:
    """The files of ``pattern`` in index order; none is one ConfigError line that names the
    folder, says when it holds the other kind of dataset, and how to write the right one."""
    root = Path(folder)
    files = sorted(str(p) for p in root.glob(pattern)) if root.is_dir() else []
    if files:
        return files
    if not root.is_dir():
        where = "it does not exist"
    elif any(root.glob(other)):
        where = f"it holds {other} files, another model kind's dataset"
    else:
        where = f"it has no {pattern} files"
    raise ConfigError(f"no {what} in {str(folder)!r} ({where}): write one with {how}")


def list_images(folder: str | os.PathLike) -> list[str]:
    """The dataset's JPEG paths in index order; a missing or empty folder is a ConfigError."""
    return _listed(folder, IMAGE_GLOB, TOKEN_GLOB, "dataset of JPEG files",
                   "perfsuite.stalls.dataset.ensure_dataset(folder, DatasetSpec(...)) or `perfsuite stalls`")


def list_tokens(folder: str | os.PathLike) -> list[str]:
    """The token shards' paths in index order; a missing or empty folder is a ConfigError."""
    return _listed(folder, TOKEN_GLOB, IMAGE_GLOB, "dataset of token shards",
                   "perfsuite.stalls.dataset.ensure_dataset(folder, TokenSpec(...)) or "
                   "`perfsuite stalls --models gpt-tiny`")


def check_token_file(path: str, seq_len: int, vocab: int) -> None:
    """One shard against the model that will read it (every rank checks its first before any
    step): the length must be seq_len + 1 tokens and every id inside the vocabulary, or the
    embedding would fail later with an index error that names neither."""
    import numpy as np

    size = os.path.getsize(path)
    if size != TOKEN_BYTES * (seq_len + 1):
        raise ConfigError(f"token shard {path} holds {size // TOKEN_BYTES} tokens; sequences of {seq_len} "
                          f"need {seq_len + 1} (inputs + one target): write a dataset for this --seq-len")
    top = int(np.fromfile(path, dtype=TOKEN_DTYPE).max())
    if top >= vocab:
        raise ConfigError(f"token shard {path} holds id {top}, outside the model's vocabulary of {vocab}: "
                          f"write a dataset for this model")


class ShardFeed:
    """What the frameworks' file feeds share: this rank's shard split into warm-up and timed
    files, the timed part opened only after the warm-up, and the wait for each batch timed inside
    the step it feeds (that wait is the data stall). A framework's feed makes the tensors the
    step reads (``x``, ``y``), then calls ``_begin``; it supplies ``_open(files)``, an iterable of
    (images, labels) batches, and ``_put(images, labels)``, which copies a batch into them."""

    def __init__(self, files: list[str], rank: int, world_size: int, batch: int, image: int, classes: int,
                 warmup_steps: int, steps: int, prep_threads: int, prefetch: int):
        self.batch, self.image, self.classes = batch, image, classes
        self.prep_threads, self.prefetch = prep_threads, prefetch
        self.warm_files, self.timed_files = shard(files, rank, world_size, warmup_steps, steps, batch)
        self.wait_s: list[float] = []
        self._it = None

    def _open(self, files: list[str]) -> Iterable:
        raise NotImplementedError

    def _put(self, images: Any, labels: Any) -> None:
        raise NotImplementedError

    def _begin(self) -> None:
        self._it = iter(self._open(self.warm_files)) if self.warm_files else None

    def start_timed(self) -> None:
        """Open the timed part only now: nothing of it was read during warm-up."""
        self._it = iter(self._open(self.timed_files))

    def wrap(self, step: Callable) -> Callable:
        def fed_step():
            t0 = time.perf_counter()
            self._put(*next(self._it))
            self.wait_s.append(time.perf_counter() - t0)
            return step()

        return fed_step

    def describe(self, **extra: Any) -> dict[str, Any]:
        timed_wait = self.wait_s[-len(self.timed_files) // self.batch:] if self.wait_s else []
        return {"data": "files", "prep_threads": self.prep_threads, "prefetch": self.prefetch,
                "files_per_rank_timed": len(self.timed_files), **extra,
                "input_wait_ms_mean": (sum(timed_wait) / len(timed_wait) * 1e3) if timed_wait else None}
