"""Measures upstream and downstream time per step, and their ratio R = t_up / t_down.

Example::

    import tensorflow as tf
    from trainers import timing

    dataset = tf.data.Dataset.range(10**6).batch(128)
    t_up = timing.seconds_per_batch(dataset, num_batches=30)

Data echoing pays off when the input pipeline is slower than the train step (R > 1); the paper's
rule is an echo factor near R. We measure the two sides separately, each for a few dozen steps:

* t_up: time per batch of the input pipeline alone (iterating the dataset, no training);
* t_down: time per train step on one cached batch repeated, so no input work is included
  (``Trainer.train`` on ``dataset.take(1).cache().repeat()``, after a warm-up that traces it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

# The pipeline-alone timing and the factor rule are the library's (``echoing.diagnose``).
from echoing._src.core.diagnose import (
    MAX_RECOMMENDED_FACTOR,
    NO_ECHO_BELOW_RATIO,
    cached_batch,
    recommended_factor,
    seconds_per_batch,
)

__all__ = [
    "MAX_RECOMMENDED_FACTOR",
    "NO_ECHO_BELOW_RATIO",
    "cached_batch",
    "recommend_echo",
    "seconds_per_batch",
    "seconds_per_step",
]


def seconds_per_step(train: Callable[[int], object], *, num_steps: int, warmup: int = 3) -> float:
    """Mean wall seconds per step of ``train(n)`` (e.g. ``Trainer.train``) over ``num_steps``.

    ``train`` must block until its steps are done (``Trainer.train`` returns a Python float).
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}.")
    train(warmup)
    start = time.perf_counter()
    train(num_steps)
    return (time.perf_counter() - start) / num_steps


def recommend_echo(
    *, upstream_seconds: float, downstream_seconds: float, unaugmented_upstream_seconds: float
) -> dict[str, object]:
    """The echo factor and insertion point the measured times call for.

    Args:
      upstream_seconds: t_up, seconds per batch of the whole echo-free input pipeline.
      downstream_seconds: t_down, seconds per train step on a cached batch.
      unaugmented_upstream_seconds: seconds per batch of the same pipeline without augmentation.

    Returns:
      ``{"ratio": R = t_up / t_down, "echo_factor": 1 if R < 1.05 else min(R, 8),
      "echo_insert": "after_augment" when augmentation is more than half of t_up (echo the
      costly augmented examples) else "before_augment" (reading dominates: echo raw examples and
      augment each copy differently), "augment_fraction": share of t_up spent augmenting}``.
    """
    for name, value in (
        ("upstream_seconds", upstream_seconds),
        ("downstream_seconds", downstream_seconds),
        ("unaugmented_upstream_seconds", unaugmented_upstream_seconds),
    ):
        if not value > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {value!r}; time at least a step.")
    ratio = upstream_seconds / downstream_seconds
    factor = recommended_factor(ratio)
    augment_fraction = max(0.0, upstream_seconds - unaugmented_upstream_seconds) / upstream_seconds
    return {
        "ratio": ratio,
        "echo_factor": factor,
        "echo_insert": "after_augment" if augment_fraction > 0.5 else "before_augment",
        "augment_fraction": augment_fraction,
    }
