"""Trains the Assistant from Boss feedback in a background thread; the Boss never waits.

Example::

    import tensorflow as tf
    import echoing

    assistant = echoing.Assistant(num_classes=10, input_shape=(40,))
    with echoing.AssistantLearner(assistant, queue_size=16) as learner:
        batch = {"inputs": tf.random.normal([32, 40]), "label": tf.zeros([32], tf.int64)}
        per_example_losses = tf.random.uniform([32])
        learner.feedback(batch, per_example_losses, step=0)  # after each Boss train step
        learner.wait_until_idle()
        print(learner.stats())

The Boss (the training loop) calls :meth:`AssistantLearner.feedback` after each step with the
batch it trained on and the per-example losses. That call only appends to a bounded queue; if
the queue is full the OLDEST feedback is dropped and counted, so memory stays bounded and the
Boss never blocks. A daemon thread pops batches, labels each example ``z = [loss > T]`` and takes
one optimizer step on the Assistant's binary cross-entropy. ``echoing.assistant_filter`` reads
the updated variables live.

The threshold ``T`` is, by default, a running mean of recent Boss losses, exactly what the
paper's code does (``autoassist-exp/image_classification``: ``loss > loss_mean``, the mean an
exponential average over batches with decay 0.75). The paper text leaves T open. A running mean
adapts as the Boss improves, so roughly the harder part of the current loss distribution is
labelled hard all through training; a fixed T (``threshold=0.1``) labels almost everything easy
once the Boss is good. Non-finite losses are never trained on (nor enter T); they are counted.

Errors raised in the thread are re-raised in the Boss's thread on the next ``feedback``/``push``
or ``close``.
"""

from __future__ import annotations

import collections
import contextlib
import math
import numbers
import threading
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from echoing._src.assist.assistant import (
    FeatureSelector,
    check_feature_selector,
    labels_of,
    select_features,
)
from echoing._src.core.types import is_positive_int

# Assistant accuracy is reported over this many most recently trained batches.
_ACCURACY_WINDOW = 50


