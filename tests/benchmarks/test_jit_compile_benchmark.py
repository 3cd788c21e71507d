"""Smoke test of benchmarks/jit_compile.py: both step variants are timed compiled and not."""

import json

import pytest


@pytest.fixture(scope="module")
def results(run_quick_benchmark):
    output = run_quick_benchmark("jit_compile")
    return json.loads(output.read_text()), output


def test_every_variant_is_measured_both_ways(results):
    data, output = results
    assert [(r["model"], r["variant"]) for r in data["rows"]] == [
        ("mnist1d_mlp", "plain"),
        ("mnist1d_mlp", "pgd"),
    ]
    for row in data["rows"]:
        assert len(row["uncompiled_all"]) == len(row["compiled_all"]) == row["repeats"]
        assert row["uncompiled_seconds_per_step"] > 0 and row["compiled_seconds_per_step"] > 0
        assert row["speedup"] == pytest.approx(
            row["uncompiled_seconds_per_step"] / row["compiled_seconds_per_step"]
        )
    assert output.with_suffix(".png").stat().st_size > 0
    assert data["headline"] == {
        "mnist1d_mlp_plain_speedup": data["rows"][0]["speedup"],
        "mnist1d_mlp_pgd_speedup": data["rows"][1]["speedup"],
    }
