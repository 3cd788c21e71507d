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
the updated variables live. Non-finite losses are never trained on (nor enter T); they are
counted.

This module is the Boss-facing front; each job behind it has its own module:

* ``options``: the learner's settings (:class:`LearnerOptions`), checked in one place;
* ``echoing._src.core.background``: the bounded queue and the thread;
* ``threshold``: T, by default the paper code's running mean of recent Boss losses;
* ``example_tables``: the training set by id, for :meth:`AssistantLearner.feedback_ids`;
* ``training``: the labelling and the optimizer step;
* ``feedback_checks`` and ``learner_stats``: what is refused at once, and what is counted;
* ``learner_state``: T and the counts as one checkpointable object,
  :attr:`AssistantLearner.checkpoint_state`, so a resumed run continues them.

Errors raised in the thread are re-raised in the Boss's thread on the next ``feedback``/``push``
or ``close``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from echoing._src.assist.assistant import labels_of, select_features
from echoing._src.assist.example_tables import ExampleTables
from echoing._src.assist.feedback_checks import check_shapes, integer_labels
from echoing._src.assist.learner_state import LearnerState
from echoing._src.assist.learner_stats import LearnerStats
from echoing._src.assist.options import LearnerOptions
from echoing._src.assist.threshold import LossThreshold
from echoing._src.assist.training import AssistantTrainer
from echoing._src.core.background import BackgroundWorker, WorkerClosedError
from echoing._src.core.types import ClosesOnExit

_OPTION_NAMES = frozenset(field.name for field in dataclasses.fields(LearnerOptions))


def _option(name: str) -> property:
    """A read-only attribute of the learner that reads ``learner.options.<name>``."""
    return property(lambda self: getattr(self.options, name), doc=f"``options.{name}``.")


