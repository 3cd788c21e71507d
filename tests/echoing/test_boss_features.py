"""BossFeatures: the Boss's first layers on a host copy, pooled, as Assistant features."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing


def _boss(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((40,), name="inputs")
    x = keras.layers.Reshape((40, 1))(inputs)
    x = keras.layers.Conv1D(8, 5, padding="same", activation="relu", name="conv")(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x))


def _examples(n=64):
    rng = np.random.default_rng(0)
    return {
        "inputs": rng.normal(size=(n, 40)).astype(np.float32),
        "label": rng.integers(0, 10, n).astype(np.int64),
        "id": np.arange(n, dtype=np.int64),
    }


def test_features_are_the_boss_layer_pooled_for_a_batch_and_for_one_example():
    boss = _boss()
    features = echoing.BossFeatures(boss, "conv", pool_size=4)
    x = _examples()["inputs"][:6]
    conv = keras.Model(boss.input, boss.get_layer("conv").output)(x).numpy()  # [6, 40, 8]
    expected = conv.reshape(6, 10, 4, 8).mean(axis=2).reshape(6, 80)
    assert features.shape == (80,)
    np.testing.assert_allclose(features({"inputs": x}).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        features({"inputs": x[2]}).numpy(), expected[2], rtol=1e-5, atol=1e-6
    )


def test_the_host_copy_follows_the_boss_only_on_refresh():
    boss = _boss()
    features = echoing.BossFeatures(boss, "conv", pool_size=1)
    x = {"inputs": _examples()["inputs"][:4]}
    before = features(x).numpy()
    kernel = boss.get_layer("conv").kernel
    kernel.assign(kernel * 2.0)
    np.testing.assert_array_equal(features(x).numpy(), before)  # stale until refreshed
    features.refresh()
    after = features(x).numpy()
    assert features.shape == (320,)
    assert not np.allclose(after, before)
    # relu(2·w·x + b) with b = 0 at initialisation: exactly twice the old features.
    np.testing.assert_allclose(after, 2 * before, rtol=1e-5, atol=1e-6)


def test_filter_and_learner_score_and_train_on_boss_features():
    boss = _boss()
    features = echoing.BossFeatures(boss, "conv", pool_size=4)
    assistant = echoing.Assistant(num_classes=10, input_shape=features.shape)
    examples = _examples(256)
    stage = echoing.assistant_filter(assistant, features=features, base_prob=0.5, seed=0)
    dataset = tf.data.Dataset.from_tensor_slices(examples).apply(stage)
    with echoing.AssistantLearner(assistant, features=features, asynchronous=False) as learner:
        batch = {key: value[:64] for key, value in examples.items()}
        losses = np.where(np.arange(64) % 2 == 0, 3.0, 0.1).astype(np.float32)
        learner.feedback(batch, losses)
        assert learner.stats()["trained_examples"] == 64
    kept = sum(1 for _ in dataset)
    assert 0 < kept <= 256
    assert stage.stats()["filter_seen"] == 256
    assert np.any(assistant.kernel.numpy() != 0)  # the learner trained on the pooled features


def test_tap_is_the_boss_answering_with_the_features_of_its_own_forward_pass():
    boss = _boss()
    features = echoing.BossFeatures(boss, "conv", pool_size=4)
    x = _examples()["inputs"][:6]
    logits, feature_map = features.tap(x, training=True)
    np.testing.assert_allclose(logits.numpy(), boss(x).numpy(), rtol=1e-5, atol=1e-6)
    # The host copy is fresh here, so both routes give the same features.
    np.testing.assert_allclose(
        features.pool(feature_map).numpy(), features({"inputs": x}).numpy(), rtol=1e-5, atol=1e-6
    )
    # Training through the tap trains the Boss's own variables; the pooled features pass no
    # gradient back (the Assistant's loss must not move the Boss).
    with tf.GradientTape(persistent=True) as tape:
        logits, feature_map = features.tap(x, training=True)
        boss_loss = tf.reduce_mean(tf.square(logits))
        pooled = tf.reduce_sum(features.pool(feature_map))
    kernel = boss.get_layer("conv").kernel
    assert tape.gradient(boss_loss, kernel) is not None
    assert tape.gradient(pooled, kernel) is None
    assert [v.path for v in features.tap.trainable_variables] == [
        v.path for v in boss.trainable_variables
    ]


def test_the_learner_trains_on_features_from_the_boss_forward_pass():
    boss = _boss()
    features = echoing.BossFeatures(boss, "conv", pool_size=4)
    assistant = echoing.Assistant(num_classes=10, input_shape=features.shape)
    batch = {key: value[:64] for key, value in _examples(64).items()}
    _, feature_map = features.tap(batch["inputs"], training=True)
    losses = np.where(np.arange(64) % 2 == 0, 3.0, 0.1).astype(np.float32)
    with echoing.AssistantLearner(assistant, asynchronous=False) as learner:
        learner.push(features.pool(feature_map), batch["label"], losses)
        assert learner.stats()["trained_examples"] == 64
    assert np.any(assistant.kernel.numpy() != 0)


def test_bad_arguments_are_clear_errors():
    boss = _boss()
    with pytest.raises(ValueError, match=r"up_to='conv2'.*no layer of that name.*'conv'"):
        echoing.BossFeatures(boss, "conv2")
    with pytest.raises(ValueError, match=r"pool_size=0.*int >= 1"):
        echoing.BossFeatures(boss, "conv", pool_size=0)

    class Subclassed(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(TypeError, match=r"boss=Subclassed.*functional or Sequential"):
        echoing.BossFeatures(Subclassed(), "conv")
    a, b = keras.Input((4,)), keras.Input((4,))
    two_inputs = keras.Model([a, b], keras.layers.Dense(2, name="dense")(a + b))
    with pytest.raises(ValueError, match=r"has 2 inputs; it reads one"):
        echoing.BossFeatures(two_inputs, "dense")
