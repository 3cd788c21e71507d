"""Tests for echoing.assistant: the scorer's formula, Keras save/load, checkpoints, bad input."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from echoing import Assistant


def _reference_scores(features, labels, kernel, label_bias, bias, downsample):
    """NumPy version of sigmoid(w·pool(flatten(x)) + u[y] + c)."""
    flat = features.reshape(len(features), -1)
    width = kernel.shape[0]
    padded = np.zeros((len(flat), width * downsample), np.float64)
    padded[:, : flat.shape[1]] = flat
    pooled = padded.reshape(len(flat), width, downsample).mean(-1)
    return 1 / (1 + np.exp(-(pooled @ kernel + label_bias[labels] + bias)))


@pytest.mark.parametrize(
    "feature_shape, num_classes, downsample, kernel_width",
    [
        ((40,), 10, 1, 40),
        ((40,), 10, 4, 10),
        ((7,), 3, 2, 4),  # 7 values in runs of 2: the last run is zero-padded
        ((4, 4, 3), 5, 3, 16),
    ],
)
def test_scores_match_logistic_regression_formula(
    feature_shape, num_classes, downsample, kernel_width
):
    rng = np.random.default_rng(0)
    assistant = Assistant(num_classes, input_shape=feature_shape, downsample=downsample)
    assert assistant.kernel.shape == (kernel_width,)
    kernel = rng.normal(size=kernel_width).astype(np.float32)
    label_bias = rng.normal(size=num_classes).astype(np.float32)
    assistant.kernel.assign(kernel)
    assistant.label_bias.assign(label_bias)
    assistant.bias.assign(0.25)
    features = rng.normal(size=(16, *feature_shape)).astype(np.float32)
    labels = rng.integers(0, num_classes, 16)
    scores = assistant((tf.constant(features), tf.constant(labels))).numpy()
    expected = _reference_scores(features, labels, kernel, label_bias, 0.25, downsample)
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
    assert scores.shape == (16,)


def test_untrained_assistant_scores_one_half():
    assistant = Assistant(10, input_shape=(40,))
    scores = assistant((tf.random.normal([8, 40], seed=1), tf.range(8))).numpy()
    np.testing.assert_allclose(scores, 0.5)


def test_builds_on_first_call_without_input_shape():
    assistant = Assistant(3)
    assert not assistant.built
    scores = assistant((tf.ones([2, 5]), tf.constant([0, 2])))
    assert assistant.built and assistant.kernel.shape == (5,)
    assert scores.shape == (2,)


def test_keras_save_and_load_round_trip(tmp_path):
    assistant = Assistant(4, input_shape=(6,), downsample=2)
    assistant.kernel.assign([1.0, -2.0, 0.5])
    assistant.label_bias.assign([0.1, 0.2, -0.3, 0.4])
    assistant.bias.assign(-0.7)
    path = str(tmp_path / "assistant.keras")
    assistant.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, Assistant)
    assert (restored.num_classes, restored.downsample) == (4, 2)
    inputs = (tf.random.normal([5, 6], seed=2), tf.constant([0, 1, 2, 3, 0]))
    np.testing.assert_allclose(restored(inputs).numpy(), assistant(inputs).numpy(), rtol=1e-6)


def test_restores_with_a_training_checkpoint(tmp_path):
    boss = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
    boss_optimizer = keras.optimizers.SGD(0.1)
    boss_optimizer.build(boss.trainable_variables)
    assistant = Assistant(3, input_shape=(6,))
    step = tf.Variable(7, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(
        boss=boss, optimizer=boss_optimizer, assistant=assistant, step=step
    )
    assistant.kernel.assign(np.arange(6, dtype=np.float32))
    assistant.label_bias.assign([1.0, 2.0, 3.0])
    boss_weights = [w.numpy() for w in boss.weights]
    path = checkpoint.save(str(tmp_path / "ckpt"))

    assistant.kernel.assign(np.zeros(6, np.float32))
    assistant.label_bias.assign(np.zeros(3, np.float32))
    boss.layers[0].kernel.assign(np.zeros((6, 3), np.float32))
    step.assign(0)

    checkpoint.restore(path).assert_consumed()
    np.testing.assert_array_equal(assistant.kernel.numpy(), np.arange(6))
    np.testing.assert_array_equal(assistant.label_bias.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(boss.weights[0].numpy(), boss_weights[0])
    assert int(step.numpy()) == 7


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_classes": 0}, "num_classes=0"),
        ({"num_classes": "10"}, "num_classes='10'"),
        ({"num_classes": True}, "num_classes=True"),
        ({"num_classes": 10, "downsample": 0}, "downsample=0"),
        ({"num_classes": 10, "downsample": 1.5}, "downsample=1.5"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Assistant(**kwargs)


def test_variable_feature_shape_is_rejected():
    with pytest.raises(ValueError, match="static feature shape"):
        Assistant(3).build(((None, None), (None,)))
