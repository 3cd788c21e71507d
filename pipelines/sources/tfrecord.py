"""TFRecord files, local or on ``gs://``, and the writer that makes them (``tfrecord_writer``).

Example::

    import numpy as np
    from pipelines.sources import tfrecord

    tfrecord.write("/tmp/train.tfrecord", np.random.rand(100, 40, 1), np.arange(100) % 10)
    tfrecord.write("/tmp/eval.tfrecord", np.random.rand(20, 40, 1), np.arange(20) % 10)
    source = tfrecord.load("/tmp/train*.tfrecord", "/tmp/eval*.tfrecord", num_classes=10)

Each record is a ``tf.train.Example`` with ``inputs`` (PNG/JPEG bytes, or a serialized float32
tensor), ``encoding`` ("png", "jpeg" or "tensor"), ``label`` and ``id`` (int64). The first record
tells the source how to decode the rest, so files are self-describing. Shards in TFDS's
image-classification layout (``image``, ``label``: ImageNet's TFRecords as TFDS prepares them)
are read too, ids being record positions; see ``record_layouts``.

Local paths are read by ``TFRecordDataset`` in the graph. ``gs://`` paths are read through
**gcsfs** from a Python generator (``Dataset.from_generator``), not in the graph: TensorFlow's own
gs:// client ignores storage emulators, and gcsfs honours ``STORAGE_EMULATOR_HOST``. So gs://
pipelines cannot be serialised to the tf.data service, and reads hold the GIL. Records are counted
once, up front: local files by a pass in the graph, gs:// files from the count ``write`` stores in
the object's metadata (or a pass over the record headers).

Faults (see ``ReadOptions``):

- Network: gs:// reads are retried per HTTP request by gcsfs and, when it gives up, per file by
  reopening at the first record not yet delivered (``pipelines.sources.gcs``,
  ``record_reader``); then an ``ObjectReadError`` names the object and the last error.
- Corrupt or truncated records: local files fail at ``load`` (the counting pass checks every
  checksum) with a ``ValueError`` naming the file and byte offset; gs:// records are checked
  (masked CRC-32C of length and data, like ``TFRecordDataset``) as they are read, and a bad one
  raises ``CorruptRecordError`` naming the object, record index and byte offset. With
  ``skip_corrupt=True`` bad records are skipped, logged and counted in the split's
  ``read_stats`` instead (local files are then read in Python too, to be able to count).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re

import numpy as np
import tensorflow as tf

from pipelines.sources import (
    files,
    gcs,
    images,
    record_format,
    record_ids,
    record_layouts,
    record_reader,
)
from pipelines.sources.source import Source, SourceSplit, check_not_empty
from pipelines.sources.tfrecord_writer import (  # the writer: tfrecord.write, as documented
    COUNT_METADATA,
    ENCODINGS,
    write,
    write_shards,
)

__all__ = ["ReadOptions", "gcs_filesystem", "load", "write", "write_shards"]


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How TFRecord files are read (the data config's ``skip_corrupt`` and ``gcs_*`` fields).

    Attributes:
      skip_corrupt: skip, log and count corrupt or truncated records instead of failing.
      gcs_request_attempts: tries per HTTP request (gcsfs's own retry and backoff).
      gcs_retry: reopening a gs:// file at the offset reached once gcsfs gives up.
      gcs_block_size: bytes per gs:// range request (8 MiB: one request per 8 MiB read).
      num_parallel_calls: parallelism of record parsing.
    """

    skip_corrupt: bool = False
    gcs_request_attempts: int = 6
    gcs_retry: record_reader.RetryPolicy = dataclasses.field(
        default_factory=record_reader.RetryPolicy
    )
    gcs_block_size: int = 8 << 20
    num_parallel_calls: int = tf.data.AUTOTUNE


