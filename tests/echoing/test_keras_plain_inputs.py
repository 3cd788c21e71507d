"""echoing.keras wrappers: fit on with_ids batches and a compile without a loss; evaluate and
predict on the user's plain arrays; training without ids refused at trace time, with the fix."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing

N, BATCH = 64, 16
_RNG = np.random.default_rng(0)
X = _RNG.normal(size=(N, 8)).astype("float32")
Y = np.arange(N) % 3
W = _RNG.uniform(0.0, 2.0, size=N).astype("float32")


def _per_example_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


def _net():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
    )


def _loss_feedback(observers=(), loss=None, learning_rate=0.1):
    model = echoing.keras.LossFeedback(
        _net(), per_example_loss=_per_example_loss(), observers=observers
    )
    model.compile(keras.optimizers.SGD(learning_rate), loss=loss, metrics=["accuracy"])
    return model


def _batches(*elements):
    source = tf.data.Dataset.from_tensor_slices(elements)
    return echoing.with_ids(source).batch(BATCH).map(echoing.keras.fit_inputs)


@pytest.fixture(scope="module", params=["LossFeedback", "PriorityModel"])
def trained(request):
    """A wrapper fitted on ids without a loss in compile, and the history of its fit."""
    if request.param == "LossFeedback":
        table = echoing.LossTable(N)
        model = _loss_feedback([table.update])
        history = model.fit(_batches(X, Y), epochs=2, verbose=0)
        assert table.seen.numpy().all()  # every example reported by its with_ids id
    else:
        table = echoing.PriorityTable(N)
        model = echoing.keras.PriorityModel(
            _net(), per_example_loss=_per_example_loss(), table=table
        )
        model.compile(keras.optimizers.SGD(0.1), metrics=["accuracy"])
        batches = echoing.priority_sample(
            table, {"inputs": X, "label": Y}, batch_size=BATCH, top_ratio=0.25, renew_ratio=0.75
        )
        history = model.fit(
            batches.map(echoing.keras.fit_inputs), steps_per_epoch=4, epochs=2, verbose=0
        )
    assert set(history.history) == {"loss", "accuracy"}
    assert int(model.optimizer.iterations) > 0
    return model


@pytest.mark.parametrize(
    "plain",
    [
        pytest.param(lambda: X, id="array"),
        pytest.param(lambda: tf.constant(X), id="tensor"),
        pytest.param(lambda: {"inputs": X}, id="dict without id"),
        pytest.param(lambda: {"inputs": X, "id": np.arange(N)}, id="dict with id"),
    ],
)
def test_evaluate_and_predict_take_plain_inputs_and_match_the_wrapped_model(trained, plain):
    expected = trained.model.predict(X, verbose=0)
    np.testing.assert_allclose(trained.predict(plain(), verbose=0), expected, rtol=1e-6)
    loss, accuracy = trained.evaluate(plain(), Y, batch_size=N, verbose=0)
    np.testing.assert_allclose(loss, np.mean(_per_example_loss()(Y, expected)), rtol=1e-5)
    np.testing.assert_allclose(accuracy, np.mean(expected.argmax(-1) == Y), rtol=1e-6)
    # Weighted: the compiled default is Keras's "sum_over_batch_size", sum(loss * w) / batch.
    weighted = trained.evaluate(plain(), Y, sample_weight=W, batch_size=N, verbose=0)[0]
    np.testing.assert_allclose(weighted, np.sum(_per_example_loss()(Y, expected) * W) / N, 1e-5)


def test_plain_batches_from_a_dataset_evaluate_like_the_id_batches():
    model = _loss_feedback()
    model.fit(_batches(X, Y), epochs=1, verbose=0)
    plain = tf.data.Dataset.from_tensor_slices((X, Y)).batch(BATCH)
    np.testing.assert_allclose(
        model.evaluate(plain, verbose=0), model.evaluate(_batches(X, Y), verbose=0), rtol=1e-6
    )


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "sample_weight"])
def test_compile_without_a_loss_trains_as_the_compiled_keras_loss(weighted):
    data = _batches(X, Y, W) if weighted else _batches(X, Y)
    runs = []
    for loss in [None, keras.losses.SparseCategoricalCrossentropy(from_logits=True)]:
        model = _loss_feedback(loss=loss, learning_rate=0.5)
        start = [v.numpy() for v in model.model.weights]
        history = model.fit(data, epochs=3, verbose=0)
        runs.append(([v.numpy() for v in model.model.weights], history.history))
    (default_weights, default_history), (keras_weights, keras_history) = runs
    assert not np.allclose(start[0], default_weights[0])  # it trained
    for got, expected in zip(default_weights, keras_weights, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(default_history["loss"], keras_history["loss"], rtol=1e-5)
    np.testing.assert_allclose(default_history["accuracy"], keras_history["accuracy"])


def _plain_fit(model):
    model.fit(X, Y, batch_size=BATCH, verbose=0)


def _tuple_batches_fit(model):
    model.fit(tf.data.Dataset.from_tensor_slices((X, Y)).batch(BATCH), verbose=0)


def _dict_without_id_fit(model):
    model.fit({"inputs": X}, Y, batch_size=BATCH, verbose=0)


def _compute_loss_in_training(model):
    model.compute_loss(x=X[:4], y=Y[:4], y_pred=model(X[:4]), training=True)


@pytest.mark.parametrize(
    ("train", "received"),
    [
        (_plain_fit, r"a \w*Tensor of shape \(\w+, 8\) and dtype float32"),
        (_tuple_batches_fit, r"a \w*Tensor of shape \(\w+, 8\) and dtype float32"),
        (_dict_without_id_fit, r"a dict with keys \['inputs'\]"),
        (_compute_loss_in_training, r"a ndarray of shape \(4, 8\) and dtype float32"),
    ],
)
def test_training_without_ids_is_refused_before_any_step_with_the_fix(train, received):
    calls = []
    model = _loss_feedback([lambda ids, losses: calls.append(ids)])
    start = [v.numpy() for v in model.model.weights]
    with pytest.raises(
        TypeError,
        match=r"LossFeedback needs x = \{'inputs': \.\.\., 'id': \.\.\.\} to train, so that "
        rf"it can report by example id, got {received}; give .*"
        r"echoing\.with_ids\(dataset\)\.batch\(32\)\.map\(echoing\.keras\.fit_inputs\)",
    ):
        train(model)
    # Refused while fit traces its step: no step ran, no observer was reached.
    assert int(model.optimizer.iterations) == 0 and not calls
    for before, after in zip(start, model.model.weights, strict=True):
        np.testing.assert_array_equal(before, after.numpy())


def test_float_ids_are_refused_when_fit_traces_the_step():
    table = echoing.LossTable(8)
    net = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    model = echoing.keras.LossFeedback(
        net,
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None
        ),
        observers=[table.update],
    )
    model.compile("sgd")
    x = {"inputs": np.zeros((8, 2), np.float32), "id": np.arange(8, dtype=np.float32) + 0.5}
    with pytest.raises(TypeError, match=r"x\['id'\] must hold integer example ids, got dtype"):
        model.fit(x, np.zeros(8, np.int64), batch_size=4, epochs=1, verbose=0)
    assert not table.seen.numpy().any()


def test_evaluate_on_unmapped_batch_dicts_names_the_map_that_fixes_it():
    model = _loss_feedback()
    model.fit(_batches(X, Y), epochs=1, verbose=0)
    batches = echoing.with_ids(tf.data.Dataset.from_tensor_slices((X, Y))).batch(BATCH)
    with pytest.raises(
        TypeError,
        match=r"LossFeedback got no labels y to evaluate on, and x = a dict with keys "
        r"\['id', 'inputs', 'label'\]: evaluate was given the batch dicts themselves\. .*"
        r"model\.evaluate\(batches\.map\(echoing\.keras\.fit_inputs\)\)",
    ):
        model.evaluate(batches, verbose=0)
    mapped = model.evaluate(batches.map(echoing.keras.fit_inputs), verbose=0, return_dict=True)
    assert set(mapped) == {"loss", "accuracy"}


def test_a_model_of_two_outputs_needs_a_loss_per_output_in_compile():
    inputs = keras.Input((8,))
    two = keras.Model(inputs, [keras.layers.Dense(3)(inputs), keras.layers.Dense(3)(inputs)])
    model = echoing.keras.LossFeedback(two, per_example_loss=_per_example_loss(), observers=[])
    with pytest.raises(ValueError, match=r"the wrapped model has 2 outputs, and compile\(\) wi"):
        model.compile("sgd")


def test_saving_the_wrapper_names_the_model_to_save(tmp_path):
    model = _loss_feedback()
    path = str(tmp_path / "net.keras")
    with pytest.raises(TypeError, match=r"wrapper .* model\.model\.save\('.*net\.keras'\)"):
        model.save(path)
    model.model.save(path)  # what the message says works
    assert keras.models.load_model(path).count_params() == model.model.count_params()
