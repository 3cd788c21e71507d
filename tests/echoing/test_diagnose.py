"""echoing.diagnose on a user's own pipeline and model: R, the factor, and clear errors."""

import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing

UP, DOWN = 0.040, 0.010  # seconds slept: a pipeline about 4x slower than the step


def _sleep(seconds):
    def sleep(x):
        time.sleep(seconds)
        return x

    return lambda x: tf.py_function(sleep, [x], tf.float32)


def _slow_pipeline():
    return tf.data.Dataset.from_tensors(tf.zeros([8, 4])).repeat().map(_sleep(UP))


def test_r_of_a_known_slow_pipeline_is_its_two_timings_each_at_least_what_it_sleeps():
    # How close R comes to timing the parts apart is a benchmark figure (keras_fit.json's
    # diagnose_R_error): a busy 2-core machine moves both timings by tens of percent. Here,
    # only what holds on any machine: each part takes at least what it sleeps.
    report = echoing.diagnose(_slow_pipeline(), _sleep(DOWN), num_steps=15)
    assert report["upstream_seconds"] >= UP and report["downstream_seconds"] >= DOWN
    ratio = report["upstream_seconds"] / report["downstream_seconds"]
    assert report["ratio"] == pytest.approx(ratio)
    assert report["ratio"] > 2  # clearly input-bound (4 by the sleeps, less their overheads)
    assert report["echo_factor"] == pytest.approx(report["ratio"])
    assert report["input_wait_fraction"] == pytest.approx(1 - 1 / report["ratio"])
    assert "input-bound: try echoing.echo(" in echoing.format_diagnosis(report)


def test_a_pipeline_that_already_echoes_is_said_and_the_factor_is_one_more_on_top():
    examples = tf.data.Dataset.from_tensor_slices(tf.zeros([64, 4])).repeat()
    echoed = examples.apply(echoing.echo(2, buffer_size=8)).batch(8)
    assert echoing.diagnose(echoed, lambda b: b, num_steps=3)["already_echoes"] == 1.0
    assert echoing.diagnose(examples.batch(8), lambda b: b, num_steps=3)["already_echoes"] == 0.0
    report = {
        "upstream_seconds": 0.04,
        "downstream_seconds": 0.01,
        "ratio": 4.0,
        "input_wait_fraction": 0.75,
        "echo_factor": 4.0,
        "already_echoes": 1.0,
    }
    assert "input-bound even with the echo already in the pipeline" in (
        echoing.format_diagnosis(report)
    )
    assert "raise its factor about 4.0x (the factors multiply), or AutoEcho's max_factor" in (
        echoing.format_diagnosis(report)
    )
    report.update(ratio=0.5, input_wait_fraction=0.0, echo_factor=1.0)
    assert "not input-bound with the echo already in the pipeline" in (
        echoing.format_diagnosis(report)
    )


def test_a_keras_model_is_timed_on_a_copy_and_left_unchanged():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [w.copy() for w in model.get_weights()]
    dataset = (
        tf.data.Dataset.from_tensor_slices(
            (np.random.default_rng(0).normal(size=(64, 4)).astype("float32"), np.arange(64) % 3)
        )
        .batch(8)
        .repeat()
    )
    report = echoing.diagnose(dataset, model, num_steps=5)
    assert report["ratio"] > 0 and report["downstream_seconds"] > 0
    for old, new in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)
    assert int(model.optimizer.iterations.numpy()) == 0
    if report["echo_factor"] == 1.0:
        assert "not input-bound" in echoing.format_diagnosis(report)


@pytest.mark.parametrize(
    ("dataset", "step", "error", "match"),
    [
        (tf.data.Dataset.range(0), lambda b: b, ValueError, r"ended after 0 elements.*It is empty"),
        (
            tf.data.Dataset.range(5),
            lambda b: b,
            ValueError,
            r"ended after 5 elements; timing needs",
        ),
        ([1, 2], lambda b: b, TypeError, "expected a batched tf.data.Dataset"),
        (  # the arrays themselves: described, not printed, with the Dataset that wraps them
            (np.zeros((500, 8)), np.zeros(500)),
            lambda b: b,
            TypeError,
            r"got a tuple of 2 \(a ndarray of shape \(500, 8\), a ndarray of shape \(500,\)\); "
            r"time the pipeline .*from_tensor_slices\(\(x, y\)\)\.batch\(64\), model\)\.$",
        ),
        (tf.data.Dataset.range(50), 3, TypeError, "a compiled keras.Model or a callable"),
    ],
)
def test_bad_inputs_are_clear_errors(dataset, step, error, match):
    with pytest.raises(error, match=match):
        echoing.diagnose(dataset, step, num_steps=10)