class AssistantLearner:
    """Bounded-queue background trainer of an Assistant from (features, labels, losses).

    Args:
      assistant: the scorer to train (an :class:`echoing.Assistant` or any Keras model with
        the same ``(features, labels) -> [B]`` signature). Built on the first feedback if needed.
      threshold: ``"mean"`` (running mean of recent Boss losses, the paper's code) or a fixed
        finite float T; examples with loss > T are labelled hard (z = 1).
      threshold_decay: decay per batch of the running mean's exponential averages (paper: 0.75).
      optimizer: Keras optimizer for the Assistant (default Adam, learning rate 0.01).
      queue_size: most feedback batches held; when full the oldest is dropped and counted.
      features: what the Assistant scores in a batch dict (same meaning as in the filter).
      label_key: the batch key holding integer labels; ``None`` when examples have no class
        (e.g. text for a language model): every example is label 0, as in the filter.
      asynchronous: ``False`` trains inside ``feedback`` on the caller's thread (the paper's
        "sequential" AutoAssist; for measuring overhead and for debugging).
      train_every: train on every k-th batch fed back, skip the others (counted): the
        learner's cost falls k-fold. Where the Boss and the learner share the CPU cores (no
        accelerator) its work is the Boss's overhead; with an accelerator, 1 (every batch).
      max_batches_per_step: when the thread falls behind, it merges up to this many queued
        batches into one optimizer step (each keeps the threshold T of its own time).
      examples: an in-memory copy of the training set indexed by example id (a dict of arrays
        such as ``{"inputs": [N, ...], "label": [N]}``), so the Boss can report only
        ``(ids, losses)`` (the paper's AssistantQueue) via :meth:`feedback_ids`; the learner
        thread gathers the features. A ``features`` function is applied there, per batch, when
        the Assistant trains (so one that reads live state, such as ``echoing.BossFeatures``,
        sees its current value); a key is selected once, here.
    """

    def __init__(
        self,
        assistant: keras.Model,
        *,
        threshold: str | float = "mean",
        threshold_decay: float = 0.75,
        optimizer: keras.optimizers.Optimizer | None = None,
        queue_size: int = 32,
        features: FeatureSelector = None,
        label_key: str | None = "label",
        asynchronous: bool = True,
        max_batches_per_step: int = 8,
        examples: Mapping[str, Any] | None = None,
        train_every: int = 1,
    ):
        _check_arguments(
            assistant,
            threshold,
            threshold_decay,
            queue_size,
            max_batches_per_step,
            optimizer,
            features,
            asynchronous,
            train_every,
        )
        self._example_labels, self._example_features, self._example_columns = _example_tables(
            examples, features, label_key
        )
        self.examples = examples
        self.assistant = assistant
        self.threshold = threshold
        self.threshold_decay = float(threshold_decay)
        self.optimizer = optimizer or keras.optimizers.Adam(learning_rate=0.01)
        self.queue_size = queue_size
        self.features = features
        self.label_key = label_key
        self.asynchronous = asynchronous
        self.max_batches_per_step = max_batches_per_step
        self.train_every = train_every

        self._queue: collections.deque = collections.deque()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._busy = False
        self._error: BaseException | None = None
        # Statistics; written by whichever thread trains, read under the condition's lock.
        self._queue_drops = 0
        self._nonfinite = 0
        self._pushed_batches = 0
        self._offered_batches = 0
        self._trained_batches = 0
        self._trained_examples = 0
        self._hard_examples = 0
        self._recent_accuracy: collections.deque = collections.deque(maxlen=_ACCURACY_WINDOW)
        self._loss_sum_average = 0.0
        self._count_average = 0.0
        self._last_step: int | None = None
        self._train_step = None  # a tf.function, traced once for the first batch's shapes

    # ----- The Boss's side: cheap, never blocks on training.

    def feedback(
        self,
        batch: Mapping[str, Any],
        per_example_losses: tf.Tensor,
        step: int | None = None,
    ) -> None:
        """Hands the Assistant one trained batch and its per-example Boss losses.

        Args:
          batch: the batch dict the Boss trained on (``"inputs"``, ``"label"``, ...).
          per_example_losses: ``[B]`` Boss losses of that batch (unreduced).
          step: the Boss's step, kept for reporting.
        """
        features = select_features(batch, self.features)
        self.push(
            features,
            labels_of(batch, self.label_key, features),
            per_example_losses,
            step=step,
        )

    __call__ = feedback

    def feedback_ids(
        self, ids: tf.Tensor, per_example_losses: tf.Tensor, step: int | None = None
    ) -> None:
        """Like :meth:`feedback` but with example ids; needs ``examples`` at construction.

        This is the ``(ids, per_example_losses, step)`` feedback signature of
        ``trainers.loop``; ids and losses of any matching shape (e.g. ``[steps, B]``) work.
        """
        self.push(None, tf.reshape(ids, [-1]), tf.reshape(per_example_losses, [-1]), step=step)

    def push(
        self, features: tf.Tensor, labels: tf.Tensor, losses: tf.Tensor, step: int | None = None
    ) -> None:
        """Queues ``(features [B, ...], labels [B], losses [B])`` for training (see feedback).

        ``features=None`` means ``labels`` holds example ids to look up in ``examples``; they
        are checked to be in range here, in the caller's thread (which reads their values).
        Integer labels of any width are taken (as int64); other labels are refused, since the
        Assistant would truncate 1.7 to class 1.
        """
        self._raise_if_failed()
        labels = self._checked_ids(labels) if features is None else _integer_labels(labels)
        self._check_shapes(features, labels, losses)
        with self._condition:
            self._offered_batches += 1
            if (self._offered_batches - 1) % self.train_every:
                return  # skipped: see train_every
        if not self.assistant.built:
            sample_features, sample_labels = features, labels
            if features is None:  # from feedback_ids: labels holds ids
                sample_features = self._features_of(tf.zeros([1], tf.int64))
                sample_labels = self._example_labels
            shape = [1] + [1 if d is None else d for d in sample_features.shape[1:]]
            with tf.device("/cpu:0"):
                self.assistant(
                    (
                        tf.zeros(shape, tf.as_dtype(sample_features.dtype)),
                        tf.zeros([1], tf.as_dtype(sample_labels.dtype)),
                    )
                )
        if not self.optimizer.built:
            # Eagerly, so the thread's tf.function never creates variables.
            with tf.device("/cpu:0"):
                self.optimizer.build(self.assistant.trainable_variables)
        item = (features, labels, losses)
        if not self.asynchronous:
            self._train([item])
            with self._condition:
                self._pushed_batches += 1
                self._last_step = step
            return
        with self._condition:
            if self._closing:
                raise RuntimeError("AssistantLearner.push after close(); create a new learner.")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="assistant_learner", daemon=True
                )
                self._thread.start()
            if len(self._queue) >= self.queue_size:
                self._queue.popleft()
                self._queue_drops += 1
            self._queue.append(item)
            self._pushed_batches += 1
            self._last_step = step
            self._condition.notify()

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """Blocks until every queued batch is trained (for tests and benchmarks, not the Boss).

        Returns:
          True if idle, False if ``timeout`` seconds passed first.
        """
        with self._condition:
            idle = self._condition.wait_for(
                lambda: self._error is not None or (not self._queue and not self._busy), timeout
            )
        self._raise_if_failed()
        return idle

    def close(self) -> None:
        """Stops the thread (pending feedback is discarded) and re-raises its error, if any."""
        with self._condition:
            self._closing = True
            self._queue.clear()
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._raise_if_failed()

    def __enter__(self) -> AssistantLearner:
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        if exc_type is None:
            self.close()
        else:
            # Do not mask the caller's exception with the thread's.
            with contextlib.suppress(Exception):
                self.close()

    def stats(self) -> dict[str, float]:
        """Learner statistics so far.

        Returns:
          ``assistant_accuracy`` (agreement of ``g > 0.5`` with ``z`` on the last 50 trained
          batches, measured before each update), ``hard_fraction`` (share of z = 1),
          ``threshold`` (current T), ``queue_drops``, ``nonfinite_losses``,
          ``pushed_batches``, ``skipped_batches`` (see ``train_every``), ``trained_batches``,
          ``trained_examples``.
        """
        with self._condition:
            correct = sum(c for c, _ in self._recent_accuracy)
            total = sum(n for _, n in self._recent_accuracy)
            return {
                "assistant_accuracy": correct / total if total else 0.0,
                "hard_fraction": (
                    self._hard_examples / self._trained_examples if self._trained_examples else 0.0
                ),
                "threshold": self._current_threshold(),
                "queue_drops": self._queue_drops,
                "nonfinite_losses": self._nonfinite,
                "pushed_batches": self._pushed_batches,
                "skipped_batches": self._offered_batches - self._pushed_batches,
                "trained_batches": self._trained_batches,
                "trained_examples": self._trained_examples,
            }

    def _check_shapes(self, features, labels, losses) -> None:
        """Static checks, in the caller's thread: what would fail deep in the learner's graph."""
        rows = tf.TensorShape(np.shape(labels))[:1]
        if not rows.is_compatible_with(tf.TensorShape(np.shape(losses))[:1]):
            raise ValueError(
                f"AssistantLearner got {rows[0]} labels (or ids) but {np.shape(losses)} losses; "
                "pass one unreduced Boss loss per example of the batch (reduction=None)."
            )
        expected = getattr(self.assistant, "_feature_shape", None)
        if features is None or expected is None:
            return
        shape = tuple(np.shape(features))
        if shape[1:] != tuple(expected) or shape[:1] != tuple(rows):
            raise ValueError(
                f"AssistantLearner got features of shape {shape}, but the Assistant scores "
                f"features of shape {tuple(expected)} per example ({rows[0]} examples here); "
                "give it the batch the Boss trained on, selected as the filter selects them "
                "(features=...)."
            )

    def _checked_ids(self, ids) -> np.ndarray:
        """``ids`` (example ids, for ``examples``) as int64 values, refused unless in range."""
        if self.examples is None:
            raise ValueError(
                "AssistantLearner.feedback_ids needs the training examples by id: construct the "
                "learner with examples={'inputs': x_train, 'label': y_train}, or call feedback("
                "batch, losses) with the batch itself."
            )
        values = np.asarray(ids)
        if not np.issubdtype(values.dtype, np.integer):
            raise TypeError(
                f"AssistantLearner.feedback_ids needs integer example ids, got dtype "
                f"{values.dtype}; a cast would truncate 1.7 to 1, another example's id. Give the "
                "examples int ids (echoing.with_ids)."
            )
        values = values.astype(np.int64).reshape(-1)
        size = int(self._example_labels.shape[0])
        if values.size and (values.min() < 0 or values.max() >= size):
            raise ValueError(
                f"AssistantLearner.feedback_ids got ids in [{values.min()}, {values.max()}], "
                f"outside [0, {size}) (the {size} examples given as examples=...); report the "
                "ids of those examples, numbered 0..N-1 in their order (as echoing.with_ids "
                "numbers a source), or construct the learner with all the training examples."
            )
        return values

    def _check_labels(self, labels) -> None:
        num_classes = getattr(self.assistant, "num_classes", None)
        values = np.asarray(labels)
        if (
            num_classes is not None
            and values.size
            and not (values.min() >= 0 and values.max() < num_classes)
        ):
            raise ValueError(
                f"AssistantLearner got labels in [{values.min()}, {values.max()}], outside "
                f"[0, {num_classes}) for an Assistant of num_classes={num_classes}; pass the "
                "Boss's integer class labels (or build the Assistant with the right num_classes)."
            )

    # ----- The learner's side.

    def _run(self) -> None:
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._queue or self._closing)
                if self._closing:
                    return
                # Coalesce a backlog into one step: fewer, larger Assistant steps cost the Boss
                # less CPU than one step per Boss batch when the learner falls behind.
                items = [
                    self._queue.popleft()
                    for _ in range(min(len(self._queue), self.max_batches_per_step))
                ]
                self._busy = True
            try:
                self._train(items)
            except BaseException as error:  # re-raised in the Boss's thread
                with self._condition:
                    self._error = error
                    self._busy = False
                    self._condition.notify_all()
                return
            with self._condition:
                self._busy = False
                self._condition.notify_all()

    def _current_threshold(self) -> float:
        if self.threshold != "mean":
            return float(self.threshold)
        return self._loss_sum_average / self._count_average if self._count_average else 0.0

    def _train(self, items) -> None:
        """One optimizer step on the concatenation of ``items``, labelled with their own T."""
        features_list, labels_list, losses_list, thresholds_list = [], [], [], []
        trained_batches = trained_examples = nonfinite = 0
        for features, labels, losses in items:
            if features is None:  # from feedback_ids: labels holds example ids
                features = self._features_of(labels)
                with tf.device("/cpu:0"):
                    labels = tf.gather(self._example_labels, labels)
            self._check_labels(labels)  # needs the values: here, off the Boss's thread
            losses = np.asarray(losses, np.float32).reshape(-1)
            finite = np.isfinite(losses)
            count = int(finite.sum())
            nonfinite += losses.size - count
            if not count:
                continue
            if self.threshold == "mean":
                # The paper's code: T = EMA(sum of losses) / EMA(batch size), decay 0.75.
                decay = self.threshold_decay
                with self._condition:
                    self._loss_sum_average = decay * self._loss_sum_average + (1 - decay) * float(
                        losses[finite].sum()
                    )
                    self._count_average = decay * self._count_average + (1 - decay) * count
            threshold = self._current_threshold()
            # Non-finite losses get threshold +inf and weight 0: never trained on.
            thresholds_list.append(np.where(finite, threshold, np.inf).astype(np.float32))
            losses_list.append(np.where(finite, losses, 0.0).astype(np.float32))
            features_list.append(features)
            labels_list.append(labels)
            trained_batches += 1
            trained_examples += count
        correct = hard = 0
        if trained_batches:
            thresholds = np.concatenate(thresholds_list)
            features, labels = _concatenate(features_list), _concatenate(labels_list)
            if self._train_step is None:
                # Any batch size (merged backlogs vary) with one trace.
                self._train_step = tf.function(
                    self._train_step_eager,
                    input_signature=[
                        tf.TensorSpec([None, *features.shape[1:]], features.dtype),
                        tf.TensorSpec([None], labels.dtype),
                        tf.TensorSpec([None], tf.float32),
                        tf.TensorSpec([None], tf.float32),
                        tf.TensorSpec([None], tf.bool),
                    ],
                )
            correct, hard = self._train_step(
                features, labels, np.concatenate(losses_list), thresholds, np.isfinite(thresholds)
            )
            correct, hard = int(correct), int(hard)
        with self._condition:
            self._nonfinite += nonfinite
            self._trained_batches += trained_batches
            self._trained_examples += trained_examples
            self._hard_examples += hard
            if trained_examples:
                self._recent_accuracy.append((correct, trained_examples))

    def _features_of(self, ids) -> tf.Tensor:
        """The features of the ``examples`` with these ids, as the filter would select them."""
        with tf.device("/cpu:0"):
            if self._example_features is not None:
                return tf.gather(self._example_features, ids)
            rows = {key: tf.gather(column, ids) for key, column in self._example_columns.items()}
            return select_features(rows, self.features)

    def _train_step_eager(self, features, labels, losses, thresholds, finite):
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

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(
                f"AssistantLearner's training thread failed: {self._error}; the Assistant "
                "stopped learning. Fix the cause (often features/labels that do not match the "
                "Assistant) and create a new learner."
            ) from self._error


