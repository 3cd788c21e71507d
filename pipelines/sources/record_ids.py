"""Whether the ids an echoing-layout TFRecord split stores can key per-example tables.

``pipelines.sources.tfrecord.write`` stores ids ``first_id, first_id + 1, ...`` in each record;
shards written without their ``first_id`` all start at 0, and a split written with an offset
runs past its record count. A per-example table (pruning's losses, priority sampling's) needs
each example's own id in ``[0, records)``: duplicate ids would share one loss and one keep
decision, in silence, and an id past the table fails a lookup mid-run. ``tfrecord.load`` reads
the ids (``read``) in the pass that counts a local split's records, and ``usable`` says when they
are not, so the source numbers the records by position instead.

Example::

    import numpy as np
    from pipelines.sources import record_ids, tfrecord

    x, y = np.zeros([4, 3], np.float32), np.arange(4) % 2
    tfrecord.write("/tmp/a.tfrecord", x, y)  # ids 0..3
    tfrecord.write("/tmp/b.tfrecord", x, y)  # ids 0..3 again: first_id left out
    rows = [record_ids.read(path) for path in ("/tmp/a.tfrecord", "/tmp/b.tfrecord")]
    record_ids.usable(np.concatenate(rows)[:, 0], "/tmp/*")  # False, a warning: 8 records, 4 ids
"""

from __future__ import annotations

import logging

import numpy as np
import tensorflow as tf

from pipelines.sources.record_layouts import ECHOING_FEATURES


def read(path: str) -> np.ndarray:
    """``[records, 2]`` int64 rows ``(id, label)``: what each record of the local file ``path``
    stores, in order. Every record is parsed as the echoing layout's first one was, so one
    written another way (a label stored as a float, a missing feature) is named here, at load,
    not in a graph error mid-run."""

    def id_and_label(record):
        example = tf.io.parse_single_example(record, ECHOING_FEATURES)
        return tf.stack([example["id"], example["label"]])

    rows = tf.data.TFRecordDataset(path).map(id_and_label).batch(65_536)
    try:
        return np.concatenate([np.zeros([0, 2], np.int64), *(batch.numpy() for batch in rows)])
    except tf.errors.InvalidArgumentError as error:
        raise ValueError(
            f"TFRecord file {path}: a record does not hold the features the split's first "
            f"record has ({', '.join(sorted(ECHOING_FEATURES))}, as tfrecord.write stores them: "
            "a label as one int64, the inputs as bytes); write every record with "
            f"tfrecord.write. TensorFlow said: {error.message.splitlines()[0]}"
        ) from error


def usable(ids: np.ndarray, pattern: str) -> bool:
    """Whether the ``ids`` a split's records store (one per record) are ``0 .. records - 1``,
    each once; else logs a warning naming the problem and returns False."""
    records, distinct = len(ids), np.unique(ids)  # records >= 1
    if len(distinct) == records and distinct[0] == 0 and distinct[-1] == records - 1:
        return True
    problem = (
        f"{records} records but {len(distinct)} distinct ids"
        if len(distinct) < records
        else f"ids from {distinct[0]} to {distinct[-1]}, not 0 to {records - 1}"
    )
    logging.warning(
        "TFRecord files %r hold %s, so the ids they store cannot key the per-example tables "
        "(pruning's, priority sampling's): the records are numbered by position instead. "
        "Write each shard with its first_id (tfrecord.write(..., first_id=start), or "
        "tfrecord.write_shards) to keep the stored ids.",
        pattern,
        problem,
    )
    return False
