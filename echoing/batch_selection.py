"""In-batch selection with static shapes: train on the k rows of a batch that score highest.

Example::

    import tensorflow as tf
    import echoing

    batch = {"inputs": tf.reshape(tf.range(12.0), [6, 2]), "id": tf.range(6, dtype=tf.int64)}
    losses = tf.constant([0.1, 2.0, 0.3, float("nan"), 1.5, 0.2])
    selected = echoing.select_rows(batch, losses, k=2)
    print(selected["id"].numpy())  # [1 4]: the two highest losses; the NaN is never preferred

Selective-Backprop and RHO-LOSS style selection: score every row of a batch of B with a cheap
forward pass (the loss in inference mode, an Assistant's score, or a loss table's entry), then
run the forward and backward pass on the k highest only. ``k`` is a Python int, so the result
has shape ``[k, ...]`` whatever the scores are: it compiles under XLA and on TPUs, unlike
``boolean_mask`` or ``Dataset.filter`` (tensorflow/tensorflow#67330). Non-finite scores rank
below every finite one (a NaN loss would poison the step), and ``count_nonfinite`` says how many
there were so a caller can log them.
"""

from __future__ import annotations

import numbers

import tensorflow as tf


def select_rows(batch: dict, scores: tf.Tensor, k: int) -> dict:
    """The ``k`` rows of every tensor in ``batch`` whose ``scores`` are highest (order kept).

    Args:
      batch: a dict of tensors sharing their first axis, of size B.
      scores: float ``[B]``; higher is more worth training on (e.g. per-example losses).
      k: rows to keep, a Python int in ``[1, B]``.

    Returns:
      A dict with the same keys, each of first dimension ``k`` (static).

    Raises:
      ValueError: ``k`` not an int in ``[1, B]`` (B static), or scores not of shape ``[B]``
        (InvalidArgumentError at run time when B is only known then).
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"select_rows(k={k!r}): expected an int >= 1, the rows to train on.")
    if not isinstance(batch, dict) or not batch:
        raise TypeError(f"select_rows(batch={batch!r}): expected a non-empty dict of tensors.")
    scores = tf.convert_to_tensor(scores)
    size = tf.compat.dimension_value(next(iter(batch.values())).shape[0])
    if size is not None and k > size:
        raise ValueError(
            f"select_rows(k={k}) asks for more rows than the batch has ({size}); pick k <= the "
            "per-replica batch size."
        )
    if scores.shape.rank != 1 or (size is not None and scores.shape[0] not in (None, size)):
        raise ValueError(
            f"select_rows: scores must be one per row, shape [{size}], got {scores.shape}."
        )
    checks = [
        tf.debugging.assert_less_equal(
            tf.constant(k), tf.shape(scores)[0], message=f"select_rows: k={k} > rows in batch"
        )
    ]
    with tf.control_dependencies(checks):
        ranked = tf.where(tf.math.is_finite(scores), tf.cast(scores, tf.float32), -float("inf"))
        _, index = tf.math.top_k(ranked, k=k, sorted=False)
    index = tf.sort(index)  # the batch's own order, so a selection of all rows is the batch
    return {key: tf.gather(value, index) for key, value in batch.items()}


def count_nonfinite(scores: tf.Tensor) -> tf.Tensor:
    """The number of NaN/inf entries of ``scores`` (int64)."""
    finite = tf.math.is_finite(tf.convert_to_tensor(scores))
    return tf.reduce_sum(tf.cast(tf.logical_not(finite), tf.int64))
