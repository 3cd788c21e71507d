"""The data config: every field ``make_datasets`` reads, its default, and its validation.

Example::

    import pipelines

    config = pipelines.default_data_config()
    config.num_train, config.num_eval = 1_000, 200  # a tiny MNIST-1D
    datasets = pipelines.make_datasets(config, seed=0)
"""

from __future__ import annotations

import numbers
import os
import re
import warnings

import ml_collections
import tensorflow as tf
from ml_collections import config_dict

SOURCES = ("mnist1d", "tfds", "tfrecord", "arrays", "image_folder", "text")
AUGMENTATIONS = ("mnist1d", "image", "inception", "none")
DEFAULT_DATA_DIR = os.path.join("~", ".cache", "echoing")


def default_data_config() -> ml_collections.ConfigDict:
    """Returns the data config with every field at its default (MNIST-1D, no echo)."""
    config = ml_collections.ConfigDict()
    # Where examples come from: "mnist1d" (embedded, generated locally), "tfds" (a prepared TFDS
    # dataset `name` under `data_dir`), "tfrecord" (`train_files`/`eval_files`, local or gs://),
    # "arrays" (in-memory `train_arrays`/`eval_arrays`), "image_folder" (JPEG/PNG files in one
    # folder per class under `image_dir`; "" = the embedded photo set, generated locally), "text"
    # (lines of text files `train_files`/`eval_files`, local or gs://, or of the prepared TFDS
    # text dataset `name`'s train_split/eval_split, tokenized for a language model; neither =
    # the embedded corpus of the standard library's docstrings).
    config.source = "mnist1d"
    config.name = ""
    config.data_dir = None  # None -> ~/.cache/echoing
    config.train_split = "train"
    config.eval_split = "test"
    # Generated or embedded sets only: MNIST-1D, the photo set, and the text corpus (its first
    # num_train / num_eval paragraphs, or all it has). MNIST-1D generates both splits in one
    # draw of num_train + num_eval examples, so changing either changes the train examples too.
    config.num_train = 40_000
    config.num_eval = 10_000
    config.image_dir = ""  # source="image_folder": root/<class>/* or root/<split>/<class>/*
    # image_dir without split folders: this fraction of the images (by a hash of each path) is
    # held out for eval.
    config.eval_fraction = 0.1
    # source="text": tokens per example (longer lines become several examples) and the size of
    # the WordPiece vocabulary learned from the train files.
    config.text_max_length = 128
    config.vocab_size = 4_000
    config.train_files = ""
    config.eval_files = ""
    # {"inputs": array [N, ...], "label": int array [N]} for source="arrays".
    config.train_arrays = None
    config.eval_arrays = None
    # None -> from the source's metadata (TFDS, MNIST-1D) or max(label) + 1 (arrays); required
    # for TFRecord files, which carry no metadata.
    config.num_classes = None
    # Images of varying size (e.g. imagenet2012, image folders) are cropped and resized to
    # image_size x image_size on decode (required for source="image_folder").
    config.image_size = None
    config.batch_size = 128
    config.eval_batch_size = 1_000
    config.shuffle_buffer = 10_000  # 0 = no shuffle: the train split in its stored order
    # "mnist1d"; "image" (crop-resize, flip, colour jitter on decoded pixels); "inception"
    # (random-resized crop while decoding JPEG bytes, then flip; needs encoded images:
    # image_folder, or png/jpeg TFRecords); "none".
    config.augment = "mnist1d"
    # Moved: echo is a technique (the run config's echo, echo_insert and echo_buffer_size) or a
    # stage you insert (make_datasets(insertions=[(point, "echo", echoing.echo(2))])). Still
    # read, with a FutureWarning, for one more release (moved_echo_fields).
    config.echo = config_dict.placeholder(float)
    config.echo_insert = config_dict.placeholder(str)
    config.echo_buffer_size = config_dict.placeholder(int)
    # The pipeline's own maps: 1 = sequential (nothing computed ahead). A TFDS-stored source
    # (MNIST-1D, tfds) reads its files with TFDS's own parallel reader either way.
    config.num_parallel_calls = tf.data.AUTOTUNE
    config.prefetch = tf.data.AUTOTUNE
    # tf.data's autotuner (parallelism and buffer sizes tuned while the pipeline runs). Leave it
    # on for training runs. Seconds-long runs (smoke tests) gain nothing from it, and tearing an
    # autotuned iterator down can wait until the autotuner's next scheduled pass, up to 60 s
    # (benchmarks/iterator_teardown.py). Off: AUTOTUNE parallelism is the CPU count and AUTOTUNE
    # prefetch holds one element.
    config.autotune = True
    # TFRecord faults. skip_corrupt: skip and count corrupt/truncated records (with a warning
    # naming the file) instead of failing; never silent (see Datasets.train_read_stats). For
    # image folders: decode every file once at load and leave out (and count) the ones that fail.
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
    # dispatcher + worker on localhost). The stages before the first inserted stage (echo, a
    # filter: their state lives in this process) run on the service workers, up to after_augment
    # when nothing is inserted earlier; the rest runs in this process.
    config.service_address = ""
    config.service_processing_mode = "parallel_epochs"
    return config


