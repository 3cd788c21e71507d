"""TFRecord faults: network errors on gs:// reads, corrupt and truncated records, and the
invariant that no example is silently lost (fresh examples == records read)."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

import pipelines
from echoing import meters
from pipelines.sources import gcs as gcs_module
from pipelines.sources import record_format, tfrecord

# Three files of eight records; ids 0-7, 8-15, 16-23.
NUM_FILES, PER_FILE, NUM_CLASSES = 3, 8, 4
TOTAL = NUM_FILES * PER_FILE
# Small range requests, so one file takes several object-data GETs and faults land mid-file.
BLOCK_BYTES = 256


def _write_local(directory) -> str:
    labels = np.arange(TOTAL) % NUM_CLASSES
    return tfrecord.write_shards(
        os.path.join(str(directory), "train"), _inputs(), labels, num_shards=NUM_FILES
    )


def _config(train_files, **overrides):
    config = pipelines.default_data_config()
    config.source, config.num_classes, config.augment = "tfrecord", NUM_CLASSES, "none"
    config.train_files = config.eval_files = train_files
    config.gcs_block_size = BLOCK_BYTES
    # No read-ahead anywhere, so after n rows exactly n records have been read: sequential
    # maps, no shuffle or prefetch buffers (see _rows for the tf.data options).
    config.batch_size, config.shuffle_buffer, config.prefetch, config.num_parallel_calls = (
        1,
        0,
        0,
        1,
    )
    config.gcs_retry_delay = 0.01
    for key, value in overrides.items():
        config[key] = value
    return config


def _rows(datasets, count):
    """Ids of the first ``count`` train rows, pulled with tf.data's own read-ahead off."""
    return [int(batch["id"][0]) for batch in _batches(datasets, count)]


def _batches(datasets, count) -> list[dict]:
    """The first ``count`` train batches (of one row), pulled with tf.data's own read-ahead off."""
    options = tf.data.Options()
    options.autotune.enabled = False
    # Default optimizations (e.g. map parallelization) would compute elements ahead.
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_optimization.inject_prefetch = False
    return list(datasets.train.with_options(options).take(count).as_numpy_iterator())


def _written(batch) -> int:
    """The row ``batch``'s one example was written as, found by its inputs."""
    first = float(batch["inputs"].ravel()[0])
    return next(i for i, row in enumerate(_inputs()) if float(row[0]) == first)


def _inputs() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(TOTAL, 5)).astype(np.float32)


@pytest.fixture(scope="module")
def gcs_files(gcs, tmp_path_factory):
    """The three files in a bucket, uploaded through the proxy; returns their glob."""
    local = _write_local(tmp_path_factory.mktemp("faults"))
    filesystem = tfrecord.gcs_filesystem()
    filesystem.mkdir("echoing-faults")
    for path in sorted(tf.io.gfile.glob(local)):
        filesystem.put(path, f"gs://echoing-faults/clean/{os.path.basename(path)}")
    return "gs://echoing-faults/clean/train-*-of-00003.tfrecord"


# (what happens, overrides, proxy fault as (count, after, status), reopens by our layer: min, max)
NETWORK_FAULTS = [
    # gcsfs retries a 503 itself (its backoff waits 1-2 s); our layer never sees it.
    ("gcsfs_retries_a_503", {}, (1, 3, 503), (0, 0)),
    # gcsfs tries once only, so two 503s in a row reach our layer: one reopen each.
    ("reopen_after_gcsfs_gives_up", {"gcs_request_attempts": 1}, (2, 4, 503), (2, 2)),
    # aiohttp itself resends a GET once when a pooled keep-alive connection closes before any
    # reply, so one or both drops reach our layer.
    ("reopen_after_dropped_connections", {"gcs_request_attempts": 1}, (2, 5, "drop"), (1, 2)),
]


