"""The data config: every field ``make_datasets`` reads, its default, and its validation.

Example::

    import pipelines

    config = pipelines.default_data_config()
    config.num_train, config.num_eval = 1_000, 200  # a tiny MNIST-1D
    config.echo, config.echo_insert = 2.0, "before_augment"
    datasets = pipelines.make_datasets(config, seed=0)
"""

from __future__ import annotations

import numbers
import os

import ml_collections
import tensorflow as tf

SOURCES = ("mnist1d", "tfds", "tfrecord", "arrays")
AUGMENTATIONS = ("mnist1d", "image", "none")
DEFAULT_DATA_DIR = os.path.join("~", ".cache", "echoing")


def default_data_config() -> ml_collections.ConfigDict:
    """Returns the data config with every field at its default (MNIST-1D, no echo)."""
    config = ml_collections.ConfigDict()
    # Where examples come from: "mnist1d" (embedded, generated locally), "tfds" (a prepared TFDS
    # dataset `name` under `data_dir`), "tfrecord" (`train_files`/`eval_files`, local or gs://),
    # "arrays" (in-memory `train_arrays`/`eval_arrays`).
    config.source = "mnist1d"
    config.name = ""
    config.data_dir = None  # None -> ~/.cache/echoing
    config.train_split = "train"
    config.eval_split = "test"
    config.num_train = 40_000  # MNIST-1D only
    config.num_eval = 10_000  # MNIST-1D only
    config.train_files = ""
    config.eval_files = ""
    # {"inputs": array [N, ...], "label": int array [N]} for source="arrays".
    config.train_arrays = None
    config.eval_arrays = None
    # None -> from the source's metadata (TFDS, MNIST-1D) or max(label) + 1 (arrays); required
    # for TFRecord files, which carry no metadata.
    config.num_classes = None
    # Images of varying size (e.g. imagenet2012) are resized to image_size x image_size on decode.
    config.image_size = None
    config.batch_size = 128
    config.eval_batch_size = 1_000
    config.shuffle_buffer = 10_000
    config.augment = "mnist1d"
    config.echo = 1.0  # 1.0 = no echo
    config.echo_insert = "before_augment"
    config.echo_buffer_size = 0  # 0 = no shuffle after echo
    config.num_parallel_calls = tf.data.AUTOTUNE  # 1 = sequential maps (nothing computed ahead)
    config.prefetch = tf.data.AUTOTUNE
    # TFRecord faults. skip_corrupt: skip and count corrupt/truncated records (with a warning
    # naming the file) instead of failing; never silent (see Datasets.corrupt_records).
    config.skip_corrupt = False
    # gs:// reads: gcsfs retries each HTTP request (5xx, 408, 429, connection errors) up to
    # gcs_request_attempts times with its own backoff (about 1, 2, 4, 8, 16 s); when it gives
    # up, the file is reopened at the next unread record up to gcs_read_attempts times, waiting
    # gcs_retry_delay * 2**k seconds (at most gcs_max_retry_delay) before attempt k + 1.
    config.gcs_request_attempts = 6
    config.gcs_read_attempts = 3
    config.gcs_retry_delay = 1.0
    config.gcs_max_retry_delay = 30.0
    # Bytes per gs:// range request: larger means fewer round trips, more memory per file.
    config.gcs_block_size = 8 << 20
    # tf.data service: "" = off; "grpc://host:port" (a dispatcher) or "local" (an in-process
    # dispatcher + worker on localhost). The stages before echo run on the service workers;
    # echo and everything after it run in this process.
    config.service_address = ""
    config.service_processing_mode = "parallel_epochs"
    return config


