"""Runs benchmarks/selection.py --quick once, checks its JSON, and draws it with the notebook."""

import json
import math

import numpy as np
import pytest

HEADLINE = {
    "prune_speedup_equal_epochs",
    "prune_speedup_vs_short_schedule",
    "prune_accuracy_delta",
    "prune_vs_short_accuracy_delta",
    "select_batch_speedup",
    "sample_batch_speedup",
    "assist_steps_saved",
    "assist_oracle_steps_saved",
    "assist_raw_steps_saved",
    "assist_overhead",
    "assist_boss_forward_steps_saved",
    "assist_boss_forward_overhead",
    "pgd_steps_speedup_clean",
    "pgd_wall_speedup_clean",
}


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory, load_benchmark):
    output = tmp_path_factory.mktemp("selection") / "selection.json"
    cache = tmp_path_factory.mktemp("selection_cache")
    load_benchmark("selection").main(["--quick", "--output", str(output), "--cache", str(cache)])
    return output


def test_quick_run_compares_every_method_with_the_baselines(quick_results):
    result = json.loads(quick_results.read_text())
    assert quick_results.with_suffix(".png").stat().st_size > 0
    assert set(result["headline"]) >= HEADLINE
    assert all(v is None or isinstance(v, float) for v in result["headline"].values())
    runs = {run["method"]: run for run in result["runs"]}
    assert set(runs) == {
        "full",
        "prune",
        "short",
        "select",
        "sample",
        "assist",
        "assist_boss",
        "assist_boss_forward",
        "assist_oracle",
    }
    epochs = result["config"]["epochs"]
    assert len(runs["full"]["curve"]) == len(runs["prune"]["curve"]) == epochs
    # The short schedule is given exactly the steps pruning took.
    assert runs["short"]["curve"][-1]["steps"] == runs["prune"]["curve"][-1]["steps"]
    assert runs["prune"]["curve"][-1]["steps"] < runs["full"]["curve"][-1]["steps"]
    # Selection scores batches of 2 x the batch size and trains on one batch size of rows.
    assert len(runs["select"]["curve"]) == epochs
    assert 2 * runs["select"]["curve"][-1]["steps"] == runs["full"]["curve"][-1]["steps"]
    assert runs["sample"]["curve"][-1]["steps"] == runs["select"]["curve"][-1]["steps"]
    # Every Assistant filters: fewer steps than the full data over the same epochs, at a keep
    # rate of at least its base probability γ; the learned ones were trained from the Boss.
    for method in ("assist", "assist_boss", "assist_boss_forward", "assist_oracle"):
        assert len(runs[method]["curve"]) == epochs
        assert runs[method]["curve"][-1]["steps"] < runs["full"]["curve"][-1]["steps"]
        assert 0.3 <= runs[method]["assistant"]["keep_rate"] < 1.0
    for method in ("assist", "assist_boss", "assist_boss_forward"):
        assert runs[method]["assistant"]["trained_examples"] > 0
    fraction = result["headline"]["prune_step_fraction"]
    assert fraction == pytest.approx(
        runs["prune"]["curve"][-1]["steps"] / runs["full"]["curve"][-1]["steps"]
    )


def test_learning_rate_warms_up_linearly_then_decays_on_a_cosine(load_benchmark):
    bench = load_benchmark("selection")
    data = {"x": np.zeros([4, 40], np.float32)}
    run = bench.Run(data, seed=0, learning_rate=0.1, warmup=0.25)
    rates = {}
    for fraction in (0.0, 0.125, 0.25, 0.5, 1.0):
        run.set_progress(fraction)
        rates[fraction] = float(run.optimizer.learning_rate.numpy())
    cosine = lambda f: 0.5 * (1 + math.cos(math.pi * f))  # noqa: E731
    assert rates[0.0] == 0.0
    assert rates[0.125] == pytest.approx(0.1 * cosine(0.125) * 0.5)  # half-way up the ramp
    assert rates[0.25] == pytest.approx(0.1 * cosine(0.25))
    assert rates[0.5] == pytest.approx(0.05)
    assert rates[1.0] == pytest.approx(0.0, abs=1e-9)