@pytest.mark.parametrize(
    ("name", "overrides", "fault", "reopened"), NETWORK_FAULTS, ids=[f[0] for f in NETWORK_FAULTS]
)
def test_network_faults_mid_epoch_lose_and_repeat_nothing(
    gcs, gcs_files, name, overrides, fault, reopened
):
    counts = meters.EchoMeters()
    datasets = pipelines.make_datasets(_config(gcs_files, **overrides), seed=0, meters=counts)
    failures_before = gcs.failures
    count, after, status = fault
    gcs.fail(count, after=after, status=status)
    ids = _rows(datasets, TOTAL)
    assert gcs.failures - failures_before == count  # the faults really happened
    assert ids == list(range(TOTAL))  # in file order, each record once
    assert counts.fresh.value() == TOTAL  # fresh examples == records read
    assert reopened[0] <= datasets.train_read_stats.reopened <= reopened[1]
    # Mid-file: the reader resumed at a record boundary past the start of a file.
    assert all(offset > 0 for _, offset, _ in datasets.train_read_stats.errors)
    assert datasets.train_read_stats.skipped == 0


@pytest.mark.parametrize("status", [503, "drop"])
def test_outage_ends_in_an_error_naming_the_object(gcs, gcs_files, status):
    config = _config(gcs_files, gcs_request_attempts=1, gcs_read_attempts=3)
    datasets = pipelines.make_datasets(config, seed=0)
    gcs.fail(1000, after=2, status=status)
    try:
        with pytest.raises(tf.errors.OpError) as caught:
            _rows(datasets, TOTAL)
    finally:
        gcs.fail(0)
    message = caught.value.message
    assert re.search(
        r"cannot read gs://echoing-faults/clean/train-00000-of-00003\.tfrecord after 3 "
        r"attempt\(s\) in a row, at byte offset \d+ \(record \d+\); last error: ",
        message,
    ), message
    assert ("503" in message) if status == 503 else ("Disconnected" in message), message
    assert datasets.train_read_stats.reopened == 2


def test_emulator_down_at_load_is_a_clear_error(gcs, gcs_files):
    gcs_module.filesystem(1).invalidate_cache()  # no listing from earlier tests
    gcs.down()
    try:
        with pytest.raises(
            ValueError, match=r"cannot read data config train_files=.*echoing-faults"
        ):
            pipelines.make_datasets(_config(gcs_files, gcs_request_attempts=1), seed=0)
    finally:
        gcs.down(False)
        gcs_module.filesystem(1).invalidate_cache()


def _damage(path: str, kind: str) -> int:
    """Damages ``path`` in place; returns the index of the first record it spoils."""
    with open(path, "rb") as file:
        data = bytearray(file.read())
    offsets, offset = [], 0
    while offset < len(data):  # walk the framing to find record boundaries
        offsets.append(offset)
        offset += 16 + int.from_bytes(data[offset : offset + 8], "little")
    if kind == "data_checksum":
        data[offsets[3] + 20] ^= 0xFF  # a byte inside record 3's data
        spoiled = 3
    elif kind == "length_checksum":
        data[offsets[2] + 9] ^= 0xFF  # record 2's length checksum: the rest cannot be framed
        spoiled = 2
    else:  # truncated inside the last record
        data = data[: offsets[-1] + 10]
        spoiled = len(offsets) - 1
    with open(path, "wb") as file:
        file.write(bytes(data))
    return spoiled


# (damage kind, records of file 0 lost, where the error is raised without skip_corrupt)
DAMAGES = [("data_checksum", 1, "read"), ("truncated", 1, "load"), ("length_checksum", 6, "load")]


