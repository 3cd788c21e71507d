"""What every source hands to a pipeline: raw examples per split plus how to decode them.

Example::

    import numpy as np
    from pipelines.sources import arrays

    source = arrays.load(
        train={"inputs": np.zeros([8, 4]), "label": np.arange(8) % 2},
        eval={"inputs": np.zeros([2, 4]), "label": np.arange(2)},
    )
    first = next(iter(source.train.dataset.map(source.train.decode)))
    # {"inputs": float32 [4], "label": int64 0, "id": int64 0}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import tensorflow as tf

from pipelines.sources.record_reader import ReadStats

# ``shard_function(num_shards, index) -> SourceSplit``: a source's own way to shard (e.g. by file).
ShardFunction = Callable[[int, int], "SourceSplit"]


@dataclasses.dataclass(frozen=True)
class SourceSplit:
    """One split of a source.

    Attributes:
      dataset: unbatched, unshuffled, finite raw elements; a dict holding at least an int64 "id"
        (the example's index in the split, stable across epochs).
      decode: per-element function raw -> {"inputs": float32 input_shape, "label": int64,
        "id": int64}; runs in the graph (the pipeline's "decode" stage).
      num_examples: examples in one pass over ``dataset``.
      shard_function: optional ``(num_shards, index) -> SourceSplit`` that shards cheaper than
        record by record, e.g. TFRecord files by file so a worker reads only its files; None
        shards records with ``Dataset.shard``.
      read_stats: what reading skipped or retried (``skip_corrupt``, gs:// faults), or None.
      crop_decode: optional ``(raw, seed) -> decoded`` that decodes a random-resized crop, given
        a per-element stateless seed [2]; sources of encoded images offer it so that
        ``augment="inception"`` crops while decoding (only the crop's JPEG blocks are decoded).
      batch: optional ``(dataset, batch_size, drop_remainder) -> dataset`` for examples that
        ``Dataset.batch`` cannot stack (variable-length text: padded, bucketed by length).
      rows: optional ``() -> {key: tensor [num_examples, ...]}``, the raw elements of
        ``dataset`` as in-memory columns in the same order (an "id" column included), for
        splits that can be read by id (arrays, file lists, MNIST-1D); None for streams. Loss
        pruning then decides on ids and reads only the kept rows (``pipelines.datasets``).
    """

    dataset: tf.data.Dataset
    decode: Callable[[dict], dict]
    num_examples: int
    shard_function: ShardFunction | None = None
    read_stats: ReadStats | None = None
    crop_decode: Callable[[dict, tf.Tensor], dict] | None = None
    batch: Callable[[tf.data.Dataset, int, bool], tf.data.Dataset] | None = None
    rows: Callable[[], dict[str, tf.Tensor]] | None = None

    def shard(self, num_shards: int, index: int) -> SourceSplit:
        """The part of this split that input pipeline ``index`` of ``num_shards`` reads.

        The shards are disjoint and together hold every example exactly once. Sharding happens
        at the source, before decoding, so each pipeline reads (and, for remote files, fetches)
        only its own part.

        Raises:
          ValueError: ``index`` is not in ``[0, num_shards)``, or the split has fewer examples
            than ``num_shards`` (a pipeline would get no example and hang when repeated).
        """
        if not 0 <= index < num_shards:
            raise ValueError(
                f"shard index must be in [0, num_shards={num_shards}), got {index}; it is the "
                "InputContext's input_pipeline_id."
            )
        if self.num_examples < num_shards:
            raise ValueError(
                f"a split of {self.num_examples} examples cannot be sharded over {num_shards} "
                "input pipelines: some would get no example. Use more data or fewer workers."
            )
        if num_shards == 1:
            return self
        if self.shard_function is not None:
            return self.shard_function(num_shards, index)
        rows = self.rows
        if rows is not None:  # the rows Dataset.shard keeps: every num_shards-th from index

            def rows():
                return {key: column[index::num_shards] for key, column in self.rows().items()}

        return dataclasses.replace(
            self,
            dataset=self.dataset.shard(num_shards, index),
            num_examples=len(range(index, self.num_examples, num_shards)),
            rows=rows,
        )


@dataclasses.dataclass(frozen=True)
class Source:
    """A train and an eval split with shared metadata.

    Attributes:
      train: the training split.
      eval: the evaluation split.
      num_classes: labels are in ``[0, num_classes)``.
      input_shape: decoded ``"inputs"`` shape per example, e.g. (40, 1) or (32, 32, 3).
    """

    train: SourceSplit
    eval: SourceSplit
    num_classes: int
    input_shape: tuple[int, ...]


def check_not_empty(num_examples: int, what: str) -> None:
    """Raises a clear error for an empty split, which would otherwise hang a repeated pipeline."""
    if num_examples <= 0:
        raise ValueError(
            f"{what} is empty (0 examples); a training pipeline repeats it forever and would "
            "hang. Check the path, split name or sizes in the data config."
        )
