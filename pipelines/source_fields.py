"""Which data-config fields each source reads, so that a field set for another source (a TFDS
``name`` with the generated MNIST-1D) is named rather than ignored.

Example::

    from pipelines import config, source_fields

    data = config.default_data_config()
    data.name = "cifar10"  # read by TFDS and text only
    source_fields.set_for_other_sources(data)  # ['name']
"""

from __future__ import annotations

import warnings

import ml_collections

from pipelines.config import at_default, default_data_config

# The fields each source reads, of those that choose or shape the data; the others (batching,
# shuffling, parallelism, data_dir, the service) apply to every source.
SOURCE_FIELDS = {
    "mnist1d": {"num_train", "num_eval"},
    "arrays": {"train_arrays", "eval_arrays", "num_classes"},
    "image_folder": {
        *("image_dir", "num_train", "num_eval", "image_size", "train_split", "eval_split"),
        *("eval_fraction", "skip_corrupt"),
    },
    "text": {
        *("name", "train_split", "eval_split", "train_files", "eval_files", "num_train"),
        *("num_eval", "text_max_length", "vocab_size", "gcs_request_attempts"),
    },
    "tfds": {"name", "train_split", "eval_split", "num_classes", "image_size"},
    "tfrecord": {
        *("train_files", "eval_files", "num_classes", "image_size", "skip_corrupt"),
        *("gcs_request_attempts", "gcs_read_attempts", "gcs_retry_delay"),
        *("gcs_max_retry_delay", "gcs_block_size"),
    },
}


def fields_read(config: ml_collections.ConfigDict) -> set[str]:
    """Of ``SOURCE_FIELDS``' fields, those ``config``'s source reads given its other fields: an
    image folder at ``image_dir`` uses every image there (``num_train``/``num_eval`` size the
    embedded photo set), text files or a TFDS text dataset replace the embedded corpus, and
    only a TFDS text dataset has named splits."""
    read = set(SOURCE_FIELDS[config.source])
    if config.source == "image_folder" and config.image_dir:
        read -= {"num_train", "num_eval"}
    if config.source == "text":
        if config.name or config.train_files:
            read -= {"num_train", "num_eval"}
        if config.name:  # read by TFDS, not from files
            read -= {"train_files", "eval_files", "gcs_request_attempts"}
        else:  # files (or the embedded corpus) have no named splits
            read -= {"train_split", "eval_split"}
    return read


def unread_fields(config: ml_collections.ConfigDict, keys) -> list[str]:
    """Of the data-config ``keys``, those ``config``'s source does not read (``fields_read``):
    set, they would be ignored (e.g. ``name`` for MNIST-1D, which is generated)."""
    chosen = set().union(*SOURCE_FIELDS.values())
    return sorted(key for key in keys if key in chosen and key not in fields_read(config))


def set_for_other_sources(config: ml_collections.ConfigDict) -> list[str]:
    """The fields ``config`` sets away from their defaults that only other sources read (a
    TFDS ``name`` with ``source="mnist1d"``): the data would be built without them.

    Example::

        config = default_data_config()
        config.source = "tfrecord"
        set_for_other_sources(config)  # [] (num_train and num_eval are at their defaults)
    """
    defaults = default_data_config()
    chosen = set().union(*SOURCE_FIELDS.values())
    others = chosen - SOURCE_FIELDS[config.source]
    return sorted(key for key in others if not at_default(config[key], defaults[key]))


def warn_set_for_other_sources(config: ml_collections.ConfigDict) -> None:
    """Warns, once per message, naming the fields ``set_for_other_sources`` finds. A warning,
    not an error: they are often what the config started from set for its own source (an image
    folder config's photo-set sizes when its source became TFRecords), yet may be a mistake."""
    fields = set_for_other_sources(config)
    if not fields:
        return
    values = ", ".join(f"{key}={config[key]!r}" for key in fields)
    warnings.warn(
        f"data config {values}: the data source {config.source!r} does not read "
        f"{'this field' if len(fields) == 1 else 'these fields'}, so the data is built without "
        f"{'it' if len(fields) == 1 else 'them'} (it reads "
        f"{', '.join(sorted(SOURCE_FIELDS[config.source]))}). Set data config source to the "
        f"source that reads {'it' if len(fields) == 1 else 'them'}, or leave "
        f"{'it at its default' if len(fields) == 1 else 'them at their defaults'}.",
        UserWarning,
        stacklevel=2,
    )
