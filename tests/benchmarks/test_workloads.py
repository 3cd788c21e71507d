"""benchmarks/workloads.py: a --quick run of the image workload end to end, and the text
workload's statistics (its training runs are the text_lm smoke run's, in tests/configs)."""

import json

import pytest

HEADLINE = {
    "image_R",
    "image_echo_speedup_e2",
    "image_echo_speedup_e4",
    "image_final_accuracy",
    "image_autoecho_vs_best_fixed",
    "text_R",
    "text_echo_speedup_e2",
    "text_echo_speedup_e4",
    "text_autoecho_vs_best_fixed",
    "text_padding_fraction",
    "text_final_perplexity",
    "text_unigram_perplexity",
}


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory, load_benchmark, data_dir):
    output = tmp_path_factory.mktemp("workloads") / "workloads.json"
    arguments = ["--quick", "--workloads", "image", "--output", str(output), "--data-dir", data_dir]
    load_benchmark("workloads").main(arguments)
    return output


def test_quick_run_measures_rates_and_every_variant(quick_results):
    result = json.loads(quick_results.read_text())
    assert quick_results.with_suffix(".png").stat().st_size > 0
    headline = result["headline"]
    assert set(headline) == HEADLINE
    assert all(v is None or isinstance(v, float) for v in headline.values())
    assert headline["image_R"] > 0 and 0 <= headline["image_final_accuracy"] <= 1
    # The text workload did not run: its figures are null, not made up.
    assert all(value is None for key, value in headline.items() if key.startswith("text_"))
    rates = result["rates"]["image"]
    assert rates["examples_per_second_per_core"] > 0
    assert rates["examples_per_second_total"] > 0
    assert rates["train_examples_per_second"] > 0
    runs = {(run["workload"], run["variant"], run["factor"]): run for run in result["runs"]}
    assert set(runs) == {("image", "baseline", 1.0), ("image", "after_decode", 2.0)}
    assert runs[("image", "baseline", 1.0)]["echo_ratio"] == 1.0
    assert runs[("image", "after_decode", 2.0)]["echo_ratio"] == 2.0


def test_text_statistics_measure_padding_and_the_unigram_baseline(load_benchmark, data_dir):
    benchmark = load_benchmark("workloads")
    arguments = benchmark.argparse.Namespace(quick=True, data_dir=data_dir)
    config = benchmark.workload_config(benchmark.WORKLOADS["text"], arguments, seed=0)
    statistics = benchmark.text_statistics(config, batches=5)
    assert 0 <= statistics["padding_fraction_bucketed"] < statistics["padding_fraction_unbucketed"]
    # Add-one smoothed unigram perplexity: above 1, below the vocabulary's size.
    assert 1 < statistics["unigram_perplexity"] < config.data.vocab_size


def hand_built_runs(workload: str, point: str) -> list[dict]:
    """Two seeds; seed 1 is slow for every variant (a busy machine)."""
    seconds = {("baseline", 1.0): (10.0, 90.0), (point, 2.0): (5.0, 22.5),
               (point, 4.0): (10.0, 30.0), ("auto", None): (4.0, 45.0)}  # fmt: skip
    return [
        {"workload": workload, "variant": variant, "factor": factor, "seed": seed,
         "seconds_to_target": times[seed], "steps_to_target": 10, "final_accuracy": 0.9,
         "final_perplexity": None, "R": 3.0 if variant == "baseline" else None}
        for (variant, factor), times in seconds.items()
        for seed in (0, 1)
    ]  # fmt: skip


def test_headline_speedup_is_the_paired_geometric_mean_of_hand_built_runs(load_benchmark):
    benchmark = load_benchmark("workloads")
    table = benchmark.summarize(hand_built_runs("image", "after_augment"))
    sections = benchmark.headline_sections(table, None)
    headline, spread = sections["headline"], sections["headline_spread"]
    assert headline["image_echo_speedup_e2"] == pytest.approx(8**0.5)  # 2x and 4x
    assert spread["image_echo_speedup_e2"]["per_seed"] == pytest.approx([2.0, 4.0])
    assert headline["image_echo_speedup_e4"] == pytest.approx(3**0.5)  # 1x and 3x
    # AutoEcho (2.5x and 2x) over the best fixed factor (e = 2), seed by seed.
    assert headline["image_autoecho_vs_best_fixed"] == pytest.approx((1.25 * 0.5) ** 0.5)
    assert sections["headline_ratio_of_means"]["image_echo_speedup_e2"] == pytest.approx(50 / 13.75)
    assert headline["image_R"] == 3.0 and headline["text_echo_speedup_e2"] is None
    assert set(headline) == HEADLINE