def resolve_data_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Returns the defaults updated with ``config``, after checking every key and value.

    The defaults are a locked, type-safe ConfigDict: an unknown key or a value of the wrong
    type is refused by ml_collections (naming the field, and the closest known key); what
    types cannot say (ranges, choices, combinations) is checked here.

    Raises:
      TypeError: ``config`` is not a ConfigDict/dict, or a value has the wrong type.
      ValueError: an unknown key, or a value outside its allowed set or range.
    """
    if not isinstance(config, (ml_collections.ConfigDict, dict)):
        raise TypeError(
            f"data_config must be an ml_collections.ConfigDict, got {type(config).__name__}; "
            "start from pipelines.default_data_config()."
        )
    given = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
    resolved = locked_update(default_data_config(), given, "data config")
    _check_choice("source", resolved.source, SOURCES)
    _check_choice("augment", resolved.augment, AUGMENTATIONS)
    for key in ("batch_size", "eval_batch_size", "gcs_request_attempts", "gcs_read_attempts"):
        _check_minimum(key, resolved[key], 1)
    _check_minimum("gcs_block_size", resolved.gcs_block_size, 1)
    _check_minimum("shuffle_buffer", resolved.shuffle_buffer, 0)
    for key in ("gcs_retry_delay", "gcs_max_retry_delay"):
        if resolved[key] < 0:
            raise ValueError(f"data config {key} must be seconds >= 0, got {resolved[key]!r}.")
    if not isinstance(resolved.autotune, bool):
        raise TypeError(f"data config autotune must be True or False, got {resolved.autotune!r}.")
    _check_autotune("num_parallel_calls", resolved.num_parallel_calls, minimum=1)
    _check_autotune("prefetch", resolved.prefetch, minimum=0)
    if resolved.source == "mnist1d" and resolved.augment in ("image", "inception"):
        raise ValueError(
            f"data config augment={resolved.augment!r} crops and flips images, and "
            "source='mnist1d' holds 1-D signals; set augment='mnist1d' (its own shifts) or "
            "'none'."
        )
    if resolved.source == "mnist1d":
        _check_minimum("num_train", resolved.num_train, 1)
        _check_minimum("num_eval", resolved.num_eval, 1)
    for key in ("num_classes", "image_size"):
        if resolved[key] is not None:
            _check_integer(key, resolved[key])
            _check_minimum(key, resolved[key], 1)
    if resolved.skip_corrupt and resolved.source not in ("tfrecord", "image_folder"):
        raise ValueError(
            f"data config skip_corrupt applies to source='tfrecord' or 'image_folder' only, got "
            f"source={resolved.source!r}; set skip_corrupt=False."
        )
    _check_service(resolved)
    _check_source(resolved)
    return resolved


# The data-config keys echo moved out of (see default_data_config); the run config's echo
# technique has the same three names.
MOVED_ECHO_KEYS = ("echo", "echo_insert", "echo_buffer_size")


def moved_echo_fields(config: ml_collections.ConfigDict) -> dict:
    """The moved echo keys a data config sets (not None), with a FutureWarning that says where
    they live now; ``{}`` when it sets none.

    Example::

        config = pipelines.default_data_config()
        moved_echo_fields(config)  # {}
    """
    moved = {key: config[key] for key in MOVED_ECHO_KEYS if config.get(key) is not None}
    if moved:
        warnings.warn(
            f"the data config's {sorted(moved)} moved: echo is a technique of the run config "
            "(e.g. --config.echo=2 --config.echo_insert=after_augment --config.echo_buffer_size=N) "
            'or a stage you insert (make_datasets(insertions=[("after_augment", "echo", '
            "echoing.echo(2))])). The old keys are read for one more release.",
            FutureWarning,
            stacklevel=3,
        )
    return moved


def at_default(value, default) -> bool:
    """Whether a config field's ``value`` is its ``default``; a field whose default is None
    (``train_arrays``: arrays, which == compares per entry) is at it only when None."""
    if default is None:
        return value is None
    return value == default


def locked_update(
    defaults: ml_collections.ConfigDict, given: dict, what: str
) -> ml_collections.ConfigDict:
    """``defaults``, locked (no new keys) and type-safe, updated with ``given``.

    Raises:
      ValueError: a key ``defaults`` does not have (ml_collections names the closest one).
      TypeError: a value whose type cannot be cast to the default's (ints do become floats).
    """
    defaults.lock()
    try:
        defaults.update(given)
    except KeyError as error:
        # ml_collections' message lists every field's value; keep its key and its suggestion.
        message = str(error.args[0])
        key = re.search(r'Key "([^"]+)"', message)
        suggestion = re.search(r'Did you mean "([^"]+)"', message)
        raise ValueError(
            f"unknown {what} key {key.group(1) if key else message!r}"
            + (f"; did you mean {suggestion.group(1)!r}?" if suggestion else ".")
            + f" Valid keys: {sorted(defaults.keys())}."
        ) from None
    except TypeError as error:
        raise TypeError(f"{what}: {error}") from None
    return defaults


def _check_source(config: ml_collections.ConfigDict) -> None:
    if config.source == "image_folder":
        _check_image_folder(config)
    if config.source == "text":
        _check_text(config)
    if config.source == "tfds" and not config.name:
        raise ValueError(
            "data config source='tfds' needs data config name, e.g. name='cifar10'; got name=''."
        )
    if config.source != "tfrecord":
        return
    for key in ("train_files", "eval_files"):
        if not config[key]:
            raise ValueError(
                f"data config source='tfrecord' needs {key} (a glob, local or gs://), got "
                f"{config[key]!r}; e.g. {key}='gs://bucket/{key.split('_')[0]}-*.tfrecord'."
            )
    if config.num_classes is None:
        raise ValueError(
            "data config source='tfrecord' needs data config num_classes (TFRecord "
            "files carry no metadata), got None; e.g. num_classes=10."
        )


def _check_image_folder(config: ml_collections.ConfigDict) -> None:
    if config.image_size is None:
        raise ValueError(
            "data config source='image_folder' needs data config image_size (images of every "
            "size are cropped and resized to image_size x image_size), got None; e.g. "
            "image_size=224."
        )
    if not 0 <= config.eval_fraction < 1:
        raise ValueError(
            f"data config eval_fraction must be in [0, 1), got {config.eval_fraction!r}; e.g. 0.1."
        )
    if config.image_dir == "":
        _check_minimum("num_train", config.num_train, 1)
        _check_minimum("num_eval", config.num_eval, 1)


def _check_text(config: ml_collections.ConfigDict) -> None:
    if config.augment != "none":
        raise ValueError(
            f"data config source='text' has no augmentation, got augment={config.augment!r}; "
            "set augment='none'."
        )
    if bool(config.train_files) != bool(config.eval_files):
        raise ValueError(
            "data config source='text' needs both train_files and eval_files (globs of text "
            "files, local or gs://), or neither for the embedded corpus; got train_files="
            f"{config.train_files!r}, eval_files={config.eval_files!r}."
        )
    if config.name and config.train_files:
        raise ValueError(
            f"data config source='text' reads either the TFDS dataset name={config.name!r} or "
            f"the files train_files={config.train_files!r}, not both; set one to ''."
        )
    if not config.train_files and not config.name:
        _check_minimum("num_train", config.num_train, 1)
        _check_minimum("num_eval", config.num_eval, 1)
    _check_minimum("text_max_length", config.text_max_length, 2)
    _check_minimum("vocab_size", config.vocab_size, 30)


def _check_service(config: ml_collections.ConfigDict) -> None:
    address = config.service_address
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


def warn_if_eval_is_train(config: ml_collections.ConfigDict) -> None:
    """Warns when ``config``'s eval split is its train split (the same files, split name or
    arrays): the eval accuracy would be training accuracy. A warning, not an error: evaluating
    on the training data can be what a user wants, to see how well a model fits it."""
    same = None
    if config.source in ("tfrecord", "text") and config.train_files:
        shared = _shared_files(config.train_files, config.eval_files)
        if shared:
            same = (
                f"train_files {config.train_files!r} and eval_files {config.eval_files!r} share "
                f"{len(shared)} file{'s' if len(shared) != 1 else ''} ({shared[0]})"
            )
    elif config.source in ("tfds", "image_folder", "text") and (
        config.source != "text" or config.name
    ):
        if os.path.normpath(config.train_split) == os.path.normpath(config.eval_split):
            same = f"train_split and eval_split are both {config.train_split!r}"
    elif config.source == "arrays" and _same_arrays(config.train_arrays, config.eval_arrays):
        same = "train_arrays and eval_arrays hold the same arrays"
    if same:
        warnings.warn(
            f"data config {same}, so the run evaluates on its training data and its eval "
            "accuracy is training accuracy; point the eval split at held-out data for a "
            "figure of how the model generalises.",
            UserWarning,
            stacklevel=2,  # make_datasets' line: shown once, however many pipelines a run builds
        )


def _shared_files(train_files: str, eval_files: str) -> list[str]:
    """The files both globs name, sorted: local globs are expanded (``a/*.txt`` holds
    ``a/b.txt``) and compared as files (a path written another way, a symbolic or hard link to
    the same file); remote ones (``gs://``) are compared as written."""
    if "://" in train_files or "://" in eval_files:
        return [train_files] if train_files == eval_files else []

    def files(pattern: str) -> dict:
        expanded = os.path.abspath(os.path.expanduser(pattern))
        paths = [os.path.realpath(path) for path in tf.io.gfile.glob(expanded)] or [expanded]
        return {_file_key(path): path for path in paths}

    train, evaluation = files(train_files), files(eval_files)
    return sorted(train[key] for key in train.keys() & evaluation.keys())


def _file_key(path: str):
    """What tells one file from another: its device and inode (hard links share them), or the
    path of one that cannot be read."""
    try:
        status = os.stat(path)
    except OSError:
        return path
    return (status.st_dev, status.st_ino)


def _same_arrays(train, evaluation) -> bool:
    """Whether the two ``{"inputs": ..., "label": ...}`` hold the very same inputs array (the
    config copies the dicts, not the arrays)."""
    try:
        return train["inputs"] is evaluation["inputs"]
    except (KeyError, TypeError):
        return False


def data_dir(config: ml_collections.ConfigDict) -> str:
    """The config's data_dir, or ~/.cache/echoing when it is None, with ``~`` expanded."""
    path = config.data_dir if config.data_dir is not None else DEFAULT_DATA_DIR
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"data config data_dir must be a path or None, got {path!r}.")
    return os.path.expanduser(os.fspath(path))


def _check_choice(key: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"data config {key} must be one of {list(choices)}, got {value!r}.")


def _check_integer(key: str, value) -> None:
    # Only for fields whose default is None, which ml_collections leaves untyped.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"data config {key} must be an int, got {value!r} ({type(value).__name__})."
        )


def _check_minimum(key: str, value, minimum: int) -> None:
    if value < minimum:
        raise ValueError(f"data config {key} must be >= {minimum}, got {value!r}.")


def _check_autotune(key: str, value, *, minimum: int) -> None:
    if value != tf.data.AUTOTUNE:
        _check_minimum(key, value, minimum)
