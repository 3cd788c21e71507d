"""Smoke test of benchmarks/jit_compile.py: both step variants are timed compiled and not."""

import json

import pytest


@pytest.fixture(scope="module")
def results(tmp_path_factory, load_benchmark):
    # In this process (the headline test below imports the script here anyway): a child process
    # would spend longer importing TensorFlow than the quick run spends measuring.
    output = tmp_path_factory.mktemp("jit_compile") / "jit_compile.json"
    assert load_benchmark("jit_compile").main(["--quick", "--output", str(output)]) == 0
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
    assert next(iter(data)) == "headline"
    assert all(type(value) is float for value in data["headline"].values())
    assert data["headline"] == {
        "mnist1d_mlp_plain_speedup": data["rows"][0]["speedup"],
        "mnist1d_mlp_pgd_speedup": data["rows"][1]["speedup"],
    }


def test_headline_names_each_rows_speedup_as_a_float(load_benchmark):
    headline = load_benchmark("jit_compile").headline
    rows = [
        {"model": "resnet_small", "variant": "plain", "speedup": 1.5},
        {"model": "resnet_small", "variant": "pgd", "speedup": 2},  # an int comes out a float
    ]
    figures = headline(rows)
    assert figures == {"resnet_small_plain_speedup": 1.5, "resnet_small_pgd_speedup": 2.0}
    assert all(type(value) is float for value in figures.values())
    assert headline([]) == {}
