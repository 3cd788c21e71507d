"""The byte-exact storage emulator, and the MD5 check on gs:// uploads."""

import concurrent.futures
import json
import os
import socket
import urllib.request

import numpy as np
import pytest

from pipelines.sources import files, gcs, gcs_emulator, tfrecord

RELATED = 'multipart/related; boundary="==0=="'
# Every line-break byte a file may end in, and neighbours of the old parse's fault.
TAILS = [b"", b"a", b"\r", b"\n", b"\r\n", b"\n\r", b"\r\r", b" "]


def _body(content: bytes, newline: bytes) -> bytes:
    """A two-part multipart/related upload body as gcsfs (newline "\\n") or others build it."""
    meta = json.dumps({"name": "object"}).encode()
    return (
        b"--==0=="
        + newline
        + b"Content-Type: application/json; charset=UTF-8"
        + newline * 2
        + meta
        + newline
        + b"--==0=="
        + newline
        + b"Content-Type: application/x-tfrecord"
        + newline * 2
        + content
        + newline
        + b"--==0==--"
    )


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
@pytest.mark.parametrize("tail", TAILS)
def test_split_related_keeps_every_byte(tail, newline):
    content = b"data\n--==0 not a delimiter\r\n" + tail
    parts = gcs_emulator.split_related(_body(content, newline), RELATED)
    assert parts == {
        "meta": {"name": "object"},
        "content": content,
        "content-type": "application/x-tfrecord",
    }


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (_body(b"x", b"\n"), "multipart/related", "without a boundary"),
        (b"junk" + _body(b"x", b"\n"), RELATED, "does not start"),
        (_body(b"x", b"\n")[:-4], RELATED, "two parts closed"),
    ],
)
def test_split_related_rejects_malformed_bodies(body, content_type, message):
    with pytest.raises(ValueError, match=message):
        gcs_emulator.split_related(body, content_type)


@pytest.fixture(scope="module")
def filesystem():
    with gcs_emulator.running() as host, gcs_emulator.client_environment(host):
        filesystem = tfrecord.gcs_filesystem()
        filesystem.mkdir("exact")
        yield filesystem


@pytest.mark.parametrize("tail", TAILS)
def test_small_uploads_are_stored_byte_for_byte(filesystem, tail):
    data = b"x" * 100 + tail  # under 5 MiB: gcsfs sends a multipart upload
    filesystem.pipe(f"gs://exact/{tail.hex() or 'empty'}", data)
    assert filesystem.cat(f"gs://exact/{tail.hex() or 'empty'}") == data


def test_uploaded_shards_equal_the_same_shards_written_locally(filesystem, tmp_path):
    rng = np.random.default_rng(0)
    # 40 small shards (about 1 in 256 ended in 0x0D, which the emulator used to cut off), and
    # one of ~6 MB, which gcsfs sends as a resumable upload instead; both are MD5-checked.
    inputs, labels = rng.normal(size=(80, 8)).astype(np.float32), np.arange(80) % 3
    tfrecord.write_shards("gs://exact/small", inputs, labels, num_shards=40)
    tfrecord.write_shards(str(tmp_path / "small"), inputs, labels, num_shards=40)
    large = rng.normal(size=(3, 500_000)).astype(np.float32)
    tfrecord.write("gs://exact/large.tfrecord", large, np.zeros(3))
    tfrecord.write(str(tmp_path / "large.tfrecord"), large, np.zeros(3))
    local_files = sorted(tmp_path.iterdir())
    assert len(local_files) == 41 and (tmp_path / "large.tfrecord").stat().st_size > 5 * 2**20
    for local in local_files:
        assert filesystem.cat(f"gs://exact/{local.name}") == local.read_bytes(), local.name


def test_an_upload_stored_short_raises_naming_the_object(filesystem, monkeypatch):
    split_related = gcs_emulator.split_related

    def store_one_byte_short(body, content_type):
        parts = split_related(body, content_type)
        return {**parts, "content": parts["content"][:-1]}

    monkeypatch.setattr(gcs_emulator, "split_related", store_one_byte_short)
    with pytest.raises(OSError, match=r"upload to gs://exact/short.tfrecord was stored with other"):
        tfrecord.write("gs://exact/short.tfrecord", np.zeros((2, 3)), np.zeros(2))


def test_a_client_that_never_sends_its_request_does_not_stall_the_others(filesystem):
    # The stock emulator serves one connection at a time with no timeout: this idle connection
    # would block the read below until its 10 s timeout fails the test.
    filesystem.pipe("gs://exact/while-idle", b"served")
    host = os.environ["STORAGE_EMULATOR_HOST"]
    address, port = host.removeprefix("http://").rsplit(":", 1)
    url = f"{host}/storage/v1/b/exact/o/while-idle?alt=media"
    idle = socket.create_connection((address, int(port)))
    with idle, urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == b"served"


def test_uploads_from_many_threads_are_all_stored(filesystem):
    # Connections are served in threads; the storage underneath must still see one at a time.
    contents = {f"gs://exact/threaded-{i}": bytes([i]) * (1000 + i) for i in range(16)}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: filesystem.pipe(*item), contents.items()))
    filesystem.invalidate_cache()
    assert {path: filesystem.cat(path) for path in contents} == contents


def test_a_bucket_that_cannot_be_reached_is_one_clear_error(monkeypatch):
    # A port nothing listens on: every request is refused at once, as without a network.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    gcs.filesystem(1).clear_instance_cache()  # no instance made for another endpoint
    with pytest.raises(ValueError) as raised:
        files.glob("gs://bucket/train-*", "train_files", request_attempts=1)
    gcs.filesystem(1).clear_instance_cache()
    message = str(raised.value)
    assert "train_files='gs://bucket/train-*' through gcsfs (ClientConnectorError: " in message
    assert "after 1 attempts; check the network" in message
    assert "gcs_request_attempts" in message and "ConnectionKey" not in message
