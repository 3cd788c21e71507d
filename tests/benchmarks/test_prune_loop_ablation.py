"""Runs benchmarks/prune_loop_ablation.py --quick in this process and checks what it wrote."""

import json

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("prune_loop_ablation")


def test_quick_run_times_every_way_against_the_hand_written_loop(bench, tmp_path, data_dir):
    output = tmp_path / "prune_loop_ablation.json"
    bench.main(["--quick", "--data-dir", data_dir, "--output", str(output)])
    result = json.loads(output.read_text())
    assert next(iter(result)) == "headline"
    assert set(result["summary"]) == set(bench.WAYS)
    for name in bench.WAYS:
        row = result["summary"][name]
        assert row["ms_per_step"] > 0
        assert len(row["speed_vs_hand"]["per_seed"]) == result["config"]["rounds"]
    assert result["summary"]["hand"]["speed_vs_hand"]["mean"] == pytest.approx(1.0)
    assert set(result["headline"]) == {f"{name}_speed_vs_hand" for name in bench.WAYS[1:]}
    assert all(isinstance(value, float) for value in result["headline"].values())


def test_steps_must_divide_into_whole_in_graph_calls(bench):
    with pytest.raises(SystemExit):
        bench.parse_args(["--steps", "10", "--steps-per-call", "4"])
