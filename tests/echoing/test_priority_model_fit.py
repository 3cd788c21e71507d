"""``echoing.keras.PriorityModel`` trains as a Keras model does: regularization losses, mixed
precision, and the loss given to ``compile`` (issue 33: the first two were silently dropped)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing

N, BATCH = 128, 16


def _fit(*, regularizer=None, steps=10, learning_rate=0.1, compile_loss=None, change=None):
    """Trains a Dense layer under priority sampling; returns (its kernel before, after)."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    arrays = {"inputs": rng.normal(size=(N, 8)).astype("float32"), "label": np.arange(N) % 2}
    table = echoing.PriorityTable(N)
    batches = echoing.priority_sample(
        table, arrays, batch_size=BATCH, top_ratio=0.25, renew_ratio=0.75, seed=0
    )
    dense = keras.layers.Dense(2, kernel_regularizer=regularizer)
    net = keras.Sequential([keras.Input((8,)), dense])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    model = echoing.keras.PriorityModel(net, per_example_loss=loss, table=table)
    if change is not None:
        change(dense)
    model.compile(keras.optimizers.SGD(learning_rate), loss=compile_loss)
    before = np.array(dense.kernel.numpy(), np.float32)
    model.fit(batches.map(echoing.keras.fit_inputs), steps_per_epoch=steps, epochs=1, verbose=0)
    return before, np.array(dense.kernel.numpy(), np.float32)


def test_the_models_regularization_losses_are_trained_on():
    # Before: L2(10) trained to the same kernel as no regularizer at all.
    _, plain = _fit()
    _, shrunk = _fit(regularizer=keras.regularizers.L2(1.0))
    assert np.linalg.norm(shrunk) < 0.5 * np.linalg.norm(plain)


def test_mixed_precision_trains_as_float32_does():
    # Before: the LossScaleOptimizer divided unscaled gradients by its scale (32768), so the
    # kernel moved by 5.7e-5 against 1.08 in float32.
    before, after = _fit()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        mixed_before, mixed_after = _fit()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    moved, mixed_moved = np.linalg.norm(after - before), np.linalg.norm(mixed_after - mixed_before)
    assert 0.8 < mixed_moved / moved < 1.25  # float16's rounding, not a factor of thousands


def test_a_loss_given_to_compile_is_said_to_be_for_evaluate_only():
    with pytest.warns(UserWarning, match=r"PriorityModel.compile\(loss='mse'\): the train step "
                      r"trains on per_example_loss .* only what evaluate reports"):  # fmt: skip
        _fit(compile_loss="mse", steps=1)


def test_a_trainable_change_after_wrapping_names_the_fix_when_fit_traces():
    # Before: "zip() argument 2 is shorter than argument 1" from inside the step.
    def freeze(dense):
        dense.trainable = False

    message = r"the wrapped model's trainable variables changed after it was wrapped \(2 then, "
    with pytest.raises(ValueError, match=message + r"0 now: .* set layer.trainable before wrap"):
        _fit(change=freeze, steps=1)


def test_an_overflowing_step_leaves_the_aggregated_gradient_as_it_was():
    table = echoing.PriorityTable(8)
    variable = tf.Variable([1.0, 2.0])
    meter = echoing.PriorityMeter(table, [variable])
    ids, priorities = tf.range(4, dtype=tf.int64), tf.ones([4])
    meter.update(ids, priorities, [tf.constant([0.5, 0.5])], 0)
    kept = meter.aggregated_gradient[0].numpy()
    meter.update(ids, priorities, [tf.constant([np.inf, 0.5])], 1)
    np.testing.assert_array_equal(meter.aggregated_gradient[0].numpy(), kept)


def _round_robin(table):
    """A PriorityModel over a sampler that only renews (round-robin over ids), and its batches."""
    rng = np.random.default_rng(0)
    arrays = {"inputs": rng.normal(size=(N, 8)).astype("float32"), "label": np.arange(N) % 2}
    batches = echoing.priority_sample(
        table, arrays, batch_size=BATCH, top_ratio=0.0, renew_ratio=1.0, seed=0
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model = echoing.keras.PriorityModel(net, per_example_loss=loss, table=table)
    model.compile(keras.optimizers.SGD(0.1))
    return model, batches.map(echoing.keras.fit_inputs)


def test_a_second_fit_over_the_same_sampler_is_said_to_renew_from_the_first_ids_again():
    # Issue 33: a second fit made a new iterator, which started the sampler at step 0 again:
    # ids 0..79 were renewed twice and 80..127 never, without a word.
    table = echoing.PriorityTable(N)
    model, batches = _round_robin(table)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(batches, steps_per_epoch=5, epochs=1, verbose=0)  # the first: nothing to say
    assert not [w for w in caught if "PriorityModel.fit" in str(w.message)]
    said = r"priority_sample from its step 0 again .* up to step 4; .*start_step=int\(model"
    with pytest.warns(UserWarning, match=said):
        model.fit(batches, steps_per_epoch=5, epochs=1, verbose=0)


def test_a_fit_resumed_by_backup_and_restore_is_said_to_restart_the_sampler(tmp_path):
    # Issue 33: BackupAndRestore resumed the optimizer at step 6 while a rebuilt sampler and
    # table began again at id 0 (ids 0..59 trained twice, 60..99 never), without a word.
    class Crash(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise RuntimeError("crash")

    def attempt(*callbacks):
        model, batches = _round_robin(echoing.PriorityTable(N))
        model({"inputs": np.zeros([2, 8], np.float32), "id": np.arange(2)})  # built
        backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
        model.fit(batches, steps_per_epoch=3, epochs=4, callbacks=[backup, *callbacks], verbose=0)

    with pytest.raises(RuntimeError, match="crash"):
        attempt(Crash())
    said = r"fit resumes at epoch 2 \(a BackupAndRestore restored the model and optimizer, not"
    with pytest.warns(UserWarning, match=said):
        attempt()


def test_steps_per_execution_above_one_is_said_to_pick_from_stale_priorities():
    # Issue 33: at steps_per_execution=4, 8 top-k steps reached 48, 56 or 40 of 64 examples
    # (batches picked again before the table was updated), against 56 at 1, without a word.
    model, batches = _round_robin(echoing.PriorityTable(N))
    model.compile(keras.optimizers.SGD(0.1), steps_per_execution=4)
    said = r"steps_per_execution=4, .* priorities up to 3 steps old .*steps_per_execution=1"
    with pytest.warns(UserWarning, match=said):
        model.fit(batches, steps_per_epoch=4, epochs=1, verbose=0)
    model, batches = _round_robin(echoing.PriorityTable(N))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(batches, steps_per_epoch=4, epochs=1, verbose=0)
    assert not [w for w in caught if "steps_per_execution" in str(w.message)]
