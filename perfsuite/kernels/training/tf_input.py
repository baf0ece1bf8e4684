"""The real-data input of the TensorFlow epoch: JPEG files through tf.data, and thread budgets.

``options["data"] = "files"`` (with ``data_dir``, written by ``perfsuite/stalls/dataset.py``) feeds each
step from a tf.data pipeline instead of the kernel's fixed synthetic batch: list the files, read,
decode, augment (resize, random flip, brightness), batch, prefetch, on ``prep_threads`` threads
of a private pool, from this rank's shard (``input_files``).

The batch arrives in two non-trainable variables that the transport's step reads (transports
close over ``x, y``), so every transport trains on real data unchanged; the time a step waits
for its batch is inside the step's time: that wait *is* the data stall.

``options["compute_threads"]`` (or its old name ``tf_threads``) caps TensorFlow's compute threads
per rank, so one worker has the same
cores in the 1-worker and the N-worker runs (the CPU stand-in for "one GPU per worker").
"""
from __future__ import annotations

from typing import Any

from .input_files import DATA_SOURCES, ShardFeed, input_options, list_images, shard  # noqa: F401


def configure_threads(tf: Any, options: dict) -> int | None:
    """Cap TF's intra/inter-op threads; must run before TensorFlow executes its first op."""
    n = input_options(options)["compute_threads"]
    if n is not None:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(n)
    return n


class FileFeed(ShardFeed):
    """Feeds a transport's step from JPEG files through tf.data (see the module docstring)."""

    def __init__(self, tf: Any, files: list[str], rank: int, world_size: int, batch: int,
                 image: int, classes: int, warmup_steps: int, steps: int, prep_threads: int,
                 prefetch: int):
        super().__init__(files, rank, world_size, batch, image, classes, warmup_steps, steps, prep_threads, prefetch)
        self.tf = tf
        self.x = tf.Variable(tf.zeros([batch, image, image, 3], tf.float32), trainable=False)
        self.y = tf.Variable(tf.zeros([batch], tf.int32), trainable=False)
        self._begin()

    def _open(self, files: list[str]):
        tf, image, classes = self.tf, self.image, self.classes

        def load(path):
            raw = tf.io.read_file(path)  # the fetch: page cache or disk
            img = tf.io.decode_jpeg(raw, channels=3)
            img = tf.image.resize(img, [image, image])
            img = tf.image.random_flip_left_right(img)
            img = tf.image.random_brightness(img, 0.1) / 255.0
            # The label is in the name (img-<index>-<label>.jpg), like a class folder would give.
            label = tf.strings.to_number(
                tf.strings.split(tf.strings.split(path, "-")[-1], ".")[0], tf.int32) % classes
            return img, label

        ds = tf.data.Dataset.from_tensor_slices(files)
        ds = ds.map(load, num_parallel_calls=self.prep_threads, deterministic=True)
        ds = ds.batch(self.batch, drop_remainder=True).prefetch(self.prefetch)
        opts = tf.data.Options()
        opts.threading.private_threadpool_size = self.prep_threads
        opts.autotune.enabled = False  # the thread count is the experiment's knob: keep it
        return ds.with_options(opts)

    def _put(self, images: Any, labels: Any) -> None:
        self.x.assign(images)
        self.y.assign(labels)


def input_feed(tf: Any, options: dict, rank: int, world_size: int, batch: int, image: int,
               classes: int, warmup_steps: int, steps: int) -> FileFeed | None:
    """None for synthetic data (the kernel's own fixed batch), else a FileFeed."""
    opts = input_options(options)
    if opts["data"] != "files":
        return None
    files = list_images(opts["data_dir"])
    return FileFeed(tf, files, rank, world_size, batch, image, classes, warmup_steps, steps,
                    opts["prep_threads"], opts["prefetch"])