def test_an_uncompiled_model_and_a_too_slow_pipeline_are_refused():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="not compiled"):
        echoing.diagnose(tf.data.Dataset.range(50), model)
    with pytest.raises(TimeoutError, match=r"in 0.05 s; raise max_seconds"):
        echoing.diagnose(_slow_pipeline(), _sleep(DOWN), num_steps=10, max_seconds=0.05)


def test_a_model_keras_cannot_copy_is_refused_naming_the_ways_on():
    # Keras' own NotImplementedError asked the user to implement get_config (issue 33).
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    network = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    wrapped = echoing.keras.LossFeedback(network, per_example_loss=loss, observers=[])
    wrapped.compile("sgd")
    with pytest.raises(ValueError) as raised:
        echoing.diagnose(tf.data.Dataset.range(50), wrapped)
    assert str(raised.value).startswith(
        "diagnose times a Keras model on a copy (keras.models.clone_model, so that yours is left "
        "unchanged), and Keras cannot copy this LossFeedback (NotImplementedError: a subclassed "
        "model needs a get_config() to be copied). Pass a callable that runs one train step "
        "instead, e.g. diagnose(dataset, lambda batch: model.train_on_batch(*batch))"
    )
    assert "compile model.model as you train it and pass that" in str(raised.value)


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"num_steps": 0}, ValueError, r"diagnose\(num_steps=0\): expected an int >= 1"),
        ({"num_steps": 2.5}, TypeError, r"diagnose\(num_steps=2\.5\): expected an int >= 1"),
        ({"num_steps": True}, TypeError, r"diagnose\(num_steps=True\): expected an int >= 1"),
        ({"warmup": -1}, ValueError, r"diagnose\(warmup=-1\): expected an int >= 0"),
        ({"max_seconds": -1}, ValueError, r"diagnose\(max_seconds=-1\): expected a number of"),
        ({"max_seconds": 0}, ValueError, r"diagnose\(max_seconds=0\): expected a number of"),
        ({"max_seconds": float("nan")}, ValueError, r"diagnose\(max_seconds=nan\)"),
        ({"max_seconds": "10"}, TypeError, r"diagnose\(max_seconds='10'\)"),
    ],
)
def test_bad_counts_are_refused_by_their_own_names_before_any_timing(arguments, error, match):
    # num_steps=0 was reported as "num_batches", max_seconds=-1 as a TimeoutError and
    # num_steps=2.5 as Python's "'float' object cannot be interpreted as an integer".
    def step(batch):
        raise AssertionError("timed a step")

    with pytest.raises(error, match=match):
        echoing.diagnose(tf.data.Dataset.range(50), step, **arguments)


def test_an_unbatched_dataset_is_refused_with_the_fix_for_a_keras_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    examples = tf.data.Dataset.from_tensors((tf.zeros([4]), tf.constant(0))).repeat()
    with pytest.raises(
        ValueError,
        match=r"look like single examples \(features of shape \(4,\)\), but the model takes "
        r"batches of shape \(None, 4\).*dataset\.batch\(32\)",
    ):
        echoing.diagnose(examples, model, num_steps=3)
    report = echoing.diagnose(examples.batch(8), model, num_steps=3, warmup=1)  # batched: runs
    assert report["ratio"] > 0


