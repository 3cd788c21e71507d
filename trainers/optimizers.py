"""The run's optimizer: AdamW with linear warm-up, then cosine decay to 0 over ``num_steps``.

Example::

    from trainers import optimizers, run_config

    optimizer = optimizers.make_optimizer(run_config.default_config())

A run a technique measures in its own units (pruning: epochs read, since it takes fewer steps
per epoch) passes ``progress``, the fraction of the run done, and the schedule is indexed by
``progress · num_steps`` instead of the step: the same curve over the same epochs.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf


class ProgressIndexed(keras.optimizers.schedules.LearningRateSchedule):
    """``schedule`` evaluated at ``progress() · num_steps``, or at the optimizer's step when
    that is further: a run ends at the first of its progress and ``num_steps``, and its
    schedule ends with it either way.

    Example::

        schedule = ProgressIndexed(keras.optimizers.schedules.CosineDecay(0.1, 100),
                                   lambda: tf.constant(0.5), num_steps=100)
        schedule(0)  # 0.05: half of the run is done
    """

    def __init__(self, schedule, progress: Callable[[], tf.Tensor], num_steps: int):
        self.schedule, self.progress, self.num_steps = schedule, progress, num_steps

    def __call__(self, step):
        # The run's progress says where on the curve it is, unless its steps run out first.
        along = tf.cast(self.progress(), tf.float32) * self.num_steps
        return self.schedule(tf.maximum(along, tf.cast(step, tf.float32)))

    def get_config(self) -> dict:
        return {"schedule": self.schedule.get_config(), "num_steps": self.num_steps}


def make_optimizer(
    config, progress: Callable[[], tf.Tensor] | None = None
) -> keras.optimizers.Optimizer:
    """AdamW on the config's schedule; indexed by ``progress`` (a fraction) when given."""
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if config.warmup_steps else config.learning_rate,
        decay_steps=config.num_steps - config.warmup_steps,
        warmup_target=config.learning_rate if config.warmup_steps else None,
        warmup_steps=config.warmup_steps,
    )
    if progress is not None:
        schedule = ProgressIndexed(schedule, progress, config.num_steps)
    return keras.optimizers.AdamW(learning_rate=schedule, weight_decay=config.weight_decay)
