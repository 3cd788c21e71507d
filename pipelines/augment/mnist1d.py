"""Graph-level augmentation for MNIST-1D signals: random shift, amplitude scale and noise.

Example::

    import tensorflow as tf
    from pipelines.augment import mnist1d

    ds = tf.data.Dataset.from_tensors({"inputs": tf.ones([40, 1]), "label": 0, "id": 0})
    ds = ds.repeat(4).apply(mnist1d.augment(seed=0))  # four differently-augmented copies

Each element gets its own stateless seed from a seeded ``Dataset.random`` stream, so the output
is a pure function of ``seed`` and the element order, and repeated (echoed) elements that pass
through this stage are augmented differently.
"""

from __future__ import annotations

import numbers

import tensorflow as tf

from echoing._src.core.types import DatasetTransformation


def augment(
    *,
    seed: int,
    max_shift: int = 3,
    scale_range: tuple[float, float] = (0.9, 1.1),
    noise_stddev: float = 0.05,
    num_parallel_calls: int = tf.data.AUTOTUNE,
) -> DatasetTransformation:
    """Returns a transformation that augments ``element["inputs"]`` of shape [length, channels].

    Args:
      seed: seeds every draw; same seed and input order, same output.
      max_shift: shift each signal by a uniform integer in ``[-max_shift, max_shift]`` along the
        length axis, filling with the edge value (not wrapping, so no template piece jumps ends).
      scale_range: multiply the signal by a uniform factor in this range.
      noise_stddev: add Gaussian noise with this standard deviation (the data are standardised).
      num_parallel_calls: passed to ``Dataset.map``.

    Raises:
      TypeError / ValueError: an argument has the wrong type or range (checked at once).
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"augment seed must be an int, got {seed!r}; e.g. seed=0.")
    if isinstance(max_shift, bool) or not isinstance(max_shift, numbers.Integral) or max_shift < 0:
        raise ValueError(f"max_shift must be an int >= 0, got {max_shift!r}; e.g. max_shift=3.")
    low, high = (float(value) for value in scale_range)
    if not 0 < low <= high:
        raise ValueError(
            f"scale_range must be (low, high) with 0 < low <= high, got {scale_range!r}; "
            "e.g. (0.9, 1.1)."
        )
    if not noise_stddev >= 0:
        raise ValueError(f"noise_stddev must be >= 0, got {noise_stddev!r}; e.g. 0.05.")
    max_shift, noise_stddev = int(max_shift), float(noise_stddev)

    def augment_one(element: dict, draw: tf.Tensor) -> dict:
        signal = element["inputs"]
        seeds = tf.random.experimental.stateless_split(tf.stack([draw, int(seed)]), num=3)
        shift = tf.random.stateless_uniform(
            [], seeds[0], minval=-max_shift, maxval=max_shift + 1, dtype=tf.int32
        )
        scale = tf.random.stateless_uniform([], seeds[1], minval=low, maxval=high)
        noise = tf.random.stateless_normal(tf.shape(signal), seeds[2], stddev=noise_stddev)
        augmented = _shift(signal, shift, max_shift) * scale + noise
        return {**element, "inputs": tf.ensure_shape(augmented, signal.shape)}

    def apply(dataset: tf.data.Dataset) -> tf.data.Dataset:
        draws = tf.data.Dataset.random(seed=seed)
        return tf.data.Dataset.zip((dataset, draws)).map(
            augment_one, num_parallel_calls=num_parallel_calls, deterministic=True
        )

    return apply


def _shift(signal: tf.Tensor, shift: tf.Tensor, max_shift: int) -> tf.Tensor:
    """Shifts along axis 0 by ``shift`` (may be negative), padding with edge values."""
    if max_shift == 0:
        return signal
    length = tf.shape(signal)[0]
    padded = tf.concat(
        [
            tf.repeat(signal[:1], max_shift, axis=0),
            signal,
            tf.repeat(signal[-1:], max_shift, axis=0),
        ],
        axis=0,
    )
    # Output position i reads input position i - shift.
    return padded[max_shift - shift : max_shift - shift + length]