def _labels_by_id(examples: Mapping[str, Any]) -> np.ndarray:
    """Label 0 for each of the ``examples`` (rows of their first array): no classes."""
    rows = len(next(iter(examples.values()))) if examples else 0
    return np.zeros([rows], np.int32)


def _example_tables(examples, features, label_key):
    """The learner's per-id tables from ``examples``: (labels, features, columns), on the host.

    ``features`` is selected once here, unless it is a function: then the raw columns are kept
    and the function runs per batch in the learner's thread, since it may read live state
    (``echoing.BossFeatures`` follows the Boss's weights).
    """
    if examples is None:
        return None, None, None
    if not isinstance(examples, Mapping) or label_key not in (*examples, None):
        raise TypeError(
            f"AssistantLearner(examples={type(examples).__name__}): expected a dict of "
            f"arrays indexed by example id with a {label_key!r} key, e.g. "
            "{'inputs': x_train, 'label': y_train}."
        )
    with tf.device("/cpu:0"):
        labels = _integer_labels(
            _labels_by_id(examples) if label_key is None else examples[label_key]
        )
        if callable(features):
            return labels, None, {k: tf.constant(v) for k, v in examples.items()}
        return labels, tf.constant(select_features(examples, features)), None


def _check_arguments(
    assistant,
    threshold,
    threshold_decay,
    queue_size,
    max_batches_per_step,
    optimizer,
    features,
    asynchronous,
    train_every,
) -> None:
    """``AssistantLearner``'s argument checks: each bad value a clear error, at construction."""
    if not isinstance(assistant, keras.Model):
        raise TypeError(
            f"AssistantLearner(assistant={assistant!r}): expected a keras.Model scorer such "
            "as echoing.Assistant(num_classes=...)."
        )
    _check_threshold(threshold, threshold_decay)
    if not is_positive_int(queue_size):
        raise ValueError(
            f"AssistantLearner(queue_size={queue_size!r}): expected an int >= 1, the most "
            "feedback batches held in memory."
        )
    if not is_positive_int(max_batches_per_step):
        raise ValueError(
            f"AssistantLearner(max_batches_per_step={max_batches_per_step!r}): expected an "
            "int >= 1, the most queued feedback batches merged into one Assistant step."
        )
    if optimizer is not None and not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            f"AssistantLearner(optimizer={optimizer!r}): expected a keras optimizer such as "
            "keras.optimizers.Adam(0.01), or None."
        )
    check_feature_selector(features, "AssistantLearner")
    if not isinstance(asynchronous, bool):
        raise TypeError(f"AssistantLearner(asynchronous={asynchronous!r}): expected a bool.")
    if not is_positive_int(train_every):
        raise ValueError(
            f"AssistantLearner(train_every={train_every!r}): expected an int >= 1 (1 trains "
            "on every fed-back batch, k on every k-th)."
        )


