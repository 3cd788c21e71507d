"""Per-example priorities for priority sampling: learn, estimate, checkpoint.

Example::

    import tensorflow as tf
    import echoing

    table = echoing.PriorityTable(4)
    table.update(ids=[0, 1], priorities=[2.0, 0.5], step=0)
    table.update(ids=[0], priorities=[1.0], step=2)
    table.estimate(step=4)  # [0.574, 0.5, inf, inf]: slope of id 0 = 0.8 * ln(1/2) / 2
    tf.train.Checkpoint(priorities=table).write("/tmp/priorities")

Algorithm 2 of the paper (Li et al., "prioritized gradient descent"): per example ``i`` the
table keeps ``ln p_i`` from its last measurement, the step ``t_i`` of that measurement, and a
slope ``a_i`` of ``ln p`` per step. A new measurement ``p`` at step ``t`` learns

    a_i <- decay * (ln p - ln p_i) / (t - t_i) + (1 - decay) * a_i;   ln p_i <- ln p;   t_i <- t

and the estimate at step ``s`` is ``exp(a_i * (s - t_i) + ln p_i)``: priorities are extrapolated
log-linearly, which the paper observes they follow between renewals.

Three cases the paper leaves open are defined here:

* **never measured**: the estimate is ``+inf``, so top-k selection takes unmeasured examples
  first (optimistic initialisation, as prioritized replay gives new items the maximum priority);
  the first epoch is then a pass over the data in id order.
* **p <= 0** (``ln p`` undefined): ``ḡ·g_i <= 0`` means a step on the example does not lower the
  aggregate loss to first order, so it is the least useful example. Its ``ln p`` is stored as
  ``-inf`` (estimate exactly 0, ranked last until a renewal measures it again) and its slope is
  reset to 0. A slope is learned only between two finite ``ln p`` at different steps; otherwise
  the old slope is kept (same step) or reset to 0 (no finite history).
* **NaN/inf priorities** are rejected: they never enter the table, ``update`` returns how many
  it dropped and ``num_rejected`` counts them over the run.

The variables live on the host CPU: the sampler (a tf.data stage) reads them live and the trainer
writes them after each step. The table is a ``tf.Module``, so ``tf.train.Checkpoint`` saves it
alongside the model.
"""

from __future__ import annotations

import sys

import numpy as np
import tensorflow as tf

from echoing._src.core.checks import in_interval, is_int, is_real
from echoing._src.core.ids import integer_ids

# ``measured_step`` of an example that has never been measured.
NEVER_MEASURED = -1


