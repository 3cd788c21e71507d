"""The decoded train split in memory, indexed by example id, for techniques that look ids up.

Example::

    import pipelines

    config = pipelines.default_data_config()
    config.num_train, config.num_eval = 1_000, 200
    examples = pipelines.examples_by_id(config)
    print(examples.arrays["inputs"].shape, examples.num_classes)  # (1000, 40, 1) 10

The Assistant learner gathers features by id, and priority sampling selects rows by id, so the
source must number its examples 0..N-1 (every source here does).
"""

from __future__ import annotations

import ml_collections
import numpy as np

from echoing.techniques import ExamplesById
from pipelines import sources
from pipelines.config import resolve_data_config


def num_train_examples(data_config: ml_collections.ConfigDict) -> int:
    """The number of examples in the train split (its ids are 0 .. N - 1)."""
    return sources.load(resolve_data_config(data_config)).train.num_examples


def examples_by_id(data_config: ml_collections.ConfigDict) -> ExamplesById:
    """The decoded (not augmented) train split in memory: row i is example id i.

    Token sequences (text) are padded with 0 to the longest: ``inputs`` is ``[N, longest]``.

    Raises:
      ValueError: the source's ids are not 0..N-1.
    """
    source = sources.load(resolve_data_config(data_config))
    count = source.train.num_examples
    decoded = source.train.dataset.map(source.train.decode)
    # Sequences of different lengths (text) are padded with 0, the padding token, to the longest.
    decoded = decoded.padded_batch(count) if None in source.input_shape else decoded.batch(count)
    batch = next(iter(decoded))
    order = np.argsort(batch["id"].numpy())
    ids = batch["id"].numpy()[order]
    if not np.array_equal(ids, np.arange(count)):
        raise ValueError(
            f"the train split's ids are not 0..{count - 1}; the Assistant learner and priority "
            "sampling look examples up by id, so the source must number its examples from 0."
        )
    arrays = {
        "inputs": batch["inputs"].numpy()[order],
        "label": batch["label"].numpy()[order],
    }
    return ExamplesById(arrays, source.num_classes, tuple(source.input_shape))