def load(
    train_files: str,
    eval_files: str,
    *,
    num_classes: int,
    image_size: int | None = None,
    options: ReadOptions = ReadOptions(),
) -> Source:
    """Returns a source over TFRecord globs written by ``write``, or in TFDS's image-classification
    layout (``record_layouts``), local or gs://.

    Each split's ``read_stats`` (a ``record_reader.ReadStats``) counts the records skipped with
    ``skip_corrupt`` and the gs:// files reopened after a fault; it is None for local files read
    in the graph.

    Raises:
      ValueError: a glob matches no file, a gs:// path cannot be read, a split has no record,
        a local file is corrupt or truncated (without ``skip_corrupt``), or the records are in
        neither layout.
      record_reader.ObjectReadError: a gs:// object stays unreadable after every retry.
    """
    train_paths = _glob(train_files, "train_files", options)
    eval_paths = _glob(eval_files, "eval_files", options)
    first_record, first_path = _first(train_paths, options, train_files)
    layout = record_layouts.layout_of(first_record, first_path)
    train_counts, by_position = _count_train(train_paths, train_files, layout, num_classes, options)
    eval_counts, _ = _count(eval_paths, eval_files, options)
    parse = record_layouts.parser(layout, ids_by_position=by_position)
    first = {key: value.numpy() for key, value in parse(0, first_record).items()}
    decode_inputs, input_shape = _decoder(first, image_size, train_files)
    crop_decode = _crop_decoder(input_shape) if first["encoding"].decode() != "tensor" else None

    _require_eval_stored_as_train(first, eval_paths, options, train_files, eval_files)
    check_label = _label_checker(int(num_classes), train_files, eval_files)
    check_label(first)  # labels all off (the usual mistake) fail here, before any training

    def decode(example: dict) -> dict:
        label = check_label(example)
        return {"inputs": decode_inputs(example), "label": label, "id": example["id"]}

    if crop_decode is not None:
        crop_decode = _with_checked_label(crop_decode, check_label)
    split = functools.partial(
        _split, parse=parse, decode=decode, crop_decode=crop_decode, options=options
    )
    return Source(
        train=split(train_paths, train_counts, _first_ids(train_counts)),
        eval=split(eval_paths, eval_counts, _first_ids(eval_counts)),
        num_classes=int(num_classes),
        input_shape=input_shape,
    )


def _count_train(paths, files: str, layout, num_classes, options: ReadOptions):
    """``(records per file, whether ids go by position)`` of the train split. Local records in
    the echoing layout are counted by a pass that reads their ids and labels too: ids that
    cannot key per-example tables are numbered by position instead, and labels stopping short
    of ``num_classes`` are said."""
    stored = (
        layout == record_layouts.ECHOING
        and not options.skip_corrupt
        and not paths[0].startswith("gs://")  # ids trusted: not read twice over a network
    )
    counts, rows = _count(paths, files, options, stored=stored)
    if rows is None:
        return counts, options.skip_corrupt
    _warn_if_classes_untrained(int(rows[:, 1].max()), int(num_classes), files)
    return counts, not record_ids.usable(rows[:, 0], files)


def _label_checker(num_classes: int, train_files: str, eval_files: str):
    """``example -> label`` that stops with a message naming the record's id and label when the
    label is outside ``[0, num_classes)``: a loss would otherwise fail deep in the train step
    (on a CPU) or turn NaN without a word (on a GPU)."""
    message = (
        f"TFRecord files {train_files!r} / {eval_files!r} hold a label outside [0, {num_classes}) "
        "(the record's id and label follow); set data config num_classes to the largest "
        "label + 1, or fix the records."
    )

    def check_label(example: dict) -> tf.Tensor:
        label, record_id = example["label"], example["id"]
        in_range = tf.logical_and(label >= 0, label < num_classes)
        if tf.executing_eagerly():  # e.g. the first record, checked while loading
            if not in_range:
                raise ValueError(f"{message} id={int(record_id)}, label={int(label)}.")
            return tf.convert_to_tensor(label)
        check = tf.debugging.Assert(in_range, [message, "id=", record_id, "label=", label])
        with tf.control_dependencies([check]):
            return tf.identity(label)

    return check_label


def _require_eval_stored_as_train(train_first: dict, eval_paths, options, train_files, eval_files):
    """Both splits are decoded as the train split's first record says; eval records stored
    another way (PNG against tensors) failed at the first evaluation, after training, in a
    decode error that named no file."""
    record, path = _first(eval_paths, options, eval_files)
    layout = record_layouts.layout_of(record, path)
    eval_first = {key: v.numpy() for key, v in record_layouts.parser(layout)(0, record).items()}
    train_kind, eval_kind = _stored_as(train_first), _stored_as(eval_first)
    if train_kind != eval_kind:
        raise ValueError(
            f"TFRecord files {eval_files!r} store their inputs as {eval_kind} and the train "
            f"files {train_files!r} as {train_kind} (first records of {path} and the train "
            "split); both splits are decoded alike: write them the same way "
            "(tfrecord.write(..., encoding=...))."
        )