def test_speedups_are_ratios_of_seconds_to_the_target(load_benchmark):
    bench = load_benchmark("selection")
    curve = lambda points: [  # noqa: E731
        {"epoch": i + 1, "steps": 10 * (i + 1), "seconds": s, "test_accuracy": a}
        for i, (s, a) in enumerate(points)
    ]
    runs = [
        {"method": "full", "seed": 0, "curve": curve([(2.0, 0.5), (4.0, 0.9)])},
        {"method": "prune", "seed": 0, "curve": curve([(1.0, 0.6), (2.0, 0.9)])},
        {"method": "short", "seed": 0, "curve": curve([(1.0, 0.6), (2.0, 0.8)])},
    ]
    summary = bench.summarize(runs)
    assert summary["target_accuracy"] == pytest.approx(0.9)
    headline = bench.headline(summary)
    assert headline["prune_speedup_equal_epochs"] == pytest.approx(4.0 / 2.0)
    assert headline["prune_speedup_vs_short_schedule"] is None  # short never reached it
    assert headline["prune_accuracy_delta"] == pytest.approx(0.0)
    assert headline["prune_vs_short_accuracy_delta"] == pytest.approx(10.0)  # 90% against 80%


def test_paired_speedup_is_the_geometric_mean_of_per_seed_ratios(load_benchmark):
    bench = load_benchmark("selection")
    curve = lambda seconds, accuracy: [  # noqa: E731
        {"epoch": 1, "steps": 10, "seconds": seconds, "test_accuracy": accuracy}
    ]
    runs = [
        {"method": "full", "seed": 0, "curve": curve(8.0, 0.9)},
        {"method": "full", "seed": 1, "curve": curve(1.0, 0.95)},
        {"method": "full", "seed": 2, "curve": curve(3.0, 0.95)},
        {"method": "prune", "seed": 0, "curve": curve(2.0, 0.9)},  # 4x on this seed
        {"method": "prune", "seed": 1, "curve": curve(4.0, 0.9)},  # 0.25x on this one
        {"method": "prune", "seed": 2, "curve": curve(1.0, 0.8)},  # never reaches 0.9
    ]
    entry = bench.summarize(runs)["methods"]["prune"]
    # The ratio of mean seconds would say 4.0 / 3.0; seed by seed it is 4x and 0.25x.
    assert entry["paired_seeds"] == 2
    assert entry["paired_speedup"] == pytest.approx(1.0)
    assert entry["paired_speedup_range"] == pytest.approx([0.25, 4.0])
    assert "1.00x (0.25-4.00, 2 seeds)" in bench.markdown(bench.summarize(runs))


def test_headline_speedup_is_the_paired_geometric_mean_of_hand_built_runs(load_benchmark):
    bench = load_benchmark("selection")

    def run(method, seed, seconds, accuracy=0.9):
        curve = [{"epoch": 1, "steps": 10, "seconds": seconds, "test_accuracy": accuracy}]
        return {"method": method, "seed": seed, "curve": curve}

    # Seed 1 is slow for every method (a busy machine): paired, it weighs as much as seed 0.
    runs = [run("full", 0, 4.0), run("full", 1, 36.0)]
    runs += [run("prune", 0, 2.0), run("prune", 1, 9.0)]  # 2x and 4x
    runs += [run("short", 0, 3.0), run("short", 1, 9.0)]  # prune: 1.5x and 1x against it
    runs += [run("select", 0, 4.0), run("select", 1, 12.0)]  # 1x and 3x
    sections = bench.headline_sections(bench.summarize(runs))
    headline, spread = sections["headline"], sections["headline_spread"]
    assert headline["prune_speedup_equal_epochs"] == pytest.approx(8**0.5)
    assert spread["prune_speedup_equal_epochs"]["per_seed"] == pytest.approx([2.0, 4.0])
    assert headline["prune_speedup_vs_short_schedule"] == pytest.approx(1.5**0.5)
    assert headline["select_batch_speedup"] == pytest.approx(3**0.5)
    assert headline["sample_batch_speedup"] is None  # not run
    # The ratios of mean seconds stay beside the headline: 20 / 5.5, 6 / 5.5, 20 / 8.
    by_means = sections["headline_ratio_of_means"]
    assert by_means["prune_speedup_equal_epochs"] == pytest.approx(20 / 5.5)
    assert by_means["prune_speedup_vs_short_schedule"] == pytest.approx(6 / 5.5)
    assert by_means["select_batch_speedup"] == pytest.approx(20 / 8)