class AssistantLearner(ClosesOnExit):
    """Bounded-queue background trainer of an Assistant from (features, labels, losses).

    Args:
      assistant: the scorer to train (an :class:`echoing.Assistant` or any Keras model with
        the same ``(features, labels) -> [B]`` signature). Built on the first feedback if needed.
      options: a :class:`LearnerOptions`; or, instead, its fields as keywords (``threshold``,
        ``threshold_decay``, ``optimizer``, ``queue_size``, ``features``, ``label_key``,
        ``asynchronous``, ``max_batches_per_step``, ``examples``, ``train_every``; see there),
        e.g. ``AssistantLearner(assistant, queue_size=16)``. Not both.

    To resume, checkpoint ``assistant``, ``optimizer`` and ``checkpoint_state`` (T and the
    counts of :meth:`stats`), e.g. ``tf.train.Checkpoint(assistant=..., assistant_optimizer=
    learner.optimizer, assistant_learner=learner.checkpoint_state)``, as the Assistant technique
    does.
    """

    threshold = _option("threshold")
    queue_size = _option("queue_size")
    features = _option("features")
    label_key = _option("label_key")
    asynchronous = _option("asynchronous")
    max_batches_per_step = _option("max_batches_per_step")
    examples = _option("examples")
    train_every = _option("train_every")

    def __init__(
        self, assistant: keras.Model, *, options: LearnerOptions | None = None, **keywords: Any
    ):
        if not isinstance(assistant, keras.Model):
            raise TypeError(
                f"AssistantLearner(assistant={assistant!r}): expected a keras.Model scorer such "
                "as echoing.Assistant(num_classes=...)."
            )
        self.options = _resolve_options(options, keywords)
        self.assistant = assistant
        examples = self.options.examples
        self._tables = (
            None
            if examples is None
            else ExampleTables(examples, self.options.features, self.options.label_key)
        )
        if self._tables is not None:
            self._tables.check_fits(assistant)
        self._trainer = AssistantTrainer(
            assistant,
            self.options.optimizer,
            LossThreshold(self.options.threshold, self.options.threshold_decay),
            self._tables,
        )
        self.optimizer = self._trainer.optimizer
        self._stats = LearnerStats()
        self._worker = BackgroundWorker(
            self._train,
            capacity=self.options.queue_size,
            # Coalesce a backlog into one step: fewer, larger Assistant steps cost the Boss
            # less CPU than one step per Boss batch when the learner falls behind.
            max_items_per_call=self.options.max_batches_per_step,
            name="assistant_learner",
            describe_failure=_describe_failure,
        )
        # Checkpoint it beside the Assistant and ``optimizer``: a resumed run then continues
        # T and every count of stats() (see learner_state).
        self.checkpoint_state = LearnerState(
            self._stats, self._trainer.threshold, lambda: self._worker.drops
        )

    @property
    def threshold_decay(self) -> float:
        """``options.threshold_decay``, as a float."""
        return float(self.options.threshold_decay)

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
        self._worker.raise_if_failed()
        labels = self._checked_ids(labels) if features is None else integer_labels(labels)
        check_shapes(self.assistant, features, labels, losses)
        if self._stats.offered() % self.train_every:
            return  # skipped: see train_every
        self._trainer.ensure_built(features, labels)
        item = (features, labels, losses)
        if not self.asynchronous:
            self._train([item])
            self._stats.pushed(step)
            return
        try:
            self._worker.submit(item)
        except WorkerClosedError:
            raise RuntimeError(
                "AssistantLearner.push after close(); create a new learner."
            ) from None
        self._stats.pushed(step)

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """Blocks until every queued batch is trained (for tests and benchmarks, not the Boss).

        Returns:
          True if idle, False if ``timeout`` seconds passed first.
        """
        return self._worker.wait_until_idle(timeout)

    def close(self) -> None:
        """Stops the thread (pending feedback is discarded) and re-raises its error, if any."""
        self._worker.close()

    def require_open(self, owner: str) -> None:
        """Raises, before a fit trains, what its first fed batch would: a failed or closed
        learner (``owner`` is the callback about to feed it)."""
        self._worker.raise_if_failed()
        if self._worker.closed:
            raise RuntimeError(
                f"{owner}: its AssistantLearner was closed (learner.close()), so it cannot "
                "learn from this fit; create a new AssistantLearner (and callback) for it."
            )

    def stats(self) -> dict[str, float]:
        """Learner statistics so far.

        Returns:
          ``assistant_accuracy`` (agreement of ``g > 0.5`` with ``z`` on the last 50 trained
          batches, measured before each update), ``hard_fraction`` (share of z = 1),
          ``threshold`` (current T), ``queue_drops``, ``nonfinite_losses``,
          ``pushed_batches``, ``skipped_batches`` (see ``train_every``), ``trained_batches``,
          ``trained_examples``.
        """
        return self._stats.report(self._trainer.threshold.value(), self._worker.drops)

    def _checked_ids(self, ids) -> np.ndarray:
        """``ids`` (example ids, for ``examples``) as int64 values, refused unless in range."""
        if self._tables is None:
            raise ValueError(
                "AssistantLearner.feedback_ids needs the training examples by id: construct the "
                "learner with examples={'inputs': x_train, 'label': y_train}, or call feedback("
                "batch, losses) with the batch itself."
            )
        return self._tables.checked_ids(ids)

    # ----- The learner's side (its thread, or the caller's when not asynchronous).

    def _train(self, items) -> None:
        """One optimizer step on the concatenation of ``items``, counted in the statistics."""
        self._stats.trained(self._trainer.train(items))

    # The worker's queue and thread, under the names they had before it was split out.
    @property
    def _queue(self) -> list:
        return self._worker.pending()

    @property
    def _thread(self):
        return self._worker.thread


def _resolve_options(options: LearnerOptions | None, keywords: dict[str, Any]) -> LearnerOptions:
    """The learner's options: given whole, or built from keywords, never both."""
    unknown = sorted(set(keywords) - _OPTION_NAMES)
    if unknown:
        raise TypeError(f"AssistantLearner() got an unexpected keyword argument {unknown[0]!r}")
    if options is None:
        return LearnerOptions(**keywords)
    if not isinstance(options, LearnerOptions):
        raise TypeError(
            f"AssistantLearner(options={options!r}): expected a LearnerOptions, or "
            "the options as keywords."
        )
    if keywords:
        raise TypeError(
            f"AssistantLearner(options=..., {', '.join(f'{k}=...' for k in sorted(keywords))}): "
            "give the options either as keywords or as options=LearnerOptions(...), not both "
            "(dataclasses.replace(options, ...) changes some of them)."
        )
    return options


def _describe_failure(error: BaseException) -> str:
    return (
        f"AssistantLearner's training thread failed: {error}; the Assistant "
        "stopped learning. Fix the cause (often features/labels that do not match the "
        "Assistant) and create a new learner."
    )