def _stored_as(first: dict) -> str:
    """How a split's first record stores its inputs: the encoding, and a tensor's shape."""
    if first["encoding"].decode() != "tensor":
        return "encoded images"  # PNG, JPEG and the rest all decode alike
    try:
        shape = tuple(tf.io.parse_tensor(first["inputs"], tf.float32).shape)
    except tf.errors.InvalidArgumentError:
        return "tensors that are not float32"
    return f"float32 tensors of shape {shape}"


def _warn_if_classes_untrained(top_label: int, num_classes: int, train_files: str) -> None:
    """Says when the train records' labels stop short of ``num_classes``: the model's head has
    classes no example trains (num_classes=1000 on labels 0-9 trained a 1000-way model)."""
    if top_label + 1 < num_classes:
        logging.warning(
            "TFRecord files %r hold labels up to %d, so classes %d to %d of num_classes=%d are "
            "never trained; set data config num_classes=%d, unless the data set has classes "
            "these records do not hold.",
            train_files,
            top_label,
            top_label + 1,
            num_classes - 1,
            num_classes,
            top_label + 1,
        )


def _with_checked_label(crop_decode, check_label):
    def checked(example: dict, seed: tf.Tensor) -> dict:
        return {**crop_decode(example, seed), "label": check_label(example)}

    return checked


def _split(paths, counts, first_ids, *, parse, decode, crop_decode, options) -> SourceSplit:
    """The split of ``paths`` (``counts`` records each, ids from ``first_ids``), parsed by
    ``parse``; it shards by file."""
    split = functools.partial(
        _split, parse=parse, decode=decode, crop_decode=crop_decode, options=options
    )

    def shard_by_file(num_shards: int, index: int) -> SourceSplit:
        # With at least one file per pipeline each pipeline opens only its own files, so
        # nothing is fetched twice over the network; otherwise shard record by record.
        if len(paths) < num_shards:
            whole = dataclasses.replace(split(paths, counts, first_ids), shard_function=None)
            return whole.shard(num_shards, index)
        mine = slice(index, None, num_shards)
        return dataclasses.replace(
            split(paths[mine], counts[mine], first_ids[mine]), shard_function=None
        )

    records, stats = _records(paths, first_ids, options)
    # 1 = a sequential map: a parallel map of 1 still parses one record ahead.
    parallel = None if options.num_parallel_calls == 1 else options.num_parallel_calls
    return SourceSplit(
        dataset=records.map(parse, num_parallel_calls=parallel),
        decode=decode,
        crop_decode=crop_decode,
        num_examples=sum(counts),
        shard_function=shard_by_file,
        read_stats=stats,
    )


def _crop_decoder(input_shape: tuple[int, ...]):
    """For ``augment="inception"``: a random-resized crop while decoding encoded images (of a
    JPEG, only the blocks the crop covers), to ``input_shape``."""

    def crop_decode(example: dict, seed: tf.Tensor) -> dict:
        pixels = images.decode_random_crop(
            example["inputs"], seed, size=input_shape[0], channels=input_shape[-1]
        )
        if input_shape[0] != input_shape[1]:  # stored non-square, no image_size: keep shape
            pixels = tf.image.resize(pixels, input_shape[:2])
        return {"inputs": pixels, "label": example["label"], "id": example["id"]}

    return crop_decode


