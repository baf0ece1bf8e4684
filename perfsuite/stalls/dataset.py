"""The real-data input of the stall runs: a folder of JPEG files of a chosen count and size, or,
for a language model, a folder of token shards (one sequence of seq_len + 1 token ids a file).

A room of its own, because a dataset is the *input* of a measurement, not a record of one:
``report`` writes what people read, ``baselines``/``asv`` what the suite remembers; neither
should learn JPEG encoding, and the kernel (inside a rank) only reads, through the naming of
``kernels/training/tf_input.py``. Nothing is downloaded: images are generated from a seed (smooth colour
fields plus noise, so they compress like photographs, not like flat colour), encoded with Pillow
(installed with matplotlib), and described by a versioned manifest written through ``formats``.
A folder whose manifest matches is reused, so repeated stall runs do not rewrite it.

File names carry the label (``input_files.file_name``); the frameworks' pipelines read it back.

Token shards (``TokenSpec``) are many small files as well, because that is what makes the fetch
stall mean something: a step reads ``batch`` files, each a seek and a read, as an image model's
step does. Their tokens are not uniform noise, which no model can learn: a Zipf-like unigram
distribution (as words in text, and as ``kernels/models/gpt_torch.py`` draws its synthetic batch) interleaved
with a fixed book of repeated n-grams ("phrases"), so a GPT learns the unigram within a few
steps and the phrases after, and the loss falls over a short epoch (the epoch's validity check).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from ..store import formats
from ..records.errors import ConfigError
from ..kernels.training.input_files import TOKEN_DTYPE, file_name, list_images, list_tokens, token_file_name

DATASET_FORMAT = formats.DATASET
MANIFEST = "perfsuite-dataset.json"
JPEG_QUALITY = 90
#: The token stream's phrase book: PHRASES distinct n-grams of 2..PHRASE_MAX tokens, and the
#: share of the stream's segments that are a phrase rather than one unigram token.
PHRASES, PHRASE_MAX, PHRASE_SHARE = 256, 8, 0.5
MAX_VOCAB = 1 << 16  # ids are stored as uint16


@dataclass(frozen=True)
class DatasetSpec:
    kind: ClassVar[str] = "jpeg"
    count: int  # number of JPEG files
    image_px: int  # height = width of each stored image
    classes: int = 10
    seed: int = 1234

    def __post_init__(self):
        if self.count < 1:
            raise ConfigError(f"dataset file count {self.count} must be >= 1")
        if not 8 <= self.image_px <= 4096:
            raise ConfigError(f"dataset image size {self.image_px} px must be between 8 and 4096")
        if self.classes < 1:
            raise ConfigError(f"dataset classes {self.classes} must be >= 1")


@dataclass(frozen=True)
class TokenSpec:
    """A language model's dataset: ``count`` files of ``seq_len + 1`` token ids below ``vocab``."""

    kind: ClassVar[str] = "tokens"
    count: int
    seq_len: int
    vocab: int
    seed: int = 1234

    def __post_init__(self):
        if self.count < 1:
            raise ConfigError(f"dataset file count {self.count} must be >= 1")
        if self.seq_len < 2:
            raise ConfigError(f"dataset sequence length {self.seq_len} must be >= 2 tokens")
        if not 2 <= self.vocab <= MAX_VOCAB:
            raise ConfigError(f"dataset vocabulary {self.vocab} must be between 2 and {MAX_VOCAB} "
                              f"(token ids are stored as uint16)")


def describe(manifest: dict) -> str:
    """A manifest in a few words, for messages: what is in the folder."""
    if manifest.get("kind") == TokenSpec.kind:
        return (f"{manifest.get('count')} token files of {manifest.get('tokens_per_file')} tokens, "
                f"vocab {manifest.get('vocab')}")
    return f"{manifest.get('count')} JPEG files of {manifest.get('image_px')} px"


def read_manifest(folder: str | os.PathLike) -> dict | None:
    path = Path(folder) / MANIFEST
    if not path.exists():
        return None
    d = formats.read_json(path, "dataset manifest", "delete the folder and let the suite rewrite it")
    return formats.check_format(d, DATASET_FORMAT, str(path))


