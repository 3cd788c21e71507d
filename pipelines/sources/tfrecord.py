"""TFRecord files, local or on ``gs://``, and a writer that makes them.

Example::

    import numpy as np
    from pipelines.sources import tfrecord

    tfrecord.write("/tmp/train.tfrecord", np.random.rand(100, 40, 1), np.arange(100) % 10)
    tfrecord.write("/tmp/eval.tfrecord", np.random.rand(20, 40, 1), np.arange(20) % 10)
    source = tfrecord.load("/tmp/train*.tfrecord", "/tmp/eval*.tfrecord", num_classes=10)

Each record is a ``tf.train.Example`` with ``inputs`` (PNG/JPEG bytes, or a serialized float32
tensor), ``encoding`` ("png", "jpeg" or "tensor"), ``label`` and ``id`` (int64). The first record
tells the source how to decode the rest, so files are self-describing.

Local paths are read by ``TFRecordDataset`` in the graph. ``gs://`` paths are read through
**gcsfs** from a Python generator (``Dataset.from_generator``), not in the graph: TensorFlow's own
gs:// client ignores storage emulators, and gcsfs honours ``STORAGE_EMULATOR_HOST``. So gs://
pipelines cannot be serialised to the tf.data service, and reads hold the GIL; record CRCs are not
checked on that path. Both paths count the records once, up front (one pass over the files).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import struct
import tempfile

import numpy as np
import tensorflow as tf

from pipelines.sources import images
from pipelines.sources.source import Source, SourceSplit, check_not_empty

ENCODINGS = ("png", "jpeg", "tensor")
_FEATURES = {
    "inputs": tf.io.FixedLenFeature([], tf.string),
    "encoding": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "id": tf.io.FixedLenFeature([], tf.int64),
}
# A TFRecord is: uint64 length, uint32 masked CRC of the length, data, uint32 masked CRC of data.
_HEADER_BYTES, _FOOTER_BYTES = 12, 4
# Object metadata key holding a gs:// file's record count (set by `write`).
_COUNT_METADATA = "tfrecord_records"
# gs:// files are read in 8 MiB range requests. gcsfs's default prefetching cache makes each
# small read() a round trip through its event loop (~30 ms each under load, measured).
_GCS_BLOCK_BYTES = 8 << 20


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
    if encoding != "tensor" and (inputs.dtype != np.uint8 or inputs.ndim != 4):
        raise ValueError(
            f"encoding={encoding!r} needs uint8 images [N, height, width, channels], got dtype "
            f"{inputs.dtype} shape {inputs.shape}; use encoding='tensor' for other arrays."
        )
    if path.startswith("gs://"):
        with tempfile.TemporaryDirectory() as directory:
            local = os.path.join(directory, "shard.tfrecord")
            count = write(local, inputs, labels, encoding=encoding, first_id=first_id)
            # The record count rides along as object metadata, so readers need not fetch the
            # whole object to count it (see _gcs_count).
            gcs_filesystem().put(local, path, metadata={_COUNT_METADATA: str(count)})
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
            writer.write(example.SerializeToString())
    return len(inputs)


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
    if not prefix.startswith("gs://") and os.path.dirname(prefix):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
    bounds = np.linspace(0, len(inputs), num_shards + 1).astype(int)
    for shard, (start, stop) in enumerate(itertools.pairwise(bounds)):
        path = f"{prefix}-{shard:05d}-of-{num_shards:05d}.tfrecord"
        write(path, inputs[start:stop], labels[start:stop], encoding=encoding, first_id=int(start))
    return f"{prefix}-*-of-{num_shards:05d}.tfrecord"


def load(
    train_files: str,
    eval_files: str,
    *,
    num_classes: int,
    image_size: int | None = None,
) -> Source:
    """Returns a source over TFRecord globs written by ``write`` (local or gs://).

    Raises:
      ValueError: a glob matches no file, a gs:// path cannot be read, a split has no record,
        or the records are not in ``write``'s format.
    """
    train_paths, eval_paths = _glob(train_files, "train_files"), _glob(eval_files, "eval_files")
    train_counts = _count(train_paths, train_files)
    eval_counts = _count(eval_paths, eval_files)
    decode_inputs, input_shape = _decoder(_first(train_paths), image_size, train_files)

    def decode(example: dict) -> dict:
        return {"inputs": decode_inputs(example), "label": example["label"], "id": example["id"]}

    def split(paths: list[str], counts: list[int]) -> SourceSplit:
        def shard_by_file(num_shards: int, index: int) -> SourceSplit:
            # With at least one file per pipeline each pipeline opens only its own files, so
            # nothing is fetched twice over the network; otherwise shard record by record.
            if len(paths) < num_shards:
                whole = dataclasses.replace(split(paths, counts), shard_function=None)
                return whole.shard(num_shards, index)
            return dataclasses.replace(
                split(paths[index::num_shards], counts[index::num_shards]), shard_function=None
            )

        parsed = _records(paths).map(_parse, num_parallel_calls=tf.data.AUTOTUNE)
        return SourceSplit(
            dataset=parsed, decode=decode, num_examples=sum(counts), shard_function=shard_by_file
        )

    return Source(
        train=split(train_paths, train_counts),
        eval=split(eval_paths, eval_counts),
        num_classes=int(num_classes),
        input_shape=input_shape,
    )


def _parse(record: tf.Tensor) -> dict:
    example = tf.io.parse_single_example(record, _FEATURES)
    return {
        "inputs": example["inputs"],
        "encoding": example["encoding"],
        "label": example["label"],
        "id": example["id"],
    }


def _decoder(first: dict, image_size: int | None, what: str):
    """A graph decode function and the static input shape, from the first record."""
    encoding = first["encoding"].decode()
    if encoding not in ENCODINGS:
        raise ValueError(
            f"TFRecord files {what!r} have encoding {encoding!r}, expected one of "
            f"{list(ENCODINGS)}; write them with pipelines.sources.tfrecord.write."
        )
    if encoding == "tensor":
        shape = tuple(tf.io.parse_tensor(first["inputs"], tf.float32).shape)

        def decode_tensor(example):
            return tf.ensure_shape(tf.io.parse_tensor(example["inputs"], tf.float32), shape)

        return decode_tensor, shape
    first_image = tf.io.decode_image(first["inputs"], expand_animations=False)
    channels = int(first_image.shape[-1])
    stored = (None, None, channels) if image_size is not None else tuple(first_image.shape)
    shape = images.static_shape(stored, image_size, f"TFRecord files {what!r}")

    def decode_picture(example):
        return images.decode(example["inputs"], shape=shape, resize=image_size is not None)

    return decode_picture, shape


def _first(paths: list[str]) -> dict:
    if paths[0].startswith("gs://"):
        record = next(_gcs_records(paths[0]))
    else:
        record = next(iter(tf.data.TFRecordDataset(paths[:1])))
    try:
        return {key: value.numpy() for key, value in _parse(record).items()}
    except tf.errors.InvalidArgumentError as error:
        raise ValueError(
            f"the TFRecord file {paths[0]!r} does not hold tf.train.Examples with features "
            f"{sorted(_FEATURES)}; write it with pipelines.sources.tfrecord.write "
            f"({error.message.splitlines()[0]})."
        ) from error


def _count(paths: list[str], pattern: str) -> list[int]:
    """Records per file: one pass in the graph (local), or over the record headers (gs://)."""
    if paths[0].startswith("gs://"):
        counts = [_gcs_count(path) for path in paths]
    else:
        counts = [
            int(tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda total, _: total + 1))
            for path in paths
        ]
    check_not_empty(sum(counts), f"TFRecord files {pattern!r}")
    return counts


def _glob(pattern: str, key: str) -> list[str]:
    if pattern.startswith("gs://"):
        filesystem = gcs_filesystem()
        try:
            paths = sorted("gs://" + path for path in filesystem.glob(pattern))
        except Exception as error:  # gcsfs raises many types (auth, HTTP, OSError)
            raise ValueError(
                f"cannot read data config {key}={pattern!r} through gcsfs: {error!r}; check the "
                "bucket name, your credentials, or STORAGE_EMULATOR_HOST for an emulator."
            ) from error
    else:
        paths = sorted(tf.io.gfile.glob(os.path.expanduser(pattern)))
    if not paths:
        raise ValueError(
            f"data config {key}={pattern!r} matches no file; check the path and glob (e.g. "
            "'/data/train-*.tfrecord' or 'gs://bucket/train-*.tfrecord')."
        )
    return paths


def _records(paths: list[str]) -> tf.data.Dataset:
    """Serialized records of ``paths`` in order (deterministic, so ids follow file order)."""
    if not paths[0].startswith("gs://"):
        return tf.data.TFRecordDataset(paths)
    signature = tf.TensorSpec([], tf.string)
    return tf.data.Dataset.from_tensor_slices(paths).interleave(
        lambda path: tf.data.Dataset.from_generator(
            _gcs_records, args=(path,), output_signature=signature
        ),
        cycle_length=1,
    )


def _gcs_records(path: bytes):
    """Yields the records of one gs:// TFRecord file, read with gcsfs (Python, not graph)."""
    path = path.decode() if isinstance(path, bytes) else path
    with _open_gcs(path) as stream:
        while header := _read_exactly(stream, _HEADER_BYTES):
            (length,) = struct.unpack("<Q", header[:8])
            data = _read_exactly(stream, length)
            _read_exactly(stream, _FOOTER_BYTES)
            yield data


def _gcs_count(path: str) -> int:
    """Records in a gs:// file, from its metadata when ``write`` made it.

    Otherwise by a pass over the record headers, which fetches the whole object (seeks within a
    block still download it).
    """
    metadata = gcs_filesystem().info(path).get("metadata") or {}
    if metadata.get(_COUNT_METADATA, "").isdigit():
        return int(metadata[_COUNT_METADATA])
    count = 0
    with _open_gcs(path) as stream:
        while header := _read_exactly(stream, _HEADER_BYTES):
            (length,) = struct.unpack("<Q", header[:8])
            stream.seek(length + _FOOTER_BYTES, 1)
            count += 1
    return count


def _open_gcs(path: str):
    return gcs_filesystem().open(path, "rb", block_size=_GCS_BLOCK_BYTES, cache_type="readahead")


def _read_exactly(stream, size: int) -> bytes:
    """``size`` bytes, b"" at the end of the file; file reads may return fewer bytes than asked."""
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    data = b"".join(chunks)
    if data and remaining:
        raise ValueError(
            f"truncated TFRecord in {stream.path}: wanted {size} bytes, got {len(data)}."
        )
    return data


def gcs_filesystem():
    """A gcsfs filesystem; anonymous against ``STORAGE_EMULATOR_HOST`` when it is set.

    gcsfs is imported here, not at module import, because it reads its feature switches from the
    environment on import. Its experimental zonal/HNS bucket probe makes every bucket access wait
    ~60 s against an emulator, so it is off unless the user turned it on.
    """
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return gcsfs.GCSFileSystem(token="anon")
    return gcsfs.GCSFileSystem()


def _bytes_feature(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int_feature(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
