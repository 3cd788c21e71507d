"""Tests for trainers.models: output shapes, trainability and every error users can hit."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers import models


@pytest.mark.parametrize(
    ("name", "input_shape", "num_classes"),
    [
        ("mnist1d_mlp", (40,), 10),
        ("mnist1d_cnn", (40,), 10),
        ("mnist1d_cnn", (40, 2), 3),
        ("resnet_small", (32, 32, 3), 10),
    ],
)
def test_build_model_maps_inputs_to_logits_and_learns(name, input_shape, num_classes):
    model = models.build_model(name, input_shape, num_classes)
    inputs = tf.random.stateless_normal([4, *input_shape], seed=[0, 1])
    labels = tf.constant([0, 1, 0, 1], tf.int64)
    assert model(inputs).shape == (4, num_classes)
    # A few SGD steps on 4 fixed examples must lower the loss: the model is wired end to end.
    optimizer = tf.keras.optimizers.SGD(0.05)
    losses = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(
                tf.keras.losses.sparse_categorical_crossentropy(
                    labels, model(inputs, training=True), from_logits=True
                )
            )
        grads = tape.gradient(loss, model.trainable_variables)
        assert all(g is not None for g in grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        losses.append(float(loss))
    assert np.isfinite(losses).all()
    assert losses[-1] < losses[0]


@pytest.mark.parametrize(
    ("name", "input_shape", "num_classes", "error", "message"),
    [
        ("mnist1d_transformer", (40,), 10, ValueError, "mnist1d_cnn"),
        (3, (40,), 10, TypeError, "must be a str"),
        ("mnist1d_mlp", (), 10, ValueError, "non-empty"),
        ("mnist1d_mlp", (0,), 10, ValueError, "positive"),
        ("mnist1d_mlp", 40, 10, TypeError, "sequence of ints"),
        ("mnist1d_mlp", (40,), 1, ValueError, "num_classes"),
        ("resnet_small", (40,), 10, ValueError, "height, width, channels"),
    ],
)
def test_build_model_rejects_bad_input(name, input_shape, num_classes, error, message):
    with pytest.raises(error, match=message):
        models.build_model(name, input_shape, num_classes)


@pytest.mark.parametrize(
    ("name", "inputs"),
    [
        ("mnist1d_mlp", tf.random.stateless_normal([3, 40], seed=[0, 2])),
        ("mnist1d_cnn", tf.random.stateless_normal([3, 40], seed=[0, 3])),
        ("resnet_small", tf.random.stateless_uniform([3, 32, 32, 3], seed=[0, 4])),
        ("resnet_imagenet_tiny", tf.random.stateless_uniform([3, 64, 64, 3], seed=[0, 5])),
        # Token ids of any length: the custom SinusoidalPositions layer must deserialize.
        ("transformer_lm_small", tf.constant([[5, 9, 2, 7, 1]] * 3, tf.int32)),
    ],
)
def test_every_model_saves_as_keras_and_loads_with_the_same_outputs(name, inputs, tmp_path):
    # What a finished run leaves in workdir/model.keras (trainers.experiment).
    input_shape = (None,) if name == "transformer_lm_small" else tuple(inputs.shape[1:])
    model = models.build_model(name, input_shape, 50)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded(inputs), model(inputs), rtol=1e-5, atol=1e-5)
