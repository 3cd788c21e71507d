"""Runs benchmarks/autoassist.py --quick once, checks its JSON, and executes the notebook on it."""

import json

import pytest


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory, load_benchmark):
    output = tmp_path_factory.mktemp("autoassist")
    load_benchmark("autoassist").main(["--quick", "--output", str(output)])
    return output


def test_quick_run_writes_json_and_png_with_every_method(quick_results):
    result = json.loads((quick_results / "autoassist.json").read_text())
    assert (quick_results / "autoassist.png").stat().st_size > 0
    methods = result["summary"]["mnist1d"]["methods"]
    assert set(methods) == {"shuffle", "assistant", "assistant_reweight", "shrinking"}
    for run in result["runs"]:
        curve = run["curve"]
        assert curve and all(0.0 <= p["test_accuracy"] <= 1.0 for p in curve)
        # Filtering reads at least as many examples as the Boss trains on.
        assert all(p["data_passes"] >= p["boss_epochs"] - 1e-9 for p in curve)
        if run["method"].startswith("assistant"):
            assert run["stats"]["filter_seen"] > run["stats"]["filter_kept"] > 0
            assert run["stats"]["trained_batches"] > 0
    assert set(result["headline"]) >= {
        "assistant_steps_vs_shuffle",
        "shrinking_steps_vs_shuffle",
        "assistant_epochs_vs_shuffle",
        "shrinking_epochs_vs_shuffle",
    }
    assert all(v is None or isinstance(v, float) for v in result["headline"].values())
    assert set(result["throughput"]) == {
        "baseline",
        "filter_only",
        "assistant_sync",
        "assistant_async",
    }
    assert result["throughput"]["assistant_async"]["learner"]["trained_batches"] > 0
    assert result["learner_threads_at_exit"] == 0  # every learner thread was closed


def test_quick_run_counts_optimizer_steps_for_every_method(quick_results):
    """Steps are the Boss's compute: shrinking pays a full batch per step, whatever it keeps."""
    result = json.loads((quick_results / "autoassist.json").read_text())
    batch, n = result["config"]["batch_size"], None
    for run in result["runs"]:
        for p in run["curve"]:
            n = n or round(p["examples_trained"] / p["boss_epochs"])
            # Every step computes the loss and gradient of a full batch.
            assert p["examples_computed"] == p["optimizer_steps"] * batch
            assert p["examples_trained"] == pytest.approx(p["boss_epochs"] * n)
            assert p["examples_computed"] >= p["examples_trained"]
            if run["method"] == "shrinking":
                # Half the batch or more is dropped inside the step, after it was computed: one
                # Boss epoch (kept examples / N) costs far more than N / batch steps.
                assert p["examples_computed"] > 1.3 * p["examples_trained"]
            else:
                # The filter drops before batching: every computed row is trained on.
                assert p["examples_computed"] == p["examples_trained"]
    summary = result["summary"]["mnist1d"]["methods"]
    for entry in summary.values():
        if entry["optimizer_steps_to_target"] is not None:
            assert entry["examples_computed_to_target"] == pytest.approx(
                entry["optimizer_steps_to_target"] * batch
            )


def test_first_reaching_and_summary_use_the_shuffle_baseline_target(load_benchmark):
    bench = load_benchmark("autoassist")
    curve = lambda accs: [  # noqa: E731
        {
            "optimizer_steps": 10 * (i + 1),
            "examples_computed": 320 * (i + 1),
            "boss_epochs": 0.5 * (i + 1),
            "data_passes": 1.0 * (i + 1),
            "seconds": 1.0 * (i + 1),
            "test_accuracy": a,
        }
        for i, a in enumerate(accs)
    ]
    runs = [
        {"task": "t", "method": "shuffle", "seed": 0, "curve": curve([0.5, 0.8, 0.9, 1.0])},
        {"task": "t", "method": "shuffle", "seed": 1, "curve": curve([0.5, 0.6, 0.7, 0.8])},
        {"task": "t", "method": "assistant", "seed": 0, "curve": curve([0.8, 0.9, 0.9, 0.9])},
        {"task": "t", "method": "assistant", "seed": 1, "curve": curve([0.1, 0.2, 0.3, 0.4])},
    ]
    summary = bench.summarize(runs)["t"]
    assert summary["target_accuracy"] == pytest.approx(0.99 * 0.8)
    shuffle, assistant = summary["methods"]["shuffle"], summary["methods"]["assistant"]
    assert shuffle["boss_epochs_to_target"] == pytest.approx((1.0 + 2.0) / 2)
    assert assistant["seeds_reaching_target"] == 1
    assert assistant["boss_epochs_to_target"] == pytest.approx(0.5)
    assert assistant["boss_epochs_saved_vs_shuffle"] == pytest.approx(1 - 0.5 / 1.5)
    # One assistant seed missed the target: its headline ratios are null, not a mean of one.
    ratios = bench.headline(bench.summarize(runs))
    assert ratios["assistant_steps_vs_shuffle"] is None
    del runs[-1]
    # Paired with shuffle's seed 0 alone (20 steps, 1 Boss epoch); the ratio of means with both
    # of shuffle's seeds stays beside the headline.
    sections = bench.headline_sections(bench.summarize(runs))
    assert sections["headline"]["assistant_steps_vs_shuffle"] == pytest.approx(10 / 20)
    assert sections["headline"]["assistant_epochs_vs_shuffle"] == pytest.approx(0.5 / 1.0)
    assert sections["headline_ratio_of_means"]["assistant_steps_vs_shuffle"] == pytest.approx(
        10 / 30
    )


def test_headline_ratio_is_the_paired_geometric_mean_of_hand_built_runs(load_benchmark):
    bench = load_benchmark("autoassist")

    def run(method, seed, steps_to_target):
        # Accuracy 1.0 from ``steps_to_target`` on (the target is 0.99 x shuffle's best, 1.0).
        curve = [{"optimizer_steps": s, "examples_computed": 32 * s, "boss_epochs": s / 10,
                  "data_passes": s / 10, "seconds": s / 100,
                  "test_accuracy": 1.0 if s >= steps_to_target else 0.5}
                 for s in range(10, 1001, 10)]  # fmt: skip
        return {"task": "mnist1d", "method": method, "seed": seed, "curve": curve}

    # Seed 1 is slow for both (a harder seed): paired, it weighs as much as seed 0.
    runs = [run("shuffle", 0, 100), run("shuffle", 1, 800)]
    runs += [run("assistant", 0, 50), run("assistant", 1, 200)]  # 1/2 and 1/4 the steps
    sections = bench.headline_sections(bench.summarize(runs))
    assert sections["headline"]["assistant_steps_vs_shuffle"] == pytest.approx(0.125**0.5)
    spread = sections["headline_spread"]["assistant_steps_vs_shuffle"]
    assert (spread["min"], spread["max"]) == pytest.approx((0.25, 0.5))
    assert spread["seeds"] == [0, 1]
    assert sections["headline_ratio_of_means"]["assistant_steps_vs_shuffle"] == pytest.approx(
        250 / 900
    )


def test_notebook_draws_the_results_without_training(quick_results, execute_notebook):
    outputs = execute_notebook("autoassist", AUTOASSIST_RESULTS=quick_results / "autoassist.json")
    assert not [o for o in outputs if o.output_type == "error"]
    assert any(o.get("data", {}).get("image/png") for o in outputs)
    text = "".join(o.get("text", "") for o in outputs)
    assert "mnist1d: target test accuracy" in text
