"""Models the trainers build by name: MNIST-1D MLP and 1-D CNN, a small ResNet for 32×32 images.

Example::

    import tensorflow as tf
    from trainers import models

    model = models.build_model("mnist1d_cnn", input_shape=(40,), num_classes=10)
    logits = model(tf.zeros([8, 40]))  # [8, 10] unnormalised logits

Every model returns logits (no softmax), so the loss is computed per example with
``from_logits=True`` and the train step can hand per-example losses to feedback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras


def _mnist1d_mlp(input_shape: Sequence[int], num_classes: int) -> keras.Model:
    """Two hidden layers of 256 units (the MNIST-1D paper's MLP, widened)."""
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(256, activation="relu")(x)
    x = keras.layers.Dense(256, activation="relu")(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, logits, name="mnist1d_mlp")


def mnist1d_cnn(input_shape: Sequence[int], num_classes: int, *, width: int = 1) -> keras.Model:
    """A 1-D CNN: four convolutions (three strided), flattened, a hidden and a linear layer.

    A signal of shape ``[length]`` gets a channel axis; ``[length, channels]`` is used as is.
    ``width`` multiplies the filters of every convolution after the first, and the hidden units
    (``benchmarks/selection_profile.py`` grows the Boss this way, its first layer unchanged).

    Example::

        model = mnist1d_cnn((40,), 10, width=2)  # 2x the filters after the first convolution
    """
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = inputs
    if len(input_shape) == 1:
        x = keras.layers.Reshape((input_shape[0], 1))(x)
    x = keras.layers.Conv1D(32, 5, padding="same", activation="relu")(x)
    x = keras.layers.Conv1D(64 * width, 3, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.Conv1D(64 * width, 3, padding="same", activation="relu")(x)
    x = keras.layers.Conv1D(128 * width, 3, strides=2, padding="same", activation="relu")(x)
    # Flatten rather than pool: MNIST-1D digits are defined by where features sit in the signal.
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(128 * width, activation="relu")(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, logits, name="mnist1d_cnn")


def _residual_block(x, filters: int, strides: int):
    shortcut = x
    y = keras.layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False)(x)
    y = keras.layers.BatchNormalization()(y)
    y = keras.layers.ReLU()(y)
    y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
    y = keras.layers.BatchNormalization()(y)
    if strides != 1 or shortcut.shape[-1] != filters:
        shortcut = keras.layers.Conv2D(filters, 1, strides=strides, use_bias=False)(shortcut)
        shortcut = keras.layers.BatchNormalization()(shortcut)
    return keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))


def _resnet_small(input_shape: Sequence[int], num_classes: int) -> keras.Model:
    """A ResNet with three stages of one basic block (16, 32, 64 filters), for 32×32 images."""
    if len(input_shape) != 3:
        raise ValueError(
            f"resnet_small expects image inputs [height, width, channels], got input_shape="
            f"{tuple(input_shape)}; use an image dataset or one of the mnist1d models."
        )
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    for filters, strides in ((16, 1), (32, 2), (64, 2)):
        x = _residual_block(x, filters, strides)
    x = keras.layers.GlobalAveragePooling2D()(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, logits, name="resnet_small")


def _resnet_imagenet_tiny(input_shape: Sequence[int], num_classes: int) -> keras.Model:
    """ResNet's ImageNet shape, shrunk: a strided stem and max-pool, then three stages of one
    basic block (16, 32, 64 filters), each halving the resolution, so the features are 1/32 of
    the input as in ResNet-50 (64 px in, 2x2 out). Cheap enough per image that decoding JPEGs is
    the bottleneck on a CPU, as it is for ResNet-50 on an accelerator."""
    if len(input_shape) != 3:
        raise ValueError(
            f"resnet_imagenet_tiny expects image inputs [height, width, channels], got "
            f"input_shape={tuple(input_shape)}; use an image dataset."
        )
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
    for filters in (16, 32, 64):
        x = _residual_block(x, filters, strides=2)
    x = keras.layers.GlobalAveragePooling2D()(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, logits, name="resnet_imagenet_tiny")


