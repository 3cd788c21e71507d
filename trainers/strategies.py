"""Builds the ``tf.distribute`` strategy a training run names, and says who writes the workdir.

Example::

    from trainers import strategies

    strategy = strategies.make_strategy("default")  # or "mirrored"
    print(strategy.num_replicas_in_sync, strategies.is_chief(strategy))

    # Two workers on this machine; run the same line with task_index=1 in a second process
    # (or set TF_CONFIG and leave workers empty):
    # strategies.make_strategy(
    #     "multi_worker", workers=("127.0.0.1:12345", "127.0.0.1:12346"), task_index=0
    # )

Names:

- ``default``: one device (``tf.distribute.get_strategy()``).
- ``mirrored``: ``MirroredStrategy`` over the local GPUs (the CPU when there are none).
- ``multi_worker``: ``MultiWorkerMirroredStrategy``; the cluster comes from ``workers`` (the
  addresses of every worker, this process being ``task_index``) or else from ``TF_CONFIG``;
  with neither it is a one-worker cluster on the local devices.
- ``tpu``: ``TPUClusterResolver`` + ``initialize_tpu_system`` + ``TPUStrategy``. ``tpu`` names
  the TPU (``"local"`` on a Cloud TPU VM, a TPU name or ``grpc://`` address for a TPU node).
- ``parameter_server``: not built here: ``trainers.async_partitioned`` owns the cluster and the
  coordinator (``python -m trainers.train --strategy=parameter_server --config=configs/passm.py``).

The strategy must be created before any other TensorFlow work in the process
(``MultiWorkerMirroredStrategy`` configures collective ops on the runtime at creation).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import tensorflow as tf

NAMES = ("default", "mirrored", "multi_worker", "tpu", "parameter_server")
# Strategies whose replicas step together; the custom loop (trainers.loop) runs under these.
SYNCHRONOUS = ("default", "mirrored", "multi_worker", "tpu")

_ADDRESS = re.compile(r"^[\w.\-]+:\d{1,5}$")


def check_name(name: object) -> str:
    """Returns ``name`` if it is one of ``NAMES``.

    Raises:
      ValueError: anything else, naming the valid names.
    """
    if not isinstance(name, str) or name not in NAMES:
        raise ValueError(
            f"strategy must be one of {list(NAMES)}, got {name!r}; e.g. --strategy=mirrored."
        )
    return name


def make_strategy(
    name: str,
    *,
    workers: Sequence[str] = (),
    task_index: int = 0,
    tpu: str = "",
) -> tf.distribute.Strategy:
    """Builds the synchronous strategy ``name`` (see the module docstring).

    Args:
      name: one of ``SYNCHRONOUS``.
      workers: ``multi_worker`` only: every worker's ``host:port``, the same list in every
        worker process; empty uses ``TF_CONFIG`` (or one local worker without it).
      task_index: ``multi_worker`` with ``workers``: this process's index in ``workers``.
      tpu: ``tpu`` only: ``"local"``, a TPU name or a ``grpc://host:port`` address; empty uses
        the ``TPU_NAME`` environment variable.

    Raises:
      ValueError: an unknown name, ``parameter_server`` (built by the async trainer), bad
        worker addresses or task index, options given to a strategy that does not use them,
        or ``tpu`` on a machine without a TPU.
    """
    check_name(name)
    workers = _check_workers(workers)
    _check_task_index(task_index, workers)
    if not isinstance(tpu, str):
        raise TypeError(f"tpu must be a string (a TPU name, 'local' or grpc://...), got {tpu!r}.")
    if name != "multi_worker" and workers:
        raise ValueError(
            f"workers={list(workers)} is only used by strategy='multi_worker', got "
            f"strategy={name!r}; drop the worker addresses or use --strategy=multi_worker."
        )
    if name != "tpu" and tpu:
        raise ValueError(
            f"tpu={tpu!r} is only used by strategy='tpu', got strategy={name!r}; drop it or use "
            "--strategy=tpu."
        )
    if name == "parameter_server":
        raise ValueError(
            "strategy='parameter_server' runs the asynchronous trainer, which builds its own "
            "cluster and coordinator: use `python -m trainers.train --strategy=parameter_server "
            "--config=configs/passm.py` (trainers.async_partitioned.train_and_evaluate)."
        )
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return _multi_worker(workers, task_index)
    return _tpu(tpu)


def from_config(config) -> tf.distribute.Strategy:
    """``make_strategy`` for a run config's ``strategy``, ``workers``, ``task_index``, ``tpu``."""
    return make_strategy(
        config.strategy, workers=config.workers, task_index=config.task_index, tpu=config.tpu
    )


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True for the process that owns the workdir: the only one, or the cluster's chief.

    Under ``MultiWorkerMirroredStrategy`` that is task ``chief`` if the cluster has one, else
    worker 0; every other worker writes beside it (see ``worker_directory``).
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type is None:
        return True
    if task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief


