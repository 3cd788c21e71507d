"""Tests for trainers.loop.Trainer under the default strategy and MirroredStrategy (2 CPUs)."""

import json
import os
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing import techniques
from trainers import loop, models

HERE = os.path.dirname(os.path.abspath(__file__))
NUM_EXAMPLES, BATCH = 48, 8


def _examples(sample_weight=None):
    examples = {
        "inputs": tf.random.stateless_normal([NUM_EXAMPLES, 40], seed=[3, 4]),
        "label": tf.range(NUM_EXAMPLES, dtype=tf.int64) % 3,
        "id": tf.range(NUM_EXAMPLES, dtype=tf.int64) * 10,
    }
    if sample_weight is not None:
        examples["sample_weight"] = tf.fill([NUM_EXAMPLES], float(sample_weight))
    return examples


def _trainer(
    feedback=(), sample_weight=None, learning_rate=0.1, eval_batch=BATCH, extra=(), jit=False
):
    keras.utils.set_random_seed(0)
    model = models.build_model("mnist1d_mlp", (40,), 3)
    trainer = loop.Trainer(
        model=model,
        optimizer=keras.optimizers.SGD(learning_rate),
        train_dataset_fn=loop.per_replica_batches(
            lambda: (
                tf.data.Dataset.from_tensor_slices(_examples(sample_weight))
                .repeat()
                .batch(BATCH, drop_remainder=True)
            ),
            global_batch_size=BATCH,
        ),
        eval_dataset_fn=loop.per_replica_batches(
            lambda: tf.data.Dataset.from_tensor_slices(_examples()).batch(eval_batch),
            global_batch_size=eval_batch,
        ),
        techniques=[*extra, *(techniques.FeedbackCallback(callback) for callback in feedback)],
        jit_compile=jit,
    )
    return trainer, model


@pytest.mark.parametrize("num_steps", [1, 4, 7])
def test_train_feeds_back_ids_and_per_example_losses_in_order(num_steps):
    seen = []
    trainer, model = _trainer(feedback=[lambda *args: seen.append(args)])
    inputs = _examples()["inputs"]
    labels = _examples()["label"]
    # The loss of each example before any update: what the first step must report.
    before = keras.losses.sparse_categorical_crossentropy(
        labels[:BATCH], model(inputs[:BATCH]), from_logits=True
    ).numpy()
    result = trainer.train(num_steps)
    trainer.train(2)
    (ids, losses, step), (ids_2, _, step_2) = seen
    expected_ids = (np.arange(num_steps * BATCH) % NUM_EXAMPLES * 10).reshape(num_steps, BATCH)
    np.testing.assert_array_equal(ids.numpy(), expected_ids)
    assert losses.shape == (num_steps, BATCH)
    np.testing.assert_allclose(losses.numpy()[0], before, rtol=1e-5)
    np.testing.assert_allclose(result["train_loss"], losses.numpy().mean(), rtol=1e-5)
    assert (step, step_2) == (num_steps, num_steps + 2)
    assert int(trainer.step.numpy()) == num_steps + 2
    # The next call continues the same iterator where the previous one stopped.
    assert ids_2.numpy()[0, 0] == (num_steps * BATCH) % NUM_EXAMPLES * 10


