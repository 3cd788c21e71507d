"""JVP priorities vs per-example gradients, Eq. 9 for ḡ, priorities written by id, PriorityStep."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from echoing import PriorityMeter, PriorityStep, PriorityTable

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


def _model(kind: str) -> keras.Model:
    keras.utils.set_random_seed(0)
    layers = {
        "linear": [keras.layers.Dense(3)],
        "mlp": [keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)],
        "cnn": [
            keras.layers.Reshape((12, 1)),
            keras.layers.Conv1D(4, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(3),
        ],
    }[kind]
    return keras.Sequential([keras.Input((12,)), *layers])


def _data(batch_size: int = 8):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(batch_size, 12)).astype(np.float32)
    y = rng.integers(0, 3, size=batch_size)
    return tf.constant(x), tf.constant(y)


@pytest.mark.parametrize("kind", ["linear", "mlp", "cnn"])
@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf.function"])
def test_jvp_priorities_match_per_example_gradients(kind, in_function):
    model = _model(kind)
    x, y = _data()
    meter = PriorityMeter(PriorityTable(8), model.trainable_variables)
    rng = np.random.default_rng(2)
    for aggregate in meter.aggregated_gradient:
        aggregate.assign(rng.normal(size=aggregate.shape).astype(np.float32))

    def run():
        return meter.losses_gradients_priorities(lambda: LOSS(y, model(x)))

    losses, gradients, priorities = (tf.function(run) if in_function else run)()

    variables = [v.value for v in model.trainable_variables]
    with tf.GradientTape() as tape:
        reference_losses = LOSS(y, model(x))
    jacobians = tape.jacobian(reference_losses, variables)  # per-example gradients
    expected = sum(
        tf.reduce_sum(tf.reshape(j, [8, -1]) * tf.reshape(g, [1, -1]), axis=1)
        for j, g in zip(jacobians, meter.aggregated_gradient, strict=True)
    )
    np.testing.assert_allclose(priorities.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(losses.numpy(), reference_losses.numpy(), rtol=1e-6)
    # The gradient returned is the MEAN over the batch (not a sum).
    for gradient, jacobian in zip(gradients, jacobians, strict=True):
        np.testing.assert_allclose(
            gradient.numpy(), tf.reduce_mean(jacobian, axis=0).numpy(), rtol=1e-4, atol=1e-6
        )


def test_sample_weight_weights_the_gradient_not_the_priorities():
    model = _model("mlp")
    x, y = _data()
    meter = PriorityMeter(PriorityTable(8), model.trainable_variables)
    for aggregate in meter.aggregated_gradient:
        aggregate.assign(tf.ones_like(aggregate))
    weight = tf.constant([2.0, 0.0, 1.0, 1.0, 0.5, 0.0, 3.0, 1.0])
    _, plain_gradients, plain_priorities = meter.losses_gradients_priorities(
        lambda: LOSS(y, model(x))
    )
    _, gradients, priorities = meter.losses_gradients_priorities(
        lambda: LOSS(y, model(x)), sample_weight=weight
    )
    np.testing.assert_allclose(priorities.numpy(), plain_priorities.numpy(), rtol=1e-6)
    with tf.GradientTape() as tape:
        expected_loss = tf.reduce_mean(LOSS(y, model(x)) * weight)
    expected = tape.gradient(expected_loss, model.trainable_variables)
    for gradient, reference in zip(gradients, expected, strict=True):
        np.testing.assert_allclose(gradient.numpy(), reference.numpy(), rtol=1e-5, atol=1e-7)
    assert not np.allclose(gradients[0].numpy(), plain_gradients[0].numpy())


@pytest.mark.parametrize("num_examples,batch_size", [(10, 2), (100, 25), (4, 4)])
def test_aggregated_gradient_follows_eq_9_with_the_mean(num_examples, batch_size):
    variable = tf.Variable(tf.zeros([3]))
    meter = PriorityMeter(PriorityTable(num_examples), [variable])
    ids = tf.range(batch_size)
    mean_gradients = [np.array([1.0, -2.0, 0.5]), np.array([0.25, 4.0, -1.0]), np.ones(3)]
    expected = np.zeros(3)
    keep = 1.0 - batch_size / num_examples
    for step, gradient in enumerate(mean_gradients):
        meter.update(ids, tf.ones([batch_size]), [tf.constant(gradient, tf.float32)], step)
        expected = keep * expected + gradient
        np.testing.assert_allclose(meter.aggregated_gradient[0].numpy(), expected, rtol=1e-6)


def test_priorities_are_written_by_example_id_and_not_before_an_aggregate_exists():
    table = PriorityTable(10)
    meter = PriorityMeter(table, [tf.Variable(tf.zeros([2]))])
    ids = tf.constant([7, 2, 9])
    gradient = [tf.constant([1.0, 0.0])]
    meter.update(ids, tf.constant([1.0, 2.0, 4.0]), gradient, step=0)
    assert np.all(table.measured_step.numpy() == -1), "ḡ was 0: priorities must not be written"
    meter.update(ids, tf.constant([1.0, 2.0, 4.0]), gradient, step=1)
    np.testing.assert_allclose(table.estimate(1).numpy()[[7, 2, 9]], [1.0, 2.0, 4.0], rtol=1e-6)
    unmeasured = np.setdiff1d(np.arange(10), [7, 2, 9])
    assert np.all(table.measured_step.numpy()[unmeasured] == -1)


def test_priority_step_trains_and_refreshes_the_batch_priorities():
    model = _model("mlp")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 12)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)
    table = PriorityTable(40)
    step_fn = PriorityStep(model, LOSS, keras.optimizers.SGD(0.1), table)
    sampled = []
    for step in range(12):
        ids = tf.constant((np.arange(8) + 8 * step) % 40)
        batch = {"x": tf.gather(x, ids), "y": tf.gather(y, ids), "id": ids}
        before = [v.numpy() for v in step_fn.feedback.aggregated_gradient]
        metrics = step_fn(batch, step)
        sampled.append(float(metrics["loss"]))
        if step >= 1:  # priority = ḡ (before the step) · ∇loss_i at the pre-step weights
            priority = metrics["priority"].numpy()
            np.testing.assert_allclose(
                table.estimate(step).numpy()[ids.numpy()],
                np.where(priority > 0, priority, 0.0),  # p <= 0 is stored as estimate 0
                rtol=1e-5,
            )
            assert any(np.any(b != 0) for b in before)
    assert int(metrics["rejected"]) == 0
    assert np.all(table.measured_step.numpy() >= 0)
    # Five passes over 40 examples: the loss goes down (fixed seeds; 0.1 margin, seen 0.5+).
    assert np.mean(sampled[-5:]) < np.mean(sampled[:5]) - 0.1, sampled


@pytest.mark.parametrize(
    "arguments,error,message",
    [
        ({"table": "table"}, TypeError, "PriorityTable or ShardedPriorityTable, got str"),
        ({"variables": []}, ValueError, "variables is empty"),
        ({"variables": [np.zeros(3)]}, TypeError, "tf.Variables or Keras variables.*ndarray"),
    ],
)
def test_meter_errors(arguments, error, message):
    kwargs = {"table": PriorityTable(4), "variables": [tf.Variable(0.0)], **arguments}
    with pytest.raises(error, match=message):
        PriorityMeter(kwargs["table"], kwargs["variables"])


def test_priority_step_rejects_a_non_callable_loss():
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        PriorityStep(_model("linear"), "crossentropy", keras.optimizers.SGD(), PriorityTable(4))
