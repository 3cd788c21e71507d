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
