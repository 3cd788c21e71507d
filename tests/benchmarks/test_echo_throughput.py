"""Smoke test of benchmarks/echo_throughput.py: every configuration runs and its ratios add up."""

import json
import statistics

import pytest


@pytest.fixture(scope="module")
def results(tmp_path_factory, load_benchmark):
    # In this process: a child would spend about as long importing TensorFlow as the quick run
    # spends measuring (the drained pipelines leave no iterator or thread behind).
    output = tmp_path_factory.mktemp("echo_throughput") / "echo_throughput.json"
    load_benchmark("echo_throughput").main(["--quick", "--output", str(output)])
    return json.loads(output.read_text()), output


def test_every_size_level_and_factor_is_measured(results):
    data, output = results
    configurations = {(r["element"], r["level"], r["factor"]) for r in data["rows"]}
    # --quick: every element size at both levels, e = 2 at the example level, e = 4 at the batch
    # level (each factor once per element size; the full run measures every combination).
    assert configurations == {
        (element, level, factor)
        for element in ("40xfloat32", "32x32x3xuint8", "224x224x3xuint8")
        for level, factor in (("example", 2), ("batch", 4))
    }
    assert len(data["rows"]) == len(configurations)
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


def test_headline_is_the_largest_paired_counting_overhead_and_its_noise_floor(results):
    data = results[0]
    overheads, floors = [], []
    for row in data["rows"]:
        assert len(row["seconds_per_trial"]["echo"]) == data["trials"] == 2
        # The floor compares echo with the baseline taking its path: the vectorised one for
        # elements up to 32 KiB (a batch of them at the batch level), flat_map above.
        size = {"40xfloat32": 160, "32x32x3xuint8": 3072, "224x224x3xuint8": 150528}
        element_bytes = size[row["element"]] * (row["batch_size"] if row["level"] == "batch" else 1)
        twin = "vectorized" if element_bytes <= 32 * 1024 else "one_liner"
        seconds = row["paired_seconds"]
        assert set(seconds) == {"echo", "echo+fused meters", twin}
        # Each trial's runs, then the extra pairs (one in a quick run).
        assert seconds["echo"][:2] == row["seconds_per_trial"]["echo"]
        assert len(seconds["echo"]) == len(seconds["echo+fused meters"]) == 3
        pairs = zip(seconds["echo+fused meters"], seconds["echo"], strict=True)
        overheads.append(statistics.median(1 - echo / fused for fused, echo in pairs))
        assert row["fused_meters_overhead"] == pytest.approx(overheads[-1])
        pairs = zip(seconds[twin], seconds["echo"], strict=True)
        floors.append(abs(statistics.median(1 - echo / other for other, echo in pairs)))
        assert row["noise_floor"] == pytest.approx(floors[-1])
    assert data["headline"]["counting_overhead_max"] == pytest.approx(max(overheads))
    assert data["headline"]["counting_overhead_noise_floor"] == pytest.approx(max(floors))
