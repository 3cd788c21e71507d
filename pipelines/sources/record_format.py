"""The TFRecord file format, framed and checked in Python (for readers outside the graph).

Example::

    import io
    import tensorflow as tf
    from pipelines.sources import record_format

    path = "/tmp/example.tfrecord"
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"hello")
    with open(path, "rb") as stream:
        size = stream.seek(0, io.SEEK_END)
        stream.seek(0)
        (record,) = record_format.scan(stream, path, size=size)
    assert record.data == b"hello" and record.problem is None

A record is: uint64 length, uint32 masked CRC-32C of the length, the data, uint32 masked CRC-32C
of the data (all little-endian). ``scan`` checks both checksums like ``TFRecordDataset`` does
and reports, instead of raising, what is wrong with a record, so that callers can either fail
with the file, record index and byte offset, or skip and count it.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from typing import BinaryIO

import google_crc32c

HEADER_BYTES, FOOTER_BYTES = 12, 4
_MASK_DELTA = 0xA282EAD8


class CorruptRecordError(ValueError):
    """A record that fails its checksum or is cut short; names the file, index and offset."""

    def __init__(self, path: str, index: int, offset: int, problem: str):
        self.path, self.index, self.offset, self.problem = path, index, offset, problem
        super().__init__(
            unreadable_start(path, problem)
            if offset == 0 and not problem.startswith("data checksum")  # no record framed
            else f"corrupt TFRecord file {path}: record {index} at byte offset {offset}: "
            f"{problem}. Rewrite the file, or set data config skip_corrupt=True to skip and "
            "count such records."
        )


def unreadable_start(path: str, problem: str) -> str:
    """The message for a file whose very first record header does not frame: most often not a
    TFRecord file at all (a text or image file the glob matched), which skipping cannot mend."""
    return (
        f"TFRecord file {path} does not start with a TFRecord record ({problem}): it is not a "
        "TFRecord file (another kind of file the glob matched?), or its start is damaged. Point "
        "the glob at the TFRecord files only, e.g. train_files='dir/train-*.tfrecord'; rewrite "
        "a damaged file, or set data config skip_corrupt=True to skip what cannot be read."
    )


class ShortReadError(OSError):
    """The stream ended before the size it reported (e.g. a dropped connection)."""


@dataclasses.dataclass(frozen=True)
class Record:
    """One framed record, or the damaged region where a record should be.

    Attributes:
      index: 0-based position of the record in its file.
      offset: byte offset of its header.
      end: byte offset just past it, where the next record starts (the file size when the
        rest of the file cannot be framed).
      data: the record's bytes; None when ``problem`` is set or the data was not read.
      problem: what is wrong with it, or None.
      rest_of_file: the damage cannot be framed past: the region runs to the file's end and
        may have held any number of records.
    """

    index: int
    offset: int
    end: int
    data: bytes | None
    problem: str | None
    rest_of_file: bool = False


def masked_crc32c(data: bytes) -> int:
    """The CRC-32C of ``data``, masked as TFRecord stores it."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def scan(
    stream: BinaryIO,
    path: str,
    *,
    size: int,
    offset: int = 0,
    index: int = 0,
    read_data: bool = True,
) -> Iterator[Record]:
    """Yields the records of ``stream`` from ``offset`` (a record boundary) to ``size``.

    Args:
      stream: a binary file object positioned at ``offset``.
      path: named in errors.
      size: the file's size in bytes.
      offset: where to start; ``index`` is the index of the record that starts there.
      index: see ``offset``.
      read_data: False seeks over the data (framing and the length checksum only), e.g. to
        count records without fetching them.

    Raises:
      ShortReadError: the stream returned fewer bytes than ``size`` promised.
    """
    while offset < size:
        remaining = size - offset
        if remaining < HEADER_BYTES:
            problem = f"truncated: {remaining} bytes left, a record header needs {HEADER_BYTES}"
            yield Record(index, offset, size, None, problem, rest_of_file=True)
            return
        header = _read_exactly(stream, HEADER_BYTES, path, offset)
        length, length_crc = struct.unpack("<QI", header)
        if masked_crc32c(header[:8]) != length_crc:
            problem = (
                f"length checksum mismatch; the remaining {remaining} bytes of the file cannot "
                "be framed"
            )
            yield Record(index, offset, size, None, problem, rest_of_file=True)
            return
        end = offset + HEADER_BYTES + length + FOOTER_BYTES
        if end > size:
            problem = f"truncated: the record needs {end - offset} bytes, {remaining} are left"
            yield Record(index, offset, size, None, problem, rest_of_file=True)
            return
        if read_data:
            body = _read_exactly(stream, length + FOOTER_BYTES, path, offset + HEADER_BYTES)
            data = body[:length]
            (data_crc,) = struct.unpack("<I", body[length:])
            if masked_crc32c(data) != data_crc:
                yield Record(index, offset, end, None, "data checksum mismatch")
            else:
                yield Record(index, offset, end, data, None)
        else:
            stream.seek(end)
            yield Record(index, offset, end, None, None)
        offset, index = end, index + 1


def _read_exactly(stream: BinaryIO, size: int, path: str, offset: int) -> bytes:
    """``size`` bytes; file reads may return fewer bytes than asked, so loop."""
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise ShortReadError(
                f"{path}: the stream ended {remaining} bytes early at byte offset "
                f"{offset + size - remaining}"
            )
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
