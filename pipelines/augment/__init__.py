"""Graph-level augmentations, one module per kind of data.

Example::

    from pipelines import augment

    transformation = augment.for_config("mnist1d", seed=0)  # Dataset -> Dataset
"""

from __future__ import annotations

import tensorflow as tf

from echoing._src.core.types import DatasetTransformation
from pipelines.augment import mnist1d

__all__ = ["for_config", "mnist1d"]


def for_config(
    kind: str, *, seed: int, num_parallel_calls: int = tf.data.AUTOTUNE
) -> DatasetTransformation:
    """The augmentation a data config's ``augment`` names: "mnist1d", "image", "inception" or
    "none" ("inception" flips here: its crop happens while decoding, see ``pipelines.datasets``).
    """
    if kind == "mnist1d":
        return mnist1d.augment(seed=seed, num_parallel_calls=num_parallel_calls)
    if kind == "image":
        from pipelines.augment import image

        return image.augment(seed=seed, num_parallel_calls=num_parallel_calls)
    if kind == "inception":
        from pipelines.augment import image

        return image.augment(
            seed=seed,
            crop=False,
            brightness=0.0,
            contrast=0.0,
            saturation=0.0,
            num_parallel_calls=num_parallel_calls,
        )
    if kind == "none":
        return lambda dataset: dataset
    raise ValueError(
        f"augment must be one of ['mnist1d', 'image', 'inception', 'none'], got {kind!r}."
    )
