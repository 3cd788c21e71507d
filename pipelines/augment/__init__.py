"""Graph-level augmentations, one module per kind of data.

Example::

    from pipelines import augment

    transformation = augment.for_config("mnist1d", seed=0)  # Dataset -> Dataset
"""

from __future__ import annotations

import tensorflow as tf

from echoing._src.core.types import DatasetTransformation
from pipelines.augment import mnist1d

__all__ = ["check_fits", "for_config", "mnist1d"]


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


# The rank of one example's inputs each augmentation transforms: signals [length, channels],
# images [height, width, channels].
_INPUT_RANKS = {"mnist1d": 2, "image": 3, "inception": 3}


def check_fits(kind: str, input_shape) -> None:
    """Raises ValueError, before any pipeline runs, when the augmentation ``kind`` does not fit
    examples of ``input_shape`` (MNIST-1D's shifts of a signal on images would run, along
    their rows, and say nothing)."""
    rank = _INPUT_RANKS.get(kind)
    if rank is None or len(input_shape) == rank:
        return
    what = "signals [length, channels]" if rank == 2 else "images [height, width, channels]"
    fitting = {2: "'mnist1d' or ", 3: "'image' or "}.get(len(input_shape), "")
    raise ValueError(
        f"data config augment={kind!r} augments {what}, and this data's inputs have shape "
        f"{tuple(input_shape)}; set augment={fitting}'none'."
    )
