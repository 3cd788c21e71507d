"""Whether the ids an echoing-layout TFRecord split stores can key per-example tables.

``pipelines.sources.tfrecord.write`` stores ids ``first_id, first_id + 1, ...`` in each record;
shards written without their ``first_id`` all start at 0, and a split written with an offset
runs past its record count. A per-example table (pruning's losses, priority sampling's) needs
each example's own id in ``[0, records)``: duplicate ids would share one loss and one keep
decision, in silence, and an id past the table fails a lookup mid-run. ``stored_ids_usable``
reads the ids once at load and says when they are not, so the source numbers the records by
position instead.

Example::

    from pipelines.sources import record_ids, tfrecord

    tfrecord.write("/tmp/a.tfrecord", x, y)  # ids 0..n-1
    tfrecord.write("/tmp/b.tfrecord", x, y)  # ids 0..n-1 again: first_id left out
    record_ids.stored_ids_usable(["/tmp/a.tfrecord", "/tmp/b.tfrecord"], 2 * n, "/tmp/*")
    # False, and a warning: 2n records, n distinct ids
"""

from __future__ import annotations

import logging

import numpy as np
import tensorflow as tf

_ID = {"id": tf.io.FixedLenFeature([], tf.int64)}


def stored_ids_usable(paths: list[str], records: int, pattern: str) -> bool:
    """Whether the ids stored in ``paths`` (``records`` in all) are ``0 .. records - 1``, each
    once; else logs a warning naming the problem and returns False. gs:// objects are not read
    again for this (their ids are trusted)."""
    if paths[0].startswith("gs://"):
        return True
    ids = (
        tf.data.TFRecordDataset(paths)
        .map(lambda record: tf.io.parse_single_example(record, _ID)["id"])
        .batch(65_536)
    )
    distinct = np.unique(np.concatenate([batch.numpy() for batch in ids]))  # records >= 1
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
