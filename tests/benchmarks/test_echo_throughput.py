"""Smoke test of benchmarks/echo_throughput.py: every configuration runs and its ratios add up."""

import json

import pytest


@pytest.fixture(scope="module")
def results(run_quick_benchmark):
    output = run_quick_benchmark("echo_throughput")
    return json.loads(output.read_text()), output


def test_every_size_level_and_factor_is_measured(results):
    data, output = results
    configurations = {(r["element"], r["level"], r["factor"]) for r in data["rows"]}
    assert len(configurations) == 3 * 2 * 2
    assert output.with_suffix(".png").stat().st_size > 0


def test_echo_emits_factor_times_the_identity_examples(results):
    for row in results[0]["rows"]:
        out, batch_size = row["examples_out"], row["batch_size"]
        if row["level"] == "batch":  # whole batches repeat
            expected = row["factor"] * out["identity"]
        else:  # the echoed examples then go through batch(drop_remainder=True)
            expected = row["factor"] * row["inputs"] // batch_size * batch_size
        for method in ("one_liner", "vectorized", "echo", "echo+meters", "echo+fused meters"):
            assert out[method] == expected, (row["element"], row["level"], method)


def test_ratios_are_computed_from_the_measured_rates(results):
    for row in results[0]["rows"]:
        rate = row["examples_per_second"]
        assert row["echo_vs_one_liner"] == pytest.approx(rate["echo"] / rate["one_liner"])
        best = max(rate["one_liner"], rate["vectorized"])
        assert row["echo_vs_best_baseline"] == pytest.approx(rate["echo"] / best)


def test_headline_is_the_largest_fused_counting_overhead(results):
    data = results[0]
    overheads = []
    for row in data["rows"]:
        rate = row["examples_per_second"]
        overhead = 1 - rate["echo+fused meters"] / rate["echo"]
        assert row["fused_meters_overhead"] == pytest.approx(overhead)
        overheads.append(overhead)
    assert data["headline"]["counting_overhead_max"] == pytest.approx(max(overheads))
