"""Runs benchmarks/keras_fit.py --quick once, checks its JSON, and draws it with the notebook."""

import json

import pytest


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory, load_benchmark):
    output = tmp_path_factory.mktemp("keras_fit") / "keras_fit.json"
    load_benchmark("keras_fit").main(["--quick", "--output", str(output)])
    return output


def test_quick_run_compares_auto_echo_and_a_fixed_factor_with_plain_fit(quick_results):
    result = json.loads(quick_results.read_text())
    assert quick_results.with_suffix(".png").stat().st_size > 0
    headline = result["headline"]
    assert set(headline) == {
        "autoecho_fit_speedup",
        "autoecho_from_diagnosis_fit_speedup",
        "fixed_echo_fit_speedup",
        "autoecho_batch_fit_speedup",
        "fixed_batch_echo_fit_speedup",
        "pruning_fit_speedup",
        "diagnose_R_error",
    }
    assert all(v is None or isinstance(v, float) for v in headline.values())
    methods = {"baseline", "auto", "auto_start", "fixed", "auto_batch", "fixed_batch", "pruned"}
    assert {run["method"] for run in result["runs"]} == methods
    # Echoing methods train --echo-steps-scale times the baseline's steps.
    epochs = result["config"]["epochs"]
    echo_epochs = round(epochs * result["config"]["echo_steps_scale"])
    for run in result["runs"]:
        echoing_run = run["method"] not in ("baseline", "pruned")
        assert len(run["curve"]) == (echo_epochs if echoing_run else epochs), run["method"]
    # AutoEcho's factor is in fit's logs; the others have none.
    for run in result["runs"]:
        factors = [p["echo_factor"] for p in run["curve"]]
        if run["method"].startswith("auto"):
            assert all(1.0 <= f <= result["config"]["max_echo"] for f in factors)
        else:
            assert factors == [None] * len(run["curve"])
    diagnosis = result["diagnosis"]
    apart, measured = diagnosis["apart"]["ratio"], diagnosis["diagnose"]["ratio"]
    assert headline["diagnose_R_error"] == pytest.approx(abs(measured - apart) / apart)


def test_notebook_draws_the_results_without_training(quick_results, execute_notebook):
    outputs = execute_notebook("keras_fit", KERAS_FIT_RESULTS=quick_results)
    assert any(output.get("output_type") == "display_data" for output in outputs)
    text = "".join(output.get("text", "") for output in outputs)
    assert "baseline" in text and "autoecho_fit_speedup" in text


def test_headline_speedup_is_the_paired_geometric_mean_of_hand_built_runs(load_benchmark):
    benchmark = load_benchmark("keras_fit")
    # Seconds at which each seed's curve reaches 0.9 (its final accuracy, the target).
    reach = {"baseline": (10.0, 90.0), "auto": (5.0, 22.5)}  # 2x on seed 0, 4x on seed 1

    def run(method, seed):
        seconds = reach.get(method, reach["baseline"])[seed]
        curve = [{"seconds": seconds / 2, "test_accuracy": 0.5, "echo_factor": 2.0},
                 {"seconds": seconds, "test_accuracy": 0.9, "echo_factor": 2.0}]  # fmt: skip
        return {"method": method, "seed": seed, "curve": curve}

    runs = [run(method, seed) for seed in (0, 1) for method in benchmark.METHODS]
    sections = benchmark.headline_sections(benchmark.summarize(runs), {"relative_error": 0.1})
    assert sections["headline"]["autoecho_fit_speedup"] == pytest.approx(8**0.5)
    assert sections["headline_spread"]["autoecho_fit_speedup"]["per_seed"] == pytest.approx(
        [2.0, 4.0]
    )
    assert sections["headline"]["fixed_echo_fit_speedup"] == pytest.approx(1.0)
    # The ratio of mean seconds (50 / 13.75) stays beside it.
    assert sections["headline_ratio_of_means"]["autoecho_fit_speedup"] == pytest.approx(50 / 13.75)
    assert sections["headline"]["diagnose_R_error"] == 0.1
