"""Writes a run's scalars twice: one JSON object per line in ``metrics.jsonl`` and TensorBoard.

Example::

    from trainers import metrics_writer

    with metrics_writer.MetricsWriter("/tmp/run") as writer:
        writer.write(100, {"train_loss": 0.5, "fresh_examples": 12_800})
    # /tmp/run/metrics.jsonl gets {"step": 100, "wall_time": ..., "train_loss": 0.5, ...};
    # /tmp/run/tensorboard/ gets the same scalars for `tensorboard --logdir /tmp/run`.

A resumed run appends to the same files, so the log covers the whole run across restarts; it
passes ``start_step`` (the restored step), and rows of later steps, written before a kill, are
dropped first, so no step is logged twice. An open writer holds the workdir's lock
(``workdir_lock.WorkdirLock``), so a second run writing the same files at the same time is
refused (``workdir_lock.WorkdirInUseError``) instead of dropping and interleaving rows.
"""

from __future__ import annotations

import json
import os
import sys
import time

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from trainers import workdir_lock

METRICS_FILENAME = "metrics.jsonl"


def _scalar_metadata() -> bytes:
    # TensorBoard's scalar plugin marker, written with core tf.summary.write so that logging
    # needs no tensorboard install (tf.summary.scalar does); TensorBoard reads it the same.
    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    return metadata.SerializeToString()


_SCALAR_METADATA = _scalar_metadata()


class MetricsWriter:
    """Appends ``{"step", "wall_time", **scalars}`` lines and TensorBoard summaries.

    Holds ``workdir``'s lock from construction to ``close`` (nested in the run's own hold when
    the run took it first, as ``trainers.experiment.run`` does).

    Raises:
      workdir_lock.WorkdirInUseError: another run holds ``workdir``; nothing was written.
    """

    def __init__(self, workdir: str, start_step: int | None = None):
        tf.io.gfile.makedirs(workdir)
        self.path = os.path.join(workdir, METRICS_FILENAME)
        self._lock = workdir_lock.WorkdirLock(workdir).acquire()
        try:
            if start_step is not None:
                _drop_rows_after(self.path, start_step)
            self._file = tf.io.gfile.GFile(self.path, "a")
            self._summaries = tf.summary.create_file_writer(os.path.join(workdir, "tensorboard"))
        except BaseException:
            self._lock.release()
            raise

    def write(self, step: int, scalars: dict[str, float]) -> None:
        """Logs ``scalars`` (name -> number) at ``step``; flushes so a kill loses nothing."""
        record = {"step": int(step), "wall_time": time.time()}
        for name, value in scalars.items():
            if name in record:
                raise ValueError(f"metric name {name!r} is reserved; rename the metric.")
            record[name] = float(value)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        with self._summaries.as_default(step=int(step)):
            for name, value in scalars.items():
                tf.summary.write(
                    name, tf.constant(float(value), tf.float32), metadata=_SCALAR_METADATA
                )
        self._summaries.flush()

    def close(self) -> None:
        try:
            self._file.close()
            self._summaries.close()
        finally:
            self._lock.release()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class NoteBeforeFirstRow:
    """A writer (a ``MetricsWriter``, or a wrapper of one) that prints ``note`` on stderr just
    before its first row, when ``note`` is not None: a resume's warning, said once the restored
    run has trained a loop, since a checkpoint or input that does not fit fails before. Then it
    calls ``at_first_row`` (the workdir's config record takes a fitting resume's values)."""

    def __init__(self, writer, note: str | None, at_first_row=None):
        self.writer, self.note, self.at_first_row = writer, note, at_first_row

    def write(self, step: int, scalars: dict[str, float]) -> None:
        if self.note is not None:
            print(self.note, file=sys.stderr)
            self.note = None
        if self.at_first_row is not None:
            self.at_first_row()
            self.at_first_row = None
        self.writer.write(step, scalars)


def read_metrics(workdir: str) -> list[dict[str, float]]:
    """The records of ``workdir/metrics.jsonl`` in order (empty if there is none)."""
    path = os.path.join(workdir, METRICS_FILENAME)
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as file:
        return [json.loads(line) for line in file if line.strip()]


def _drop_rows_after(path: str, step: int) -> None:
    """Rewrites ``path`` without the rows of steps after ``step`` (if it has any)."""
    if not tf.io.gfile.exists(path):
        return
    with tf.io.gfile.GFile(path) as file:
        lines = [line for line in file if line.strip()]
    kept = [line for line in lines if json.loads(line)["step"] <= step]
    if len(kept) < len(lines):
        with tf.io.gfile.GFile(path, "w") as file:
            file.write("".join(kept))
