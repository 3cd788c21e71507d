"""Every train-step variant and the eval step compile with XLA (CPU as the stand-in for TPU) and
match the uncompiled steps numerically."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing import techniques
from echoing._src.priority.table import NEVER_MEASURED
from trainers import experiment, loop, models, strategies

BATCH, STEPS, NUM_EXAMPLES = 16, 3, 64
# XLA fuses and reorders float32 arithmetic; after 3 SGD-with-momentum steps the weights of the
# compiled and uncompiled runs agree to this (measured differences are ~1e-7).
ATOL, RTOL = 2e-5, 1e-4


def _examples(sample_weight: bool) -> dict[str, tf.Tensor]:
    examples = {
        "inputs": tf.random.stateless_normal([NUM_EXAMPLES, 40, 1], seed=[3, 4]),
        "label": tf.range(NUM_EXAMPLES, dtype=tf.int64) % 10,
        "id": tf.range(NUM_EXAMPLES, dtype=tf.int64),
    }
    if sample_weight:
        examples["sample_weight"] = tf.random.stateless_uniform(
            [NUM_EXAMPLES], seed=[5, 6], minval=0.5, maxval=3.0
        )
    return examples


def _run(variant: str, jit_compile: bool, initial_weights, strategy):
    """Trains STEPS steps and evaluates; returns weights, losses, feedback, priorities, eval."""
    with strategy.scope():
        model = models.build_model("mnist1d_cnn", (40, 1), 10)
        model.set_weights(initial_weights)
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
    examples = _examples(sample_weight=variant == "sample_weight")
    seen = []
    table = priority_meter = None
    if variant == "pgd":
        table = echoing.PriorityTable(NUM_EXAMPLES)
        priority_meter = echoing.PriorityMeter(table, model.trainable_variables)
    trainer = loop.Trainer(
        model=model,
        optimizer=optimizer,
        train_dataset_fn=loop.per_replica_batches(
            lambda: (
                tf.data.Dataset.from_tensor_slices(examples)
                .repeat()
                .batch(BATCH, drop_remainder=True)
            ),
            global_batch_size=BATCH,
        ),
        # 64 examples in batches of 24: the last is partial, so the eval step compiles twice.
        eval_dataset_fn=loop.per_replica_batches(
            lambda: tf.data.Dataset.from_tensor_slices(examples).batch(24), global_batch_size=24
        ),
        techniques=[
            techniques.FeedbackCallback(
                lambda ids, losses, step: seen.append((ids.numpy(), losses.numpy()))
            )
        ]
        if variant == "feedback"
        else [techniques.PriorityGradients(priority_meter)]
        if priority_meter is not None
        else (),
        strategy=strategy,
        jit_compile=jit_compile,
    )
    result = trainer.train(STEPS)
    priorities = None
    if table is not None:
        priorities = (table.log_priority.numpy(), table.measured_step.numpy())
    return model.get_weights(), result, seen, priorities, trainer.evaluate(), trainer


@pytest.fixture(scope="module")
def initial_weights():
    keras.utils.set_random_seed(0)
    return models.build_model("mnist1d_cnn", (40, 1), 10).get_weights()


@pytest.mark.parametrize(
    ("variant", "strategy_name"),
    [
        ("plain", "default"),
        ("sample_weight", "default"),
        ("feedback", "default"),
        ("pgd", "default"),
        # On CPUs under MultiWorkerMirrored the all-reduce + update run outside the compiled
        # forward/backward (+JVP) pass: the other code path.
        ("pgd", "multi_worker"),
    ],
)
def test_compiled_step_matches_the_uncompiled_step(variant, strategy_name, initial_weights):
    strategy = strategies.make_strategy(strategy_name)
    plain_weights, plain_result, plain_seen, plain_priorities, plain_eval, _ = _run(
        variant, False, initial_weights, strategy
    )
    jit_weights, jit_result, jit_seen, jit_priorities, jit_eval, trainer = _run(
        variant, True, initial_weights, strategy
    )
    # The steps really are XLA clusters: the compiled function lowers to HLO.
    assert trainer._compiled_update is (strategy_name == "default")
    compiled = trainer._step_and_update if trainer._compiled_update else trainer._forward_backward
    batch = next(iter(trainer.train_dataset))
    hlo = compiled.experimental_get_compiler_ir(batch)(stage="hlo")
    assert "HloModule" in hlo
    changed = max(
        float(np.max(np.abs(a - b))) for a, b in zip(initial_weights, jit_weights, strict=True)
    )
    assert changed > 1e-3  # the compiled steps trained
    for plain, compiled in zip(plain_weights, jit_weights, strict=True):
        np.testing.assert_allclose(compiled, plain, atol=ATOL, rtol=RTOL)
    assert jit_result["train_loss"] == pytest.approx(plain_result["train_loss"], rel=RTOL)
    assert jit_eval["eval_examples"] == plain_eval["eval_examples"] == NUM_EXAMPLES
    assert jit_eval["eval_loss"] == pytest.approx(plain_eval["eval_loss"], rel=RTOL)
    assert jit_eval["eval_accuracy"] == pytest.approx(plain_eval["eval_accuracy"], abs=1 / 64)
    if variant == "feedback":
        (plain_ids, plain_losses), (jit_ids, jit_losses) = plain_seen[0], jit_seen[0]
        np.testing.assert_array_equal(jit_ids, plain_ids)
        assert jit_losses.shape == (STEPS, BATCH)
        np.testing.assert_allclose(jit_losses, plain_losses, atol=ATOL, rtol=RTOL)
    if variant == "pgd":
        # ForwardAccumulator (the JVP giving ḡ·g_i) compiles under XLA; the first step writes no
        # priorities (ḡ = 0), the next two write 32 examples'.
        (plain_log, plain_measured), (jit_log, jit_measured) = plain_priorities, jit_priorities
        np.testing.assert_array_equal(jit_measured, plain_measured)
        assert (jit_measured != NEVER_MEASURED).sum() == 2 * BATCH
        assert np.abs(jit_log[jit_measured == 1]).max() > 0
        np.testing.assert_allclose(jit_log, plain_log, atol=1e-4, rtol=1e-3)


def test_jit_compile_must_be_a_bool(initial_weights):
    with tf.distribute.get_strategy().scope():
        model = models.build_model("mnist1d_cnn", (40, 1), 10)
        optimizer = keras.optimizers.SGD(0.1)
    with pytest.raises(TypeError, match="jit_compile must be True or False, got 'yes'"):
        loop.Trainer(
            model=model,
            optimizer=optimizer,
            train_dataset_fn=lambda context: tf.data.Dataset.range(1),
            jit_compile="yes",
        )


def test_jit_compile_refuses_batches_of_unknown_shape(initial_weights):
    with tf.distribute.get_strategy().scope():
        model = models.build_model("mnist1d_cnn", (40, 1), 10)
        optimizer = keras.optimizers.SGD(0.1)
    examples = _examples(sample_weight=False)
    with pytest.raises(ValueError, match=r"static shape, got batch\['inputs'\] \(None, 40, 1\)"):
        loop.Trainer(
            model=model,
            optimizer=optimizer,
            # drop_remainder=False: the batch dimension is unknown.
            train_dataset_fn=lambda context: tf.data.Dataset.from_tensor_slices(examples).batch(5),
            jit_compile=True,
        )


def test_masked_padding_leaves_the_evaluation_unchanged(initial_weights):
    with tf.distribute.get_strategy().scope():
        model = models.build_model("mnist1d_cnn", (40, 1), 10)
        model.set_weights(initial_weights)
        optimizer = keras.optimizers.SGD(0.1)
    examples = _examples(sample_weight=False)
    results = []
    for padded in (False, True):
        # 64 examples in batches of 24: 24, 24, 16, or padded 24, 24, 24 with 8 masked rows.
        batches = tf.data.Dataset.from_tensor_slices(examples).batch(24)
        if padded:
            batches = experiment.padded_to_full_batches(batches, NUM_EXAMPLES, 24)
        trainer = loop.Trainer(
            model=model,
            optimizer=optimizer,
            train_dataset_fn=lambda context, batches=batches: batches.repeat(),
            eval_dataset_fn=lambda context, batches=batches: batches,
            jit_compile=padded,
        )
        results.append(trainer.evaluate())
    assert results[1]["eval_examples"] == results[0]["eval_examples"] == NUM_EXAMPLES
    assert results[1]["eval_accuracy"] == pytest.approx(results[0]["eval_accuracy"], abs=1e-9)
    assert results[1]["eval_loss"] == pytest.approx(results[0]["eval_loss"], rel=RTOL)
