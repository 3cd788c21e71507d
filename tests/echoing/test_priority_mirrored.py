"""Priorities and ḡ under MirroredStrategy on 2 logical CPUs equal the default strategy's,
in a custom loop and through ``model.fit`` (``echoing.keras.PriorityModel``).

The check runs in a subprocess (``python this_file``), because logical devices must be configured
before TensorFlow initialises, which the rest of the test session has already done.
"""

import pathlib
import subprocess
import sys

import numpy as np


def _data():
    import tensorflow as tf

    x = tf.random.stateless_normal([40, 6], seed=[0, 0])
    y = tf.range(40, dtype=tf.int64) % 3
    ids = tf.constant(np.random.default_rng(0).permutation(40), tf.int64)
    return tf.data.Dataset.from_tensor_slices(
        {"x": tf.gather(x, ids), "y": tf.gather(y, ids), "id": ids}
    )


def _model():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, "tanh"), keras.layers.Dense(3)]
    )


def _result(table, meter, model):
    def local(variable):
        values = getattr(variable, "values", None)
        return (values[0] if values else variable).numpy()

    return {
        "log_priority": table.log_priority.numpy(),
        "measured_step": table.measured_step.numpy(),
        "aggregated_gradient": np.concatenate(
            [local(v).ravel() for v in meter.aggregated_gradient]
        ),
        "weights": np.concatenate([np.ravel(v.numpy()) for v in model.trainable_variables]),
    }


def _run_fit(strategy):
    """The same 10 steps through ``model.fit`` with ``echoing.keras.PriorityModel``."""
    import keras

    import echoing

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    table = echoing.PriorityTable(40)
    with strategy.scope():
        model = echoing.keras.PriorityModel(_model(), per_example_loss=loss_fn, table=table)
        model.compile(keras.optimizers.SGD(0.5))
    batches = _data().batch(8, drop_remainder=True).repeat(2)
    batches = batches.map(lambda b: ({"inputs": b["x"], "id": b["id"]}, b["y"]))
    model.fit(batches, epochs=1, verbose=0, shuffle=False)
    return _result(table, model.feedback, model.model)


def _run(strategy):
    import keras
    import tensorflow as tf

    from echoing import PriorityMeter, PriorityTable

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    table = PriorityTable(40)  # host-side, outside the strategy scope
    with strategy.scope():
        model = _model()
        optimizer = keras.optimizers.SGD(0.5)
        meter = PriorityMeter(table, model.trainable_variables)
    data = _data()
    dataset = strategy.experimental_distribute_dataset(data.batch(8, drop_remainder=True).repeat(2))

    @tf.function
    def step(batch, number):
        def replica_step(batch):
            _, gradients, priorities = meter.losses_gradients_priorities(
                lambda: loss_fn(batch["y"], model(batch["x"], training=True))
            )
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            meter.update(batch["id"], priorities, gradients, number)

        strategy.run(replica_step, args=(batch,))

    for number, batch in enumerate(dataset):
        step(batch, tf.constant(number, tf.int64))
    return _result(table, meter, model)


def _check():
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    default = _run(tf.distribute.get_strategy())
    mirrored = _run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    fit = _run_fit(tf.distribute.get_strategy())
    fit_mirrored = _run_fit(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    assert np.all(default["measured_step"] >= 0), "10 steps of 8 over 40 ids measure every id"
    for name, other in (("mirrored", mirrored), ("fit", fit), ("fit mirrored", fit_mirrored)):
        np.testing.assert_array_equal(other["measured_step"], default["measured_step"], name)
        for key in ("log_priority", "aggregated_gradient", "weights"):
            np.testing.assert_allclose(
                other[key], default[key], rtol=1e-4, atol=1e-6, err_msg=f"{name}: {key}"
            )
    print("MIRRORED_EQUALS_DEFAULT")


def test_mirrored_priorities_equal_default():
    result = subprocess.run(
        [sys.executable, str(pathlib.Path(__file__).resolve())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "MIRRORED_EQUALS_DEFAULT" in result.stdout, result.stderr[-3000:]


if __name__ == "__main__":
    _check()
