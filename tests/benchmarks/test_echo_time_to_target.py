"""benchmarks/echo_time_to_target.py: a --quick run end to end, its summary arithmetic, and the
notebook that draws its JSON."""

import json

import pytest


@pytest.fixture(scope="module")
def quick_results(run_quick_benchmark):
    # Network (capped gs:// reads) with batch echoing with and without a shuffle buffer, and
    # AutoEcho: every kind of run, smoke-sized.
    arguments = ("--scenarios", "network", "--insertions", "after_batch")
    return run_quick_benchmark("echo_time_to_target", *arguments)


def test_quick_run_records_every_variant_and_the_network_set_up(quick_results):
    result = json.loads(quick_results.read_text())
    assert quick_results.with_suffix(".png").stat().st_size > 0
    assert quick_results.with_name("echo_time_to_target_auto_echo.png").stat().st_size > 0
    runs = {(r["scenario"], r["variant"], r["factor"] if r["variant"] != "auto" else "auto",
             r["shuffle"]) for r in result["rows"]}  # fmt: skip
    assert runs == {
        ("network", "baseline", 1, False),
        ("network", "after_batch", 2, False),
        ("network", "after_batch", 2, True),
        ("network", "auto", "auto", False),
    }
    network = result["scenarios"]["network"]
    assert network["limiter"] in ("netns+tbf", "in-process")
    assert network["megabits_per_second"] == 20.0
    for row in result["rows"]:
        if row["reached"]:
            assert row["fresh_examples_to_target"] > 0 and row["seconds_to_target"] > 0
        if row["final"]:
            # Final-accuracy runs go on to the fresh-example budget (640 in --quick); the
            # counter includes the pipeline's read-ahead, so it is at least the budget.
            assert row["final_fresh_examples"] >= 640
            assert 0 <= row["final_accuracy"] <= 1
        elif row["reached"]:
            assert row["steps"] == row["steps_to_target"]  # stopped at the target
    baselines = [r for r in result["rows"] if r["variant"] == "baseline"]
    assert all(r["R"] > 0 for r in baselines)  # R is measured in the baseline runs
    for row in (r for r in result["rows"] if r["variant"] == "auto"):
        assert row["factor_trace"] and all(1.0 <= f <= 8.0 for _, f, _ in row["factor_trace"])


def test_summary_means_spreads_and_speedups(load_benchmark):
    benchmark = load_benchmark("echo_time_to_target")

    def row(variant, factor, seconds, seed, reached=True):
        return {"scenario": "network", "variant": variant, "factor": factor, "shuffle": False,
                "seed": seed, "reached": reached, "seconds_to_target": seconds,
                "fresh_examples_to_target": seconds and 100 * seconds, "steps_to_target": 10,
                "final_accuracy": None, "R": 4.0 if variant == "baseline" else None}  # fmt: skip

    rows = [row("baseline", 1, 30.0, 0), row("baseline", 1, 50.0, 1)]
    rows += [row("after_batch", 4, 8.0, 0), row("after_batch", 4, 12.0, 1)]
    rows += [row("before_augment", 4, None, 0, reached=False)]
    table = {(e["variant"], e["factor"]): e for e in benchmark.summarise(rows)}
    baseline, echoed = table[("baseline", 1)], table[("after_batch", 4)]
    assert baseline["seconds_to_target"] == {"mean": 40.0, "min": 30.0, "max": 50.0, "n": 2}
    assert baseline["R"]["mean"] == 4.0
    assert echoed["speedup"] == pytest.approx(40.0 / 10.0)
    assert table[("before_augment", 4)]["reached"] == 0
    assert table[("before_augment", 4)]["seconds_to_target"] is None


def test_quick_run_headline_is_computed_from_its_table(quick_results, load_benchmark):
    result = json.loads(quick_results.read_text())
    assert next(iter(result)) == "headline"
    assert result["headline"] == load_benchmark("echo_time_to_target").headline(result["table"])
    assert {"network_best_e2_speedup", "network_auto_vs_best_fixed"} <= set(result["headline"])
    # The project's rule for every results JSON: floats, or null where not reached (not ints).
    assert all(v is None or type(v) is float for v in result["headline"].values())


def test_headline_takes_the_best_fixed_variant_and_nulls_what_was_not_reached(load_benchmark):
    headline = load_benchmark("echo_time_to_target").headline

    def entry(variant, factor, speedup, accuracy=None, ratio=None, scenario="network"):
        return {"scenario": scenario, "variant": variant, "factor": factor, "speedup": speedup,
                "final_accuracy": accuracy and {"mean": accuracy},
                "R": ratio and {"mean": ratio}}  # fmt: skip

    table = [
        entry("baseline", 1, 1.0, accuracy=0.930, ratio=5.0),
        entry("after_batch", 4, 2.0, accuracy=0.925),
        entry("before_augment", 4, None),  # not reached on any seed: no speed-up
        entry("before_augment", 2, None),
        entry("auto", "auto", 1.8, ratio=4.5),
        entry("baseline", 1, 1.0, accuracy=0.90, ratio=0.9, scenario="idle"),
        entry("auto", "auto", None, scenario="idle"),
    ]
    assert headline(table) == pytest.approx(
        {
            "idle_R": 0.9,
            "idle_auto_speedup": None,
            "network_R": 5.0,
            "network_best_e2_speedup": None,
            "network_best_e4_speedup": 2.0,
            "network_best_fixed_speedup": 2.0,
            "network_auto_speedup": 1.8,
            "network_auto_vs_best_fixed": 0.9,
            "final_accuracy_delta_worst_points": -0.5,
        }
    )


def test_headline_ratio_is_null_when_no_fixed_variant_reached_the_target(load_benchmark):
    headline = load_benchmark("echo_time_to_target").headline
    table = [
        {"scenario": "cpu", "variant": "baseline", "factor": 1, "speedup": 1.0,
         "final_accuracy": None, "R": {"mean": 3.0}},
        {"scenario": "cpu", "variant": "after_batch", "factor": 4, "speedup": None,
         "final_accuracy": None, "R": None},
        {"scenario": "cpu", "variant": "auto", "factor": "auto", "speedup": 1.2,
         "final_accuracy": None, "R": None},
    ]  # fmt: skip
    assert headline(table) == {
        "cpu_R": 3.0,
        "cpu_best_e4_speedup": None,
        "cpu_best_fixed_speedup": None,
        "cpu_auto_speedup": 1.2,
        "cpu_auto_vs_best_fixed": None,
        "final_accuracy_delta_worst_points": None,  # no final-accuracy runs
    }


def test_notebook_draws_the_results_without_training(quick_results, execute_notebook):
    outputs = execute_notebook(
        "echoing", ECHO_RESULTS=quick_results, ECHO_AUTO_RESULTS=quick_results
    )
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum(1 for o in outputs if o.get("data", {}).get("image/png")) >= 2
    text = "".join(o.get("text", "") for o in outputs)
    assert "network  after_batch" in text
