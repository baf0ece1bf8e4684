"""The real-data input of the PyTorch epoch: the dataset's JPEG files through a DataLoader.

``options["data"] = "files"`` feeds each step from a ``torch.utils.data.DataLoader`` over this
rank's shard (``input_files``): read the file (the fetch), decode the JPEG, resize, random flip,
brightness (the prep), in ``prep_threads`` worker processes, ``prefetch`` batches ahead per
worker: the pipeline a PyTorch user writes, and the one DS-Analyzer measured. The batch is copied
into the tensors the step closes over, so the transport's step is the same on real data; the
time a step waits for its batch is inside the step's time: that wait is the data stall.

A language model reads token shards instead (``TokenFeed``): the fetch is the same (a small file
per sequence), the prep is decoding its uint16 ids to int64 and cutting inputs and next-token
targets, shifted by one. No augmentation: text pipelines have none a GPT trainer applies per
step (tokenizing happened when the shards were written), so a small prep stall is the honest
result, not a missing piece.
"""
from __future__ import annotations

from typing import Any

from .input_files import TOKEN_DTYPE, ShardFeed, check_token_file, input_options, list_images, list_tokens


class _Images:
    """A map-style dataset of JPEG paths; the label is in the file name (img-<i>-<label>.jpg)."""

    def __init__(self, files: list[str], image: int, classes: int):
        self.files, self.image, self.classes = files, image, classes

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg, read_file
        from torchvision.transforms.v2 import functional as F

        path = self.files[i]
        img = decode_jpeg(read_file(path), mode=ImageReadMode.RGB)  # the fetch, then the decode
        img = F.resize(img, [self.image, self.image], antialias=True)
        if torch.rand(()) < 0.5:
            img = F.horizontal_flip(img)
        img = F.adjust_brightness(img.float() / 255.0, 1.0 + (float(torch.rand(())) - 0.5) * 0.2)
        label = int(path.rsplit("-", 1)[-1].split(".")[0]) % self.classes
        return img, label


class _LoaderFeed(ShardFeed):
    """A shard read through a DataLoader of ``_dataset(files)``, each batch copied into the
    tensors the step closes over (``x``, ``y``, made by the subclass)."""

    what = ""

    def _dataset(self, files: list[str]) -> Any:
        raise NotImplementedError

    def _open(self, files: list[str]):
        from torch.utils.data import DataLoader

        workers = self.prep_threads
        return DataLoader(self._dataset(files), batch_size=self.batch, shuffle=False, drop_last=True,
                          num_workers=workers, prefetch_factor=max(self.prefetch, 1) if workers else None)

    def _put(self, x: Any, y: Any) -> None:
        self.x.copy_(x)
        self.y.copy_(y)

    def describe(self, **extra: Any) -> dict[str, Any]:
        return super().describe(loader="DataLoader worker processes", **({"input": self.what} if self.what else {}),
                                **extra)


class FileFeed(_LoaderFeed):
    def __init__(self, torch: Any, files: list[str], rank: int, world_size: int, batch: int, image: int,
                 classes: int, warmup_steps: int, steps: int, prep_threads: int, prefetch: int, device: Any):
        super().__init__(files, rank, world_size, batch, image, classes, warmup_steps, steps, prep_threads, prefetch)
        self.x = torch.zeros(batch, 3, image, image, device=device)
        self.y = torch.zeros(batch, dtype=torch.int64, device=device)
        self._begin()

    def _dataset(self, files: list[str]) -> Any:
        return _Images(files, self.image, self.classes)


class _Tokens:
    """A map-style dataset of token shards, one sequence of seq_len + 1 ids per file."""

    def __init__(self, files: list[str], seq_len: int, vocab: int):
        self.files, self.seq_len, self.vocab = files, seq_len, vocab

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        path = self.files[i]
        with open(path, "rb") as f:  # the fetch
            raw = f.read()
        ids = np.frombuffer(raw, dtype=TOKEN_DTYPE)
        # Every shard is checked, not only the first: one bad file would otherwise surface as
        # an embedding index error in the step, far from the file that caused it.
        if ids.size != self.seq_len + 1 or int(ids.max()) >= self.vocab:
            raise ValueError(f"token shard {path}: {ids.size} ids (max {int(ids.max()) if ids.size else None}); "
                             f"the model needs {self.seq_len + 1} ids below {self.vocab}")
        tokens = torch.from_numpy(ids.astype(np.int64))  # the prep: decode, then shift by one
        return tokens[:-1], tokens[1:]


class TokenFeed(_LoaderFeed):
    """A language model's shard of token files: each step's (inputs, targets), batch x seq_len
    int64, copied into the tensors the step closes over, as FileFeed copies images."""

    def __init__(self, torch: Any, files: list[str], rank: int, world_size: int, batch: int, seq_len: int,
                 vocab: int, warmup_steps: int, steps: int, prep_threads: int, prefetch: int, device: Any):
        super().__init__(files, rank, world_size, batch, 0, vocab, warmup_steps, steps, prep_threads, prefetch)
        self.seq_len = seq_len
        self.x = torch.zeros(batch, seq_len, dtype=torch.int64, device=device)
        self.y = torch.zeros(batch, seq_len, dtype=torch.int64, device=device)
        self._begin()

    what = "token shards"

    def _dataset(self, files: list[str]) -> Any:
        return _Tokens(files, self.seq_len, self.classes)


def input_feed(torch: Any, options: dict, rank: int, world_size: int, batch: int, work: Any,
               warmup_steps: int, steps: int, device: Any) -> FileFeed | TokenFeed | None:
    """None for synthetic data (the kernel's own fixed batch), else a FileFeed of the
    ``work``load's (``torch_models.Workload``) images, or a TokenFeed of its token shards."""
    opts = input_options(options)
    if opts["data"] != "files":
        return None
    if work.spec.is_lm:
        files = list_tokens(opts["data_dir"])
        check_token_file(files[0], work.seq_len, work.classes)  # a wrong dataset: one line, before any step
        return TokenFeed(torch, files, rank, world_size, batch, work.seq_len, work.classes, warmup_steps, steps,
                         opts["prep_threads"], opts["prefetch"], device)
    return FileFeed(torch, list_images(opts["data_dir"]), rank, world_size, batch, work.image, work.classes,
                    warmup_steps, steps, opts["prep_threads"], opts["prefetch"], device)
