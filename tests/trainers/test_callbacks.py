"""EchoStatsCallback with Keras model.fit on an echoed dataset: exact counts per epoch."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing import meters
from trainers import callbacks

NUM_EXAMPLES = 96


def _echoed_dataset(counts, factor, insert):
    features = tf.random.stateless_normal([NUM_EXAMPLES, 8], seed=[0, 0])
    labels = tf.cast(features[:, 0] > 0, tf.int64)
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).apply(counts.fresh.count())
    if insert == "before_batch":
        return ds.apply(echoing.echo(factor)).apply(counts.emitted.count()).batch(16)
    # Batch echoing: whole batches repeat; count rows so emitted is in examples.
    return ds.batch(16).apply(echoing.echo(factor)).apply(counts.emitted.count(rows=True))


@pytest.mark.parametrize(
    ("factor", "insert", "epochs"),
    [(1, "before_batch", 2), (2, "before_batch", 2), (3, "after_batch", 1)],
)
def test_fit_on_echoed_dataset_logs_exact_counts(factor, insert, epochs):
    keras.utils.set_random_seed(0)
    counts = meters.EchoMeters()
    stats = callbacks.EchoStatsCallback(counts)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile(
        keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    history = model.fit(
        _echoed_dataset(counts, factor, insert), epochs=epochs, callbacks=[stats], verbose=0
    )
    expected_fresh = [NUM_EXAMPLES * (epoch + 1) for epoch in range(epochs)]
    assert history.history["fresh_examples"] == expected_fresh
    assert history.history["emitted_examples"] == [factor * n for n in expected_fresh]
    assert history.history["echo_ratio"] == [float(factor)] * epochs
    assert stats.epochs[-1]["fresh_examples"] == expected_fresh[-1]
    assert np.isfinite(history.history["loss"]).all()


def test_verbose_prints_one_line_per_epoch(capsys):
    counts = meters.EchoMeters()
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(
        _echoed_dataset(counts, 2, "before_batch"),
        epochs=2,
        callbacks=[callbacks.EchoStatsCallback(counts, verbose=True)],
        verbose=0,
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    assert lines == [
        "epoch 1: fresh examples 96, emitted 192, echo ratio 2.00",
        "epoch 2: fresh examples 192, emitted 384, echo ratio 2.00",
    ]


@pytest.mark.parametrize("bad", [None, {"fresh": 1}, meters.ElementCounter("x")])
def test_callback_rejects_non_meters(bad):
    with pytest.raises(TypeError, match="EchoMeters"):
        callbacks.EchoStatsCallback(bad)


def test_a_meter_the_pipeline_never_applied_gives_nan_and_one_warning():
    counts = meters.EchoMeters()
    features = tf.zeros([32, 8])
    # Only the fresh meter applied: the ratio read 0.00 (no echo) although echo ran at 2.
    ds = tf.data.Dataset.from_tensor_slices((features, tf.zeros([32], tf.int64)))
    ds = ds.apply(counts.fresh.count()).apply(echoing.echo(2)).batch(16)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.warns(UserWarning, match="the emitted meter counted no examples") as caught:
        history = model.fit(
            ds, epochs=2, callbacks=[callbacks.EchoStatsCallback(counts)], verbose=0
        )
    assert np.isnan(history.history["echo_ratio"]).all()
    assert len([w for w in caught if "EchoStatsCallback" in str(w.message)]) == 1