def _transformer_lm_small(input_shape: Sequence[int], num_classes: int) -> keras.Model:
    """A decoder-only Transformer language model: token ids [batch, length] -> next-token
    logits [batch, length, vocabulary]; 2 pre-norm blocks, width 128, 4 heads, sinusoidal
    positions (any length), causal self-attention. Padding sits at the end of each sequence, so
    causal attention never lets a real token see it."""
    if len(input_shape) != 1:
        raise ValueError(
            f"transformer_lm_small expects token ids [length], got input_shape="
            f"{tuple(input_shape)}; use source='text'."
        )
    width, heads, blocks = 128, 4, 2
    inputs = keras.Input(shape=(None,), dtype="int32", name="inputs")
    x = SinusoidalPositions()(keras.layers.Embedding(num_classes, width)(inputs))
    for _ in range(blocks):
        y = keras.layers.LayerNormalization()(x)
        y = keras.layers.MultiHeadAttention(heads, width // heads)(y, y, use_causal_mask=True)
        x = x + y
        y = keras.layers.LayerNormalization()(x)
        y = keras.layers.Dense(4 * width, activation="gelu")(y)
        x = x + keras.layers.Dense(width)(y)
    x = keras.layers.LayerNormalization()(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, logits, name="transformer_lm_small")


@keras.saving.register_keras_serializable(package="trainers")
class SinusoidalPositions(keras.layers.Layer):
    """Adds sinusoidal position encodings to [batch, length, width] embeddings, any length.

    Registered with Keras (as ``trainers>SinusoidalPositions``): a saved language model
    (``workdir/model.keras``) loads with ``keras.models.load_model`` once ``trainers.models``
    is imported (Keras imports only its own modules when it loads), as the run's
    ``trained model:`` line says (``trainers.summary.trained_model_line``).
    """

    def call(self, embeddings):
        length, width = keras.ops.shape(embeddings)[1], embeddings.shape[-1]
        positions = keras.ops.cast(keras.ops.arange(length), "float32")
        # 10000 ** (-2i / width), with ln(10000) = 9.2103.
        frequencies = keras.ops.exp(
            keras.ops.arange(0, width, 2, dtype="float32") * (-9.210340371976184 / width)
        )
        angles = positions[:, None] * frequencies[None, :]
        encoding = keras.ops.concatenate([keras.ops.sin(angles), keras.ops.cos(angles)], axis=-1)
        return embeddings + keras.ops.cast(encoding[None], embeddings.dtype)


MODELS: dict[str, Callable[[Sequence[int], int], keras.Model]] = {
    "mnist1d_mlp": _mnist1d_mlp,
    "mnist1d_cnn": mnist1d_cnn,
    "resnet_small": _resnet_small,
    "resnet_imagenet_tiny": _resnet_imagenet_tiny,
    "transformer_lm_small": _transformer_lm_small,
}


def build_model(name: str, input_shape: Sequence[int], num_classes: int) -> keras.Model:
    """Builds the named model; call it under ``strategy.scope()`` to place its variables.

    Args:
      name: one of ``MODELS``: "mnist1d_mlp", "mnist1d_cnn", "resnet_small",
        "resnet_imagenet_tiny", "transformer_lm_small" (input_shape (None,): token ids).
      input_shape: shape of one example, without the batch axis (e.g. ``(40,)``, ``(32, 32, 3)``).
      num_classes: number of output logits.

    Returns:
      A ``keras.Model`` mapping ``[batch, *input_shape]`` float32 inputs to ``[batch, num_classes]``
      logits.

    Raises:
      ValueError: unknown name, empty or non-positive shape, fewer than 2 classes.
      TypeError: name is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(f"model name must be a str, got {name!r} ({type(name).__name__}).")
    if name not in MODELS:
        raise ValueError(
            f"unknown model name {name!r}; expected one of {sorted(MODELS)}. "
            "Set config.model to one of these."
        )
    try:
        shape = tuple(None if dim is None else int(dim) for dim in input_shape)
    except TypeError as error:
        raise TypeError(
            f"input_shape must be a sequence of ints like (40,), got {input_shape!r}."
        ) from error
    if not shape or any(dim is not None and dim <= 0 for dim in shape):
        raise ValueError(
            f"input_shape must be non-empty with positive dimensions, got {input_shape!r}."
        )
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an int >= 2, got {num_classes!r}.")
    return MODELS[name](shape, num_classes)
