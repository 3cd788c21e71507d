"""Runs benchmarks/bench.py --quick once, and checks its summary on hand-built runs."""

import json

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("prune_overhead")


@pytest.fixture(scope="module")
def quick(bench, tmp_path_factory):
    # In this process, where the bench fixture imported the script (and TensorFlow) already: a
    # child would start both again. --quick runs its pipelines without the autotuner, so no
    # iterator it leaves to the garbage collector waits on one at teardown.
    data_dir = tmp_path_factory.mktemp("prune_overhead_data")
    output = data_dir / "prune_overhead.json"
    arguments = ["--quick", "--no-image", "--paths", "hand,loop,fit,trainer"]
    bench.main([*arguments, "--data-dir", str(data_dir), "--output", str(output)])
    return json.loads(output.read_text())


def test_quick_run_measures_every_path_full_and_pruned(quick):
    assert next(iter(quick)) == "headline"
    paths = {run["path"] for run in quick["runs"]}
    assert paths == {"hand", "loop", "fit", "trainer"}
    for path in paths:
        runs = [run for run in quick["runs"] if run["path"] == path]
        assert sorted(run["prune"] for run in runs) == [False, True]
        assert all(run["steps"] > 0 and run["seconds"] > 0 for run in runs)
    headline = quick["headline"]
    assert headline["prune_decoded_fraction_image"] is None  # --no-image
    for path in ("loop", "fit", "trainer"):
        assert isinstance(headline[f"prune_step_time_ratio_{path}"], float)
        assert isinstance(headline[f"prune_accuracy_delta_{path}"], float)
    assert isinstance(headline["prune_vs_hand_speed"], float)
    assert isinstance(headline["prune_vs_hand_speed_fit"], float)
    assert set(quick["pipeline_seconds_per_batch"]) == {"full", "stream", "by_id"}


def _run(path, seed, prune, seconds, steps, accuracy):
    return {
        "path": path,
        "seed": seed,
        "prune": prune,
        "seconds": seconds,
        "steps": steps,
        "accuracy": accuracy,
    }


def test_speed_ups_are_paired_by_seed(bench):
    runs = [
        _run("loop", 0, False, 100.0, 1000, 0.99),
        _run("loop", 0, True, 50.0, 600, 0.985),
        _run("loop", 1, False, 400.0, 1000, 0.99),
        _run("loop", 1, True, 100.0, 600, 0.995),
        _run("hand", 0, True, 60.0, 600, 0.99),
        _run("hand", 1, True, 100.0, 600, 0.99),
    ]
    summary = bench.summarize(runs)["loop"]
    assert summary["wall_speedup"]["per_seed"] == [2.0, 4.0]
    assert summary["wall_speedup"]["mean"] == pytest.approx(8**0.5)  # geometric mean
    assert summary["step_time_ratio"]["per_seed"] == pytest.approx(
        [50 / 60, 100 / 600 * 1000 / 400]
    )
    assert summary["accuracy_delta_points"] == pytest.approx(0.0)
    assert summary["speed_vs_hand"]["per_seed"] == pytest.approx([60 / 50, 1.0])
    headline = bench.headline(bench.summarize(runs), None)
    assert headline["prune_wall_speedup_loop"] == pytest.approx(8**0.5)
    assert headline["prune_wall_speedup_fit"] is None


def test_decoded_fraction_is_images_read_per_epoch_pruned_over_full(bench):
    common = {"num_train": 100, "batch_size": 10, "prune_seen": None, "prune_keep_rate": None}
    full = {**common, "seed": 0, "prune": False, "seconds": 9.0, "steps": 40}
    full["fresh_examples"] = 400  # 4 epochs of 100
    pruned = {**common, "seed": 0, "prune": True, "seconds": 6.0, "steps": 26}
    pruned.update(fresh_examples=260, prune_epochs=4, prune_keep_rate=0.64)
    image = bench.image_summary([full, pruned])
    assert image["decoded_fraction"] == pytest.approx(0.65)
    assert image["kept_fraction"] == pytest.approx(0.64)
    assert image["wall_speedup"]["mean"] == pytest.approx(1.5)


def test_the_plot_takes_a_mean_that_rounds_past_equal_values(bench, tmp_path):
    # mean(0.1, 0.1, 0.1) is 0.10000000000000002 > max: matplotlib refused the negative bar.
    spread = {"mean": sum([0.1] * 3) / 3, "min": 0.1, "max": 0.1}
    summary = {"loop": {"step_time_ratio": spread, "wall_speedup": spread}}
    bench.plot(summary, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 0
