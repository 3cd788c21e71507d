"""The Assistant's training step: label each example ``z = [loss > T]``, one optimizer step.

Example::

    import numpy as np
    import tensorflow as tf
    import echoing
    from echoing._src.assist.threshold import LossThreshold
    from echoing._src.assist.training import AssistantTrainer

    assistant = echoing.Assistant(2, input_shape=(1,))
    trainer = AssistantTrainer(assistant, None, LossThreshold(0.5, decay=0.75))
    features, labels = tf.zeros([3, 1]), tf.zeros([3], tf.int64)
    trainer.ensure_built(features, labels)
    result = trainer.train([(features, labels, np.array([0.1, 1.0, np.nan], np.float32))])
    assert (result.examples, result.hard, result.nonfinite) == (2, 1, 1)

A training call takes a list of feedback items ``(features [B, ...], labels [B], losses [B])``
(``features=None``: ``labels`` holds example ids, looked up in the :class:`ExampleTables`) and
merges them into ONE step on the Assistant's binary cross-entropy; each item is labelled with
the T of its own time, so merging a backlog does not change which examples count as hard.
Non-finite losses are never trained on (weight 0) nor enter T; they are counted.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from echoing._src.assist.example_tables import ExampleTables
from echoing._src.assist.feedback_checks import check_labels
from echoing._src.assist.threshold import LossThreshold


@dataclasses.dataclass(frozen=True)
class TrainedBatches:
    """What one training call did: the learner's statistics add these up."""

    batches: int = 0  # items with at least one finite loss
    examples: int = 0  # finite losses trained on
    nonfinite: int = 0  # NaN or infinite losses skipped
    correct: int = 0  # examples where g > 0.5 agreed with z, before the update
    hard: int = 0  # examples labelled z = 1


class AssistantTrainer:
    """Trains ``assistant`` with ``optimizer`` on labelled feedback items (see the module doc).

    Args:
      assistant: the scorer, ``(features, labels) -> [B]`` in [0, 1].
      optimizer: its Keras optimizer (``None``: Adam, learning rate 0.01).
      threshold: the labelling threshold T, updated by each item's finite losses.
      tables: the examples by id, for items that carry ids instead of features.
    """

    def __init__(
        self,
        assistant: keras.Model,
        optimizer: keras.optimizers.Optimizer | None,
        threshold: LossThreshold,
        tables: ExampleTables | None = None,
    ):
        self.assistant = assistant
        self.optimizer = optimizer or keras.optimizers.Adam(learning_rate=0.01)
        self.threshold = threshold
        self.tables = tables
        self._step = None  # a tf.function, traced once for the first batch's shapes

    def ensure_built(self, features, labels) -> None:
        """Builds the Assistant and the optimizer, eagerly and on the host, from a sample.

        Called in the caller's thread before feedback is queued, so the learner thread's
        tf.function never creates variables. ``features=None``: ``labels`` holds ids.
        """
        if not self.assistant.built:
            if features is None:
                features, labels = (
                    self.tables.features_of(tf.zeros([1], tf.int64)),
                    self.tables.labels,
                )
            shape = [1] + [1 if d is None else d for d in features.shape[1:]]
            with tf.device("/cpu:0"):
                self.assistant(
                    (
                        tf.zeros(shape, tf.as_dtype(features.dtype)),
                        tf.zeros([1], tf.as_dtype(labels.dtype)),
                    )
                )
        if not self.optimizer.built:
            with tf.device("/cpu:0"):
                self.optimizer.build(self.assistant.trainable_variables)

    def train(self, items) -> TrainedBatches:
        """One optimizer step on the concatenation of ``items``, labelled with their own T."""
        features_list, labels_list, losses_list, thresholds_list = [], [], [], []
        batches = examples = nonfinite = 0
        for features, labels, losses in items:
            if features is None:  # ids, for the tables
                features, labels = self.tables.features_of(labels), self.tables.labels_of(labels)
            check_labels(self.assistant, labels)  # reads the values: here, off the Boss's thread
            losses = np.asarray(losses, np.float32).reshape(-1)
            finite = np.isfinite(losses)
            count = int(finite.sum())
            nonfinite += losses.size - count
            if not count:
                continue
            self.threshold.observe(float(losses[finite].sum()), count)
            # Non-finite losses get threshold +inf and weight 0: never trained on.
            thresholds_list.append(
                np.where(finite, self.threshold.value(), np.inf).astype(np.float32)
            )
            losses_list.append(np.where(finite, losses, 0.0).astype(np.float32))
            features_list.append(features)
            labels_list.append(labels)
            batches += 1
            examples += count
        if not batches:
            return TrainedBatches(nonfinite=nonfinite)
        thresholds = np.concatenate(thresholds_list)
        correct, hard = self._optimizer_step(
            _concatenate(features_list),
            _concatenate(labels_list),
            np.concatenate(losses_list),
            thresholds,
        )
        return TrainedBatches(batches, examples, nonfinite, int(correct), int(hard))

    def _optimizer_step(self, features, labels, losses, thresholds):
        if self._step is None:
            # Any batch size (merged backlogs vary) with one trace.
            self._step = tf.function(
                self._step_eager,
                input_signature=[
                    tf.TensorSpec([None, *features.shape[1:]], features.dtype),
                    tf.TensorSpec([None], labels.dtype),
                    tf.TensorSpec([None], tf.float32),
                    tf.TensorSpec([None], tf.float32),
                    tf.TensorSpec([None], tf.bool),
                ],
            )
        return self._step(features, labels, losses, thresholds, np.isfinite(thresholds))

    def _step_eager(self, features, labels, losses, thresholds, finite):
        weights = tf.cast(finite, tf.float32)
        targets = tf.cast(losses > thresholds, tf.float32) * weights
        with tf.GradientTape() as tape:
            scores = self.assistant((features, labels), training=True)
            scores = tf.reshape(tf.cast(scores, tf.float32), [-1])
            scores = tf.clip_by_value(scores, 1e-7, 1.0 - 1e-7)
            cross_entropy = -(
                targets * tf.math.log(scores) + (1 - targets) * tf.math.log1p(-scores)
            )
            loss = tf.reduce_sum(cross_entropy * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
        variables = self.assistant.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        agree = tf.cast((scores > 0.5) == (targets > 0.5), tf.float32) * weights
        return tf.reduce_sum(agree), tf.reduce_sum(targets)


def _concatenate(parts) -> tf.Tensor:
    if len(parts) == 1:
        return tf.convert_to_tensor(parts[0])
    return tf.concat([tf.convert_to_tensor(part) for part in parts], axis=0)
