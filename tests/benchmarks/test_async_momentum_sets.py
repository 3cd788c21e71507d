"""benchmarks/async_momentum_sets.py: the per-worker momentum ablation's quick run."""

import json

import pytest


def test_quick_run_trains_every_variant_and_reports_the_gaps(load_benchmark, tmp_path):
    path = tmp_path / "momentum_sets.json"
    load_benchmark("async_momentum_sets").main(["--quick", "--output", str(path)])
    result = json.loads(path.read_text())
    assert next(iter(result)) == "headline"
    variants = {run["variant"] for run in result["runs"]}
    assert variants == {"one_worker", "own_momentum", "shared_momentum"}
    accuracy = {run["variant"]: run["accuracy"] for run in result["runs"]}  # one rate, one seed
    assert all(0.0 <= value <= 1.0 for value in accuracy.values())
    headline = result["headline"]
    for variant in ("own_momentum", "shared_momentum"):
        gap = 100 * (accuracy[variant] - accuracy["one_worker"])
        assert headline[f"{variant}_gap_points_c2"] == pytest.approx(gap)