def test_resummarize_rederives_the_summary_from_the_stored_runs(quick_results, load_benchmark):
    stored = json.loads(quick_results.read_text())
    copy = quick_results.with_name("resummarized.json")
    edited = {**stored, "summary": {}, "headline": {}}  # as if summarised by older code
    copy.write_text(json.dumps(edited))
    result = load_benchmark("selection").main(["--resummarize", str(copy)])
    assert json.loads(copy.read_text()) == result
    assert result["runs"] == stored["runs"] and result["config"] == stored["config"]
    assert result["summary"] == stored["summary"]
    assert result["headline"] == stored["headline"]
    assert copy.with_suffix(".png").stat().st_size > 0


def test_notebook_draws_the_results_without_training(quick_results, execute_notebook):
    outputs = execute_notebook("selection", SELECTION_RESULTS=quick_results)
    assert any(output.get("output_type") == "display_data" for output in outputs)
    text = "".join(output.get("text", "") for output in outputs)
    assert "prune" in text and "target" in text


def test_fixed_learning_rates_skip_tuning_and_bad_flags_are_refused(load_benchmark, capsys):
    bench = load_benchmark("selection")
    args = bench.parse_args(["--methods", "full,prune,short", "--fixed-lrs", "full=0.1,prune=0.05"])
    # Nothing left to tune (short follows the full data), so no data is needed.
    assert bench.learning_rates(None, args) == ({"full": 0.1, "prune": 0.05, "short": 0.1}, [])
    for flag, message in (
        ("prune", "expected METHOD=RATE pairs"),
        ("prune=fast", "expected METHOD=RATE pairs"),
        ("select=0.05", "names methods not in --methods"),
    ):
        with pytest.raises(SystemExit):
            bench.parse_args(["--methods", "full,prune", "--fixed-lrs", flag])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--warmup-epochs", "-1"])
    assert "--warmup-epochs -1.0: expected 0 to --epochs (16)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--assist-anneal", "1.5"])
    assert "--assist-anneal 1.5: expected a fraction in [0, 1]" in capsys.readouterr().err


def test_annealed_assistant_trains_its_last_epochs_on_every_example(tmp_path, load_benchmark):
    output = tmp_path / "selection.json"
    arguments = ["--quick", "--output", str(output), "--cache", str(tmp_path / "cache")]
    arguments += ["--methods", "full,prune,assist_oracle", "--assist-anneal", "0.34"]
    runs = {run["method"]: run for run in load_benchmark("selection").main(arguments)["runs"]}
    full, assist = runs["full"]["curve"], runs["assist_oracle"]["curve"]
    per_epoch = full[0]["steps"]  # --quick: 3 epochs; round(3 x 0.66) = 2 filtered, 1 not
    assert [point["steps"] for point in full] == [per_epoch, 2 * per_epoch, 3 * per_epoch]
    assert assist[1]["steps"] < 2 * per_epoch  # the filter dropped examples in epochs 1-2
    assert assist[2]["steps"] - assist[1]["steps"] == per_epoch  # epoch 3: every example
