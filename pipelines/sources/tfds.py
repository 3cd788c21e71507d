"""A prepared TFDS dataset, by name, read from ``data_dir`` without a network.

Example::

    from pipelines.sources import tfds as tfds_source

    # Needs a copy prepared earlier, e.g. `tfds build cifar10 --data_dir=/data/tfds`.
    source = tfds_source.load("cifar10", data_dir="/data/tfds", train_split="train",
                              eval_split="test")

    # Random access by record index (priority sampling), for a copy prepared as ArrayRecord,
    # e.g. `tfds build cifar10 --file_format=array_record --data_dir=/data/tfds`:
    train = tfds_source.data_source("cifar10", data_dir="/data/tfds", split="train")

The builder is rebuilt from the files alone (``builder_from_files``), so no dataset code runs and
nothing is downloaded; a dataset that is not there raises at once with how to fix it. Examples
are read through the dataset's ``supervised_keys`` (input, label); image features are decoded in
the pipeline's ``decode`` stage, not by TFDS. Ids are positions in the split's file order (files
are read unshuffled; the pipeline shuffles after reading).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import read_only_builder

from pipelines.sources import images
from pipelines.sources.source import Source, SourceSplit, check_not_empty


def prepared_builder(name: str, data_dir: str):
    """The builder of the copy of ``name`` prepared under ``data_dir``, rebuilt from its files.

    Raises:
      ValueError: no such dataset, or none prepared there (with the command that prepares one).
    """
    try:
        return read_only_builder.builder_from_files(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as error:
        if name.split(":")[0].split("/")[0] not in tfds.list_builders(
            with_community_datasets=False
        ):
            raise ValueError(
                f"there is no TFDS dataset named {name!r}, and none prepared under "
                f"data_dir={data_dir!r}; check the spelling against tfds.list_builders() (e.g. "
                "'mnist', 'cifar10'), or point data_dir at your prepared copy."
            ) from error
        raise ValueError(
            f"dataset {name!r} needs a download; use --config.data.data_dir with a prepared copy "
            f"or the config's default data (no prepared copy under data_dir={data_dir!r}; "
            f"prepare one with `tfds build {name} --data_dir={data_dir}` on a machine with "
            "internet)."
        ) from error


def data_source(name: str, *, data_dir: str, split: str):
    """A random-access TFDS data source of ``split`` (record ``i`` = ``source[i]``).

    For ``echoing.priority_sample`` over data that does not fit in memory. The copy must be
    stored as ArrayRecord (``tfds build NAME --file_format=array_record``): TFRecord files can
    only be read in order.

    Raises:
      ValueError: the dataset is not prepared under ``data_dir``, is not stored as ArrayRecord,
        or has no split ``split``.
    """
    builder = prepared_builder(name, data_dir)
    info = builder.info
    file_format = info.file_format.value if info.file_format is not None else "tfrecord"
    if file_format != "array_record":
        raise ValueError(
            f"TFDS dataset {name!r} under {data_dir!r} is stored as {file_format}, which has no "
            f"random access; prepare an ArrayRecord copy with `tfds build {name} "
            f"--file_format=array_record --data_dir=DIR` (or builder.download_and_prepare("
            "file_format='array_record'))."
        )
    if split not in info.splits:
        raise ValueError(
            f"TFDS dataset {name!r} has no split {split!r}; its splits are "
            f"{sorted(info.splits.keys())}."
        )
    return builder.as_data_source(split=split)


def load(
    name: str,
    *,
    data_dir: str,
    train_split: str,
    eval_split: str,
    num_classes: int | None = None,
    image_size: int | None = None,
) -> Source:
    """Returns the TFDS dataset ``name`` (e.g. "cifar10", "mnist1d/train200_eval50_seed42").

    Raises:
      ValueError: the dataset is not prepared under ``data_dir``, has no supervised keys, a
        split does not exist or is empty, or the label has no class count.
    """
    builder = prepared_builder(name, data_dir)
    info = builder.info
    if not info.supervised_keys or len(info.supervised_keys) != 2:
        raise ValueError(
            f"TFDS dataset {name!r} has no (input, label) supervised_keys, got "
            f"{info.supervised_keys!r}; use source='tfrecord' or 'arrays' for it."
        )
    input_key, label_key = info.supervised_keys
    input_feature, label_feature = info.features[input_key], info.features[label_key]
    if num_classes is None:
        num_classes = getattr(label_feature, "num_classes", None)
        if num_classes is None:
            raise ValueError(
                f"TFDS dataset {name!r} label {label_key!r} has no class count; set data config "
                "num_classes."
            )

    input_shape, decoders, decode_inputs = _input_decoding(
        name, input_key, input_feature, image_size
    )

    def decode(example: dict) -> dict:
        return {
            "inputs": decode_inputs(example["inputs"]),
            "label": tf.cast(example["label"], tf.int64),
            "id": example["id"],
        }

    def split(split_name: str) -> SourceSplit:
        if split_name not in info.splits:
            raise ValueError(
                f"TFDS dataset {name!r} has no split {split_name!r}; its splits are "
                f"{sorted(info.splits.keys())}."
            )
        num_examples = info.splits[split_name].num_examples
        check_not_empty(num_examples, f"TFDS dataset {name!r} split {split_name!r}")
        dataset = builder.as_dataset(
            split=split_name, shuffle_files=False, decoders=decoders, as_supervised=True
        )
        dataset = dataset.enumerate().map(
            lambda index, pair: {"inputs": pair[0], "label": pair[1], "id": index}
        )
        return SourceSplit(dataset=dataset, decode=decode, num_examples=num_examples)

    return Source(
        train=split(train_split),
        eval=split(eval_split),
        num_classes=int(num_classes),
        input_shape=tuple(int(size) for size in input_shape),
    )


def _input_decoding(name: str, input_key: str, input_feature, image_size: int | None):
    """``(input_shape, decoders, decode_inputs)`` for the dataset's input feature: images are
    read encoded (``SkipDecoding``) and decoded by the split's decode stage, resized to
    ``image_size`` when given; other inputs become float32."""
    if isinstance(input_feature, tfds.features.Image):
        input_shape = images.static_shape(input_feature.shape, image_size, f"TFDS {name!r}")
        resize = image_size is not None
        decoders = {input_key: tfds.decode.SkipDecoding()}

        def decode_inputs(value):
            return images.decode(value, shape=input_shape, resize=resize)
    else:
        input_shape = tuple(input_feature.shape)
        if None in input_shape:
            raise ValueError(
                f"TFDS dataset {name!r} input {input_key!r} has varying shape {input_shape}; "
                "only fixed shapes (or images with image_size) can be batched."
            )
        decoders = None

        def decode_inputs(value):
            return tf.cast(value, tf.float32)

    return input_shape, decoders, decode_inputs
