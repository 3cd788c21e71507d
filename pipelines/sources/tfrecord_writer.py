"""Writes TFRecord files that ``pipelines.sources.tfrecord.load`` reads (``tfrecord.write`` and
``tfrecord.write_shards`` are these functions).

Example::

    import numpy as np
    from pipelines.sources import tfrecord

    glob = tfrecord.write_shards("/tmp/shards/train", np.random.rand(100, 40, 1),
                                 np.arange(100) % 10, num_shards=4)
    # "/tmp/shards/train-*-of-00004.tfrecord", ids 0..99 across the shards

Each record is a ``tf.train.Example`` with ``inputs`` (PNG/JPEG bytes, or a serialized float32
tensor), ``encoding``, ``label`` and ``id`` (int64). Labels are checked before a file is opened;
a gs:// file is written locally, then uploaded with its record count as object metadata.
"""

from __future__ import annotations

import itertools
import os
import tempfile

import numpy as np
import tensorflow as tf

from pipelines.sources import gcs

ENCODINGS = ("png", "jpeg", "tensor")
# Object metadata key holding a gs:// file's record count (set by `write`).
COUNT_METADATA = "tfrecord_records"


def write(
    path: str,
    inputs: np.ndarray,
    labels: np.ndarray,
    *,
    encoding: str = "tensor",
    first_id: int = 0,
) -> int:
    """Writes ``inputs`` [N, ...] and ``labels`` [N] as one TFRecord file; returns N.

    Args:
      path: a local path, or gs:// (written locally, then uploaded through gcsfs).
      inputs: float arrays for ``encoding="tensor"``; uint8 [N, H, W, C] images for "png"/"jpeg".
      labels: integer labels.
      encoding: "tensor" (serialized float32), "png" (lossless) or "jpeg".
      first_id: id of the first example (ids are consecutive), so shards get disjoint ids.
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {list(ENCODINGS)}, got {encoding!r}.")
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    if len(inputs) != len(labels):
        raise ValueError(f"got {len(inputs)} inputs but {len(labels)} labels; one label each.")
    _check_labels(labels)
    if encoding != "tensor" and (inputs.dtype != np.uint8 or inputs.ndim != 4):
        raise ValueError(
            f"encoding={encoding!r} needs uint8 images [N, height, width, channels], got dtype "
            f"{inputs.dtype} shape {inputs.shape}; use encoding='tensor' for other arrays."
        )
    if path.startswith("gs://"):
        with tempfile.TemporaryDirectory() as directory:
            local = os.path.join(directory, "shard.tfrecord")
            count = write(local, inputs, labels, encoding=encoding, first_id=first_id)
            _upload(local, path, count)
        return count
    with tf.io.TFRecordWriter(path) as writer:
        for index, (x, y) in enumerate(zip(inputs, labels, strict=True)):
            if encoding == "png":
                payload = tf.io.encode_png(x).numpy()
            elif encoding == "jpeg":
                payload = tf.io.encode_jpeg(x, quality=95).numpy()
            else:
                payload = tf.io.serialize_tensor(tf.constant(x, tf.float32)).numpy()
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "inputs": _bytes_feature(payload),
                        "encoding": _bytes_feature(encoding.encode()),
                        "label": _int_feature(int(y)),
                        "id": _int_feature(first_id + index),
                    }
                )
            )
            # Deterministic: the same arrays give the same bytes, so shards are reproducible.
            writer.write(example.SerializeToString(deterministic=True))
    return len(inputs)


def _check_labels(labels: np.ndarray) -> None:
    """Refuses labels that are not integer class ids [N], before a file is opened: the record
    stores ``int(label)``, which read 0.7 as class 0 and failed on one-hot rows mid-file."""
    if labels.ndim != 1:
        raise ValueError(
            f"labels must be class ids, one per example [N], got shape {labels.shape}; for "
            "one-hot rows pass labels.argmax(axis=1)."
        )
    if labels.dtype.kind in "iuf" and labels.size and np.min(labels) < 0:
        raise ValueError(
            f"labels must be class ids >= 0, got {np.min(labels).item()!r}; number the classes "
            "0, 1, ...: a negative id fails the label check at the first batch that holds it."
        )
    if labels.dtype.kind in "biu" or not labels.size:
        return
    integral = labels.dtype.kind == "f" and np.isfinite(labels) & (labels == np.round(labels))
    if labels.dtype.kind == "f" and integral.all():
        return  # integral floats, e.g. ids kept in a float array
    shown = (labels[~integral] if labels.dtype.kind == "f" else labels)[0].item()
    raise ValueError(
        f"labels must be integer class ids, got dtype {labels.dtype} ({shown!r} among them), "
        "and a record stores int(label) (0.7 would be class 0; a name fails); map them to ids "
        "first, e.g. np.unique(labels, return_inverse=True)[1] for class names."
    )


def _upload(local: str, path: str, count: int) -> None:
    """Uploads ``local`` to gs:// ``path``, checked against the MD5 the server computes.

    The record count rides along as object metadata, so readers need not fetch the whole object
    to count it (see ``_gcs_count``).
    """
    from gcsfs.retry import ChecksumError  # gcsfs is imported lazily, see sources.gcs

    try:
        gcs.filesystem().put(local, path, metadata={COUNT_METADATA: str(count)}, consistency="md5")
    except ChecksumError as error:
        raise OSError(
            f"the upload to {path} was stored with other bytes than were sent ({error}); write "
            "it again, and check the storage server if this repeats."
        ) from error


def write_shards(
    prefix: str,
    inputs: np.ndarray,
    labels: np.ndarray,
    *,
    num_shards: int,
    encoding: str = "tensor",
) -> str:
    """Writes ``prefix-00000-of-0000N.tfrecord`` shards with ids 0..N-1; returns their glob.

    Example::

        glob = write_shards("/tmp/mnist1d/train", inputs, labels, num_shards=4)
        # "/tmp/mnist1d/train-*-of-00004.tfrecord", usable as train_files
    """
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"num_shards must be an int >= 1, got {num_shards!r}; e.g. num_shards=4.")
    if num_shards > len(inputs):
        raise ValueError(
            f"num_shards={num_shards} for {len(inputs)} examples would write empty shards; "
            f"give at most num_shards={max(1, len(inputs))}."
        )
    if not prefix.startswith("gs://") and os.path.dirname(prefix):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
    bounds = np.linspace(0, len(inputs), num_shards + 1).astype(int)
    for shard, (start, stop) in enumerate(itertools.pairwise(bounds)):
        path = f"{prefix}-{shard:05d}-of-{num_shards:05d}.tfrecord"
        write(path, inputs[start:stop], labels[start:stop], encoding=encoding, first_id=int(start))
    return f"{prefix}-*-of-{num_shards:05d}.tfrecord"


def _bytes_feature(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int_feature(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