class PriorityTable(tf.Module):
    """Host-side per-example priority state (Algorithm 2 of the paper).

    Attributes:
      num_examples: ``N``, the number of examples; ids are ``0 .. N-1``.
      decay: ``λ``, the weight of the newest slope measurement (the paper: 0.8).
      log_priority: float32 ``[N]`` variable, ``ln p_i`` at the last measurement (``-inf`` for
        ``p_i <= 0``, 0 if never measured).
      slope: float32 ``[N]`` variable, ``a_i``, change of ``ln p`` per step.
      measured_step: int64 ``[N]`` variable, step of the last measurement, ``-1`` if never.
      num_rejected: int64 scalar variable, NaN/inf priorities dropped by ``update`` so far.
    """

    def __init__(self, num_examples: int, *, decay: float = 0.8, name: str | None = None):
        """Creates the table with every example unmeasured.

        Args:
          num_examples: number of examples ``N >= 1`` (the size of the random-access source).
          decay: ``λ`` in ``(0, 1]``; 1 keeps only the newest slope measurement.
          name: optional module name (variable name scope).

        Raises:
          TypeError: ``num_examples`` is not an int or ``decay`` is not a real number.
          ValueError: ``num_examples < 1`` or ``decay`` outside ``(0, 1]``.
        """
        super().__init__(name=name or "priority_table")
        if not is_int(num_examples, numpy=True):
            raise TypeError(
                f"num_examples must be an int (the number of examples in the source), got "
                f"{num_examples!r} ({type(num_examples).__name__})."
            )
        if num_examples < 1:
            raise ValueError(
                f"num_examples must be >= 1, got {num_examples}; pass the size of the source."
            )
        if not is_real(decay, finite=False):
            raise TypeError(f"decay must be a float in (0, 1], got {decay!r}.")
        if not in_interval(float(decay), 0.0, 1.0, low_open=True):
            raise ValueError(
                f"decay must be in (0, 1] (the paper uses 0.8), got {decay!r}; it weights the "
                "newest slope measurement against the previous slope."
            )
        self.num_examples = int(num_examples)
        self.decay = float(decay)
        with tf.device("/CPU:0"), self.name_scope:
            self.log_priority = tf.Variable(
                tf.zeros([self.num_examples], tf.float32), trainable=False, name="log_priority"
            )
            self.slope = tf.Variable(
                tf.zeros([self.num_examples], tf.float32), trainable=False, name="slope"
            )
            self.measured_step = tf.Variable(
                tf.fill([self.num_examples], tf.constant(NEVER_MEASURED, tf.int64)),
                trainable=False,
                name="measured_step",
            )
            self.num_rejected = tf.Variable(
                tf.constant(0, tf.int64), trainable=False, name="num_rejected"
            )

    def log_estimate(self, step: tf.Tensor | int) -> tf.Tensor:
        """``ln p̂_i(step) = a_i·(step − t_i) + ln p_i`` for all examples, float32 ``[N]``.

        Ranking on the logarithm never overflows, unlike ``estimate``. Unmeasured examples are
        ``+inf``; examples last measured with ``p <= 0`` are ``-inf``.
        """
        step = tf.cast(step, tf.int64)
        measured_step = self.measured_step.read_value()
        elapsed = tf.cast(step - measured_step, tf.float32)
        log_priority = self.log_priority.read_value()
        # Where ln p is -inf the slope is 0 by construction, so the sum stays -inf (no inf - inf).
        extrapolated = log_priority + self.slope.read_value() * elapsed
        return tf.where(
            measured_step == NEVER_MEASURED, tf.constant(np.inf, tf.float32), extrapolated
        )

    def estimate(self, step: tf.Tensor | int) -> tf.Tensor:
        """Estimated priorities ``p̂_i(step) = exp(a_i·(step − t_i) + ln p_i)``, float32 ``[N]``."""
        return tf.exp(self.log_estimate(step))

    def last_measured_step(self) -> int:
        """The step of the newest measurement, read eagerly; ``NEVER_MEASURED`` (-1) if none."""
        return int(tf.reduce_max(self.measured_step).numpy())

    def statistics(self, step: tf.Tensor | int) -> dict[str, tf.Tensor]:
        """Scalars worth logging each step: how much of the table is measured, fresh, spread.

        Returns:
          ``{"measured_fraction"``: examples measured at least once / N,
          ``"positive_fraction"``: examples whose last measurement was > 0, / N,
          ``"mean_staleness"``: mean ``step − t_i`` over measured examples,
          ``"log_priority_spread"``: standard deviation of ``ln p̂`` over finite estimates``}``.
        """
        return table_statistics(
            step,
            self.measured_step.read_value(),
            self.log_priority.read_value(),
            self.log_estimate(step),
        )

    def update(self, ids: tf.Tensor, priorities: tf.Tensor, step: tf.Tensor | int) -> tf.Tensor:
        """Learns new measurements ``priorities[j]`` of examples ``ids[j]`` made at ``step``.

        Works eagerly and inside ``tf.function``. NaN/inf priorities are dropped and counted
        (``num_rejected``). If an id repeats within one call, its priorities must be equal (the
        same example at the same parameters), because which duplicate wins is unspecified.

        Args:
          ids: int ``[n]`` example ids in ``[0, N)``.
          priorities: float ``[n]`` measured priorities ``ḡ·g_i``.
          step: the training step the priorities were measured at.

        Returns:
          int64 scalar: the number of NaN/inf priorities rejected by this call.

        Raises:
          ValueError: (eager) an id is outside ``[0, N)``, or ids and priorities differ in length.
          tf.errors.InvalidArgumentError: the same checks inside a ``tf.function``.
        """
        ids = integer_ids(ids, "PriorityTable.update")
        priorities = tf.reshape(tf.cast(priorities, tf.float32), [-1])
        step = tf.cast(step, tf.int64)
        ids = check_ids(ids, priorities, self.num_examples)

        finite = tf.math.is_finite(priorities)
        num_rejected = tf.reduce_sum(tf.cast(~finite, tf.int64))
        ids = tf.boolean_mask(ids, finite)
        priorities = tf.boolean_mask(priorities, finite)

        new_log = tf.where(
            priorities > 0.0,
            tf.math.log(tf.maximum(priorities, tf.float32.min)),
            tf.constant(-np.inf, tf.float32),
        )
        old_log = tf.gather(self.log_priority, ids)
        old_slope = tf.gather(self.slope, ids)
        old_step = tf.gather(self.measured_step, ids)
        elapsed = tf.cast(step - old_step, tf.float32)
        has_history = (old_step != NEVER_MEASURED) & tf.math.is_finite(old_log)
        both_finite = has_history & tf.math.is_finite(new_log)
        learnable = both_finite & (elapsed > 0.0)
        # Guard the division so no inf/NaN is ever computed for the rows tf.where discards.
        measured_slope = (
            tf.where(learnable, new_log, 0.0) - tf.where(learnable, old_log, 0.0)
        ) / tf.where(learnable, elapsed, 1.0)
        blended = self.decay * measured_slope + (1.0 - self.decay) * old_slope
        same_step_kept = both_finite & ~learnable
        new_slope = tf.where(learnable, blended, tf.where(same_step_kept, old_slope, 0.0))

        indices = ids[:, None]
        self.log_priority.scatter_nd_update(indices, new_log)
        self.slope.scatter_nd_update(indices, new_slope)
        self.measured_step.scatter_nd_update(indices, tf.fill(tf.shape(ids), step))
        self.num_rejected.assign_add(num_rejected)
        return num_rejected