def num_input_pipelines(strategy: tf.distribute.Strategy) -> int:
    """Input pipelines ``distribute_datasets_from_function`` builds: one per worker process.

    1 except under a multi-worker ``MultiWorkerMirroredStrategy`` (its workers and chief).
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return 1
    jobs = resolver.cluster_spec().as_dict()
    return max(1, len(jobs.get("worker", ())) + len(jobs.get("chief", ())))


def worker_directory(strategy: tf.distribute.Strategy, workdir: str) -> str:
    """Where this process writes: ``workdir`` for the chief, ``workdir/workers/TYPE_ID`` else.

    Every MultiWorkerMirrored worker saves checkpoints and metrics (so each can resume), but two
    writers in one directory would overwrite each other's files.
    """
    if is_chief(strategy):
        return workdir
    resolver = strategy.cluster_resolver
    return os.path.join(workdir, "workers", f"{resolver.task_type}_{resolver.task_id}")


def _check_workers(workers) -> tuple[str, ...]:
    if isinstance(workers, str):
        workers = tuple(filter(None, (w.strip() for w in workers.split(","))))
    if not isinstance(workers, Sequence) or not all(isinstance(w, str) for w in workers):
        raise TypeError(
            f"workers must be a list of 'host:port' strings, got {workers!r}; e.g. "
            "('127.0.0.1:12345', '127.0.0.1:12346')."
        )
    bad = [w for w in workers if not _ADDRESS.match(w)]
    if bad:
        raise ValueError(
            f"worker addresses must look like 'host:port', got {bad}; e.g. 127.0.0.1:12345."
        )
    if len(set(workers)) != len(workers):
        raise ValueError(f"worker addresses must be distinct, got {list(workers)}.")
    return tuple(workers)


def _check_task_index(task_index, workers) -> None:
    if isinstance(task_index, bool) or not isinstance(task_index, int) or task_index < 0:
        raise ValueError(f"task_index must be an int >= 0, got {task_index!r}.")
    if task_index and not workers:
        raise ValueError(
            f"task_index={task_index} needs the worker addresses (workers=...); with TF_CONFIG "
            "the task index comes from TF_CONFIG's 'task'."
        )
    if workers and task_index >= len(workers):
        raise ValueError(
            f"task_index={task_index} is out of range for {len(workers)} worker addresses; "
            f"use 0..{len(workers) - 1}."
        )


def _multi_worker(workers, task_index) -> tf.distribute.Strategy:
    if not workers:
        # TFConfigClusterResolver: TF_CONFIG, or a single local worker when it is unset.
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": list(workers)}),
        task_type="worker",
        task_id=task_index,
        rpc_layer="grpc",
    )
    return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)


def _tpu(tpu: str) -> tf.distribute.Strategy:
    tpu = tpu or os.environ.get("TPU_NAME", "")
    if not tpu:
        # An empty name would make TPUClusterResolver ask the GCE metadata server over the
        # network; say what is missing instead.
        raise ValueError(
            "strategy='tpu' needs a TPU: this machine has none configured (no tpu name given and "
            "TPU_NAME is unset). On a Cloud TPU VM pass --config.tpu=local; for a TPU node pass "
            "its name or grpc://ADDRESS; without a TPU use --strategy=default or mirrored."
        )
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        if tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except (tf.errors.OpError, ValueError, RuntimeError, IndexError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise ValueError(
            f"strategy='tpu' found no usable TPU at tpu={tpu!r}: {first_line}. This machine "
            f"sees the devices {[d.device_type for d in tf.config.list_logical_devices()]}; run "
            "on a TPU VM (tpu='local') or give a reachable TPU, or use --strategy=default."
        ) from error