def _image(rng, px: int):
    import numpy as np

    # A coarse random colour field upsampled (smooth, photo-like), plus fine noise.
    coarse = rng.random((max(2, px // 16), max(2, px // 16), 3))
    reps = -(-px // coarse.shape[0])
    smooth = np.kron(coarse, np.ones((reps, reps, 1)))[:px, :px]
    img = 0.8 * smooth + 0.2 * rng.random((px, px, 3))
    return (img * 255).astype(np.uint8)


def token_stream(n_tokens: int, vocab: int, seed: int):
    """``n_tokens`` token ids (uint16) below ``vocab``, deterministic by ``seed``: segments that
    are either one token of a Zipf-like unigram distribution (p ~ 1/rank) or one of a fixed
    book of phrases (n-grams of those tokens, themselves drawn Zipf-like: some recur often).
    Pure, so the distribution is unit-tested; vectorised, so gpt2-small's shards are quick."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p_token = 1.0 / np.arange(1, vocab + 1)
    p_token /= p_token.sum()
    book = rng.choice(vocab, size=(PHRASES, PHRASE_MAX), p=p_token)
    book_len = rng.integers(2, PHRASE_MAX + 1, size=PHRASES)
    p_phrase = 1.0 / np.arange(1, PHRASES + 1)
    p_phrase /= p_phrase.sum()
    k = max(n_tokens, 1)  # every segment is at least one token: k segments always suffice
    is_phrase = rng.random(k) < PHRASE_SHARE
    which = rng.choice(PHRASES, size=k, p=p_phrase)
    single = rng.choice(vocab, size=k, p=p_token)
    length = np.where(is_phrase, book_len[which], 1)
    k = int(np.searchsorted(np.cumsum(length), n_tokens)) + 1  # the segments that reach n_tokens
    length = length[:k]
    seg = np.repeat(np.arange(k), length)
    offset = np.arange(seg.size) - np.repeat(np.cumsum(length) - length, length)
    tokens = np.where(is_phrase[seg], book[which[seg], np.minimum(offset, PHRASE_MAX - 1)], single[seg])
    return tokens[:n_tokens].astype(TOKEN_DTYPE)


def _write_images(root: Path, spec: DatasetSpec) -> int:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(spec.seed)
    total = 0
    for i in range(spec.count):
        label = int(rng.integers(0, spec.classes))
        path = root / file_name(i, label)
        Image.fromarray(_image(rng, spec.image_px)).save(path, format="JPEG", quality=JPEG_QUALITY)
        total += path.stat().st_size
    return total


def _write_tokens(root: Path, spec: TokenSpec) -> int:
    """File i holds tokens i*(seq_len+1) .. (i+1)*(seq_len+1) of one stream, as pre-tokenised
    text is cut into training sequences."""
    per_file = spec.seq_len + 1
    rows = token_stream(spec.count * per_file, spec.vocab, spec.seed).reshape(spec.count, per_file)
    for i, row in enumerate(rows):
        (root / token_file_name(i)).write_bytes(row.tobytes())
    return rows.nbytes


def ensure_dataset(folder: str | os.PathLike, spec: DatasetSpec | TokenSpec) -> dict:
    """Write ``spec.count`` files (JPEGs, or token shards for a ``TokenSpec``) into ``folder``
    unless a matching dataset is already there.

    Returns the manifest (kind, count, image_px or seq_len and vocab, bytes, ...). A folder
    holding something else (a manifest of another spec, or stray files) is refused rather than
    overwritten.
    """
    root = Path(folder)
    found = read_manifest(root)
    want = formats.stamp(DATASET_FORMAT, {"kind": spec.kind, **asdict(spec)})
    if found is not None:
        if all(found.get(k) == v for k, v in want.items()):
            return found
        raise ConfigError(f"{root} holds another dataset ({describe(found)}); choose another folder or delete it")
    if root.exists() and any(root.iterdir()):
        raise ConfigError(f"{root} is not empty and has no {MANIFEST}; give an empty or new folder")
    root.mkdir(parents=True, exist_ok=True)
    if isinstance(spec, TokenSpec):
        total = _write_tokens(root, spec)
        extra = {"tokens_per_file": spec.seq_len + 1, "dtype": "uint16 little-endian"}
    else:
        total, extra = _write_images(root, spec), {}
    manifest = {**want, **extra, "bytes": total, "mean_file_bytes": total / spec.count}
    formats.write_json(root / MANIFEST, manifest)  # last: a half-written dataset has no manifest
    return manifest


def data_files(folder: str | os.PathLike) -> list[str]:
    """The dataset's files, of the kind its manifest names (a folder without one: JPEGs)."""
    found = read_manifest(folder)
    return list_tokens(folder) if found and found.get("kind") == TokenSpec.kind else list_images(folder)


def warm(folder: str | os.PathLike) -> int:
    """Read every file once so the page cache holds the dataset (the warm run); bytes read."""
    n = 0
    for path in data_files(folder):
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                n += len(chunk)
    return n


def evict(folder: str | os.PathLike) -> int:
    """Drop the dataset's own pages from the page cache (POSIX_FADV_DONTNEED); bytes advised.

    The cold run on an emulated slow disk uses this instead of dropping every cache: otherwise
    the throttled ranks would also read TensorFlow's libraries through the slow disk, and the
    fetch stall would be measured on imports rather than on the dataset.
    """
    n = 0
    for path in data_files(folder):
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            os.fdatasync(fd)  # dirty pages (a freshly written dataset) are not dropped otherwise
            os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)
            n += size
        finally:
            os.close(fd)
    return n
