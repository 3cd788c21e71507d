"""benchmarks/echo_time_to_target.py: a --quick run end to end, its summary arithmetic, and the
notebook that draws its JSON."""

import json

import harness
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


def _paired(*per_seed):
    """A ``harness.paired`` result with these per-seed ratios (seeds 0, 1, ...)."""
    if not per_seed or per_seed[0] is None:
        return None
    mean = 1.0
    for value in per_seed:
        mean *= value
    mean **= 1 / len(per_seed)
    return {"mean": mean, "min": min(per_seed), "max": max(per_seed),
            "per_seed": list(per_seed), "seeds": list(range(len(per_seed)))}  # fmt: skip


def test_headline_takes_the_best_fixed_variant_and_nulls_what_was_not_reached(load_benchmark):
    headline = load_benchmark("echo_time_to_target").headline

    def entry(variant, factor, *per_seed, accuracy=None, ratio=None, scenario="network"):
        return {"scenario": scenario, "variant": variant, "factor": factor,
                "paired_speedup": _paired(*per_seed),
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
        {"scenario": "cpu", "variant": "baseline", "factor": 1, "paired_speedup": _paired(1.0),
         "final_accuracy": None, "R": {"mean": 3.0}},
        {"scenario": "cpu", "variant": "after_batch", "factor": 4, "paired_speedup": None,
         "final_accuracy": None, "R": None},
        {"scenario": "cpu", "variant": "auto", "factor": "auto", "paired_speedup": _paired(1.2),
         "final_accuracy": None, "R": None},
    ]  # fmt: skip
    assert headline(table) == pytest.approx({
        "cpu_R": 3.0,
        "cpu_best_e4_speedup": None,
        "cpu_best_fixed_speedup": None,
        "cpu_auto_speedup": 1.2,
        "cpu_auto_vs_best_fixed": None,
        "final_accuracy_delta_worst_points": None,  # no final-accuracy runs
    })  # fmt: skip


def test_headline_speedup_is_the_paired_geometric_mean_of_hand_built_runs(load_benchmark):
    benchmark = load_benchmark("echo_time_to_target")

    def row(variant, factor, seconds, seed):
        return {"scenario": "network", "variant": variant, "factor": factor, "shuffle": False,
                "seed": seed, "reached": True, "seconds_to_target": seconds,
                "fresh_examples_to_target": 100 * seconds, "steps_to_target": 10,
                "final_accuracy": None, "R": 4.0 if variant == "baseline" else None}  # fmt: skip

    # Seed 1 is slow for both (a busy machine): paired, it weighs as much as seed 0.
    rows = [row("baseline", 1, 10.0, 0), row("baseline", 1, 90.0, 1)]
    rows += [row("after_batch", 4, 5.0, 0), row("after_batch", 4, 22.5, 1)]  # 2x and 4x
    rows += [row("auto", "auto", 10.0, 0), row("auto", "auto", 30.0, 1)]  # 1x and 3x
    for r in rows[-2:]:
        r["factor"] = 2.0
    sections = benchmark.headline_sections(benchmark.summarise(rows))
    figures, spread = sections["headline"], sections["headline_spread"]
    assert figures["network_best_e4_speedup"] == pytest.approx(8**0.5)
    assert spread["network_best_e4_speedup"]["per_seed"] == pytest.approx([2.0, 4.0])
    assert (spread["network_best_e4_speedup"]["min"], spread["network_best_e4_speedup"]["max"]) \
        == pytest.approx((2.0, 4.0))  # fmt: skip
    assert figures["network_auto_speedup"] == pytest.approx(3**0.5)
    # Auto over the best fixed factor, seed by seed: 1/2 and 3/4.
    assert figures["network_auto_vs_best_fixed"] == pytest.approx((0.5 * 0.75) ** 0.5)
    # The ratio of mean seconds stays, out of the headline: 50 / 13.75 and 50 / 20.
    by_means = sections["headline_ratio_of_means"]
    assert by_means["network_best_e4_speedup"] == pytest.approx(50 / 13.75)
    assert by_means["network_auto_speedup"] == pytest.approx(2.5)
    assert "network_R" not in by_means


def test_recompute_rederives_the_headline_from_stored_rows(load_benchmark, tmp_path):
    benchmark = load_benchmark("echo_time_to_target")
    rows = [
        {"scenario": "cpu", "variant": v, "factor": f, "shuffle": False, "seed": seed,
         "reached": True, "seconds_to_target": t, "fresh_examples_to_target": 1.0,
         "steps_to_target": 1, "final_accuracy": None, "R": 2.0 if v == "baseline" else None}
        for seed, (base, echo) in enumerate([(10.0, 5.0), (40.0, 10.0)])
        for v, f, t in (("baseline", 1, base), ("after_batch", 4, echo))
    ]  # fmt: skip
    path = tmp_path / "stored.json"
    path.write_text(json.dumps({"headline": {"cpu_best_e4_speedup": 1.0}, "rows": rows}))
    result = harness.recompute(path, benchmark.recompute)
    assert next(iter(result)) == "headline"
    assert result["headline"]["cpu_best_e4_speedup"] == pytest.approx(8**0.5)
    assert "recomputed_from_stored_runs" in json.loads(path.read_text())


def test_notebook_draws_the_results_without_training(quick_results, execute_notebook):
    outputs = execute_notebook(
        "echoing", ECHO_RESULTS=quick_results, ECHO_AUTO_RESULTS=quick_results
    )
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum(1 for o in outputs if o.get("data", {}).get("image/png")) >= 2
    text = "".join(o.get("text", "") for o in outputs)
    assert "network  after_batch" in text
