"""The tf.data service boundary: upstream stages run on service workers, the rest here.

Example::

    import tensorflow as tf
    import echoing
    from pipelines import service

    address = service.local_address()  # an in-process dispatcher + worker on localhost
    upstream = tf.data.Dataset.range(8).map(lambda x: x * 10)  # runs on the service worker
    dataset = upstream.apply(service.distribute(address)).apply(echoing.echo(2))
    # 0, 0, 10, 10, ... : echo runs in this process, after the service

``make_datasets`` puts the boundary right before echo when ``config.service_address`` is set
(see ``pipelines.datasets``). Only graph-serialisable datasets can cross it: no Python
generators (gs:// reads, ``skip_corrupt``), no host ``tf.Variable`` (meters, Assistant filter)
before the boundary.

The in-process servers are reached at ``localhost:<port>`` but **listen on every interface**
(``ss -ltn`` shows ``*:<port>``). TensorFlow binds both to ``0.0.0.0:<port>``
(``GrpcDataServerBase::Start`` in ``tensorflow/core/data/service/server_lib.cc``; gRPC turns it
into a dual-stack ``[::]`` socket) and neither ``DispatcherConfig`` nor ``WorkerConfig`` has a
bind address (checked on TF 2.21): ``WorkerConfig.worker_address`` is only the address the worker
gives the dispatcher, and the ``grpc+local`` protocol, which would refuse remote peers, is not
built into the pip package. Anyone who can reach this machine can reach these ports and run
datasets on them, so firewall them on a shared machine; ``start_local_servers`` logs them.
"""

from __future__ import annotations

import socket
import threading
import time

import tensorflow as tf
from absl import logging

from echoing._src.core.types import DatasetTransformation

PROCESSING_MODES = ("parallel_epochs", "distributed_epoch")
# The config value that asks for an in-process service (for trying things out and for tests).
LOCAL = "local"
# How long a pipeline waits for a dispatcher started alongside it before saying none answers.
DISPATCHER_WAIT_SECONDS = 30.0

_local_lock = threading.Lock()
_local_servers: list = []


def local_address() -> str:
    """The address of this process's own dispatcher + worker, started on first use.

    Both listen on free ports (on every interface, see the module docstring) and the worker
    registers as ``localhost:<port>``, so this process talks to them over loopback. They live
    until the process exits.
    """
    with _local_lock:
        if not _local_servers:
            _local_servers.extend(start_local_servers())
        return _local_servers[0].target


def start_local_servers() -> tuple[
    tf.data.experimental.service.DispatchServer, tf.data.experimental.service.WorkerServer
]:
    """Starts a dispatcher and one worker in this process, and logs the ports they opened.

    The warning names both ports and says that they are open on all interfaces, because no
    TensorFlow option binds them to loopback. Stop the worker before the dispatcher.

    Example::

        dispatcher, worker = start_local_servers()
        dataset = tf.data.Dataset.range(3).apply(distribute(dispatcher.target))
        worker.stop()
        dispatcher.stop()
    """
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0)
    )
    dispatcher_port = int(dispatcher.target.rpartition(":")[2])
    # WorkerServer has no public bound port, so pick one to be able to name it. Probed on the
    # wildcard address, which is what the worker binds.
    with socket.socket() as probe:
        probe.bind(("", 0))
        worker_port = probe.getsockname()[1]
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(
            dispatcher_address=f"localhost:{dispatcher_port}", port=worker_port
        )
    )
    logging.warning(
        "tf.data service servers in this process listen on ALL interfaces (0.0.0.0 and [::]), "
        "not only loopback: dispatcher port %d, worker port %d. TensorFlow has no option to bind "
        "them to 127.0.0.1, so firewall these ports on a shared machine.",
        dispatcher_port,
        worker_port,
    )
    return dispatcher, worker


def resolve_address(address: str) -> str:
    """``address``, or the in-process service's address for ``"local"``."""
    return local_address() if address == LOCAL else address


def distribute(
    address: str, *, processing_mode: str = "parallel_epochs", job_name: str | None = None
) -> DatasetTransformation:
    """Returns a transformation that runs everything before it on the tf.data service.

    Args:
      address: the dispatcher, ``grpc://host:port`` or ``host:port``, or ``"local"``.
      processing_mode: ``"parallel_epochs"`` (every worker produces the whole dataset) or
        ``"distributed_epoch"`` (workers split one epoch; needs a splittable source).
      job_name: share one job (and so its elements) between consumers; None = a job of its own.

    Raises:
      ValueError: an empty address or an unknown processing mode.
    """
    if not isinstance(address, str) or not address:
        raise ValueError(
            f"the tf.data service address must be 'grpc://host:port', 'host:port' or 'local', "
            f"got {address!r}."
        )
    if processing_mode not in PROCESSING_MODES:
        raise ValueError(
            f"tf.data service processing_mode must be one of {list(PROCESSING_MODES)}, got "
            f"{processing_mode!r}."
        )

    def apply(dataset: tf.data.Dataset) -> tf.data.Dataset:
        resolved = resolve_address(address)
        require_dispatcher(resolved)
        return dataset.apply(
            tf.data.experimental.service.distribute(
                processing_mode=processing_mode, service=resolved, job_name=job_name
            )
        )

    return apply


def require_dispatcher(address: str, wait_seconds: float | None = None) -> None:
    """Returns once something listens at the dispatcher's ``address``, waiting up to
    ``wait_seconds`` (default ``DISPATCHER_WAIT_SECONDS``) for one started alongside; else
    raises ValueError naming the address.
    TensorFlow's own registration retries for ever and prints nothing: a run given a mistyped
    port hung before its first step, and a SIGTERM, waiting for that step, did not stop it."""
    host, _, port = address.removeprefix("grpc://").rpartition(":")
    if not port.isdigit() or not host:
        raise ValueError(
            f"the tf.data service address must be 'grpc://host:port' or 'host:port', got "
            f"{address!r}."
        )
    wait_seconds = DISPATCHER_WAIT_SECONDS if wait_seconds is None else wait_seconds
    deadline, waiting = time.monotonic() + wait_seconds, False
    while True:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5.0).close()
            return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise ValueError(
                    f"no tf.data service dispatcher answers at {address} ({error}) after "
                    f"{wait_seconds:g} s; start one there (tf.data.experimental.service."
                    "DispatchServer), or fix data config service_address."
                ) from None
            if not waiting:
                logging.warning("Waiting for the tf.data service dispatcher at %s.", address)
                waiting = True
            time.sleep(0.5)
