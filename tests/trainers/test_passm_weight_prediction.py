"""Weight prediction in the shared-memory backend (``passm.weight_prediction``, issue 32).

One step of worker 0 of two, with both momentum sets filled with known values, against the update
computed by hand: the gradient at the read (off), or at the read less η·m·u_0, worker 0's own
buffer, on what worker 0 writes (every variable in ASSM, only block 0 in PASSM); worker 1's
buffer plays no part. Then the option's validation.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers.passm import SharedMemoryTrainer, UpdateMeter
from trainers.passm import backend as passm_backend
from trainers.passm import config as passm_config
from trainers.passm import experiment as async_experiment
from trainers.passm.phased import mean_loss
from trainers.passm.state import TrainingState
from trainers.passm.steps import WorkerSteps

RATE, MOMENTUM = 0.1, 0.5
BLOCKS = [range(0, 2), range(2, 4)]  # the first Dense layer, the second


def _model() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(3)]
    )


def _gradient(probe: keras.Model, weights, features, labels) -> list[np.ndarray]:
    probe.set_weights(weights)
    with tf.GradientTape() as tape:
        loss = mean_loss(probe, features, labels)
    return [g.numpy() for g in tape.gradient(loss, probe.trainable_variables)]


@pytest.mark.parametrize("predict", [False, True], ids=["at_read", "predicted"])
@pytest.mark.parametrize("mode", ["assm", "passm"])
def test_a_step_takes_its_gradient_one_step_of_its_own_momentum_ahead(mode, predict):
    model, probe = _model(), _model()
    state = TrainingState(model, BLOCKS, MOMENTUM, num_momentum_sets=2)
    rng = np.random.default_rng(0)
    for momenta in state.momentum_sets:  # both workers mid-run: every buffer non-zero
        for momentum in momenta:
            momentum.assign(rng.normal(size=momentum.shape).astype("float32"))
    own = [m.numpy() for m in state.momentum_sets[0]]
    other = [m.numpy() for m in state.momentum_sets[1]]
    features = rng.normal(size=(8, 4)).astype("float32")
    labels = rng.integers(0, 3, 8).astype("int32")
    read = model.get_weights()

    steps = WorkerSteps(
        model, state, UpdateMeter(2), worker=0, lock=tf.CriticalSection(),
        weight_prediction=predict,
    )  # fmt: skip
    data = tf.data.Dataset.from_tensors((features, labels)).repeat()
    steps.function(mode)(iter(data), tf.constant(RATE), tf.constant(1))

    # Worker 0 writes every variable in ASSM and block 0 in PASSM; only those are predicted.
    written = range(4) if mode == "assm" else BLOCKS[0]
    point = [
        w - RATE * MOMENTUM * u if predict and i in written else w
        for i, (w, u) in enumerate(zip(read, own, strict=True))
    ]
    gradients = _gradient(probe, point, features, labels)
    weights = model.get_weights()
    for i, (got, x, u, g) in enumerate(zip(weights, read, own, gradients, strict=True)):
        want = x - RATE * (MOMENTUM * u + g) if i in written else x
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The other worker's buffer is read, never written.
    for got, want in zip(state.momentum_sets[1], other, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)
    if predict:  # the prediction changed the step (the test would not see a no-op)
        at_read = _gradient(probe, read, features, labels)
        assert not np.allclose(at_read[written[0]], gradients[written[0]])


def test_one_worker_predicts_its_own_next_step():
    # c = 1: nothing lands in between; the step is Nesterov's (gradient one momentum step ahead).
    model, probe = _model(), _model()
    state = TrainingState(model, [range(4)], MOMENTUM, num_momentum_sets=1)
    for momentum in state.momentum_sets[0]:
        momentum.assign(tf.ones_like(momentum))
    features, labels = np.ones((8, 4), "float32"), np.zeros(8, "int32")
    read = model.get_weights()
    steps = WorkerSteps(
        model, state, UpdateMeter(1), worker=0, lock=tf.CriticalSection(), weight_prediction=True
    )
    data = tf.data.Dataset.from_tensors((features, labels)).repeat()
    steps.function("assm")(iter(data), tf.constant(RATE), tf.constant(1))
    ahead = [w - RATE * MOMENTUM * 1.0 for w in read]
    gradients = _gradient(probe, ahead, features, labels)
    for got, x, g in zip(model.get_weights(), read, gradients, strict=True):
        np.testing.assert_allclose(got, x - RATE * (MOMENTUM + g), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SharedMemoryTrainer(_model, num_workers=2, weight_prediction="yes"),
        lambda: WorkerSteps(
            _model(), TrainingState(_model(), BLOCKS, 0.9, num_momentum_sets=2), UpdateMeter(2),
            worker=0, lock=tf.CriticalSection(), weight_prediction=1,
        ),
    ],
    ids=["trainer", "worker_steps"],
)  # fmt: skip
def test_weight_prediction_must_be_a_bool(make):
    with pytest.raises(ValueError, match=r"weight_prediction must be True or False, got"):
        make()


def test_the_config_field_defaults_on_and_refuses_what_is_not_a_bool(load_config):
    config = load_config("passm", "smoke")
    assert config.passm.weight_prediction is True  # the setting that reaches sync accuracy
    with pytest.raises(TypeError, match=r"'weight_prediction'"):
        config.passm.weight_prediction = "yes"  # ml_collections: the field is a bool
    config.passm.weight_prediction = None
    with pytest.raises(ValueError, match=r"config.passm.weight_prediction must be True or False"):
        async_experiment.train_and_evaluate(config, None)


def test_a_backend_that_cannot_predict_says_it_trains_without(load_config, caplog):
    flat = passm_config.flat_view(load_config("passm", "smoke"))
    async_experiment._check_weight_prediction(flat, "parameter_server")
    assert flat.weight_prediction is False  # what the run reports is what it trained
    assert "only, and this run trains on 'parameter_server'" in caplog.text
    assert "--config.passm.weight_prediction=false" in caplog.text
    caplog.clear()
    synchronous = passm_config.flat_view(load_config("passm", "smoke"))
    async_experiment._check_weight_prediction(synchronous, passm_backend.SYNCHRONOUS)
    assert synchronous.weight_prediction is False and not caplog.text  # nothing stale: no noise


def test_the_smoke_config_trains_with_weight_prediction(load_config):
    config = load_config("passm", "smoke")
    config.passm.weight_prediction, config.passm.mode = True, "passm_plus"
    result = async_experiment.train_and_evaluate(config, None)
    assert result["backend"] == "shared_memory"
    assert result["strategy"] is None  # threads of this process, no tf.distribute strategy
    assert result["updates_applied"] == config.num_steps