def test_train_lowers_the_loss_and_evaluate_matches_a_direct_computation():
    trainer, model = _trainer(eval_batch=7)  # 48 = 6 * 7 + 6: a partial last eval batch
    first = trainer.train(5)["train_loss"]
    last = trainer.train(40)["train_loss"]
    assert last < 0.5 * first
    evaluation = trainer.evaluate()
    logits = model(_examples()["inputs"])
    labels = _examples()["label"].numpy()
    accuracy = float(np.mean(np.argmax(logits, axis=-1) == labels))
    loss = float(
        np.mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
    )
    assert evaluation["eval_examples"] == NUM_EXAMPLES
    assert evaluation["eval_accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert evaluation["eval_loss"] == pytest.approx(loss, rel=1e-5)


@pytest.mark.parametrize(("sample_weight", "changes"), [(0.0, False), (1.0, True)])
def test_sample_weight_scales_each_examples_loss(sample_weight, changes):
    trainer, model = _trainer(sample_weight=sample_weight)
    before = [w.copy() for w in model.get_weights()]
    trainer.train(3)
    moved = any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    assert moved == changes


def test_mirrored_strategy_on_two_cpus_matches_the_default_strategy():
    completed = subprocess.run(
        [sys.executable, os.path.join(HERE, "mirrored_check.py")],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2
    # Same initial weights, same global batches, SGD on the global mean loss: same weights up
    # to float32 summation order.
    assert result["max_weight_difference"] < 1e-5
    default_loss, mirrored_loss = result["train_loss"]
    assert mirrored_loss == pytest.approx(default_loss, rel=1e-5)
    default_eval, mirrored_eval = result["evaluation"]
    assert default_eval["eval_examples"] == mirrored_eval["eval_examples"] == 32
    assert mirrored_eval["eval_accuracy"] == pytest.approx(default_eval["eval_accuracy"])
    # Feedback gathers both replicas' halves into whole global batches, in order.
    default_ids, mirrored_ids = result["feedback_ids"]
    assert mirrored_ids == default_ids == [list(range(100 + 8 * s, 108 + 8 * s)) for s in range(3)]
    np.testing.assert_allclose(*result["feedback_losses"], rtol=1e-5)
    assert result["feedback_steps"] == [3, 3]
    assert "strategy.scope()" in result["unplaced_error"]
    # XLA's CPU backend is one device: jit_compile over two logical CPUs is refused up front.
    assert "jit_compile=True under MirroredStrategy over 2 CPU devices" in result["jit_error"]


def _dataset_fn(context):
    return tf.data.Dataset.range(1)


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"model": "mnist1d_mlp"}, TypeError, "keras.Model"),
        ({"optimizer": "sgd"}, TypeError, "keras.optimizers.Optimizer"),
        ({"train_dataset_fn": None}, TypeError, "train_dataset_fn is required"),
        ({"train_dataset_fn": 3}, TypeError, "train_dataset_fn must be callable"),
        ({"eval_dataset_fn": "eval"}, TypeError, "eval_dataset_fn must be callable"),
        ({"techniques": [print]}, TypeError, "must be an echoing.techniques.Technique"),
        (
            {"techniques": [techniques.PriorityGradients(), techniques.PriorityGradients()]},
            ValueError,
            "each replace the backward pass",
        ),
    ],
)
def test_trainer_rejects_bad_arguments(overrides, error, message):
    arguments = {
        "model": models.build_model("mnist1d_mlp", (40,), 3),
        "optimizer": keras.optimizers.SGD(0.1),
        "train_dataset_fn": _dataset_fn,
        **overrides,
    }
    with pytest.raises(error, match=message):
        loop.Trainer(**arguments)


@pytest.mark.parametrize("num_steps", [0, -1, 2.0, True])
def test_train_rejects_bad_num_steps(num_steps):
    trainer, _ = _trainer()
    with pytest.raises(ValueError, match="positive int"):
        trainer.train(num_steps)


def test_evaluate_without_eval_dataset_explains():
    trainer = loop.Trainer(
        model=models.build_model("mnist1d_mlp", (40,), 3),
        optimizer=keras.optimizers.SGD(0.1),
        train_dataset_fn=_dataset_fn,
    )
    with pytest.raises(ValueError, match="eval_dataset_fn"):
        trainer.evaluate()


@pytest.mark.parametrize(
    ("global_batch_size", "error"), [(0, ValueError), (-8, ValueError), (8.0, TypeError)]
)
def test_per_replica_batches_rejects_bad_batch_size(global_batch_size, error):
    with pytest.raises(error, match="global_batch_size"):
        loop.per_replica_batches(lambda: tf.data.Dataset.range(1), global_batch_size)


@pytest.mark.parametrize(
    ("drop_remainder", "shape", "rows"),
    [
        (True, [4], 8),  # full global batches of 8 -> static per-replica batches of 4
        (False, [None], 10),  # a partial last batch (2 rows) is kept, so the shape is dynamic
    ],
)
def test_per_replica_batches_keeps_static_shapes_of_full_batches(drop_remainder, shape, rows):
    dataset_fn = loop.per_replica_batches(
        lambda: tf.data.Dataset.range(10).batch(8, drop_remainder=drop_remainder),
        global_batch_size=8,
    )
    context = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2
    )
    dataset = dataset_fn(context)
    assert dataset.element_spec.shape.as_list() == shape
    assert sum(int(batch.shape[0]) for batch in dataset) == rows


@pytest.mark.parametrize(("repeat", "infinite"), [(True, True), (False, False)])
def test_per_replica_batches_keeps_an_endless_stream_endless(repeat, infinite):
    # MultiWorkerMirrored relaxes the batch dimension to None for streams that may end.
    batches = tf.data.Dataset.range(10).batch(8, drop_remainder=True)
    dataset_fn = loop.per_replica_batches(
        lambda: batches.repeat() if repeat else batches, global_batch_size=8
    )
    context = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2
    )
    cardinality = dataset_fn(context).cardinality()
    assert (int(cardinality) == tf.data.INFINITE_CARDINALITY) is infinite