def table_statistics(
    step: tf.Tensor | int,
    measured_step: tf.Tensor,
    log_priority: tf.Tensor,
    log_estimate: tf.Tensor,
) -> dict[str, tf.Tensor]:
    """``PriorityTable.statistics`` from the table's tensors (any order, e.g. shards joined)."""
    step = tf.cast(step, tf.int64)
    measured = measured_step != NEVER_MEASURED
    finite = tf.math.is_finite(log_estimate)
    staleness = tf.cast(tf.boolean_mask(step - measured_step, measured), tf.float32)
    finite_log = tf.boolean_mask(log_estimate, finite)
    return {
        "measured_fraction": tf.reduce_mean(tf.cast(measured, tf.float32)),
        "positive_fraction": tf.reduce_mean(
            tf.cast(measured & tf.math.is_finite(log_priority), tf.float32)
        ),
        "mean_staleness": tf.math.divide_no_nan(
            tf.reduce_sum(staleness), tf.cast(tf.size(staleness), tf.float32)
        ),
        "log_priority_spread": tf.cond(
            tf.size(finite_log) > 0,
            lambda: tf.math.reduce_std(finite_log),
            lambda: tf.constant(0.0),
        ),
    }


def check_ids(ids: tf.Tensor, priorities: tf.Tensor, num_examples: int) -> tf.Tensor:
    """Returns ``ids`` after raising readably on ids outside [0, N) or a length mismatch.

    Eagerly a ``ValueError``; inside a ``tf.function`` an ``InvalidArgumentError`` from an
    assertion the returned tensor depends on. Empty ``ids`` pass.
    """
    n = num_examples
    if tf.executing_eagerly():
        if ids.shape[0] != priorities.shape[0]:
            raise ValueError(
                f"ids and priorities must have the same length, got {ids.shape[0]} ids and "
                f"{priorities.shape[0]} priorities; pass one priority per id."
            )
        bad = ids.numpy()[(ids.numpy() < 0) | (ids.numpy() >= n)]
        if bad.size:
            raise ValueError(
                f"id {int(bad[0])} is out of range for a PriorityTable of N={n} examples; "
                f"ids must be in [0, {n}). Check that the table was built with the size of "
                "the source the ids come from."
            )
        return ids
    length_check = tf.debugging.assert_equal(
        tf.shape(ids),
        tf.shape(priorities),
        message="ids and priorities must have the same length; pass one priority per id.",
    )
    out_of_range = (ids < 0) | (ids >= n)
    # The first offending id ([] when there is none; an argmax would fail on empty ids).
    first_bad = tf.boolean_mask(ids, out_of_range)[:1]
    range_check = tf.debugging.Assert(
        ~tf.reduce_any(out_of_range),
        [
            "id",
            first_bad,
            f"is out of range for a PriorityTable of N={n} examples; ids must be in "
            f"[0, {n}). Check that the table was built with the size of the source.",
        ],
    )
    # The gathers that follow are stateless; without this they could fail first, unreadably.
    with tf.control_dependencies([length_check, range_check]):
        return tf.identity(ids)


# The step at which a sampler checks that its table was ever measured: past what a pipeline
# reads ahead of training (the sampler runs nothing ahead itself; fit's steps_per_execution or
# a prefetch add tens at most), early enough for a short fit of a few hundred steps.
UNMEASURED_STEP = 200
_UNMEASURED = (
    "echoing.priority_sample: step {} and its PriorityTable has measured no priority, so "
    "sampling uses none (top-k picks ids 0, 1, ...). Measure into this same table: "
    "echoing.keras.PriorityModel(..., table=table), or PriorityMeter(table, ...) in your own "
    "loop."
)


def warned_if_unmeasured(table, step: tf.Tensor) -> tf.Tensor:
    """``step``, once a warning is printed on stderr if it is ``UNMEASURED_STEP`` and ``table``
    (a ``PriorityTable``) has no measured priority; the table is only read at that step."""

    def check():
        unmeasured = tf.reduce_all(table.measured_step == NEVER_MEASURED)
        printed = tf.cond(
            unmeasured,
            lambda: _printed(tf.strings.format(_UNMEASURED, step)),
            lambda: tf.constant(False),
        )
        return printed

    checked = tf.cond(tf.equal(step, UNMEASURED_STEP), check, lambda: tf.constant(False))
    with tf.control_dependencies([checked]):
        return tf.identity(step)


def _printed(message: tf.Tensor) -> tf.Tensor:
    with tf.control_dependencies([tf.print(message, output_stream=sys.stderr)]):
        return tf.constant(True)
