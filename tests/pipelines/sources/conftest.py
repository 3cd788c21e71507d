"""Fixtures for source tests: a storage emulator behind a fault-injecting proxy, both on
127.0.0.1.

``gcs`` (module scope) starts a gcp-storage-emulator and a ``FaultProxy`` in front of it, points
``STORAGE_EMULATOR_HOST`` at the proxy, and yields the proxy::

    def test_something(gcs):
        gcs.fail(2, after=3)  # the 4th and 5th object-data GETs answer 503
"""

import http.client
import http.server
import socketserver
import threading

import pytest

from pipelines.sources import gcs_emulator

# Headers that describe one hop, not the message; the proxy sets its own Content-Length.
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class FaultProxy:
    """Forwards every request to ``127.0.0.1:upstream_port``, failing the ones it is told to.

    Attributes:
      port: where the proxy listens.
      failures: faults injected so far.
      media_requests: object-data GETs (``alt=media``) seen so far.
    """

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.failures = self.media_requests = 0
        self._lock = threading.Lock()
        self._pass, self._fail, self._status, self._down = 0, 0, 503, False
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _handle(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = proxy._decide("alt=media" in self.path and self.command == "GET")
                if fault == "drop":
                    self.close_connection = True
                    return
                if fault is not None:
                    payload = b'{"error": {"code": %d, "message": "injected"}}' % fault
                    self.send_response(fault)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                response = upstream.getresponse()
                payload = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                upstream.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def fail(self, count: int, *, after: int = 0, status: int | str = 503) -> None:
        """The ``count`` object-data GETs after the next ``after`` ones fail with ``status``
        (an HTTP code, or ``"drop"`` to close the connection without an answer)."""
        with self._lock:
            self._pass, self._fail, self._status = after, count, status

    def down(self, is_down: bool = True) -> None:
        """While down, every request is dropped, as if the server were gone."""
        with self._lock:
            self._down = is_down

    def _decide(self, is_media: bool):
        with self._lock:
            if is_media:
                self.media_requests += 1
            if self._down:
                self.failures += 1
                return "drop"
            if not is_media or not self._fail:
                return None
            if self._pass:
                self._pass -= 1
                return None
            self._fail -= 1
            self.failures += 1
            return self._status

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def gcs():
    with gcs_emulator.running() as emulator_host:
        proxy = FaultProxy(int(emulator_host.rsplit(":", 1)[1]))
        with gcs_emulator.client_environment(f"http://127.0.0.1:{proxy.port}"):
            yield proxy
        proxy.stop()
