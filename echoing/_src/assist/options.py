"""The AssistantLearner's options: one frozen value, every field checked when it is made.

Example::

    import echoing

    options = echoing.LearnerOptions(threshold=0.5, queue_size=16, asynchronous=False)
    learner = echoing.AssistantLearner(echoing.Assistant(2, input_shape=(4,)), options=options)
    assert learner.threshold == 0.5 and learner.queue_size == 16

``echoing.AssistantLearner(assistant, threshold=0.5, ...)`` builds the same value from its
keywords, so both spellings go through the one set of checks here and a bad value is a clear
error at construction, not a failure later in the learner's thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from echoing._src.assist.assistant import FeatureSelector, check_feature_selector
from echoing._src.assist.feedback_checks import check_label_rank
from echoing._src.core.checks import in_interval, is_positive_int, is_real


@dataclasses.dataclass(frozen=True)
class LearnerOptions:
    """How an :class:`echoing.AssistantLearner` labels, queues and trains.

    Attributes:
      threshold: ``"mean"`` (running mean of recent Boss losses, the paper's code) or a fixed
        finite float T; examples with loss > T are labelled hard (z = 1).
      threshold_decay: decay per batch of the running mean's exponential averages (paper: 0.75).
      optimizer: Keras optimizer for the Assistant (``None``: Adam, learning rate 0.01).
      queue_size: most feedback batches held; when full the oldest is dropped and counted.
      features: what the Assistant scores in a batch dict (same meaning as in the filter).
      label_key: the batch key holding integer labels; ``None`` when examples have no class
        (e.g. text for a language model): every example is label 0, as in the filter.
      asynchronous: ``False`` trains inside ``feedback`` on the caller's thread (the paper's
        "sequential" AutoAssist; for measuring overhead and for debugging).
      max_batches_per_step: when the thread falls behind, it merges up to this many queued
        batches into one optimizer step (each keeps the threshold T of its own time).
      examples: an in-memory copy of the training set indexed by example id (a dict of arrays
        such as ``{"inputs": [N, ...], "label": [N]}``), so the Boss can report only
        ``(ids, losses)`` (the paper's AssistantQueue) via ``feedback_ids``; the learner
        thread gathers the features. A ``features`` function is applied there, per batch, when
        the Assistant trains (so one that reads live state, such as ``echoing.BossFeatures``,
        sees its current value); a key is selected once, at construction.
      train_every: train on every k-th batch fed back, skip the others (counted): the
        learner's cost falls k-fold. Where the Boss and the learner share the CPU cores (no
        accelerator) its work is the Boss's overhead; with an accelerator, 1 (every batch).
    """

    threshold: str | float = "mean"
    threshold_decay: float = 0.75
    # Not compared: optimizers and arrays have no meaningful (or no boolean) equality.
    optimizer: keras.optimizers.Optimizer | None = dataclasses.field(default=None, compare=False)
    queue_size: int = 32
    features: FeatureSelector = None
    label_key: str | None = "label"
    asynchronous: bool = True
    max_batches_per_step: int = 8
    examples: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)
    train_every: int = 1

    def __post_init__(self) -> None:
        # In the order of the fields, as the checks ran before options were a value of their own.
        _check_threshold(self.threshold, self.threshold_decay)
        _check_count("queue_size", self.queue_size, "the most feedback batches held in memory.")
        _check_count(
            "max_batches_per_step",
            self.max_batches_per_step,
            "the most queued feedback batches merged into one Assistant step.",
        )
        if self.optimizer is not None and not isinstance(
            self.optimizer, keras.optimizers.Optimizer
        ):
            raise TypeError(
                f"AssistantLearner(optimizer={self.optimizer!r}): expected a keras optimizer "
                "such as keras.optimizers.Adam(0.01), or None."
            )
        check_feature_selector(self.features, "AssistantLearner")
        if not isinstance(self.asynchronous, bool):
            raise TypeError(
                f"AssistantLearner(asynchronous={self.asynchronous!r}): expected a bool."
            )
        if not is_positive_int(self.train_every):
            raise ValueError(
                f"AssistantLearner(train_every={self.train_every!r}): expected an int >= 1 (1 "
                "trains on every fed-back batch, k on every k-th)."
            )
        _check_examples(self.examples, self.label_key)


def _check_threshold(threshold, threshold_decay) -> None:
    """The hard/easy threshold: 'mean' (decayed running mean) or a fixed finite number."""
    if isinstance(threshold, str):
        if threshold != "mean":
            raise ValueError(
                f"AssistantLearner(threshold={threshold!r}): expected 'mean' (running mean "
                "of recent losses) or a finite number T (fixed threshold)."
            )
    elif not is_real(threshold):
        raise ValueError(
            f"AssistantLearner(threshold={threshold!r}): expected 'mean' or a finite "
            "number T; examples with Boss loss > T are labelled hard."
        )
    if not (
        is_real(threshold_decay, finite=False)
        and in_interval(threshold_decay, 0.0, 1.0, high_open=True)
    ):
        raise ValueError(
            f"AssistantLearner(threshold_decay={threshold_decay!r}): expected a number in "
            "[0, 1); 0 uses each batch's own mean, the paper's code uses 0.75."
        )


def _check_count(name: str, value, meaning: str) -> None:
    """A count: an int >= 1 (``True`` is refused: it is a flag, not a count)."""
    if not is_positive_int(value):
        raise ValueError(f"AssistantLearner({name}={value!r}): expected an int >= 1, {meaning}")


def _check_examples(examples, label_key) -> None:
    """``examples``: None, or a dict of arrays by id that holds the labels (unless no classes)."""
    if examples is None:
        return
    if not isinstance(examples, Mapping) or label_key not in (*examples, None):
        raise TypeError(
            f"AssistantLearner(examples={type(examples).__name__}): expected a dict of "
            f"arrays indexed by example id with a {label_key!r} key, e.g. "
            "{'inputs': x_train, 'label': y_train}."
        )
    rows = {key: np.shape(value)[:1] for key, value in examples.items()}
    if len(set(rows.values())) > 1:
        raise ValueError(
            "AssistantLearner(examples=...): its arrays are indexed by example id, so they need "
            f"one row per example each, but their rows differ: {_rows_text(rows)}. Pass the "
            "same training examples in each (x_train and y_train of one split)."
        )
    if label_key is not None:
        check_label_rank(
            np.shape(examples[label_key]),
            f"AssistantLearner(examples=...) got examples[{label_key!r}]",
            batched=False,
        )


def _rows_text(rows: dict) -> str:
    return ", ".join(
        f"{key!r}: {shape[0] if shape else 'a scalar'}" for key, shape in sorted(rows.items())
    )
