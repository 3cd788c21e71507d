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
"""

from __future__ import annotations

import threading

import tensorflow as tf

from echoing.types import DatasetTransformation

PROCESSING_MODES = ("parallel_epochs", "distributed_epoch")
# The config value that asks for an in-process service (for trying things out and for tests).
LOCAL = "local"

_local_lock = threading.Lock()
_local_servers: list = []


def local_address() -> str:
    """The address of this process's own dispatcher + worker, started on first use.

    Both listen on free ports and the worker registers as ``localhost:<port>``, so all traffic
    stays on the loopback interface. They live until the process exits.
    """
    with _local_lock:
        if not _local_servers:
            dispatcher = tf.data.experimental.service.DispatchServer(
                tf.data.experimental.service.DispatcherConfig(port=0)
            )
            worker = tf.data.experimental.service.WorkerServer(
                tf.data.experimental.service.WorkerConfig(
                    dispatcher_address=dispatcher.target.split("://")[1]
                )
            )
            _local_servers.extend([dispatcher, worker])
        return _local_servers[0].target


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
        return dataset.apply(
            tf.data.experimental.service.distribute(
                processing_mode=processing_mode,
                service=resolve_address(address),
                job_name=job_name,
            )
        )

    return apply
