"""benchmarks/workloads_gcs.py: a --quick run, the photo set read as TFDS-layout shards from a
bucket behind a capped link."""

import json

import pytest

HEADLINE = {
    "image_gcs_R",
    "image_gcs_echo_speedup_e2",
    "image_gcs_echo_speedup_e4",
    "image_gcs_autoecho_vs_best_fixed",
    "megabits_per_second",
}


@pytest.fixture(scope="module")
def quick_results(run_quick_benchmark, data_dir):
    # In a process of its own: gcsfs must first be imported with the emulator's address set.
    # A cap that the quick run's reads (several passes over ~3 MB of train shards) wait on
    # for about half a second, not seconds; test_network_bucket checks that a cap holds.
    output = run_quick_benchmark("workloads_gcs", "--data-dir", data_dir, "--megabits", "400")
    return json.loads(output.read_text()), output


def test_quick_run_reads_the_train_shards_over_the_capped_link(quick_results):
    result, output = quick_results
    assert output.with_suffix(".png").stat().st_size > 0
    headline = result["headline"]
    assert set(headline) == HEADLINE
    assert all(v is None or isinstance(v, float) for v in headline.values())
    assert headline["megabits_per_second"] == 400.0 and headline["image_gcs_R"] > 0
    assert result["limiter"] in ("netns+tbf", "in-process")
    data = result["data"]
    assert data["source"] == "tfrecord" and data["train_files"].startswith("gs://")
    assert data["eval_files"].endswith("photos-validation.tfrecord-*-of-00002")
    assert result["rates"]["examples_per_second_total"] > 0
    assert {(r["variant"], r["factor"]) for r in result["runs"]} == {
        ("baseline", 1.0),
        ("after_augment", 2.0),
    }
    echoed = next(r for r in result["runs"] if r["variant"] == "after_augment")
    assert echoed["echo_ratio"] == pytest.approx(2.0, rel=0.2)


def test_headline_speedup_is_the_paired_geometric_mean_of_hand_built_runs(load_benchmark):
    # Two seeds; seed 1 is slow for every variant (a busy machine).
    seconds = {("baseline", 1.0): (10.0, 90.0), ("after_augment", 2.0): (5.0, 22.5),
               ("after_augment", 4.0): (10.0, 30.0), ("auto", None): (4.0, 45.0)}  # fmt: skip
    runs = [
        {"workload": "image_gcs", "variant": variant, "factor": factor, "seed": seed,
         "seconds_to_target": times[seed], "steps_to_target": 10, "final_accuracy": 0.9,
         "final_perplexity": None, "R": 3.0 if variant == "baseline" else None}
        for (variant, factor), times in seconds.items()
        for seed in (0, 1)
    ]  # fmt: skip
    benchmark = load_benchmark("workloads_gcs")
    table = load_benchmark("workloads").summarize(runs)
    sections = benchmark.headline_sections(table, 600.0)
    headline, spread = sections["headline"], sections["headline_spread"]
    assert set(headline) == HEADLINE
    assert headline["image_gcs_echo_speedup_e2"] == pytest.approx(8**0.5)
    e2 = spread["image_gcs_echo_speedup_e2"]
    assert (e2["min"], e2["max"]) == pytest.approx((2.0, 4.0))
    assert headline["image_gcs_autoecho_vs_best_fixed"] == pytest.approx((1.25 * 0.5) ** 0.5)
    assert sections["headline_ratio_of_means"]["image_gcs_echo_speedup_e4"] == pytest.approx(2.5)
    assert headline["megabits_per_second"] == 600.0
