"""Reads one TFRecord file in Python: checksums, skip-and-count, reopen at the offset reached.

Example::

    import io
    import tensorflow as tf
    from pipelines.sources import record_reader

    path = "/tmp/example.tfrecord"
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"hello")

    def open_file(path):
        return open(path, "rb"), tf.io.gfile.stat(path).length

    stats = record_reader.ReadStats()
    records = record_reader.read_records(path, open_file, skip_corrupt=True, stats=stats)
    assert list(records) == [b"hello"] and stats.skipped == 0

Used where ``TFRecordDataset`` cannot be: gs:// files read through gcsfs (TensorFlow's own gs://
client ignores storage emulators) and ``skip_corrupt`` (``TFRecordDataset`` can only fail on a
bad record, not skip and count it). It runs in Python, so it holds the GIL while it checks
checksums and cannot be sent to a tf.data service worker.

Faults: an error ``is_retriable`` accepts (after the filesystem's own retries, see
``pipelines.sources.gcs``) closes the file, waits ``RetryPolicy.wait(k)`` and reopens it at the
first record not yet delivered, so no record is duplicated or lost. ``RetryPolicy.attempts``
consecutive failures without progress end the read with an ``ObjectReadError`` naming the file,
the byte offset reached and the last error.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO

from absl import logging

from pipelines.sources import record_format

# path -> (binary stream positioned at 0, the file's size in bytes)
OpenFunction = Callable[[str], tuple[BinaryIO, int]]


class ObjectReadError(OSError):
    """A file could not be read after every allowed attempt; names it and the last error."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to reopen a file after a retriable error.

    Attributes:
      attempts: tries in a row without progress before giving up (1 = never reopen).
      delay: seconds before the first reopen; doubled for each further one.
      max_delay: the cap on one wait.
    """

    attempts: int = 3
    delay: float = 1.0
    max_delay: float = 30.0

    def wait(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1-based)."""
        return min(self.delay * 2 ** (failures - 1), self.max_delay)


class ReadStats:
    """What the Python reads of one split skipped and retried; safe across tf.data threads.

    Attributes:
      skipped: corrupt or truncated records skipped (``skip_corrupt=True``).
      skipped_records: ``(path, record index, byte offset, problem)`` of each.
      lost_tails: ``(path, byte offset)`` of each skip that lost the rest of its file (damage
        that cannot be framed past): its records cannot be counted.
      reopened: files reopened after a retriable error.
      errors: ``(path, byte offset reopened at, error text)`` of each retriable error.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.skipped, self.skipped_records, self.lost_tails = 0, [], []
        self.reopened, self.errors = 0, []

    def skip(
        self, path: str, index: int, offset: int, problem: str, *, rest_of_file: bool = False
    ) -> None:
        with self._lock:
            self.skipped += 1
            self.skipped_records.append((path, index, offset, problem))
            if rest_of_file:
                self.lost_tails.append((path, offset))
        logging.warning(
            "skip_corrupt: skipped record %d at byte offset %d of %s: %s",
            index,
            offset,
            path,
            problem,
        )

    def skip_file(self, path: str, problem: str) -> None:
        """Counts a whole file skipped (an unreadable image), as record -1 at offset 0."""
        with self._lock:
            self.skipped += 1
            self.skipped_records.append((path, -1, 0, problem))
        logging.warning("skip_corrupt: skipped file %s: %s", path, problem)

    def reopen(self, path: str, offset: int, error: BaseException, wait: float) -> None:
        with self._lock:
            self.reopened += 1
            self.errors.append((path, offset, repr(error)))
        logging.warning(
            "reading %s failed at byte offset %d (%r); reopening there in %.2f s",
            path,
            offset,
            error,
            wait,
        )


def read_records(
    path: str,
    open_file: OpenFunction,
    *,
    skip_corrupt: bool,
    stats: ReadStats,
    retry: RetryPolicy = RetryPolicy(attempts=1),
    is_retriable: Callable[[BaseException], bool] = lambda error: False,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[bytes]:
    """Yields the data of every good record of ``path``, in order.

    Args:
      path: the file, named in errors and warnings.
      open_file: opens ``path``; see ``OpenFunction``.
      skip_corrupt: skip and count (in ``stats``) records that fail a checksum or are cut
        short, instead of raising ``CorruptRecordError``.
      stats: where skips and reopens are counted.
      retry: how often to reopen after an error ``is_retriable`` accepts.
      is_retriable: which errors are worth a reopen (network faults, not missing files).
      sleep: waits between attempts (a parameter so callers may use their own clock).

    Raises:
      CorruptRecordError: a bad record and ``skip_corrupt=False``.
      ObjectReadError: ``retry.attempts`` retriable errors in a row without progress.
    """
    for record in scan_records(
        path, open_file, stats=stats, retry=retry, is_retriable=is_retriable, sleep=sleep
    ):
        if record.problem is None:
            yield record.data
        elif skip_corrupt:
            stats.skip(
                path, record.index, record.offset, record.problem, rest_of_file=record.rest_of_file
            )
        else:
            raise record_format.CorruptRecordError(
                path, record.index, record.offset, record.problem
            )


def scan_records(
    path: str,
    open_file: OpenFunction,
    *,
    stats: ReadStats | None = None,
    retry: RetryPolicy = RetryPolicy(attempts=1),
    is_retriable: Callable[[BaseException], bool] = lambda error: False,
    sleep: Callable[[float], None] = time.sleep,
    read_data: bool = True,
) -> Iterator[record_format.Record]:
    """``record_format.scan`` of ``path``, reopened at the offset reached after an error.

    Args: as ``read_records``, plus ``read_data`` (False: framing only, see
    ``record_format.scan``); ``stats`` may be None to count nothing.

    Raises:
      ObjectReadError: ``retry.attempts`` retriable errors in a row without progress, or one
        error that is not retriable.
    """
    offset = index = failures = 0
    while True:
        try:
            stream, size = open_file(path)
            with stream:
                if offset:
                    stream.seek(offset)
                for record in record_format.scan(
                    stream, path, size=size, offset=offset, index=index, read_data=read_data
                ):
                    yield record
                    offset, index, failures = record.end, record.index + 1, 0
            return
        except Exception as error:  # filesystems raise many types; is_retriable sorts them
            retriable = isinstance(error, record_format.ShortReadError) or is_retriable(error)
            failures += 1
            if not retriable or failures >= retry.attempts:
                tried = f"after {failures} attempt(s) in a row" if retriable else "(not retried)"
                raise ObjectReadError(
                    f"cannot read {path} {tried}, at byte offset {offset} (record {index}); "
                    f"last error: {error!r}. Check that the storage server is up and the object "
                    "exists; gs:// retries are set by data config gcs_request_attempts and "
                    "gcs_read_attempts."
                ) from error
            wait = retry.wait(failures)
            if stats is not None:
                stats.reopen(path, offset, error, wait)
            sleep(wait)