def test_batches_that_do_not_fit_the_model_are_refused_naming_both_shapes():
    # Issue 33: 30-wide batches for a 40-wide model reached Keras' "Exception encountered when
    # calling Sequential.call() ... expected axis -1 ... 40, but received (8, 30)".
    model = keras.Sequential([keras.Input((40,)), keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batches = tf.data.Dataset.from_tensors((tf.zeros([8, 30]), tf.zeros([8], tf.int64))).repeat()
    with pytest.raises(
        ValueError,
        match=r"batches hold features of shape \(8, 30\), but the model takes inputs of shape "
        r"\(None, 40\)",
    ):
        echoing.diagnose(batches, model, num_steps=3)


def test_unbatched_inputs_of_a_model_of_several_inputs_are_refused_with_the_fix():
    # Issue 33: a dict of inputs fell through to Keras' "Invalid input shape" in the model.
    inputs = {"a": keras.Input((4,), name="a"), "b": keras.Input((3,), name="b")}
    joined = keras.layers.Concatenate()([inputs["a"], inputs["b"]])
    model = keras.Model(inputs, keras.layers.Dense(2)(joined))
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    features = {"a": tf.zeros([4]), "b": tf.zeros([3])}
    examples = tf.data.Dataset.from_tensors((features, tf.constant(0))).repeat()
    said = r"\(features of shape \(4,\), \(3,\)\), but the model takes batches of shape "
    with pytest.raises(ValueError, match=said + r"\(None, 4\), \(None, 3\)"):
        echoing.diagnose(examples, model, num_steps=3)
    assert echoing.diagnose(examples.batch(8), model, num_steps=3, warmup=1)["ratio"] > 0


def test_format_diagnosis_of_something_else_names_what_it_lacks():
    with pytest.raises(ValueError, match=r"lacks \['upstream_seconds', .*echoing\.diagnose\("):
        echoing.format_diagnosis({})


def test_format_diagnosis_of_none_names_what_it_expected():
    with pytest.raises(TypeError, match=r"expected the dict echoing\.diagnose.*got a NoneType"):
        echoing.format_diagnosis(None)


def test_features_without_labels_for_a_model_with_a_loss_are_refused_naming_the_labels():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", "sparse_categorical_crossentropy")
    features_only = tf.data.Dataset.from_tensor_slices(np.zeros((32, 4), np.float32)).batch(8)
    # Before: Keras's "None values not supported" in a 63-line trace.
    with pytest.raises(ValueError, match=r"features alone \(a tensor of shape \(None, 4\)\).*"
                       r"needs \(features, labels\)"):  # fmt: skip
        echoing.diagnose(features_only, model, num_steps=2, warmup=0)
    labelled = tf.data.Dataset.from_tensor_slices(
        (np.zeros((32, 4), np.float32), np.zeros(32, np.int64))
    ).batch(8)
    assert echoing.diagnose(labelled, model, num_steps=2, warmup=0)["ratio"] > 0


def test_a_cached_pipeline_is_timed_after_its_first_pass_fills_the_cache():
    # Before: .batch(8).cache().repeat() of 10 ms examples was timed while the cache filled,
    # R = 30.6 and "try echo(8)"; every later pass reads the cache in microseconds.
    examples = tf.data.Dataset.from_tensor_slices(tf.zeros([64, 4])).map(_sleep(UP / 4))
    cached = examples.batch(8).cache().repeat()
    report = echoing.diagnose(cached, _sleep(DOWN), num_steps=8, warmup=1)
    # Timing the filling would read 8 examples of 10 ms per batch: at least 80 ms.
    assert report["upstream_seconds"] < 0.02 and report["echo_factor"] == 1.0


def test_a_cache_whose_pass_cannot_be_skipped_is_warned_about():
    examples = tf.data.Dataset.from_tensor_slices(tf.zeros([64, 4])).cache().repeat()
    batches = examples.batch(8)  # the repeat's pass is of examples, not of the batches timed
    message = r"diagnose: the dataset caches \(Dataset.cache\), and a pass's size is unknown, "
    with pytest.warns(UserWarning, match=message + r"so the timed batches are of the first pass"):
        echoing.diagnose(batches, _sleep(0.0), num_steps=2, warmup=0)


def test_what_the_pipeline_counts_while_diagnose_reads_it_is_put_back():
    # Issue 33: diagnose's reads went into the user's EchoMeters (fit then reported echo ratios
    # 1.20 and 1.44 for echo(2)) and opened two of a pruning stage's epochs.
    x, y = np.random.default_rng(0).random((512, 8), np.float32), np.arange(512) % 2
    counts = echoing.meters.EchoMeters()
    echoed = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .apply(counts.fresh.count())
        .apply(echoing.echo(2, buffer_size=64, seed=0))
        .apply(counts.emitted.count())
        .batch(64)
    )
    prune = echoing.loss_prune(echoing.LossTable(512), num_epochs=4, seed=0)
    pruned = prune.read({"inputs": x, "label": y}, batch_size=64)
    for dataset in (echoed, pruned):
        echoing.diagnose(dataset, lambda batch: None, num_steps=4)
    assert (counts.fresh.value(), counts.emitted.value()) == (0, 0)
    assert prune.stats()["prune_seen"] == 0.0 and prune.stats()["prune_epoch"] == 0.0
    assert sum(1 for _ in echoed) == 16  # the counts go on from where they were
    assert (counts.fresh.value(), counts.emitted.value()) == (512, 1024)
    assert sum(int(tf.size(batch["id"])) for batch in pruned) == 512  # the first, whole epoch
