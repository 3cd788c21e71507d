"""The last-seen loss of every example, keyed by id, in host variables (what pruning reads).

Example::

    import tensorflow as tf
    from echoing._src.core.loss_table import LossTable

    table = LossTable(num_examples=4)
    table.update([0, 2], [0.5, float("nan")])  # the NaN is skipped and counted
    losses, seen = table.lookup(tf.constant([0, 1, 2], tf.int64))
    print(losses.numpy(), seen.numpy())  # [0.5 0. 0.] [ True False False]
    print(table.mean().numpy(), table.nonfinite_skipped.numpy())  # 0.5 1

The trainer writes it after every inner loop from the per-example losses of the rows it trained
on; a ``loss_prune`` stage reads it live from the tf.data graph. Both run on the host, so the
table lives on the CPU and is never mirrored onto accelerators; it is a ``tf.Module``, so a
``tf.train.Checkpoint`` saves and restores it with the run.
"""

from __future__ import annotations

import warnings

import numpy as np
import tensorflow as tf

from echoing._src.core.checks import is_int
from echoing._src.core.ids import integer_ids


def _host_variable(initial_value, name: str) -> tf.Variable:
    with tf.device("/cpu:0"):
        return tf.Variable(
            initial_value,
            trainable=False,
            name=name,
            synchronization=tf.VariableSynchronization.NONE,
            aggregation=tf.VariableAggregation.NONE,
        )


