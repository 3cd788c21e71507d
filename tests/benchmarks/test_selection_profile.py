"""Runs benchmarks/selection_profile.py --quick once and checks what its JSON holds."""

import json

import pytest


def test_quick_profile_times_every_part_at_every_width(tmp_path, load_benchmark):
    output = tmp_path / "selection_profile.json"
    cache = tmp_path / "cache"
    load_benchmark("selection_profile").main(
        ["--quick", "--output", str(output), "--cache", str(cache)]
    )
    result = json.loads(output.read_text())
    assert set(result["milliseconds"]) == {"1", "2"}
    for at_width in result["milliseconds"].values():
        assert set(at_width) == {
            "full",
            "prune",
            "assist",
            "assist_boss",
            "assist_boss_forward",
            "assist_oracle",
        }
        for method, timings in at_width.items():
            for key in ("pipeline_ms", "boss_step_ms", "together_ms"):
                assert timings[key] > 0, (method, key)
            # Only the learned Assistants have a learner to time.
            learned = method in ("assist", "assist_boss", "assist_boss_forward")
            assert (timings["learner_ms"] is not None) == learned, method
            assert not learned or timings["learner_ms"] > 0
            # Every filter drops some of what it reads (pruning: from a pre-filled table).
            assert (timings["keep_rate"] < 1.0) == (method != "full"), method
            assert timings["keep_rate"] >= 0.3  # γ = 0.3 for the Assistants, 1 - r for pruning
            # One ratio to full per interleaved round; full's own are exactly 0.
            assert len(timings["overhead_per_round"]) == 2
            assert method != "full" or timings["overhead_per_round"] == [0.0, 0.0]
    headline = result["headline"]
    assert set(headline) == {
        f"{method}_{key}"
        for method in ("prune", "assist", "assist_boss", "assist_boss_forward", "assist_oracle")
        for key in ("overhead", "overhead_width2", "extra_ms")
    }
    assert all(isinstance(value, float) for value in headline.values())
    at_one = result["milliseconds"]["1"]
    extra = at_one["assist"]["together_ms"] - at_one["full"]["together_ms"]
    assert headline["assist_extra_ms"] == pytest.approx(extra)
    rounds = sorted(at_one["assist_boss"]["overhead_per_round"])
    assert headline["assist_boss_overhead"] == pytest.approx(sum(rounds) / 2)  # the median of 2


def test_widths_must_be_positive(load_benchmark, capsys):
    with pytest.raises(SystemExit):
        load_benchmark("selection_profile").parse_args(["--widths", "0,2"])
    assert "--widths must be integers >= 1, got [0, 2]" in capsys.readouterr().err
