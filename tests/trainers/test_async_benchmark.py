"""Runs benchmarks/async_partitioned.py --quick once, checks its JSON, executes the notebook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory, load_benchmark):
    output = tmp_path_factory.mktemp("async_partitioned")
    load_benchmark("async_partitioned").main(["--quick", "--output_dir", str(output)])
    return output / "async_partitioned_quick.json"


def test_quick_run_writes_json_and_png_with_every_method(quick_results):
    result = json.loads(quick_results.read_text())
    assert quick_results.with_suffix(".png").stat().st_size > 0
    settings = result["settings"]
    methods = {(r["method"], r["num_workers"]) for r in result["runs"]}
    assert methods == {("sync", 0), ("assm", 2), ("passm", 2), ("passm_plus", 2)}
    for run in result["runs"]:
        assert run["completed_steps"] == run["updates_applied"] == settings["num_steps"]
        assert [h["step"] for h in run["history"]] == [10, 20]
        assert all(0.0 <= h["accuracy"] <= 1.0 for h in run["history"])
    passm = next(r for r in result["runs"] if r["method"] == "passm")
    assert sum(passm["block_updates"]) == settings["num_steps"]  # one block per PASSM step
    assert [row["method"] for row in result["summary"]] == ["sync", "assm", "passm", "passm_plus"]
    assert next(iter(result)) == "headline"
    headline = result["headline"]
    assert all(value is None or type(value) is float for value in headline.values())
    assert set(headline) == {
        "assm_speedup_c2", "assm_accuracy_gap_points_c2", "passm_speedup_c2",
        "passm_accuracy_gap_points_c2", "passm_plus_speedup_c2",
        "passm_plus_accuracy_gap_points_c2", "backward_flop_saving_c2", "step_flop_saving_c2",
    }  # fmt: skip
    passm_plus = result["summary"][3]
    assert headline["passm_plus_speedup_c2"] == passm_plus["median_speedup_vs_sync"]
    assert headline["passm_plus_accuracy_gap_points_c2"] == pytest.approx(
        100 * passm_plus["mean_accuracy_gap_vs_sync"]
    )
    saving = result["flops"]["per_worker_count"]["2"]["backward_saving_fraction"]
    assert headline["backward_flop_saving_c2"] == saving


def test_flop_counts_follow_restricted_backprop(quick_results):
    flops = json.loads(quick_results.read_text())["flops"]
    assert flops["full_step_flops"] > flops["forward_flops"] > 0
    saving = flops["per_worker_count"]["2"]
    first, last = saving["block_backward_flops"]
    # The block holding the input layer back-propagates through every layer: no saving beyond
    # skipping the other block's weight gradients; the output block stops early.
    assert flops["full_backward_flops"] > first > last > 0
    assert 0 < saving["backward_saving_fraction"] < 1


def _run(seed, method, workers, accuracies, seconds, final=None):
    history = [
        {"step": 10 * (i + 1), "train_seconds": s, "accuracy": a}
        for i, (a, s) in enumerate(zip(accuracies, seconds, strict=True))
    ]
    return {
        "seed": seed,
        "method": method,
        "num_workers": workers,
        "history": history,
        "final_accuracy": accuracies[-1] if final is None else final,
        "train_seconds": seconds[-1],
        "completed_steps": history[-1]["step"],
        "block_staleness_mean": [0.0],
    }


def test_summary_measures_time_to_sync_accuracy_minus_half_a_point(load_benchmark):
    bench = load_benchmark("async_partitioned")
    settings = {"worker_counts": [2]}
    runs = [
        _run(0, "sync", 0, [0.5, 0.7, 0.8], [1.0, 2.0, 3.0]),
        _run(0, "assm", 2, [0.6, 0.796, 0.81], [0.5, 1.0, 1.5]),  # 0.796 ≥ 0.8 − 0.005
        _run(0, "passm", 2, [0.4, 0.5, 0.6], [0.5, 1.0, 1.5]),  # never reaches it
        _run(0, "passm_plus", 2, [0.5, 0.7, 0.8], [1.0, 1.5, 2.0]),
    ]
    rows = {row["method"]: row for row in bench.summarise(runs, settings)}
    assert rows["sync"]["median_seconds_to_target"] == 3.0
    assert rows["assm"]["median_seconds_to_target"] == 1.0
    assert rows["assm"]["median_speedup_vs_sync"] == pytest.approx(3.0)
    assert rows["passm"]["reached_target"] == 0 and rows["passm"]["median_speedup_vs_sync"] is None
    assert rows["passm_plus"]["median_speedup_vs_sync"] == pytest.approx(1.5)
    assert rows["passm"]["mean_accuracy_gap_vs_sync"] == pytest.approx(-0.2)
    assert "| passm_plus | 2 | 1/1 | 2.0 | 1.50 |" in bench.markdown_table(list(rows.values()))


def test_headline_gives_speedups_gaps_in_points_and_flop_savings_per_worker_count(
    load_benchmark,
):
    headline = load_benchmark("async_partitioned").headline

    def row(method, workers, speedup, gap):
        return {"method": method, "num_workers": workers, "median_speedup_vs_sync": speedup,
                "mean_accuracy_gap_vs_sync": gap}  # fmt: skip

    summary = [
        row("sync", 0, 1.0, 0.0),  # the reference: no figures of its own
        row("assm", 2, 1.5, -0.004),
        row("passm", 2, None, -0.15),  # never reached synchronous SGD's accuracy
        row("passm_plus", 2, 2, 0),  # ints come out floats
        row("passm_plus", 4, None, -0.3),
    ]
    flops = {"per_worker_count": {
        "2": {"backward_saving_fraction": 0.5, "step_saving_fraction": 0.25,
              "paper_backward_saving_fraction": 0.25},
        "4": {"backward_saving_fraction": 0.6, "step_saving_fraction": 0.4,
              "paper_backward_saving_fraction": 0.375},
    }}  # fmt: skip
    figures = headline(summary, flops)
    assert figures == pytest.approx(
        {
            "assm_speedup_c2": 1.5,
            "assm_accuracy_gap_points_c2": -0.4,
            "passm_speedup_c2": None,
            "passm_accuracy_gap_points_c2": -15.0,
            "passm_plus_speedup_c2": 2.0,
            "passm_plus_accuracy_gap_points_c2": 0.0,
            "passm_plus_speedup_c4": None,
            "passm_plus_accuracy_gap_points_c4": -30.0,
            "backward_flop_saving_c2": 0.5,
            "step_flop_saving_c2": 0.25,
            "backward_flop_saving_c4": 0.6,
            "step_flop_saving_c4": 0.4,
        }
    )
    assert all(value is None or type(value) is float for value in figures.values())


@pytest.mark.parametrize("which", ["quick", "committed"])
def test_notebook_draws_the_results_without_training(which, quick_results, execute_notebook):
    path = quick_results if which == "quick" else ROOT / "benchmarks/results/async_partitioned.json"
    outputs = execute_notebook("async_partitioned", ASYNC_PARTITIONED_RESULTS=path)
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "passm_plus" in printed
