"""A GCS bucket behind a bandwidth-capped network: the upstream of the network-bound benchmark.

Example (as root, for the network namespace; elsewhere it falls back to an in-process limiter)::

    from network_bucket import ThrottledBucket  # run from benchmarks/

    with ThrottledBucket(megabits_per_second=4) as bucket:
        print(bucket.limiter)          # "netns+tbf" or "in-process"
        print(bucket.emulator_host)    # what STORAGE_EMULATOR_HOST is set to while inside
        # ... write and read gs://... through pipelines.sources.tfrecord (gcsfs) ...

The ``gcp-storage-emulator`` runs in a child process (``pipelines.sources.gcs_emulator``, which
keeps uploads byte for byte). Preferred set-up ("netns+tbf"): the emulator runs inside its own
network namespace, joined to this one by a veth pair with addresses in 10.233.0.0/16 that exist
only on that pair; the namespace side's egress (every byte the emulator sends) is shaped by
``tc qdisc tbf``, so downloads are capped by the kernel exactly like a slow link, while uploads
(writing the data set) run at full speed. ``netem`` is not available in this kernel, so there is
no added latency, only the bandwidth cap.

Fallback ("in-process"): when namespaces cannot be made (not root, no ``ip``/``tc``, or a
sandbox that forbids them), the emulator listens on 127.0.0.1 and a token-bucket TCP proxy in a
thread of this process caps the bytes it forwards from the emulator. That proxy costs this
process some CPU and GIL time, so the kernel set-up is the faithful one; ``limiter`` says which
ran, and the benchmark records it in its results.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from pipelines.sources import gcs_emulator

LIMITERS = ("netns+tbf", "in-process")
_EMULATOR_PORT = 9023
# tbf's bucket must hold at least one MTU-sized packet plus some slack; 64 kB keeps bursts short
# relative to a batch's transfer time at the rates the benchmark uses (>= 1 Mbit/s).
_TBF_BURST = "64kb"
_TBF_LATENCY = "400ms"


class ThrottledBucket:
    """Starts the emulator behind a capped link on enter, sets ``STORAGE_EMULATOR_HOST``.

    Args:
      megabits_per_second: the download bandwidth cap (> 0).
      limiter: "netns+tbf", "in-process", or None to try the namespace and fall back.

    Raises:
      ValueError: a bad rate or limiter name.
      RuntimeError: the emulator did not come up (its output is in the message).
    """

    def __init__(self, megabits_per_second: float, *, limiter: str | None = None):
        if isinstance(megabits_per_second, bool) or not megabits_per_second > 0:
            raise ValueError(
                f"megabits_per_second must be a positive number, got {megabits_per_second!r}."
            )
        if limiter is not None and limiter not in LIMITERS:
            raise ValueError(f"limiter must be one of {list(LIMITERS)} or None, got {limiter!r}.")
        self.megabits_per_second = float(megabits_per_second)
        self.requested_limiter = limiter
        self.limiter: str | None = None
        self.emulator_host: str | None = None
        # The network namespace the emulator runs in ("netns+tbf" only), deleted on exit.
        self.namespace: str | None = None
        # Why the namespace could not be used, when limiter=None fell back to "in-process".
        self.fallback_reason: str | None = None
        self._exit = contextlib.ExitStack()

    def __enter__(self) -> ThrottledBucket:
        try:
            if self.requested_limiter == "netns+tbf" and not namespaces_available():
                raise RuntimeError(
                    "limiter='netns+tbf' needs root with `ip` and `tc` (iproute2) and network "
                    "namespaces; use limiter=None to fall back to the in-process limiter."
                )
            if self.requested_limiter is None and namespaces_available():
                try:
                    self._start_in_namespace()
                except RuntimeError as error:
                    # E.g. a container without CAP_NET_ADMIN: fall back, and say why.
                    self._exit.close()
                    self.fallback_reason = str(error)
                    self._start_behind_proxy()
            elif self.requested_limiter == "netns+tbf":
                self._start_in_namespace()
            else:
                self._start_behind_proxy()
            self._exit.enter_context(gcs_emulator.client_environment(self.emulator_host))
        except BaseException:
            self._exit.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self._exit.close()

    def _start_in_namespace(self) -> None:
        name = self.namespace = f"echoing-{uuid.uuid4().hex[:8]}"
        # A /30 of 10.233.0.0/16 picked from the name, so concurrent benchmarks rarely collide.
        block = int(name[-4:], 16) % (1 << 14)
        base = f"10.233.{block >> 6}.{(block & 63) << 2}"
        host_address, namespace_address = _offset(base, 1), _offset(base, 2)
        host_link, namespace_link = f"vh{name[-8:]}", f"vn{name[-8:]}"
        commands = [
            ["ip", "netns", "add", name],
            ["ip", "link", "add", host_link, "type", "veth", "peer", "name", namespace_link],
            ["ip", "link", "set", namespace_link, "netns", name],
            ["ip", "addr", "add", f"{host_address}/30", "dev", host_link],
            ["ip", "link", "set", host_link, "up"],
            ["ip", "-n", name, "addr", "add", f"{namespace_address}/30", "dev", namespace_link],
            ["ip", "-n", name, "link", "set", namespace_link, "up"],
            ["ip", "-n", name, "link", "set", "lo", "up"],
            # Shape what the namespace sends: the emulator's responses, i.e. the downloads.
            [
                *("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", namespace_link, "root"),
                *("tbf", "rate", f"{self.megabits_per_second}mbit"),
                *("burst", _TBF_BURST, "latency", _TBF_LATENCY),
            ],
        ]
        # Deleting the namespace also deletes the veth pair (and the qdisc with it).
        self._exit.callback(subprocess.run, ["ip", "netns", "del", name], capture_output=True)
        for command in commands:
            _check_call(command)
        self.limiter = "netns+tbf"
        self._start_emulator(["ip", "netns", "exec", name], namespace_address, _EMULATOR_PORT)
        self.emulator_host = f"http://{namespace_address}:{_EMULATOR_PORT}"

    def _start_behind_proxy(self) -> None:
        port = _free_port()
        self._start_emulator([], "127.0.0.1", port)
        proxy = _RateLimitedProxy(("127.0.0.1", port), self.megabits_per_second * 1e6 / 8)
        self._exit.callback(proxy.close)
        self.limiter = "in-process"
        self.emulator_host = f"http://127.0.0.1:{proxy.port}"

    def _start_emulator(self, prefix: list[str], address: str, port: int) -> None:
        # The emulator with byte-exact uploads (see pipelines.sources.gcs_emulator), loaded from
        # its file: ``-m pipelines.sources.gcs_emulator`` would first import the ``pipelines``
        # package, and TensorFlow with it, seconds of start-up the emulator does not use.
        command = [*prefix, sys.executable, "-c", _EMULATOR, str(gcs_emulator.__file__)]
        command += ["--host", address, "--port", str(port), "--in-memory", "--quiet"]
        # Output goes to a file, never a pipe: the emulator prints a traceback for every client
        # that hangs up mid-response, and a pipe nobody drains would fill and stall its one
        # serving thread.
        log = self._exit.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (closed on exit)
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._exit.callback(_stop, process)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log.seek(0)
                output = log.read().decode(errors="replace")
                raise RuntimeError(f"the storage emulator exited at start: {output[-2000:]}")
            # Probed from inside the namespace when there is one: the host cannot know the
            # emulator is up any other way, and the probe must not depend on the cap.
            probe = [*prefix, sys.executable, "-c", _PROBE.format(address=address, port=port)]
            if subprocess.run(probe, capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the storage emulator did not listen on {address}:{port} in 30 s.")


# ``python -c _EMULATOR FILE FLAGS...``: gcs_emulator.main(FLAGS) with only its own imports.
_EMULATOR = (
    "import importlib.util, sys; "
    "spec = importlib.util.spec_from_file_location('gcs_emulator', sys.argv[1]); "
    "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
    "module.main(sys.argv[2:])"
)
_PROBE = "import socket; socket.create_connection(('{address}', {port}), timeout=1).close()"


def namespaces_available() -> bool:
    """Whether this process may make network namespaces with shaped veth pairs."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "geteuid")
        and os.geteuid() == 0
        and shutil.which("ip") is not None
        and shutil.which("tc") is not None
    )


class _RateLimitedProxy:
    """A TCP proxy on 127.0.0.1 forwarding to ``target``, capping server→client bytes/s.

    One token bucket for all connections, as one link would be; client→server bytes are free.
    """

    def __init__(self, target: tuple[str, int], bytes_per_second: float):
        self._target, self._rate = target, bytes_per_second
        self._lock = threading.Lock()
        self._next_send = time.monotonic()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="rate-limited-proxy").start()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, limited: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(16 << 10):
                if limited:
                    self._wait_for(len(chunk))
                sink.sendall(chunk)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def _wait_for(self, size: int) -> None:
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_send)
            self._next_send = start + size / self._rate
        if start > now:
            time.sleep(start - now)


def _offset(address: str, delta: int) -> str:
    parts = [int(part) for part in address.split(".")]
    parts[3] += delta
    return ".".join(map(str, parts))


def _check_call(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