def _decoder(first: dict, image_size: int | None, what: str):
    """A graph decode function and the static input shape, from the first record."""
    encoding = first["encoding"].decode()
    if encoding not in (*ENCODINGS, record_layouts.ENCODED_IMAGE):
        raise ValueError(
            f"TFRecord files {what!r} have encoding {encoding!r}, expected one of "
            f"{list(ENCODINGS)}; write them with pipelines.sources.tfrecord.write."
        )
    if encoding == "tensor":
        shape = tuple(tf.io.parse_tensor(first["inputs"], tf.float32).shape)
        if image_size is not None:  # arrays are stored as they train: nothing resizes them
            raise ValueError(
                f"data config image_size={image_size} resizes encoded images, and TFRecord "
                f"files {what!r} hold arrays of shape {shape} (encoding 'tensor'), which are "
                "read as stored; set image_size=None."
            )

        def decode_tensor(example):
            return tf.ensure_shape(tf.io.parse_tensor(example["inputs"], tf.float32), shape)

        return decode_tensor, shape
    if encoding == record_layouts.ENCODED_IMAGE and image_size is None:
        raise ValueError(
            f"TFRecord files {what!r} are in TFDS's image layout, whose photos differ in size; "
            "set data config image_size (e.g. 224) to crop them to one size."
        )
    first_image = tf.io.decode_image(first["inputs"], expand_animations=False)
    channels = int(first_image.shape[-1])
    stored = (None, None, channels) if image_size is not None else tuple(first_image.shape)
    shape = images.static_shape(stored, image_size, f"TFRecord files {what!r}")

    def decode_picture(example):
        return images.decode(example["inputs"], shape=shape, resize=image_size is not None)

    def decode_center(example):
        return images.decode_center_crop(example["inputs"], size=image_size, channels=channels)

    # Photos in TFDS's layout (ImageNet's) are evaluated as ImageNet is: the central crop.
    photos = encoding == record_layouts.ENCODED_IMAGE
    return (decode_center if photos else decode_picture), shape


def _first_ids(counts: list[int]) -> list[int]:
    """Each file's first example id: ids run on across files in order."""
    return [int(start) for start in np.cumsum([0, *counts[:-1]])]


def _first(paths: list[str], options: ReadOptions, pattern: str) -> tuple[bytes, str]:
    """The first readable record of ``paths``, and the file it is in."""
    if _in_python(paths, options):
        records = _python_records(paths[0], options, record_reader.ReadStats())
        record = next(records, None)
        records.close()
        if record is None:  # every record of the first file is corrupt: try the next files
            if len(paths) == 1:
                raise ValueError(
                    "no TFRecord file of the split holds a readable record (all were skipped "
                    f"as corrupt, {paths[0]} last): are they TFRecord files at all? Point the "
                    "glob at TFRecord files, or rewrite them."
                )
            return _first(paths[1:], options, pattern)
        return record, paths[0]
    for path in paths:  # an empty file (a shard with no example) holds no first record
        try:
            for record in tf.data.TFRecordDataset(path).take(1):
                return record.numpy(), path
        except tf.errors.DataLossError as error:
            # The header pass names what failed: a first header that does not frame is most
            # often a file of another kind (record_format.unreadable_start).
            _framed_count(path, _local_open, options)
            raise _corrupt(path, error) from error
    check_not_empty(0, f"TFRecord files {pattern!r}")  # raises: every file is empty


def _count(
    paths: list[str], pattern: str, options: ReadOptions, *, stored: bool = False
) -> tuple[list[int], np.ndarray | None]:
    """Records per file: a pass in the graph (local), or the gs:// object metadata / headers.
    With ``stored`` (local files), also the ``(id, label)`` rows the records store, read in
    the same pass (``record_ids.read``)."""
    rows = None
    if paths[0].startswith("gs://"):
        counts = [_gcs_count(path, options) for path in paths]
    elif options.skip_corrupt:
        counts = [_framed_count(path, _local_open, options) for path in paths]
    elif stored:
        per_file = [_local_pass(path, options, record_ids.read, size=len) for path in paths]
        counts, rows = [len(file_rows) for file_rows in per_file], np.concatenate(per_file)
    else:
        counts = [_local_pass(path, options, _records_in, size=int) for path in paths]
    check_not_empty(sum(counts), f"TFRecord files {pattern!r}")
    return counts, rows


def _records_in(path: str) -> int:
    return int(tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda total, _: total + 1))


