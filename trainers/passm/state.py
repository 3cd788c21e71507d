"""The shared state of asynchronous partitioned training: parameters, momenta and counters.

Example::

    import keras
    import tensorflow as tf
    from trainers.passm.state import TrainingState

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    state = TrainingState(model, blocks=[range(2)], momentum=0.9)
    written = state.apply([0, 1], [tf.ones([4, 2]), tf.ones([2])], rate=tf.constant(0.1))
    print(state.counters()["updates_applied"])  # 0: finish_step counts an update

Under a ``ParameterServerStrategy`` every variable lives on the parameter servers, so all
workers read and write the same ones (lock-free); the counters are ``assign_add``s there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf


def _raw_variable(variable: Any) -> tf.Variable:
    # Keras 3 wraps tf.Variables; tape.watch and assign need the tf.Variable underneath.
    value = getattr(variable, "value", variable)
    return value if isinstance(value, tf.Variable) else variable


class TrainingState(tf.Module):
    """Parameters, momentum buffers and counters, created under the strategy's scope."""

    def __init__(
        self,
        model: keras.Model,
        blocks: Sequence[range],
        momentum: float,
        *,
        num_momentum_sets: int = 1,
    ):
        super().__init__(name="training_state")
        self.parameters = [_raw_variable(v) for v in model.trainable_variables]
        self.buffers = [_raw_variable(v) for v in model.non_trainable_variables]
        # One set per worker that keeps its own momentum (the shared-memory backend, as in the
        # paper's processes); set 0 is ``momenta``, the set the parameter-server workers share.
        self.momentum_sets = [
            [
                tf.Variable(tf.zeros_like(v), trainable=False, name=f"momentum_{s}_{i}")
                for i, v in enumerate(self.parameters)
            ]
            for s in range(num_momentum_sets)
        ]
        self.momenta = self.momentum_sets[0]
        num_blocks = len(blocks)

        def counters(name: str) -> list[tf.Variable]:
            return [
                tf.Variable(0, dtype=tf.int64, trainable=False, name=f"{name}_{b}")
                for b in range(num_blocks)
            ]

        self.versions = counters("block_version")  # updates applied to each block
        self.staleness_sum = counters("staleness_sum")
        self.staleness_max = counters("staleness_max")
        self.updates_applied = tf.Variable(0, dtype=tf.int64, trainable=False)
        # Incremented first thing in every step: started − completed counts steps that began more
        # than once (a worker died under them and the coordinator ran them again elsewhere).
        self.steps_started = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.examples_seen = tf.Variable(0, dtype=tf.int64, trainable=False)
        # Steps the coordinator saw finish (set between chunks): the resume point.
        self.completed_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.blocks = [list(block) for block in blocks]
        self.momentum = float(momentum)

    def apply(
        self,
        indices: Sequence[int],
        gradients: Sequence[tf.Tensor],
        rate: tf.Tensor,
        *,
        momentum_set: int = 0,
    ) -> list[tf.Tensor]:
        """Momentum update of ``parameters[indices]`` with ``momentum_sets[momentum_set]``;
        returns the written values."""
        momenta = self.momentum_sets[momentum_set]
        written = []
        for index, gradient in zip(indices, gradients, strict=True):
            velocity = momenta[index].assign(self.momentum * momenta[index] + gradient)
            written.append(
                self.parameters[index].assign_sub(tf.cast(rate, velocity.dtype) * velocity)
            )
        return written

    def record(
        self, block: int, version_read: tf.Tensor, written: Sequence[tf.Tensor]
    ) -> list[tf.Tensor]:
        """Moves ``block``'s version and records its staleness; returns the counters written
        (a ``tf.CriticalSection`` holds its lock until what its function returns has run)."""
        # The version moves only after the block's parameters are written (nothing else orders
        # them: automatic control dependencies only chain ops on the same variable).
        with tf.control_dependencies(written):
            version_written = self.versions[block].assign_add(1)
        staleness = version_written - 1 - version_read
        total = self.staleness_sum[block].assign_add(staleness)
        # Racy max (read, then write) is fine: it is a diagnostic, and only this block's owner
        # writes it in PASSM.
        most = self.staleness_max[block].assign(tf.maximum(self.staleness_max[block], staleness))
        return [version_written, total, most]

    def finish_step(self, batch_size: tf.Tensor, after: Sequence[tf.Tensor]) -> None:
        # Counted only once the update is written, so a step cut short by a dying worker does
        # not count as applied.
        with tf.control_dependencies(after):
            self.updates_applied.assign_add(1)
        self.examples_seen.assign_add(tf.cast(batch_size, tf.int64))

    def counters(self) -> dict[str, Any]:
        updates = [int(v.numpy()) for v in self.versions]
        sums = [int(v.numpy()) for v in self.staleness_sum]
        return {
            "updates_applied": int(self.updates_applied.numpy()),
            "steps_started": int(self.steps_started.numpy()),
            "examples_seen": int(self.examples_seen.numpy()),
            "completed_steps": int(self.completed_steps.numpy()),
            "block_updates": updates,
            "block_staleness_mean": [
                total / count if count else 0.0 for total, count in zip(sums, updates, strict=True)
            ],
            "block_staleness_max": [int(v.numpy()) for v in self.staleness_max],
        }