def resolve_data_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Returns the defaults updated with ``config``, after checking every key and value.

    Raises:
      TypeError: ``config`` is not a ConfigDict/dict, or a value has the wrong type.
      ValueError: an unknown key, or a value outside its allowed set or range.
    """
    if not isinstance(config, (ml_collections.ConfigDict, dict)):
        raise TypeError(
            f"data_config must be an ml_collections.ConfigDict, got {type(config).__name__}; "
            "start from pipelines.default_data_config()."
        )
    resolved = default_data_config()
    given = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
    unknown = sorted(set(given) - set(resolved.keys()))
    if unknown:
        raise ValueError(
            f"unknown data config key(s) {unknown}; valid keys are {sorted(resolved.keys())}."
        )
    # A fresh ConfigDict (not an update) so that ConfigDict's own type coercion does not preempt
    # the clearer checks below.
    resolved = ml_collections.ConfigDict({**resolved.to_dict(), **given})

    _check_choice("source", resolved.source, SOURCES)
    _check_choice("augment", resolved.augment, AUGMENTATIONS)
    _check_int("batch_size", resolved.batch_size, minimum=1)
    _check_int("eval_batch_size", resolved.eval_batch_size, minimum=1)
    _check_int("shuffle_buffer", resolved.shuffle_buffer, minimum=0)
    _check_int("echo_buffer_size", resolved.echo_buffer_size, minimum=0)
    _check_autotune_int("num_parallel_calls", resolved.num_parallel_calls)
    _check_autotune_int("prefetch", resolved.prefetch, allow_zero=True)
    if resolved.source == "mnist1d":
        _check_int("num_train", resolved.num_train, minimum=1)
        _check_int("num_eval", resolved.num_eval, minimum=1)
    if resolved.num_classes is not None:
        _check_int("num_classes", resolved.num_classes, minimum=1)
    if resolved.image_size is not None:
        _check_int("image_size", resolved.image_size, minimum=1)
    echo = resolved.echo
    if isinstance(echo, bool) or not isinstance(echo, numbers.Real) or not echo > 0:
        raise ValueError(
            f"data config echo must be a number > 0 (1.0 = no echo), got {echo!r}; e.g. echo=2.0."
        )
    if not isinstance(resolved.echo_insert, str):
        raise TypeError(
            f"data config echo_insert must be a string such as 'before_augment', got "
            f"{resolved.echo_insert!r}."
        )
    if not isinstance(resolved.skip_corrupt, bool):
        raise TypeError(
            f"data config skip_corrupt must be True or False, got {resolved.skip_corrupt!r}."
        )
    if resolved.skip_corrupt and resolved.source != "tfrecord":
        raise ValueError(
            f"data config skip_corrupt applies to source='tfrecord' only, got source="
            f"{resolved.source!r}; set skip_corrupt=False."
        )
    _check_int("gcs_request_attempts", resolved.gcs_request_attempts, minimum=1)
    _check_int("gcs_read_attempts", resolved.gcs_read_attempts, minimum=1)
    _check_int("gcs_block_size", resolved.gcs_block_size, minimum=1)
    for key in ("gcs_retry_delay", "gcs_max_retry_delay"):
        value = resolved[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
            raise ValueError(f"data config {key} must be seconds >= 0, got {value!r}.")
    _check_service(resolved)
    if resolved.source == "tfds" and not resolved.name:
        raise ValueError("data config source='tfds' needs name, e.g. name='cifar10'; got name=''.")
    if resolved.source == "tfrecord":
        for key in ("train_files", "eval_files"):
            if not resolved[key] or not isinstance(resolved[key], str):
                raise ValueError(
                    f"data config source='tfrecord' needs {key} (a glob, local or gs://), got "
                    f"{resolved[key]!r}; e.g. {key}='gs://bucket/{key.split('_')[0]}-*.tfrecord'."
                )
        if resolved.num_classes is None:
            raise ValueError(
                "data config source='tfrecord' needs num_classes (TFRecord files carry no "
                "metadata), got None; e.g. num_classes=10."
            )
    return resolved


def _check_service(config: ml_collections.ConfigDict) -> None:
    address = config.service_address
    if not isinstance(address, str):
        raise TypeError(
            f"data config service_address must be a string ('' = off, 'grpc://host:port' or "
            f"'local'), got {address!r}."
        )
    _check_choice(
        "service_processing_mode",
        config.service_processing_mode,
        ("parallel_epochs", "distributed_epoch"),
    )
    if not address:
        return
    if config.source == "tfrecord" and "gs://" in f"{config.train_files}":
        raise ValueError(
            f"data config service_address={address!r} cannot serve train_files="
            f"{config.train_files!r}: gs:// files are read by gcsfs in a Python generator, which "
            "cannot be sent to a tf.data service worker. Copy the files to a path the workers "
            "read in the graph (local or a mounted bucket), or set service_address=''."
        )
    if config.skip_corrupt:
        raise ValueError(
            f"data config service_address={address!r} cannot be combined with skip_corrupt=True: "
            "skipping and counting corrupt records runs in a Python generator, which cannot be "
            "sent to a tf.data service worker. Set one of them off."
        )


def data_dir(config: ml_collections.ConfigDict) -> str:
    """The config's data_dir, or ~/.cache/echoing when it is None, with ``~`` expanded."""
    path = config.data_dir if config.data_dir is not None else DEFAULT_DATA_DIR
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"data config data_dir must be a path or None, got {path!r}.")
    return os.path.expanduser(os.fspath(path))


def _check_choice(key: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"data config {key} must be one of {list(choices)}, got {value!r}.")


def _check_int(key: str, value, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"data config {key} must be an int, got {value!r} ({type(value).__name__})."
        )
    if value < minimum:
        raise ValueError(f"data config {key} must be >= {minimum}, got {value!r}.")


def _check_autotune_int(key: str, value, *, allow_zero: bool = False) -> None:
    if value == tf.data.AUTOTUNE and not isinstance(value, bool):
        return
    _check_int(key, value, minimum=0 if allow_zero else 1)
