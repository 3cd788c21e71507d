"""Graph-level image augmentation: random crop-resize, horizontal flip, colour jitter.

Example::

    import tensorflow as tf
    from pipelines.augment import image

    ds = tf.data.Dataset.from_tensors({"inputs": tf.random.uniform([32, 32, 3]), "label": 0})
    ds = ds.repeat(4).apply(image.augment(seed=0))  # four different crops/flips/colours

Works on any decoded image dataset (float32 [height, width, channels] in [0, 1], as the
pipeline's ``decode`` stage makes them); the output keeps the input's shape. Each element draws
its own stateless seed from a seeded ``Dataset.random`` stream: the output is a pure function of
``seed`` and the element order, and echoes inserted before this stage are augmented differently.
"""

from __future__ import annotations

import numbers

import tensorflow as tf

from echoing._src.core.types import DatasetTransformation


def augment(
    *,
    seed: int,
    crop: bool = True,
    area_range: tuple[float, float] = (0.25, 1.0),
    aspect_ratio_range: tuple[float, float] = (3 / 4, 4 / 3),
    flip: bool = True,
    brightness: float = 0.2,
    contrast: float = 0.2,
    saturation: float = 0.2,
    num_parallel_calls: int = tf.data.AUTOTUNE,
) -> DatasetTransformation:
    """Returns a transformation that augments ``element["inputs"]`` (an image) per element.

    Args:
      seed: seeds every draw; same seed and input order, same output.
      crop: random crop-resize (False when the decode stage has cropped already).
      area_range: the crop covers this fraction of the image area before it is resized back.
      aspect_ratio_range: crop width / height range.
      flip: flip left-right with probability 1/2.
      brightness: add a uniform delta in ``[-brightness, brightness]`` (0 = off).
      contrast: scale contrast by a uniform factor in ``[1 - contrast, 1 + contrast]`` (0 = off).
      saturation: scale saturation likewise (3-channel images only; 0 = off).
      num_parallel_calls: passed to ``Dataset.map``.

    Raises:
      TypeError / ValueError: an argument has the wrong type or range (checked at once).
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"augment seed must be an int, got {seed!r}; e.g. seed=0.")
    _check_range("area_range", area_range, upper=1.0, example="(0.25, 1.0)")
    _check_range("aspect_ratio_range", aspect_ratio_range, upper=None, example="(0.75, 1.33)")
    for argument, value in (("brightness", brightness), ("contrast", contrast)):
        if not 0 <= value <= 1:
            raise ValueError(f"{argument} must be in [0, 1], got {value!r}; e.g. 0.2, 0 = off.")
    if not 0 <= saturation <= 1:
        raise ValueError(f"saturation must be in [0, 1], got {saturation!r}; e.g. 0.2, 0 = off.")

    def augment_one(element: dict, draw: tf.Tensor) -> dict:
        picture = element["inputs"]
        shape = picture.shape
        if shape.rank != 3 or not shape.is_fully_defined():
            raise ValueError(
                "image augmentation needs fixed-size images [height, width, channels], got "
                f"inputs of shape {shape}; set data config augment='none' or data config "
                "image_size."
            )
        seeds = tf.random.experimental.stateless_split(tf.stack([draw, int(seed)]), num=5)
        if crop:
            begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
                tf.shape(picture),
                bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
                seed=seeds[0],
                min_object_covered=0.0,
                aspect_ratio_range=aspect_ratio_range,
                area_range=area_range,
                use_image_if_no_bounding_boxes=True,
            )
            picture = tf.image.resize(tf.slice(picture, begin, size), shape[:2])
        if flip:
            picture = tf.image.stateless_random_flip_left_right(picture, seeds[1])
        if brightness:
            picture = tf.image.stateless_random_brightness(picture, brightness, seeds[2])
        if contrast:
            picture = tf.image.stateless_random_contrast(
                picture, 1 - contrast, 1 + contrast, seeds[3]
            )
        if saturation and shape[-1] == 3:
            picture = tf.image.stateless_random_saturation(
                picture, 1 - saturation, 1 + saturation, seeds[4]
            )
        picture = tf.clip_by_value(picture, 0.0, 1.0)
        return {**element, "inputs": tf.ensure_shape(picture, shape)}

    def apply(dataset: tf.data.Dataset) -> tf.data.Dataset:
        draws = tf.data.Dataset.random(seed=seed)
        return tf.data.Dataset.zip((dataset, draws)).map(
            augment_one,
            num_parallel_calls=num_parallel_calls,
            deterministic=None if num_parallel_calls is None else True,
        )

    return apply


def _check_range(argument: str, value, *, upper: float | None, example: str) -> None:
    try:
        low, high = (float(bound) for bound in value)
    except (TypeError, ValueError):
        raise TypeError(
            f"{argument} must be a (low, high) pair, got {value!r}; e.g. {example}."
        ) from None
    if not 0 < low <= high or (upper is not None and high > upper):
        limit = f" <= {upper}" if upper is not None else ""
        raise ValueError(
            f"{argument} must be (low, high) with 0 < low <= high{limit}, got {value!r}; "
            f"e.g. {example}."
        )
