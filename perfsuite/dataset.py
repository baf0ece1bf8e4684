"""The real-data input of the stall runs: a folder of JPEG files of a chosen count and size.

A room of its own, because a dataset is the *input* of a measurement, not a record of one:
``report`` writes what people read, ``baselines``/``asv`` what the suite remembers; neither
should learn JPEG encoding, and the kernel (inside a rank) only reads, through the naming of
``kernels/tf_input.py``. Nothing is downloaded: images are generated from a seed (smooth colour
fields plus noise, so they compress like photographs, not like flat colour), encoded with Pillow
(installed with matplotlib), and described by a versioned manifest written through ``formats``.
A folder whose manifest matches is reused, so repeated stall runs do not rewrite it.

File names carry the label (``input_files.file_name``); the frameworks' pipelines read it back.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from . import formats
from .errors import ConfigError
from .kernels.input_files import file_name, list_images

DATASET_FORMAT = formats.DATASET
MANIFEST = "perfsuite-dataset.json"
JPEG_QUALITY = 90


@dataclass(frozen=True)
class DatasetSpec:
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


def ensure_dataset(folder: str | os.PathLike, spec: DatasetSpec) -> dict:
    """Write ``spec.count`` JPEGs into ``folder`` unless a matching dataset is already there.

    Returns the manifest (count, image_px, bytes, ...). A folder holding something else (a
    manifest of another spec, or stray files) is refused rather than overwritten.
    """
    import numpy as np
    from PIL import Image

    root = Path(folder)
    found = read_manifest(root)
    want = formats.stamp(DATASET_FORMAT, asdict(spec))
    if found is not None:
        if all(found.get(k) == v for k, v in want.items()):
            return found
        raise ConfigError(f"{root} holds another dataset ({found.get('count')} files of "
                          f"{found.get('image_px')} px); choose another folder or delete it")
    if root.exists() and any(root.iterdir()):
        raise ConfigError(f"{root} is not empty and has no {MANIFEST}; give an empty or new folder")
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    total = 0
    for i in range(spec.count):
        label = int(rng.integers(0, spec.classes))
        path = root / file_name(i, label)
        Image.fromarray(_image(rng, spec.image_px)).save(path, format="JPEG", quality=JPEG_QUALITY)
        total += path.stat().st_size
    manifest = {**want, "bytes": total, "mean_file_bytes": total / spec.count}
    formats.write_json(root / MANIFEST, manifest)  # last: a half-written dataset has no manifest
    return manifest


def warm(folder: str | os.PathLike) -> int:
    """Read every file once so the page cache holds the dataset (the warm run); bytes read."""
    n = 0
    for path in list_images(folder):
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
    for path in list_images(folder):
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            os.fdatasync(fd)  # dirty pages (a freshly written dataset) are not dropped otherwise
            os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)
            n += size
        finally:
            os.close(fd)
    return n