class LossTable(tf.Module):
    """Last-seen per-example losses for ids ``0 .. num_examples - 1``.

    Attributes:
      losses: float32 ``[num_examples]``, the last finite loss recorded for each id.
      seen: bool ``[num_examples]``, whether any finite loss was recorded for the id.
      nonfinite_skipped: int64, NaN/inf losses given to ``update`` and not recorded.

    Args:
      num_examples: the number of distinct example ids (ids are ``0 .. num_examples - 1``).
    """

    def __init__(self, num_examples: int, name: str = "loss_table"):
        super().__init__(name=name)
        if not is_int(num_examples, numpy=True):
            raise TypeError(f"LossTable(num_examples={num_examples!r}): expected an int.")
        if num_examples < 1:
            raise ValueError(
                f"LossTable(num_examples={num_examples}): expected >= 1, the number of "
                "example ids (ids run from 0 to num_examples - 1)."
            )
        self.num_examples = int(num_examples)
        self.losses = _host_variable(tf.zeros([num_examples], tf.float32), "losses")
        self.seen = _host_variable(tf.zeros([num_examples], tf.bool), "seen")
        self.nonfinite_skipped = _host_variable(tf.constant(0, tf.int64), "nonfinite_skipped")

    def update(self, ids, losses) -> None:
        """Records ``losses[i]`` as the last-seen loss of example ``ids[i]`` (any shape, flattened).

        Non-finite losses are not recorded; they are counted in ``nonfinite_skipped``. Within one
        call a repeated id keeps one of its losses.

        Raises:
          ValueError: ids and losses of different sizes, or an id outside ``[0, num_examples)``
            (eagerly; inside a ``tf.function`` the same checks raise InvalidArgumentError).
        """
        caller = f"{type(self).__name__}.update"  # a FeedbackInbox's errors name it
        ids = integer_ids(ids, caller)
        losses = tf.convert_to_tensor(losses)
        if not (losses.dtype.is_floating or losses.dtype.is_integer):
            raise TypeError(
                f"{caller}: losses must be real numbers, one per id (the per-example losses, "
                f"unreduced), got dtype {losses.dtype.name}."
            )
        losses = tf.reshape(tf.cast(losses, tf.float32), [-1])
        if tf.executing_eagerly():
            self._check_eagerly(caller, ids.numpy(), losses.shape[0])
            checks = []
        else:
            checks = [
                tf.debugging.assert_equal(
                    tf.size(ids), tf.size(losses), message=f"{caller}: ids and losses"
                ),
                *self.range_checks(ids, caller),
            ]
        with tf.control_dependencies(checks):
            finite = tf.math.is_finite(losses)
            indices = tf.boolean_mask(ids, finite)[:, None]
            self.losses.scatter_nd_update(indices, tf.boolean_mask(losses, finite))
            self.seen.scatter_nd_update(indices, tf.ones_like(indices[:, 0], tf.bool))
            skipped = tf.size(finite, out_type=tf.int64) - tf.size(indices, out_type=tf.int64)
            self.nonfinite_skipped.assign_add(skipped)
            self._recorded(indices)

    # A docstring-only body: AutoGraph cannot convert it and would warn on every trace.
    @tf.autograph.experimental.do_not_convert
    def _recorded(self, indices: tf.Tensor) -> None:
        """Called by ``update`` with the ``[n, 1]`` ids it recorded (for subclasses)."""

    def lookup(self, ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(losses, seen)`` of ``ids`` (integers, as ``update`` takes); an id outside the
        table fails the op."""
        ids = integer_ids(ids, "LossTable.lookup")
        with tf.control_dependencies(self.range_checks(ids, "loss table lookup")):
            return tf.gather(self.losses, ids), tf.gather(self.seen, ids)

    def mean(self) -> tf.Tensor:
        """The mean last-seen loss over the ids seen so far (0 before any)."""
        seen = tf.cast(self.seen, tf.float32)
        return tf.math.divide_no_nan(tf.reduce_sum(self.losses * seen), tf.reduce_sum(seen))

    def range_checks(self, ids: tf.Tensor, what: str) -> list[tf.Operation]:
        """Graph assertions that every id is in ``[0, num_examples)``, naming ``what``."""
        message = (
            f"{what}: an example id is outside [0, {self.num_examples}); the loss table holds "
            f"{self.num_examples} examples. Give every example a unique id below that (the "
            "pipelines' 'id' field), or build the table with num_examples = the data set size."
        )
        return [
            tf.debugging.assert_non_negative(ids, message=message),
            tf.debugging.assert_less(ids, tf.constant(self.num_examples, tf.int64), message),
        ]

    def _check_eagerly(self, caller: str, ids: np.ndarray, num_losses: int) -> None:
        if ids.size != num_losses:
            raise ValueError(
                f"{caller} got {ids.size} ids and {num_losses} losses; pass one loss per "
                "id (the per-example losses of the rows trained on, unreduced)."
            )
        bad = ids[(ids < 0) | (ids >= self.num_examples)]
        if bad.size:
            raise ValueError(
                f"{caller} got ids outside [0, {self.num_examples}): "
                f"{bad[:5].tolist()}{' ...' if bad.size > 5 else ''}. The table was built for "
                f"{self.num_examples} examples; build it with num_examples = the data set size."
            )


class FeedbackInbox(LossTable):
    """A ``LossTable`` that also keeps which ids were updated since the last ``drain``.

    What hands the per-example loss feedback of ``fit``'s own train steps to a Python consumer
    (the Assistant learner): ``update`` runs in the train step's graph (an
    ``echoing.keras.LossFeedback`` observer), and ``drain`` is called between steps
    (``echoing.AssistantFeedbackCallback``).

    Example::

        import echoing

        inbox = echoing.FeedbackInbox(num_examples=4)
        inbox.update([3, 1], [0.5, 0.25])
        print(inbox.drain())  # (array([1, 3]), array([0.25, 0.5], dtype=float32))
        print(inbox.drain())  # nothing new: two empty arrays
    """

    def __init__(self, num_examples: int, name: str = "feedback_inbox"):
        super().__init__(num_examples, name=name)
        self.pending = _host_variable(tf.zeros([num_examples], tf.bool), "pending")

    def _recorded(self, indices: tf.Tensor) -> None:
        self.pending.scatter_nd_update(indices, tf.ones_like(indices[:, 0], tf.bool))

    def drain(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, losses)`` updated since the last call (ids ascending), and forgets them.

        Call it between train steps (a callback), not while a step may be updating.
        """
        ids = np.flatnonzero(self.pending.numpy()).astype(np.int64)
        self.pending.assign(tf.zeros_like(self.pending))
        return ids, self.losses.numpy()[ids]


class LossInbox(FeedbackInbox):
    """Deprecated, goes in the next release: ``echoing.FeedbackInbox`` (the same, renamed)."""

    def __init__(self, num_examples: int, name: str = "loss_inbox"):
        warnings.warn(
            "echoing.LossInbox is deprecated and goes in the next release: use "
            "echoing.FeedbackInbox, the same inbox under per-example loss feedback's one name.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(num_examples, name=name)