class _SleepyModel(keras.Model):
    """A linear model whose every call also sleeps ``seconds``: a step with known compute."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.dense = keras.layers.Dense(3)

    def call(self, inputs, training=False):
        slept = tf.py_function(lambda: time.sleep(self.seconds) or 0.0, [], tf.float32)
        slept = tf.ensure_shape(slept, [])
        return self.dense(inputs) + 0.0 * slept


def _sleep_per_batch(seconds):
    def sleep(batch):
        slept = tf.ensure_shape(
            tf.py_function(lambda: time.sleep(seconds) or 0.0, [], tf.float32), []
        )
        return {**batch, "inputs": batch["inputs"] + 0.0 * slept}

    return sleep


@pytest.mark.parametrize(
    ("upstream_sleep", "compute_sleep", "low", "high"),
    [
        # Upstream needs 40 ms a batch, the step almost nothing: nearly all of it is input wait.
        (0.04, 0.0, 0.7, 1.0),
        # Batches come from memory, the step needs 40 ms: next(iterator) barely waits.
        (0.0, 0.04, 0.0, 0.2),
    ],
)
def test_train_measures_the_time_blocked_on_the_input_iterator(
    upstream_sleep, compute_sleep, low, high
):
    keras.utils.set_random_seed(0)
    model = (
        _SleepyModel(compute_sleep)
        if compute_sleep
        else models.build_model("mnist1d_mlp", (40,), 3)
    )
    model(tf.zeros([1, 40]))  # builds its variables before the optimizer's slots
    trainer = loop.Trainer(
        model=model,
        optimizer=keras.optimizers.SGD(0.1),
        train_dataset_fn=loop.per_replica_batches(
            lambda: (
                tf.data.Dataset.from_tensor_slices(_examples())
                .repeat()
                .batch(BATCH, drop_remainder=True)
                .map(_sleep_per_batch(upstream_sleep) if upstream_sleep else lambda batch: batch)
            ),
            global_batch_size=BATCH,
        ),
    )
    trainer.train(2)  # traces
    start = time.perf_counter()
    result = trainer.train(20)
    loop_seconds = time.perf_counter() - start
    # Bounds on the share of the loop, not on times: load slows both sides alike.
    assert low <= result["input_wait_seconds"] / loop_seconds <= high


@pytest.mark.parametrize("jit_compile", [False, True])
def test_in_batch_selection_trains_on_the_highest_loss_rows(jit_compile):
    seen = []
    trainer, model = _trainer(
        feedback=[lambda *args: seen.append(args)],
        extra=[techniques.InBatchSelection(0.5)],
        jit=jit_compile,
    )
    examples = _examples()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    first = examples["inputs"][:BATCH], examples["label"][:BATCH]
    before = loss(first[1], model(first[0], training=False)).numpy()
    trainer.train(1)
    ((ids, losses, _),) = seen
    # The first batch is ids 0, 10, ..., 70: the 4 highest losses under the initial model.
    rows = np.sort(np.argsort(before)[-BATCH // 2 :])
    assert ids.numpy().tolist() == [(rows * 10).tolist()]
    np.testing.assert_allclose(losses.numpy()[0], before[rows], rtol=1e-4)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_sampled_in_batch_selection_draws_rows_of_the_batch_by_loss(jit_compile):
    seen = []
    trainer, model = _trainer(
        feedback=[lambda *args: seen.append(args)],
        extra=[techniques.InBatchSelection(0.5, mode="sample", seed=1)],
        jit=jit_compile,
    )
    examples = _examples()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    before = loss(examples["label"][:BATCH], model(examples["inputs"][:BATCH], training=False))
    trainer.train(1)
    ((ids, losses, _),) = seen
    # BATCH // 2 rows of the first batch (ids 0, 10, ..., 70) drawn by their loss under the
    # initial model with the seed [technique seed, step 0], each trained with that loss.
    first = {"id": tf.range(0, 10 * BATCH, 10, dtype=tf.int64)}
    drawn = echoing.sample_rows(first, before, BATCH // 2, seed=[1, 0])["id"].numpy()
    assert ids.numpy().tolist() == [drawn.tolist()]
    np.testing.assert_allclose(losses.numpy()[0], before.numpy()[drawn // 10], rtol=1e-4)
