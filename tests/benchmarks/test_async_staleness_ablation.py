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


@pytest.mark.parametrize(
    ("prediction", "dc_lambda"),
    [(0.0, 0.0), (1.0, 0.0), (0.0, 50.0)],
    ids=["plain", "predicted", "dc"],
)
def test_a_delayed_step_applies_the_gradient_of_one_update_ago(
    load_benchmark, prediction, dc_lambda
):
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
    step = load_benchmark("async_staleness_ablation").delayed_step(
        model, shadow, state, 0, prediction=prediction, dc_lambda=dc_lambda
    )
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

    # x_{k+1} = x_k − η u_{k+1}, u_{k+1} = m u_k + g(r_k): every gradient one update stale,
    # r_k = x_{k−1} (less p·η·m·u_{k−1} with prediction p), plus λ·g⊙g⊙(x_k − r_k) with DC.
    current = previous = model.get_weights()
    velocity = [np.zeros_like(w) for w in current]
    for batch in batches:
        step(iterator, tf.constant(0.1))
        grads = [
            g + dc_lambda * g * g * (now - read)
            for g, now, read in zip(gradient(previous, batch), current, previous, strict=True)
        ]
        predicted = [w - prediction * 0.1 * 0.5 * u for w, u in zip(current, velocity, strict=True)]
        velocity = [0.5 * u + g for u, g in zip(velocity, grads, strict=True)]
        previous, current = predicted, [w - 0.1 * u for w, u in zip(current, velocity, strict=True)]
        for got, want in zip(model.get_weights(), current, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        for got, want in zip(shadow.get_weights(), previous, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_momentum_sets_every_variant_s_momentum(load_benchmark):
    bench = load_benchmark("async_staleness_ablation")
    assert bench._config(bench.FULL, 0).momentum == 0.9  # the config's
    assert bench._config({**bench.FULL, "momentum": 0.0}, 0).momentum == 0.0


def test_warmup_raises_the_rate_linearly_then_the_decays_apply(load_benchmark):
    bench = load_benchmark("async_staleness_ablation")
    config = bench._config({**bench.FULL, "num_steps": 100}, 0)  # decays at steps 50 and 75
    rates = [bench._rate_at(config, 1.0, step, 0.1) for step in (0, 4, 9, 10, 60, 80)]
    assert rates == pytest.approx([0.1, 0.5, 1.0, 1.0, 0.1, 0.01])
    assert bench._rate_at(config, 1.0, 0) == 1.0  # no warm-up by default


def test_remedies_the_backend_lacks_are_refused_for_concurrent_variants(load_benchmark):
    with pytest.raises(SystemExit):
        load_benchmark("async_staleness_ablation").main(
            ["--quick", "--variants", "delayed,concurrent_assm", "--dc-lambda", "1"]
        )


def test_weight_prediction_both_headlines_each_variant_twice(load_benchmark, tmp_path):
    result = _quick(
        load_benchmark, tmp_path, "sequential,concurrent_assm", "--weight-prediction", "both"
    )
    runs = {(r["variant"], r["weight_prediction"]): r for r in result["runs"]}
    # Each off, then on; sequential without it is the reference of every gap.
    assert set(runs) == {(v, p) for v in ("sequential", "concurrent_assm") for p in (False, True)}
    headline, reference = result["headline"], runs["sequential", False]["final_accuracy"]
    assert headline["sequential_accuracy"] == pytest.approx(reference)
    for variant, predict in runs:
        key = variant + ("_predicted" if predict else "")
        if key != "sequential":
            gap = 100 * (runs[variant, predict]["final_accuracy"] - reference)
            assert headline[f"{key}_gap_points_c2"] == pytest.approx(gap)
    assert headline["concurrent_passm_predicted_gap_points_c2"] is None  # not run
    assert result["settings"]["weight_prediction"] == "both"


def test_the_updates_factor_lengthens_only_the_concurrent_variants(load_benchmark, tmp_path):
    result = _quick(
        load_benchmark, tmp_path, "sequential,concurrent_passm", "--async-updates-factor", "2"
    )
    updates = {run["variant"]: run["updates"] for run in result["runs"]}
    assert updates == {"sequential": 40, "concurrent_passm": 80}  # quick: 40 updates
    worker_updates = next(r for r in result["runs"] if r["variant"] == "concurrent_passm")
    assert sum(worker_updates["worker_updates"]) == 80
    assert result["settings"]["async_updates_factor"] == 2.0


def _quick(load_benchmark, tmp_path, variants: str, *flags: str) -> dict:
    """The results of a ``--quick`` run of ``variants`` with ``flags``."""
    path = tmp_path / "quick.json"
    load_benchmark("async_staleness_ablation").main(
        ["--quick", "--variants", variants, *flags, "--output", str(path)]
    )
    return json.loads(path.read_text())