def _local_pass(path: str, options: ReadOptions, read, *, size):
    """``read(path)`` (a count, or the stored ids), every record's checksums checked;
    ``size(read(path))`` is the records it read (``int`` of a count, ``len`` of the ids).

    ``TFRecordDataset`` checks the length and data checksums but ends a file cut inside a
    record's data without an error (verified on TF 2.21), so a header pass checks the framing
    against the file size first.
    """
    framed = _framed_count(path, _local_open, options)
    try:
        result = read(path)
    except tf.errors.DataLossError as error:
        raise _corrupt(path, error) from error
    count = size(result)
    if count != framed:  # e.g. the file changed between the passes
        raise ValueError(
            f"TFRecord file {path} holds {framed} framed records but {count} readable ones; "
            "rewrite it, or set data config skip_corrupt=True."
        )
    return result


def _corrupt(path: str, error: tf.errors.DataLossError) -> ValueError:
    # TensorFlow's message, without the "{{function_node ...}}" and "[Op:...]" around it.
    problem = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:.*$", "", error.message)
    problem = problem.strip().splitlines()[0] if problem.strip() else "unreadable"
    return ValueError(
        f"corrupt TFRecord file {path}: {problem} (a byte offset). Rewrite the file, or set "
        "data config skip_corrupt=True to skip and count corrupt records."
    )


def _framed_count(path: str, open_file, options: ReadOptions) -> int:
    """Records whose header frames correctly; a bad region fails here unless skip_corrupt."""
    count = 0
    for record in record_reader.scan_records(
        path,
        open_file,
        retry=options.gcs_retry,
        is_retriable=gcs.is_retriable,
        read_data=False,
    ):
        if record.problem is None:
            count += 1
        elif not options.skip_corrupt:
            raise record_format.CorruptRecordError(
                path, record.index, record.offset, record.problem
            )
    return count


def _glob(pattern: str, key: str, options: ReadOptions) -> list[str]:
    return files.glob(pattern, key, request_attempts=options.gcs_request_attempts)


def _in_python(paths: list[str], options: ReadOptions) -> bool:
    return paths[0].startswith("gs://") or options.skip_corrupt


def _records(paths: list[str], first_ids: list[int], options: ReadOptions):
    """``(position, serialized record)`` of ``paths`` in order (deterministic, so ids follow file
    order), each file's positions counted from its first id; and the ``ReadStats`` of the Python
    reader (None when ``TFRecordDataset`` reads them)."""
    stats = record_reader.ReadStats() if _in_python(paths, options) else None

    def generate(path: bytes):
        yield from _python_records(path.decode(), options, stats)

    def file_records(path: tf.Tensor, first_id: tf.Tensor) -> tf.data.Dataset:
        if stats is None:
            records = tf.data.TFRecordDataset(path)
        else:
            signature = tf.TensorSpec([], tf.string)
            records = tf.data.Dataset.from_generator(
                generate, args=(path,), output_signature=signature
            )
        return records.enumerate(first_id)

    files = tf.data.Dataset.from_tensor_slices((paths, tf.constant(first_ids, tf.int64)))
    return files.interleave(file_records, cycle_length=1), stats


def _python_records(path: str, options: ReadOptions, stats: record_reader.ReadStats):
    """The records of one file read in Python: gcsfs for gs://, ``tf.io.gfile`` otherwise."""
    return record_reader.read_records(
        path,
        _opener(path, options),
        skip_corrupt=options.skip_corrupt,
        stats=stats,
        retry=options.gcs_retry,
        is_retriable=gcs.is_retriable,
    )


def _opener(path: str, options: ReadOptions):
    if path.startswith("gs://"):
        filesystem = gcs.filesystem(options.gcs_request_attempts)
        return gcs.opener(filesystem, block_size=options.gcs_block_size)
    return _local_open


def _local_open(path: str):
    return tf.io.gfile.GFile(path, "rb"), tf.io.gfile.stat(path).length


def _gcs_count(path: str, options: ReadOptions = ReadOptions()) -> int:
    """Records in a gs:// file, from its metadata when ``write`` made it.

    Otherwise by a pass over the record headers, which fetches the whole object (seeks within a
    block still download it).
    """
    filesystem = gcs.filesystem(options.gcs_request_attempts)
    metadata = filesystem.info(path).get("metadata") or {}
    if metadata.get(COUNT_METADATA, "").isdigit():
        return int(metadata[COUNT_METADATA])
    return _framed_count(path, _opener(path, options), options)


def gcs_filesystem():
    """A gcsfs filesystem with gcsfs's default retries; see ``pipelines.sources.gcs``."""
    return gcs.filesystem()
