"""Runs benchmarks/pgd_clean.py --quick once and checks what its JSON says."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf


@pytest.fixture(scope="module")
def quick(tmp_path_factory, load_benchmark):
    output = tmp_path_factory.mktemp("pgd_clean") / "pgd_clean.json"
    benchmark = load_benchmark("pgd_clean")
    benchmark.main(["--quick", "--output", str(output)])
    return json.loads(output.read_text()), output, benchmark.METHODS


def test_quick_run_reports_every_method_on_both_sets(quick):
    result, output, methods = quick
    assert output.with_suffix(".png").stat().st_size > 0
    assert {"pgd_steps_speedup_clean", "pgd_wall_speedup_clean"} <= set(result["headline"])
    assert all(v is None or isinstance(v, float) for v in result["headline"].values())
    for name, dataset in result["datasets"].items():
        assert list(dataset["runs"]) == list(methods), name
        starts = {run["curves"][0]["train_loss"][0] for run in dataset["runs"].values()}
        assert len(starts) == 1, f"{name}: every method starts from the same weights"
        for target in dataset["summary"].values():
            sgd = target["methods"]["sgd"]
            # Targets are SGD's worst seed's losses, so SGD reaches each one in every seed.
            assert sgd["reached"] == sgd["seeds"] and sgd["steps_speedup"] == 1.0


def test_exact_top_k_steps_further_along_the_full_gradient_than_uniform_batches(quick):
    # G·∇L/‖∇L‖² is 1 in expectation for a uniform batch; the oracle's top-k by ḡ·g_i with
    # exact ḡ maximises it over the batch's top half, so it must be well above SGD's.
    for name, dataset in quick[0]["datasets"].items():
        alignment = dataset["alignment"]
        assert alignment["oracle"] > 2 * alignment["sgd"], name


def test_first_reaching_takes_the_first_evaluation_at_the_target(load_benchmark):
    first_reaching = load_benchmark("pgd_clean").first_reaching
    curve = {"step": [0, 10, 20, 30], "seconds": [0, 1, 2, 3], "train_loss": [2, 1.5, 0.9, 0.5]}
    assert first_reaching(curve, 1.0) == {"step": 20, "seconds": 2}
    assert first_reaching(curve, 0.5) == {"step": 30, "seconds": 3}
    assert first_reaching(curve, 0.1) is None


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--datasets", "digits,mnist"], r"--datasets: unknown \['mnist'\]; choose from digits"),
        (["--methods", "sgd,pgdd"], r"--methods: unknown \['pgdd'\]; choose from sgd, pgd"),
        (["--methods", "pgd"], r"--methods=pgd: add sgd .* or --merge"),
    ],
)
def test_unknown_data_sets_and_methods_are_refused_before_training(
    load_benchmark, capsys, arguments, message
):
    with pytest.raises(SystemExit):
        load_benchmark("pgd_clean").main(arguments)
    assert re.search(message, capsys.readouterr().err)


def test_the_imbalanced_set_draws_class_k_in_proportion_to_0_6_to_the_k(load_benchmark):
    counts = np.bincount(load_benchmark("pgd_clean").load("imbalanced", quick=True)["y"])
    assert counts.sum() == 6_000 and np.all(np.diff(counts) < 0)
    assert counts[-1] / counts[0] == pytest.approx(0.6**9, rel=0.5)


def test_normalized_oracle_steps_as_far_along_the_full_gradient_as_a_uniform_batch(
    load_benchmark,
):
    benchmark = load_benchmark("pgd_clean")
    data = benchmark.load("digits", quick=True)
    step, no_ids = tf.constant(0, tf.int64), tf.zeros([0], tf.int64)
    moves = {}
    for method in ("oracle", "oracle_normalized"):
        run = benchmark.Run(data, method, learning_rate=0.1, seed=0)  # the same initial weights
        before = [v.numpy() for v in run.variables]
        alignment = float(run.alignment(step, no_ids))
        run.step(step, no_ids)
        moves[method] = np.sqrt(
            sum(np.sum((v.numpy() - b) ** 2) for v, b in zip(run.variables, before, strict=True))
        )
    assert alignment > 1  # top-k of exact priorities: a longer step than a uniform batch's
    assert moves["oracle_normalized"] == pytest.approx(moves["oracle"] / alignment, rel=1e-3)


def test_headline_speedup_is_the_paired_geometric_mean_of_hand_built_runs(load_benchmark):
    benchmark = load_benchmark("pgd_clean")

    def curve(steps_to_final, seconds_per_step):
        # 20 evaluations of 10 steps; the loss reaches SGD's final loss (1.0) at steps_to_final.
        steps = [10 * i for i in range(21)]
        losses = [1.0 if s >= steps_to_final else 2.0 - s / 1000 for s in steps]
        return {"step": steps, "seconds": [s * seconds_per_step for s in steps],
                "train_loss": losses}  # fmt: skip

    # Seed 1 is slow for both methods (a busy machine): paired, it counts as much as seed 0.
    runs = {
        "sgd": {"curves": [curve(200, 0.01), curve(200, 0.09)]},
        "pgd": {"curves": [curve(100, 0.01), curve(50, 0.09)]},  # 2x and 4x
    }
    result = {"steps": 200, "every": 10, "runs": runs}
    results = {"digits": {**result, "summary": benchmark.summarize(result)}}
    sections = benchmark.headline_sections(results)
    headline, spread = sections["headline"], sections["headline_spread"]
    assert headline["pgd_steps_speedup_clean"] == pytest.approx(8**0.5)
    assert headline["pgd_wall_speedup_clean"] == pytest.approx(8**0.5)
    assert spread["pgd_steps_speedup_digits"]["per_seed"] == pytest.approx([2.0, 4.0])
    # SGD's mean steps (200) over PGD's (75): the ratio of means stays beside the headline.
    by_means = sections["headline_ratio_of_means"]
    assert by_means["pgd_steps_speedup_clean"] == pytest.approx(200 / 75)
    assert headline["oracle_steps_speedup_clean"] is None  # not run
