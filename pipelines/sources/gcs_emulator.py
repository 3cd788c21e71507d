"""A local ``gcp-storage-emulator`` that stores uploads byte for byte (tests, benchmarks, dev).

Example::

    from pipelines.sources import gcs_emulator, tfrecord

    with gcs_emulator.running() as host, gcs_emulator.client_environment(host):
        tfrecord.gcs_filesystem().mkdir("bucket")
        # ... write and read gs://bucket/... through pipelines.sources.tfrecord ...

In a child process (e.g. inside a network namespace)::

    python -m pipelines.sources.gcs_emulator --host 10.233.0.2 --port 9023 --in-memory

Why not the emulator as it is: it parses multipart uploads with the ``email`` package, which
takes a last data byte 0x0D (``\\r``) together with the ``\\n`` gcsfs puts before the closing
boundary for one line break, and drops it. gcsfs sends objects under 5 MiB as multipart uploads,
and a TFRecord file ends in a checksum byte, so about one small shard in 256 was stored one byte
short (real GCS keeps it). ``byte_exact_uploads`` replaces that parse for ``multipart/related``
bodies with a split on the boundary itself.

It also serves one connection at a time (``http.server.HTTPServer``, no socket timeout, a listen
backlog of 5): one client that connects and never sends its request (or never reads the
response) stalls every other client for good. ``concurrent_connections`` gives each connection
its own thread and a socket timeout, and keeps the storage single-writer with one lock around
request handling, so a stuck client costs at most ``CONNECTION_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import contextlib
import email.message
import functools
import gc
import http.server
import json
import os
import socket
import sys
import threading
from collections.abc import Iterator
from unittest import mock

# A client idle this long (mid-request or not reading the response) is disconnected.
CONNECTION_TIMEOUT_SECONDS = 60.0


def patch_emulator() -> None:
    """Both fixes of this module, in this process's emulator servers (idempotent)."""
    byte_exact_uploads()
    concurrent_connections()


class _ThreadingServer(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a stuck connection does not keep the process alive
    request_queue_size = 128


def concurrent_connections() -> None:
    """Makes this process's emulator servers serve each connection in a thread (idempotent)."""
    from gcp_storage_emulator import server

    if getattr(server.APIThread.run, "threaded", False):
        return

    def run_threaded(api_thread):  # APIThread.run with the server class replaced
        handler = functools.partial(server.RequestHandler, api_thread._storage)
        api_thread._httpd = _ThreadingServer((api_thread._host, api_thread._port), handler)
        api_thread.is_running.set()
        api_thread._httpd.serve_forever()

    run_threaded.threaded = True
    server.APIThread.run = run_threaded
    server.RequestHandler.timeout = CONNECTION_TIMEOUT_SECONDS
    # The storage (dicts and files behind them) was written for one thread; reading the
    # request line and headers, where a client can stall, stays outside the lock.
    handle, lock = server.Router.handle, threading.Lock()

    @functools.wraps(handle)
    def handle_locked(router, method):
        with lock:
            return handle(router, method)

    server.Router.handle = handle_locked


def byte_exact_uploads() -> None:
    """Makes this process's emulator servers keep multipart uploads byte for byte (idempotent)."""
    from gcp_storage_emulator import server

    if getattr(server._read_data, "byte_exact", False):
        return
    read_data = server._read_data

    def read_data_byte_exact(request_handler, query):
        content_type = request_handler.headers.get("Content-Type") or ""
        if not content_type.startswith("multipart/related"):
            return read_data(request_handler, query)
        raw = server._decode_raw_data(server._read_raw_data(request_handler), request_handler)
        return split_related(raw, content_type) if raw else None

    read_data_byte_exact.byte_exact = True
    server._read_data = read_data_byte_exact


def split_related(body: bytes, content_type: str) -> dict:
    """The JSON metadata and the content of a two-part ``multipart/related`` upload body.

    The line break before each delimiter belongs to the delimiter (RFC 2046); which break the
    client uses (``\\n`` for gcsfs, ``\\r\\n`` for others) is read off the first delimiter line.

    Returns:
      ``{"meta": dict, "content": bytes, "content-type": str}``, what the emulator expects.

    Raises:
      ValueError: a body that is not two parts framed by the boundary in ``content_type``.
    """
    header = email.message.Message()
    header["Content-Type"] = content_type
    boundary = header.get_param("boundary")
    if not boundary:
        raise ValueError(f"multipart upload without a boundary: Content-Type {content_type!r}")
    delimiter = b"--" + boundary.encode()
    if not body.startswith(delimiter):
        raise ValueError("multipart upload body does not start with its boundary")
    newline = b"\r\n" if body[len(delimiter) :].startswith(b"\r\n") else b"\n"
    inner, closing, _ = body.rpartition(newline + delimiter + b"--")
    meta_part, separator, content_part = inner[len(delimiter) :].partition(newline + delimiter)
    if not closing or not separator:
        raise ValueError("multipart upload body is not two parts closed by its boundary")
    _, meta = _headers_and_payload(meta_part, newline)
    headers, content = _headers_and_payload(content_part, newline)
    return {
        "meta": json.loads(meta),
        "content": content,
        "content-type": headers.get_content_type(),
    }


def _headers_and_payload(part: bytes, newline: bytes) -> tuple[email.message.Message, bytes]:
    """A part after its delimiter: the line break ending the delimiter, headers, blank line."""
    head, _, payload = part[len(newline) :].partition(newline + newline)
    return email.message_from_bytes(head + b"\n\n"), payload


@contextlib.contextmanager
def client_environment(host: str) -> Iterator[None]:
    """Points this process's gcsfs at the emulator at ``host`` while inside; restores on exit.

    Sets ``STORAGE_EMULATOR_HOST``, and turns off gcsfs's experimental zonal/HNS bucket probe,
    which waits ~60 s per bucket against an emulator; both before gcsfs is first imported
    (``pipelines`` imports it lazily). On exit, gcsfs's cached listings are dropped, so a later
    emulator's objects are not shadowed by this one's.

    Also on exit, garbage is collected first: a run's input iterators sit in reference cycles
    (a trainer and its compiled functions), and freeing one waits for the gs:// read in flight.
    Freed now, that read is answered; freed by a later collection, after the emulator stopped,
    it waits out gcsfs's retries against a closed port (minutes, seen as a hang at exit).
    """
    environment = {"STORAGE_EMULATOR_HOST": host, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    with mock.patch.dict(os.environ, environment):
        try:
            yield
        finally:
            gc.collect()
            if "gcsfs" in sys.modules:
                from pipelines.sources import gcs

                gcs.filesystem().invalidate_cache()


@contextlib.contextmanager
def running(host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """An in-memory emulator on ``host:port`` (0: a free port); yields its URL, stops on exit."""
    from gcp_storage_emulator.server import create_server

    patch_emulator()
    if not port:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
    server = create_server(host, port, in_memory=True)
    server.start()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def main(argv: list[str]) -> None:
    """``gcp-storage-emulator start`` with this module's fixes; takes the same flags."""
    from gcp_storage_emulator import __main__ as emulator_cli

    patch_emulator()
    emulator_cli.main(["start", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
