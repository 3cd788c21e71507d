"""The embedded default dataset: MNIST-1D, generated locally and stored as a TFDS dataset.

Example::

    from pipelines.sources import mnist1d

    source = mnist1d.load(num_train=1_000, num_eval=200, data_dir="/tmp/echoing")
    # The first call generates with the `mnist1d` package (no download) and writes
    # /tmp/echoing/mnist1d/<sizes>/1.0.0; later calls read the stored copy.

MNIST-1D (Greydanus, 2020) is 10 classes of 40-sample 1-D signals: digit-like templates padded,
dilated, scaled, translated, noised and sheared. ``mnist1d.data.make_dataset`` generates all
examples in one pass and standardises them together; we take the first ``num_train`` as train
and the next ``num_eval`` as test. Generation is Python (~1.5 ms per example), once per size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import sys
from collections.abc import Callable
from typing import ClassVar

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from pipelines.sources import files
from pipelines.sources.source import Source, SourceSplit

SEQUENCE_LENGTH = 40
NUM_CLASSES = 10
# mnist1d's own default seed: the published dataset is generated from it.
GENERATION_SEED = 42


@dataclasses.dataclass
class Mnist1dConfig(tfds.core.BuilderConfig):
    """Sizes of one stored MNIST-1D; each size is a separate TFDS config (its own directory)."""

    num_train: int = 40_000
    num_eval: int = 10_000
    generation_seed: int = GENERATION_SEED


class Mnist1d(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """TFDS builder for MNIST-1D; ``generate`` is the only place that calls ``mnist1d``."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES: ClassVar[dict[str, str]] = {
        "1.0.0": "MNIST-1D generated with the mnist1d package."
    }

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            description="MNIST-1D (Greydanus, 2020), generated locally with `mnist1d`.",
            features=tfds.features.FeaturesDict(
                {
                    "inputs": tfds.features.Tensor(shape=(SEQUENCE_LENGTH,), dtype=np.float32),
                    "label": tfds.features.ClassLabel(num_classes=NUM_CLASSES),
                    "id": tfds.features.Scalar(dtype=np.int64),
                }
            ),
            supervised_keys=("inputs", "label"),
            homepage="https://github.com/greydanus/mnist1d",
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing to download
        config = self.builder_config
        inputs, labels = generate(config.num_train + config.num_eval, config.generation_seed)
        train = slice(0, config.num_train)
        test = slice(config.num_train, config.num_train + config.num_eval)
        return {
            "train": self._generate_examples(inputs[train], labels[train]),
            "test": self._generate_examples(inputs[test], labels[test]),
        }

    def _generate_examples(self, inputs: np.ndarray, labels: np.ndarray):
        for index, (x, y) in enumerate(zip(inputs, labels, strict=True)):
            yield index, {"inputs": x.astype(np.float32), "label": int(y), "id": index}