def _check_threshold(threshold, threshold_decay) -> None:
    """The hard/easy threshold: 'mean' (decayed running mean) or a fixed finite number."""
    if isinstance(threshold, str):
        if threshold != "mean":
            raise ValueError(
                f"AssistantLearner(threshold={threshold!r}): expected 'mean' (running mean "
                "of recent losses) or a finite number T (fixed threshold)."
            )
    elif (
        isinstance(threshold, bool)
        or not isinstance(threshold, numbers.Real)
        or not math.isfinite(threshold)
    ):
        raise ValueError(
            f"AssistantLearner(threshold={threshold!r}): expected 'mean' or a finite "
            "number T; examples with Boss loss > T are labelled hard."
        )
    if (
        isinstance(threshold_decay, bool)
        or not isinstance(threshold_decay, numbers.Real)
        or not 0.0 <= threshold_decay < 1.0
    ):
        raise ValueError(
            f"AssistantLearner(threshold_decay={threshold_decay!r}): expected a number in "
            "[0, 1); 0 uses each batch's own mean, the paper's code uses 0.75."
        )


def _integer_labels(labels) -> tf.Tensor:
    """Class labels as int64 (int32, uint8, ... are widened: batches of either train together)."""
    labels = tf.convert_to_tensor(labels)
    if not labels.dtype.is_integer:
        raise TypeError(
            f"AssistantLearner got labels of dtype {labels.dtype.name}; expected integer class "
            "labels in [0, num_classes) (the Assistant would truncate 1.7 to class 1). Pass the "
            "Boss's integer labels, or label_key=None when the examples have no class."
        )
    return labels if labels.dtype == tf.int64 else tf.cast(labels, tf.int64)


def _concatenate(parts) -> tf.Tensor:
    if len(parts) == 1:
        return tf.convert_to_tensor(parts[0])
    return tf.concat([tf.convert_to_tensor(part) for part in parts], axis=0)
