"""benchmarks/iterator_teardown.py: the autotune schedule it compares with, its summary, and an
in-process quick run."""

import json

import pytest


def test_schedule_wait_is_the_time_to_the_next_optimisation(load_benchmark):
    teardown = load_benchmark("iterator_teardown")
    # Optimisations at 0, 20, 60, 140, ... ms: 20 * (2**k - 1) ms.
    assert teardown.schedule_wait(0.0) == pytest.approx(0.02)
    assert teardown.schedule_wait(0.05) == pytest.approx(0.01)
    assert teardown.schedule_wait(12.0) == pytest.approx(20.46 - 12.0)
    assert teardown.schedule_wait(25.0) == pytest.approx(40.94 - 25.0)
    # The period stops doubling at 60 s: from 81.9 s on, optimisations come every minute.
    assert teardown.schedule_wait(81.90 + 60.0 + 1.0) == pytest.approx(59.0)


def test_summary_counts_stalls_and_compares_them_with_the_schedule(load_benchmark):
    teardown = load_benchmark("iterator_teardown")
    rows = [
        {"autotune": True, "delete_seconds": 8.6, "schedule_wait_seconds": 8.5},
        {"autotune": True, "delete_seconds": 0.2, "schedule_wait_seconds": 8.5},
        {"autotune": True, "delete_seconds": 0.1, "schedule_wait_seconds": 3.0},
        {"autotune": True, "delete_seconds": 0.3, "schedule_wait_seconds": 3.0},
        {"autotune": False, "delete_seconds": 0.2, "schedule_wait_seconds": 0.0},
    ]
    headline = teardown.summarize(rows, stall_seconds=1.0)
    assert headline["stall_fraction_autotune"] == 0.25
    assert headline["max_delete_seconds_autotune"] == 8.6
    assert headline["median_delete_seconds_autotune"] == pytest.approx(0.25)
    assert headline["max_delete_seconds_no_autotune"] == 0.2
    assert headline["max_stall_over_schedule_wait"] == pytest.approx(0.2)


def test_quick_run_times_deletes_both_ways(load_benchmark, tmp_path):
    teardown = load_benchmark("iterator_teardown")
    output = tmp_path / "iterator_teardown.json"
    teardown.main(["--quick", "--output", str(output)])
    result = json.loads(output.read_text())
    assert [row["autotune"] for row in result["trials"]] == [True, False]
    assert all(row["lifetime_seconds"] >= 0.3 for row in result["trials"])
    assert all(isinstance(value, float) for value in result["headline"].values())
