"""Sources: where examples come from, each attaching a per-example int64 ``"id"``.

Example::

    import pipelines
    from pipelines import sources

    config = pipelines.resolve_data_config(pipelines.default_data_config())
    source = sources.load(config)  # MNIST-1D, generated and cached on first use
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator

import ml_collections
import numpy as np

from pipelines import config as data_config
from pipelines.sources.record_reader import ReadStats
from pipelines.sources.source import Source, SourceSplit, check_not_empty

__all__ = ["ReadStats", "Source", "SourceSplit", "check_not_empty", "load"]


def load(config: ml_collections.ConfigDict) -> Source:
    """Returns the source a resolved data config names (see ``pipelines.resolve_data_config``).

    Inside ``loaded_once()`` a source is loaded once and shared by every pipeline built on it.
    """
    loader = _LOADERS.get(config.source)
    if loader is None:
        raise ValueError(
            f"data config source must be one of {list(data_config.SOURCES)}, got {config.source!r}."
        )
    if _loaded is None:
        return loader(config)
    key = _source_key(config)
    if key not in _loaded:
        _loaded[key] = loader(config)
    return _loaded[key]


# Sources loaded inside ``loaded_once`` (None outside it), by the fields that choose them.
_loaded: dict | None = None
# Fields of what a pipeline does with the examples, which no loader reads.
_STAGE_FIELDS = frozenset(
    {
        "augment",
        "batch_size",
        "echo",
        "echo_buffer_size",
        "echo_insert",
        "eval_batch_size",
        "prefetch",
        "service_address",
        "service_processing_mode",
        "shuffle_buffer",
    }
)


@contextlib.contextmanager
def loaded_once() -> Iterator[None]:
    """Within it, ``load`` reads each source once: a run's train, eval and timing pipelines
    (and every replica's) share it, instead of re-opening the data set for each."""
    global _loaded
    outer = _loaded
    _loaded = {} if outer is None else outer
    try:
        yield
    finally:
        _loaded = outer


def _source_key(config: ml_collections.ConfigDict) -> tuple:
    return tuple(
        (name, _value_key(config[name]))
        for name in sorted(config.keys())
        if name not in _STAGE_FIELDS
    )


def _value_key(value) -> object:
    # In-memory arrays by content (configs are copied on the way, so not by identity); anything
    # unforeseen by identity, which can only miss the cache, never confuse two data sets.
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, (dict, ml_collections.ConfigDict)):
        return tuple((key, _value_key(value[key])) for key in sorted(value.keys()))
    if isinstance(value, (list, tuple)):
        return tuple(_value_key(item) for item in value)
    if isinstance(value, np.ndarray):
        digest = hashlib.sha1(np.ascontiguousarray(value).tobytes()).hexdigest()
        return ("array", value.shape, str(value.dtype), digest)
    return ("id", id(value))


# Each loader imports its source on first use: TFDS, gcsfs and tensorflow-text load only when a
# config asks for them.


def _mnist1d(config: ml_collections.ConfigDict) -> Source:
    from pipelines.sources import mnist1d

    return mnist1d.load(config.num_train, config.num_eval, data_config.data_dir(config))


def _arrays(config: ml_collections.ConfigDict) -> Source:
    from pipelines.sources import arrays

    return arrays.load(config.train_arrays, config.eval_arrays, config.num_classes)


def _image_folder(config: ml_collections.ConfigDict) -> Source:
    from pipelines.sources import image_folder, photos

    root = config.image_dir or photos.make_folder(
        data_config.data_dir(config), num_train=config.num_train, num_eval=config.num_eval
    )
    return image_folder.load(
        os.path.expanduser(root),
        image_size=config.image_size,
        train_split=config.train_split,
        eval_split=config.eval_split,
        eval_fraction=config.eval_fraction,
        skip_corrupt=config.skip_corrupt,
    )


def _text(config: ml_collections.ConfigDict) -> Source:
    from pipelines.sources import corpus, text, text_lines

    data_dir = data_config.data_dir(config)
    sizes = dict(data_dir=data_dir, max_length=config.text_max_length, vocab_size=config.vocab_size)
    if config.name:  # a prepared TFDS text dataset
        splits = (config.train_split, config.eval_split)
        return text.load_lines(
            *(text_lines.from_tfds(config.name, split, data_dir=data_dir) for split in splits),
            names=tuple(f"TFDS dataset {config.name!r} split {split!r}" for split in splits),
            **sizes,
        )
    files = (config.train_files, config.eval_files)
    if not config.train_files:
        files = corpus.make_files(data_dir, num_train=config.num_train, num_eval=config.num_eval)
    return text.load(*files, request_attempts=config.gcs_request_attempts, **sizes)


def _tfds(config: ml_collections.ConfigDict) -> Source:
    from pipelines.sources import tfds

    return tfds.load(
        config.name,
        data_dir=data_config.data_dir(config),
        train_split=config.train_split,
        eval_split=config.eval_split,
        num_classes=config.num_classes,
        image_size=config.image_size,
    )


def _tfrecord(config: ml_collections.ConfigDict) -> Source:
    from pipelines.sources import record_reader, tfrecord

    options = tfrecord.ReadOptions(
        skip_corrupt=config.skip_corrupt,
        gcs_request_attempts=config.gcs_request_attempts,
        gcs_retry=record_reader.RetryPolicy(
            attempts=config.gcs_read_attempts,
            delay=float(config.gcs_retry_delay),
            max_delay=float(config.gcs_max_retry_delay),
        ),
        gcs_block_size=config.gcs_block_size,
        num_parallel_calls=config.num_parallel_calls,
    )
    return tfrecord.load(
        config.train_files,
        config.eval_files,
        num_classes=config.num_classes,
        image_size=config.image_size,
        options=options,
    )


_LOADERS = {
    "mnist1d": _mnist1d,
    "arrays": _arrays,
    "image_folder": _image_folder,
    "text": _text,
    "tfds": _tfds,
    "tfrecord": _tfrecord,
}