@pytest.fixture(params=["local", "gs"])
def damaged(request, tmp_path):
    """``damaged(kind)`` -> (glob, path of file 0, spoiled record index), local or on gs://."""

    def make(kind):
        glob = _write_local(tmp_path)
        first = sorted(tf.io.gfile.glob(glob))[0]
        spoiled = _damage(first, kind)
        if request.param == "local":
            return glob, first, spoiled
        gcs = request.getfixturevalue("gcs")
        del gcs
        filesystem = tfrecord.gcs_filesystem()
        bucket = f"gs://echoing-faults/{kind}-{os.path.basename(str(tmp_path))}"
        for path in sorted(tf.io.gfile.glob(glob)):
            # Plain uploads (no record-count metadata): counted by a pass over the headers.
            filesystem.put(path, f"{bucket}/{os.path.basename(path)}")
        return f"{bucket}/train-*-of-00003.tfrecord", f"{bucket}/{os.path.basename(first)}", spoiled

    make.location = request.param
    return make


@pytest.mark.parametrize(("kind", "lost", "raised_at"), DAMAGES)
def test_corrupt_record_error_names_the_file(damaged, kind, lost, raised_at):
    glob, first, spoiled = damaged(kind)
    config = _config(glob)
    if damaged.location == "local" and raised_at == "read":
        raised_at = "load"  # local files: the counting pass checks every checksum
    if raised_at == "load":
        with pytest.raises(ValueError, match=f"corrupt TFRecord file {re.escape(first)}"):
            pipelines.make_datasets(config, seed=0)
        return
    datasets = pipelines.make_datasets(config, seed=0)
    with pytest.raises(tf.errors.OpError) as caught:
        _rows(datasets, TOTAL)
    assert re.search(
        f"corrupt TFRecord file {re.escape(first)}: record {spoiled} at byte offset \\d+: "
        "data checksum mismatch.*skip_corrupt=True",
        caught.value.message,
    ), caught.value.message


@pytest.mark.parametrize(("kind", "lost", "raised_at"), DAMAGES)
def test_skip_corrupt_skips_counts_and_warns(damaged, kind, lost, raised_at, caplog):
    glob, first, spoiled = damaged(kind)
    counts = meters.EchoMeters()
    datasets = pipelines.make_datasets(_config(glob, skip_corrupt=True), seed=0, meters=counts)
    good = [i for i in range(TOTAL) if not spoiled <= i < spoiled + lost]
    # Every good record exactly once, in order; the damage is in file 0, so reading the good
    # records of files 1 and 2 means file 0 was read to its end.
    batches = _batches(datasets, len(good))
    assert [_written(batch) for batch in batches] == good
    # Ids are positions among the records each file was counted to hold: within the count that
    # sizes per-example tables. The stored ids, after a damaged length header, ran past it and
    # failed pruning mid-run (issue 33).
    ids = [int(batch["id"][0]) for batch in batches]
    assert ids == sorted(set(ids)) and ids[-1] < datasets.num_train_examples
    stats = datasets.train_read_stats
    assert stats.skipped == 1
    ((path, index, offset, problem),) = stats.skipped_records
    assert (path, index) == (first, spoiled) and offset > 0 and problem
    assert counts.fresh.value() == len(good)  # fresh examples == records read
    if lost == 1:  # one record per damage: fresh + skipped == records in the files
        assert counts.fresh.value() + stats.skipped == TOTAL
    warnings = [r.getMessage() for r in caplog.records if "skip_corrupt" in r.getMessage()]
    assert any(first in warning and f"record {spoiled}" in warning for warning in warnings)


@pytest.mark.parametrize(
    ("data", "crc"),
    [(b"", 0x00000000), (b"123456789", 0xE3069283)],  # CRC-32C check values (RFC 3720)
)
def test_crc32c_matches_the_standard(data, crc):
    import google_crc32c

    assert google_crc32c.value(data) == crc
    masked = record_format.masked_crc32c(data)
    assert masked == ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def test_checksums_match_what_tensorflow_writes(tmp_path):
    path = str(tmp_path / "one.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"hello")
        writer.write(b"")
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        records = list(record_format.scan(stream, path, size=size))
    assert [(r.data, r.problem) for r in records] == [(b"hello", None), (b"", None)]
