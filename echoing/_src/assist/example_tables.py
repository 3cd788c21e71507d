"""The training examples by id, so the Boss can report ``(ids, losses)`` instead of batches.

Example::

    import numpy as np
    from echoing._src.assist.example_tables import ExampleTables

    tables = ExampleTables(
        {"inputs": np.ones([5, 3], np.float32), "label": np.arange(5) % 2},
        features=None,
        label_key="label",
    )
    ids = tables.checked_ids([4, 0])  # refused unless every id is in [0, 5)
    assert tables.features_of(ids).shape == (2, 3)
    assert list(tables.labels_of(ids).numpy()) == [0, 0]

This is the paper's AssistantQueue: the learner holds a host copy of the training set and
gathers each reported example's features and label itself, off the Boss's thread. The tables
live on the host (``/cpu:0``): they are read by the learner, never by the Boss's device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from echoing._src.assist.assistant import FeatureSelector, select_features
from echoing._src.assist.feedback_checks import integer_labels


class ExampleTables:
    """Labels ``[N]`` (int64) and features of ``examples``, looked up by example id.

    Args:
      examples: a dict of arrays indexed by example id, e.g. ``{"inputs": x, "label": y}``
        (checked by ``LearnerOptions``).
      features: what the Assistant scores. A key is selected once, here; a function is kept
        and applied per lookup, since it may read live state (``echoing.BossFeatures`` follows
        the Boss's weights).
      label_key: the key of the integer labels; ``None``: every example is label 0.
    """

    def __init__(
        self, examples: Mapping[str, Any], features: FeatureSelector, label_key: str | None
    ):
        self._selector = features
        with tf.device("/cpu:0"):
            self.labels = integer_labels(
                _labels_by_id(examples) if label_key is None else examples[label_key]
            )
            if callable(features):
                self._features = None
                self._columns = {key: tf.constant(value) for key, value in examples.items()}
            else:
                self._features = tf.constant(select_features(examples, features))
                self._columns = None

    def check_fits(self, assistant) -> None:
        """Refuses features of another shape than ``assistant`` (built with ``input_shape``)
        scores: the learner's thread would fail at its first step, after fit has run."""
        expected = getattr(assistant, "_feature_shape", None)
        if self._features is None or expected is None:
            return  # a features function, or a scorer of the user's own: judged when it runs
        shape = tuple(self._features.shape[1:])
        if not tf.TensorShape(expected).is_compatible_with(shape):
            raise ValueError(
                f"AssistantLearner(examples=...): the examples' features have shape {shape} "
                f"per example, but the Assistant scores features of shape {tuple(expected)} "
                f"(its input_shape); build the Assistant with input_shape={shape}, or give the "
                "examples the filter's features (features=... selects them)."
            )

    @property
    def size(self) -> int:
        """N, the number of examples (ids are 0..N-1)."""
        return int(self.labels.shape[0])

    def checked_ids(self, ids) -> np.ndarray:
        """``ids`` as int64 values, refused unless integers in ``[0, N)``.

        Checked in the caller's thread (which reads their values anyway): an id out of range
        would otherwise fail, or gather another example, in the learner's thread.
        """
        values = np.asarray(ids)
        if not np.issubdtype(values.dtype, np.integer):
            raise TypeError(
                f"AssistantLearner.feedback_ids needs integer example ids, got dtype "
                f"{values.dtype}; a cast would truncate 1.7 to 1, another example's id. Give the "
                "examples int ids (echoing.with_ids)."
            )
        values = values.astype(np.int64).reshape(-1)
        size = self.size
        if values.size and (values.min() < 0 or values.max() >= size):
            raise ValueError(
                f"AssistantLearner.feedback_ids got ids in [{values.min()}, {values.max()}], "
                f"outside [0, {size}) (the {size} examples given as examples=...); report the "
                "ids of those examples, numbered 0..N-1 in their order (as echoing.with_ids "
                "numbers a source), or construct the learner with all the training examples."
            )
        return values

    def features_of(self, ids) -> tf.Tensor:
        """The features of the examples with these ids, as the filter would select them."""
        with tf.device("/cpu:0"):
            if self._features is not None:
                return tf.gather(self._features, ids)
            rows = {key: tf.gather(column, ids) for key, column in self._columns.items()}
            return select_features(rows, self._selector)

    def labels_of(self, ids) -> tf.Tensor:
        """The int64 labels of the examples with these ids."""
        with tf.device("/cpu:0"):
            return tf.gather(self.labels, ids)


def _labels_by_id(examples: Mapping[str, Any]) -> np.ndarray:
    """Label 0 for each of the ``examples`` (rows of their first array): no classes."""
    rows = len(next(iter(examples.values()))) if examples else 0
    return np.zeros([rows], np.int32)