def generate(num_examples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Generates at least ``num_examples`` with the mnist1d package (whole classes each)."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    # make_dataset makes num_samples // 10 per class; round up so every example exists.
    args.num_samples = -(-num_examples // NUM_CLASSES) * NUM_CLASSES
    args.train_split = 1.0
    args.seed = seed
    data = make_dataset(args)
    return data["x"][:num_examples], data["y"][:num_examples]


def builder(
    num_train: int, num_eval: int, data_dir: str, *, file_format: str = "tfrecord"
) -> Mnist1d:
    """The builder for these sizes under ``data_dir`` (prepared or not).

    ``file_format="array_record"`` stores a random-access copy (its own config directory,
    suffixed ``_array_record``, because one prepared directory holds one format).
    """
    suffix = "" if file_format == "tfrecord" else f"_{file_format}"
    config = Mnist1dConfig(
        name=f"train{num_train}_eval{num_eval}_seed{GENERATION_SEED}{suffix}",
        num_train=num_train,
        num_eval=num_eval,
    )
    return Mnist1d(config=config, data_dir=data_dir, file_format=file_format)


def data_source(num_train: int, num_eval: int, data_dir: str, *, split: str = "train"):
    """MNIST-1D as a random-access TFDS data source (ArrayRecord), prepared on first use.

    Record ``i`` (``source[i]``) is not example ``"id" == i``: TFDS shuffles examples by key when
    it writes them, so the stored ``"id"`` feature (the generation order) is a fixed
    permutation of the record index. Priority sampling keys its table by record index; pass
    ``keys=("inputs", "label")`` to leave the stored ``"id"`` out of the batches.

    Args:
      num_train: train examples (as in ``load``).
      num_eval: test examples.
      data_dir: TFDS data directory; the copy lives in its own ``..._array_record`` config.
      split: ``"train"`` or ``"test"``.

    Returns:
      A ``tfds`` ``ArrayRecordDataSource`` with ``len() == num_train`` (or ``num_eval``).
    """
    mnist1d_builder = _prepared(
        lambda: builder(num_train, num_eval, data_dir, file_format="array_record")
    )
    return mnist1d_builder.as_data_source(split=split)


def load(num_train: int, num_eval: int, data_dir: str) -> Source:
    """Returns MNIST-1D, generating and storing it under ``data_dir`` on first use.

    Args:
      num_train: training examples (40_000 by default in the data config).
      num_eval: test examples.
      data_dir: TFDS data directory, e.g. ~/.cache/echoing.
    """
    mnist1d_builder = _prepared(lambda: builder(num_train, num_eval, data_dir))
    return Source(
        train=_split(mnist1d_builder, "train", num_train),
        eval=_split(mnist1d_builder, "test", num_eval),
        num_classes=NUM_CLASSES,
        input_shape=(SEQUENCE_LENGTH, 1),
    )


def _prepared(make_builder: Callable[[], Mnist1d]) -> Mnist1d:
    """A builder whose data is stored: generated on first use, saying so in one line."""
    mnist1d_builder = make_builder()
    if mnist1d_builder.is_prepared():
        return mnist1d_builder
    config = mnist1d_builder.builder_config
    print(
        f"Generating MNIST-1D ({config.num_train} train / {config.num_eval} eval examples) "
        f"in {mnist1d_builder.data_dir}; later runs read it from there.",
        file=sys.stderr,
    )
    # TFDS prints "Downloading and preparing dataset Unknown size ..." to stdout; nothing is
    # downloaded here, so that line would only mislead.
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            mnist1d_builder.download_and_prepare()
    except FileExistsError:
        # Another run on the same fresh data_dir stored it first. TFDS moves a complete
        # directory into place, so that copy is whole: read it with a builder that sees it.
        return make_builder()
    except (OSError, tf.errors.OpError) as error:  # a full disk, a read-only directory
        raise files.cannot_store("MNIST-1D", str(mnist1d_builder.data_dir), error) from error
    return mnist1d_builder


def _split(mnist1d_builder: Mnist1d, split: str, num_examples: int) -> SourceSplit:
    # Files in order, so that the stored "id" order is the read order (shuffling comes later).
    dataset = mnist1d_builder.as_dataset(split=split, shuffle_files=False)

    @functools.cache
    def rows() -> dict[str, tf.Tensor]:
        # ~6 MB for 40k examples: held in memory, on the host, when a pipeline reads by id.
        with tf.device("/cpu:0"):
            return next(iter(dataset.batch(num_examples)))

    return SourceSplit(dataset=dataset, decode=_decode, num_examples=num_examples, rows=rows)


def _decode(example: dict) -> dict:
    # Signals become [length, channels] so 1-D convolutions apply directly.
    return {
        "inputs": tf.reshape(tf.cast(example["inputs"], tf.float32), (SEQUENCE_LENGTH, 1)),
        "label": tf.cast(example["label"], tf.int64),
        "id": tf.cast(example["id"], tf.int64),
    }


def export_tfrecords(
    directory: str, *, num_train: int, num_eval: int, data_dir: str, num_shards: int = 4
) -> dict[str, str]:
    """Writes the stored MNIST-1D as TFRecord shards (e.g. for network/gs:// benchmarks).

    Ids are kept: example ``id`` in the shards is the same example as ``id`` in the TFDS copy.

    Args:
      directory: local directory or gs:// prefix for ``train-*`` and ``eval-*`` shards.
      num_train: MNIST-1D sizes, as in the data config (generated first if not stored).
      num_eval: see ``num_train``.
      data_dir: where the TFDS copy is stored.
      num_shards: shards per split.

    Returns:
      ``{"train_files": glob, "eval_files": glob}`` to set on a data config with
      ``source="tfrecord"`` and ``num_classes=10``.
    """
    from pipelines.sources import tfrecord

    source = load(num_train, num_eval, data_dir)
    globs = {}
    for key, split in (("train_files", source.train), ("eval_files", source.eval)):
        examples = list(split.dataset.map(split.decode).as_numpy_iterator())
        order = np.argsort([example["id"] for example in examples])
        inputs = np.stack([examples[index]["inputs"] for index in order])
        labels = np.array([examples[index]["label"] for index in order])
        prefix = f"{directory.rstrip('/')}/{key.split('_')[0]}"
        globs[key] = tfrecord.write_shards(prefix, inputs, labels, num_shards=num_shards)
    return globs
