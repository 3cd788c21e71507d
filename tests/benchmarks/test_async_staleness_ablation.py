"""benchmarks/async_staleness_ablation.py: staleness without threads vs the backend, quick run."""

import json

import pytest


def test_quick_run_reports_each_variant_against_sequential(load_benchmark, tmp_path):
    path = tmp_path / "staleness.json"
    variants = "sequential,delayed,concurrent_passm_plus_reset"
    load_benchmark("async_staleness_ablation").main(
        ["--quick", "--variants", variants, "--output", str(path)]
    )
    result = json.loads(path.read_text())
    assert next(iter(result)) == "headline"
    accuracy = {run["variant"]: run["final_accuracy"] for run in result["runs"]}  # one rate, seed
    assert set(accuracy) == set(variants.split(","))
    headline = result["headline"]
    assert headline["sequential_accuracy"] == pytest.approx(accuracy["sequential"])
    gap = 100 * (accuracy["delayed"] - accuracy["sequential"])
    assert headline["delayed_gap_points_c2"] == pytest.approx(gap)
    assert headline["round_robin_gap_points_c2"] is None  # not run: null, not a number
    reset = next(r for r in result["runs"] if r["variant"] == "concurrent_passm_plus_reset")
    # A phase switch reuses each worker's compiled steps: one trace per worker and mode.
    assert reset["traces_per_worker"] == {"assm": [1, 1], "passm": [1, 1]}
    assert result["command"].startswith("python benchmarks/async_staleness_ablation.py")


def test_a_delayed_step_applies_the_gradient_of_one_update_ago(load_benchmark):
    import keras
    import numpy as np
    import tensorflow as tf

    from trainers.passm.phased import mean_loss
    from trainers.passm.state import TrainingState

    def build():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])

    model, shadow, probe = build(), build(), build()
    state = TrainingState(model, [range(2)], momentum=0.5)
    step = load_benchmark("async_staleness_ablation").delayed_step(model, shadow, state, 0)
    rng = np.random.default_rng(0)
    features = rng.normal(size=(3, 8, 4)).astype("float32")  # 3 batches of 8
    labels = rng.integers(0, 3, (3, 8)).astype("int32")
    batches = list(zip(features, labels, strict=True))
    iterator = iter(tf.data.Dataset.from_tensor_slices((features, labels)))

    def gradient(weights, batch):  # the gradient at ``weights``, on ``probe``
        probe.set_weights(weights)
        with tf.GradientTape() as tape:
            loss = mean_loss(probe, *batch)
        return [g.numpy() for g in tape.gradient(loss, probe.trainable_variables)]

    # x_{k+1} = x_k − η u_{k+1}, u_{k+1} = m u_k + g(x_{k−1}): every gradient one update stale.
    current = previous = model.get_weights()
    velocity = [np.zeros_like(w) for w in current]
    for batch in batches:
        step(iterator, tf.constant(0.1))
        grads = gradient(previous, batch)
        velocity = [0.5 * u + g for u, g in zip(velocity, grads, strict=True)]
        previous, current = current, [w - 0.1 * u for w, u in zip(current, velocity, strict=True)]
        for got, want in zip(model.get_weights(), current, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        for got, want in zip(shadow.get_weights(), previous, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_momentum_sets_every_variant_s_momentum(load_benchmark):
    bench = load_benchmark("async_staleness_ablation")
    assert bench._config(bench.FULL, 0).momentum == 0.9  # the config's
    assert bench._config({**bench.FULL, "momentum": 0.0}, 0).momentum == 0.0
