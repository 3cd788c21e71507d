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
- ``parameter_server``: ``ParameterServerStrategy`` for the asynchronous partitioned trainer
  (``python -m trainers.train --strategy=parameter_server --config=configs/passm.py``): joins
  ``cluster_spec`` as its chief, or starts a loopback cluster in this process.

The strategy must be created before any other TensorFlow work in the process
(``MultiWorkerMirroredStrategy`` configures collective ops on the runtime at creation).
"""

from __future__ import annotations

import json
import os
import re
import warnings
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
    cluster_spec: str | dict = "",
    num_workers: int = 2,
) -> tf.distribute.Strategy:
    """Builds the strategy ``name`` (see the module docstring); the one strategy factory.

    Args:
      name: one of ``NAMES``.
      workers: ``multi_worker`` only: every worker's ``host:port``, the same list in every
        worker process; empty uses ``TF_CONFIG`` (or one local worker without it).
      task_index: ``multi_worker`` with ``workers``: this process's index in ``workers``.
      tpu: ``tpu`` only: ``"local"``, a TPU name or a ``grpc://host:port`` address; empty uses
        the ``TPU_NAME`` environment variable.
      cluster_spec: ``parameter_server`` only: the cluster to join, ``{"worker": [...], "ps":
        [...], "chief": [...]}`` (or its JSON), this process being the chief (coordinator);
        empty starts ``num_workers`` workers and one parameter server in this process on
        127.0.0.1 (``trainers.local_cluster``).
      num_workers: ``parameter_server`` without ``cluster_spec``: workers to start.

    Raises:
      ValueError: an unknown name, bad worker addresses, task index or cluster spec, options
        given to a strategy that does not use them, or ``tpu`` on a machine without a TPU.
    """
    check_name(name)
    workers = _check_workers(workers)
    _check_task_index(task_index, workers)
    if not isinstance(tpu, str):
        raise TypeError(f"tpu must be a string (a TPU name, 'local' or grpc://...), got {tpu!r}.")
    for option, value, owner in (
        ("workers", list(workers), "multi_worker"),
        ("tpu", tpu, "tpu"),
        ("cluster_spec", cluster_spec, "parameter_server"),
    ):
        if value and name != owner:
            raise ValueError(
                f"{option}={value!r} is only used by strategy={owner!r}, got strategy={name!r}; "
                f"drop it or use --strategy={owner}."
            )
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return _multi_worker(workers, task_index)
    if name == "parameter_server":
        return _parameter_server(cluster_spec, num_workers)
    return _tpu(tpu)


def from_config(config) -> tf.distribute.Strategy:
    """``make_strategy`` for a config's ``strategy`` and the options it has of ``workers``,
    ``task_index``, ``tpu`` (``trainers.run_config``), ``cluster_spec`` and ``num_workers``
    (``configs/passm.py``)."""
    return make_strategy(
        config.strategy,
        workers=config.get("workers", ""),
        task_index=config.get("task_index", 0),
        tpu=config.get("tpu", ""),
        cluster_spec=config.get("cluster_spec", ""),
        num_workers=config.get("num_workers", 2),
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
        if not os.environ.get("TF_CONFIG"):
            warnings.warn(
                "strategy='multi_worker' with neither config workers nor TF_CONFIG: it trains "
                "as one worker on this host's devices (as mirrored does); give every worker "
                "--config.workers=HOST:PORT,HOST:PORT and its --config.task_index=I (or "
                "TF_CONFIG) to train on several.",
                UserWarning,
                stacklevel=3,
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": list(workers)}),
        task_type="worker",
        task_id=task_index,
        rpc_layer="grpc",
    )
    return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)


def _parameter_server(cluster_spec, num_workers: int) -> tf.distribute.Strategy:
    from trainers import local_cluster

    if cluster_spec:
        spec = json.loads(cluster_spec) if isinstance(cluster_spec, str) else dict(cluster_spec)
        if set(spec) != {"worker", "ps", "chief"}:
            raise ValueError(
                f"cluster_spec needs exactly the jobs worker, ps and chief, got "
                f'{sorted(spec)}; e.g. \'{{"worker": ["127.0.0.1:2222"], "ps": '
                f'["127.0.0.1:2223"], "chief": ["127.0.0.1:2224"]}}\'.'
            )
        resolver = local_cluster.chief_resolver(spec)
    else:
        resolver = local_cluster.start_in_process(num_workers).resolver
    return tf.distribute.experimental.ParameterServerStrategy(resolver)


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
