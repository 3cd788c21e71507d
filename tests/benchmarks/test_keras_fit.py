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
