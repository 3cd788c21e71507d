"""record_reader: reopen at the offset reached, backoff, and errors, on local files with a
stream that fails on cue (no network)."""

import io

import pytest
import tensorflow as tf

from pipelines.sources import record_reader

RECORDS = [b"a" * 10, b"", b"b" * 30, b"c" * 5]


@pytest.fixture
def path(tmp_path):
    file = str(tmp_path / "four.tfrecord")
    with tf.io.TFRecordWriter(file) as writer:
        for record in RECORDS:
            writer.write(record)
    return file


class FlakyStream(io.BytesIO):
    """A file whose reads fail with ``error`` once the position passes ``fail_at``."""

    def __init__(self, data: bytes, fail_at: int | None, error: Exception):
        super().__init__(data)
        self.fail_at, self.error = fail_at, error

    def read(self, size=-1):
        if self.fail_at is not None and self.tell() + max(size, 0) > self.fail_at:
            raise self.error
        return super().read(size)


def _opener(path, failures):
    """Opens ``path``; the k-th open fails at byte ``failures[k]`` (None: never)."""
    with open(path, "rb") as file:
        data = file.read()
    opened = []

    def open_file(name):
        fail_at = failures[len(opened)] if len(opened) < len(failures) else None
        opened.append(name)
        return FlakyStream(data, fail_at, TimeoutError("injected")), len(data)

    return open_file


@pytest.mark.parametrize(
    ("failures", "attempts", "waits"),
    [
        ([], 3, []),
        ([40], 3, [0.5]),  # fails inside record 1 (bytes 26-41): resume at 26 once
        ([40, 40], 3, [0.5, 1.0]),  # twice in a row without progress: doubled wait
        ([40, 70], 2, [0.5, 0.5]),  # then inside record 2: progress resets the count
    ],
)
def test_reopens_at_the_offset_reached(path, failures, attempts, waits):
    stats, slept = record_reader.ReadStats(), []
    records = record_reader.read_records(
        path,
        _opener(path, failures),
        skip_corrupt=False,
        stats=stats,
        retry=record_reader.RetryPolicy(attempts=attempts, delay=0.5, max_delay=10.0),
        is_retriable=lambda error: isinstance(error, TimeoutError),
        sleep=slept.append,
    )
    assert list(records) == RECORDS  # nothing lost, nothing twice
    assert slept == waits and stats.reopened == len(waits)
    assert all(offset > 0 for _, offset, _ in stats.errors)


@pytest.mark.parametrize(
    ("failures", "attempts", "retriable", "message"),
    [
        ([40, 40, 40], 3, True, r"after 3 attempt\(s\) in a row, at byte offset 26 \(record 1\)"),
        ([40], 3, False, r"\(not retried\), at byte offset 26 \(record 1\)"),
    ],
)
def test_gives_up_naming_the_file(path, failures, attempts, retriable, message):
    records = record_reader.read_records(
        path,
        _opener(path, failures),
        skip_corrupt=False,
        stats=record_reader.ReadStats(),
        retry=record_reader.RetryPolicy(attempts=attempts, delay=0.0),
        is_retriable=lambda error: retriable,
        sleep=lambda seconds: None,
    )
    with pytest.raises(record_reader.ObjectReadError, match=f"cannot read {path} {message}"):
        list(records)


@pytest.mark.parametrize(("failures", "expected"), [(1, 0.5), (2, 1.0), (3, 2.0), (7, 10.0)])
def test_backoff_doubles_up_to_the_cap(failures, expected):
    policy = record_reader.RetryPolicy(attempts=9, delay=0.5, max_delay=10.0)
    assert policy.wait(failures) == expected
