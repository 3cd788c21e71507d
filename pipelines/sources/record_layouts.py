"""The two layouts of ``tf.train.Example`` records the TFRecord source reads, and a writer for
TFDS's.

Example::

    from pipelines.sources import record_layouts, tfrecord

    # JPEG files as they are (no re-encoding), in TFDS's ImageNet layout, 2 shards:
    files = [("/photos/cat/1.jpg", 0), ("/photos/dog/2.jpg", 1), ("/photos/dog/3.jpg", 1)]
    glob = record_layouts.write_image_shards("/tmp/pets-train", files, num_shards=2)
    source = tfrecord.load(glob, glob, num_classes=2, image_size=224)

* ``echoing``: ``tfrecord.write``'s: ``inputs`` (encoded image or serialized tensor),
  ``encoding``, ``label`` and ``id``.
* ``tfds``: TFDS's image-classification layout, as in ``imagenet2012``, ``imagenette`` or
  ``tfds.folder_dataset.ImageFolder`` shards: the encoded image under ``image`` and the class
  under ``label`` (other features, such as ``file_name``, are not read). These records carry no
  id, so an example's id is its position in its split: files in sorted order, records in file
  order (stable across runs and shard-by-file splits, which number each file from its first id).

The first record of a split decides its layout; a record in neither layout is an error naming
the features it has.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

ECHOING, TFDS = "echoing", "tfds"
# The encoding a TFDS-layout record's image has: any format tf.io.decode_image reads.
ENCODED_IMAGE = "image"

ECHOING_FEATURES = {
    "inputs": tf.io.FixedLenFeature([], tf.string),
    "encoding": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "id": tf.io.FixedLenFeature([], tf.int64),
}
_TFDS_FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


def layout_of(record: bytes, path: str) -> str:
    """``ECHOING`` or ``TFDS``, from one serialized record of the file ``path``.

    Raises:
      ValueError: the record is not a ``tf.train.Example``, or has neither layout's features.
    """
    try:
        example = tf.train.Example.FromString(record)
    except Exception as error:  # protobuf's DecodeError, whose import path varies by version
        raise ValueError(
            f"the TFRecord file {path!r} does not hold tf.train.Examples ({error}); write it "
            "with pipelines.sources.tfrecord.write or record_layouts.write_image_shards."
        ) from error
    features = set(example.features.feature)
    for layout, expected in ((ECHOING, ECHOING_FEATURES), (TFDS, _TFDS_FEATURES)):
        if set(expected) <= features:
            _require_kinds(example, expected, path)
            return layout
    raise ValueError(
        f"the TFRecord file {path!r} holds tf.train.Examples with features {sorted(features)}; "
        f"expected echoing's {sorted(ECHOING_FEATURES)} (pipelines.sources.tfrecord.write) or "
        f"TFDS's image-classification layout {sorted(_TFDS_FEATURES)}."
    )


# The tf.train.Feature list each parsed dtype is stored in.
_KIND_OF = {tf.string: "bytes_list", tf.int64: "int64_list", tf.float32: "float_list"}


def _require_kinds(example: tf.train.Example, expected: dict, path: str) -> None:
    """Refuses a feature stored as another kind than the layout parses (a label written as a
    float_list): parsing would fail at the first batch, in a graph trace naming no file."""
    for key, feature in expected.items():
        found = example.features.feature[key].WhichOneof("kind") or "empty feature"
        if found != _KIND_OF[feature.dtype]:
            raise ValueError(
                f"the TFRecord file {path!r} stores feature {key!r} as {found}, and it is read "
                f"as {feature.dtype.name}; write it as {_KIND_OF[feature.dtype]}, e.g. "
                "tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])) for a label."
            )


def parser(layout: str, *, ids_by_position: bool = False):
    """A graph function ``(position, record) -> {"inputs", "encoding", "label", "id"}``, where
    ``position`` is the record's place in its split among the readable records (the id of a
    TFDS-layout record). ``ids_by_position``: an echoing-layout record's id is its position too,
    not the id it stores: with corrupt records skipped, the stored ids have gaps and run past
    the readable records, which size the per-example tables (pruning's)."""
    if layout == ECHOING:

        def parse_echoing(position: tf.Tensor, record: tf.Tensor) -> dict:
            example = tf.io.parse_single_example(record, ECHOING_FEATURES)
            if ids_by_position:
                return {**example, "id": tf.cast(position, tf.int64)}
            return example  # the record carries its own id

        return parse_echoing

    def parse_tfds(position: tf.Tensor, record: tf.Tensor) -> dict:
        example = tf.io.parse_single_example(record, _TFDS_FEATURES)
        return {
            "inputs": example["image"],
            "encoding": tf.constant(ENCODED_IMAGE),
            "label": example["label"],
            "id": tf.cast(position, tf.int64),
        }

    return parse_tfds


def write_image_shards(prefix: str, files: list[tuple[str, int]], *, num_shards: int) -> str:
    """Writes image files, bytes unchanged, as TFDS-layout shards ``prefix.tfrecord-0000i-of-0000N``
    (TFDS's naming); returns their glob. ``files`` are ``(path, label)`` pairs, in id order.

    Raises:
      ValueError: no files, or ``num_shards`` is not an int in [1, len(files)].
    """
    if not files:
        raise ValueError("write_image_shards got no files; pass (path, label) pairs.")
    if isinstance(num_shards, bool) or not isinstance(num_shards, int):
        raise ValueError(f"num_shards must be an int, got {num_shards!r}.")
    if not 1 <= num_shards <= len(files):
        raise ValueError(
            f"num_shards must be in [1, {len(files)}] (the number of files, so no shard is "
            f"empty), got {num_shards}."
        )
    if os.path.dirname(prefix):
        tf.io.gfile.makedirs(os.path.dirname(prefix))
    bounds = np.linspace(0, len(files), num_shards + 1).astype(int)
    for shard in range(num_shards):
        path = f"{prefix}.tfrecord-{shard:05d}-of-{num_shards:05d}"
        with tf.io.TFRecordWriter(path) as writer:
            for file, label in files[bounds[shard] : bounds[shard + 1]]:
                with tf.io.gfile.GFile(file, "rb") as stream:
                    image = stream.read()
                feature = {
                    "image": _bytes(image),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                    "file_name": _bytes(os.path.basename(file).encode()),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString(deterministic=True))
    return f"{prefix}.tfrecord-*-of-{num_shards:05d}"


def _bytes(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
