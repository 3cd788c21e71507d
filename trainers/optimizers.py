"""The run's optimizer: AdamW with linear warm-up, then cosine decay to 0 over ``num_steps``.

Example::

    from trainers import optimizers, run_config

    optimizer = optimizers.make_optimizer(run_config.default_config())
"""

from __future__ import annotations

import keras


def make_optimizer(config) -> keras.optimizers.Optimizer:
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if config.warmup_steps else config.learning_rate,
        decay_steps=config.num_steps - config.warmup_steps,
        warmup_target=config.learning_rate if config.warmup_steps else None,
        warmup_steps=config.warmup_steps,
    )
    return keras.optimizers.AdamW(learning_rate=schedule, weight_decay=config.weight_decay)
