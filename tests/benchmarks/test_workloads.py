"""Runs benchmarks/workloads.py --quick once (the image folder workload) and checks its JSON."""

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
    load_benchmark("workloads").main(["--quick", "--output", str(output), "--data-dir", data_dir])
    return output


def test_quick_run_measures_rates_and_every_variant(quick_results):
    result = json.loads(quick_results.read_text())
    assert quick_results.with_suffix(".png").stat().st_size > 0
    headline = result["headline"]
    assert set(headline) == HEADLINE
    assert all(v is None or isinstance(v, float) for v in headline.values())
    assert headline["image_R"] > 0 and headline["text_R"] > 0
    assert 0.0 <= headline["text_padding_fraction"] < 1.0
    assert headline["text_final_perplexity"] > 1.0 and headline["text_unigram_perplexity"] > 1.0
    for name in ("image", "text"):
        rates = result["rates"][name]
        assert rates["examples_per_second_per_core"] > 0
        assert rates["examples_per_second_total"] > 0
        assert rates["train_examples_per_second"] > 0
    runs = {(run["workload"], run["variant"], run["factor"]): run for run in result["runs"]}
    assert set(runs) == {
        ("image", "baseline", 1.0),
        ("image", "after_decode", 2.0),
        ("text", "baseline", 1.0),
    }
    assert runs[("image", "baseline", 1.0)]["echo_ratio"] == 1.0
    assert runs[("image", "after_decode", 2.0)]["echo_ratio"] == 2.0
    assert runs[("image", "baseline", 1.0)]["final_accuracy"] is not None
