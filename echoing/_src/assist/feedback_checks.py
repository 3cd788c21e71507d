"""Checks on the Boss's feedback, so a bad batch is refused with the fix, not deep in a graph.

Example::

    import tensorflow as tf
    import echoing
    from echoing._src.assist.feedback_checks import check_shapes, integer_labels

    assistant = echoing.Assistant(2, input_shape=(3,))
    labels = integer_labels(tf.constant([0, 1], tf.int32))  # widened to int64
    check_shapes(assistant, tf.zeros([2, 3]), labels, tf.constant([1.0, 2.0]))  # fits: no error

``integer_labels`` and ``check_shapes`` run in the Boss's thread when it hands feedback over:
they read only dtypes and static shapes, which costs nothing. ``check_labels`` reads the label
values, so it runs where the Assistant trains (the learner's thread, when asynchronous).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf


def integer_labels(labels) -> tf.Tensor:
    """Class labels as int64 (int32, uint8, ... are widened: batches of either train together)."""
    labels = tf.convert_to_tensor(labels)
    if not labels.dtype.is_integer:
        raise TypeError(
            f"AssistantLearner got labels of dtype {labels.dtype.name}; expected integer class "
            "labels in [0, num_classes) (the Assistant would truncate 1.7 to class 1). Pass the "
            "Boss's integer labels, or label_key=None when the examples have no class."
        )
    return labels if labels.dtype == tf.int64 else tf.cast(labels, tf.int64)


def check_shapes(assistant: keras.Model, features, labels, losses) -> None:
    """Static checks: what would fail deep in the learner's graph. ``features=None``: ids."""
    check_label_rank(np.shape(labels), "AssistantLearner got labels (or ids)")
    rows = tf.TensorShape(np.shape(labels))[:1]
    if not rows.is_compatible_with(tf.TensorShape(np.shape(losses))[:1]):
        raise ValueError(
            f"AssistantLearner got {rows[0]} labels (or ids) but {np.shape(losses)} losses; "
            "pass one unreduced Boss loss per example of the batch (reduction=None)."
        )
    expected = getattr(assistant, "_feature_shape", None)
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


def check_label_rank(shape, owner: str, batched: bool = True) -> None:
    """Labels are one integer class per example: ``[B]`` (``batched``) or ``[N]``.

    ``[B, 1]``, as Keras' sparse losses also take them, is refused with the squeeze that fixes
    it: the Assistant would otherwise fail in a ``tf.function`` binding with no hint.
    """
    shape = tf.TensorShape(shape)
    if shape.rank == 1:
        return
    if shape.rank == 0 and batched:
        raise ValueError(
            f"{owner} of shape []: one label for the whole element, so the elements are not "
            "batched; batch them (dataset.batch(B)) so that each carries [B] labels."
        )
    rows = "[B]" if batched else "[N]"
    squeeze = (
        f" Labels of shape [{rows[1]}, 1] squeeze to {rows}: dataset.map(lambda b: {{**b, "
        "'label': tf.squeeze(b['label'], -1)}), or y.reshape(-1) for arrays."
        if shape.rank == 2 and shape[-1] == 1
        else ""
    )
    raise ValueError(
        f"{owner} of shape {shape.as_list() if shape.rank is not None else '<unknown rank>'}; "
        f"expected one integer class label per example, {rows}.{squeeze}"
    )


def check_labels(assistant: keras.Model, labels) -> None:
    """Label values in ``[0, num_classes)`` of the Assistant (when it has classes)."""
    num_classes = getattr(assistant, "num_classes", None)
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
