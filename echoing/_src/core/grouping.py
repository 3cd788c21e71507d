"""What the filter stages share: how many elements to decide at once, and their uniform draws.

Example::

    import tensorflow as tf
    from echoing._src.core import grouping

    spec = {"inputs": tf.TensorSpec([40]), "id": tf.TensorSpec([], tf.int64)}
    print(grouping.group_size(spec, 128))  # 128: dense, static shapes batch into groups
    print(float(grouping.uniform(tf.constant(0, tf.int64))))  # 1.16e-10, in (0, 1)
    grouping.require_key(spec, "id", "loss_prune", "id_key")  # passes: elements have an "id"
"""

from __future__ import annotations

import tensorflow as tf

# Dataset.random yields uniform integers in [0, 2**32) (as int64).
_RANDOM_RANGE = float(1 << 32)


def group_size(element_spec, preferred: int) -> int:
    """``preferred`` for dense elements of one static shape (decided in vectorised groups),
    else 1 (variable-length or ragged elements, which ``batch(1)`` handles for every shape)."""
    static = all(
        isinstance(spec, tf.TensorSpec) and spec.shape.is_fully_defined()
        for spec in tf.nest.flatten(element_spec)
    )
    return preferred if static else 1


def uniform(random: tf.Tensor) -> tf.Tensor:
    """float32 uniforms in (0, 1) from ``Dataset.random``'s int64 draws in ``[0, 2**32)``."""
    return tf.cast((tf.cast(random, tf.float64) + 0.5) / _RANDOM_RANGE, tf.float32)


def require_key(element_spec, key: str, stage: str, argument: str) -> None:
    """A TypeError naming ``stage`` unless elements are dicts holding ``key`` (set by
    ``argument`` of the stage)."""
    if not isinstance(element_spec, dict) or key not in element_spec:
        raise TypeError(
            f"{stage} needs unbatched dict elements with a {key!r} key, got element_spec "
            f"{element_spec}; map your elements to {{'inputs': ..., 'label': ..., 'id': ...}} "
            f"first, or set {argument}."
        )
