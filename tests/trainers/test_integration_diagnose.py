"""`python -m trainers.train --diagnose`: R, input wait and a recommended echo factor/insert."""

import json
import os
import sys

import pytest
from absl import flags

from trainers import diagnosis as diagnosis_module
from trainers import timing, train


@pytest.mark.parametrize(
    ("upstream", "downstream", "unaugmented", "factor", "insert"),
    [
        (1.0, 1.0, 0.9, 1.0, "before_augment"),  # R = 1: the pipeline keeps up
        (1.04, 1.0, 0.9, 1.0, "before_augment"),  # R just below 1.05: still no echo
        (3.0, 1.0, 2.5, 3.0, "before_augment"),  # reading dominates
        (3.0, 1.0, 1.0, 3.0, "after_augment"),  # augmentation is 2/3 of t_up
        (20.0, 1.0, 19.0, 8.0, "before_augment"),  # R = 20, capped at 8
        (2.0, 1.0, 2.2, 2.0, "before_augment"),  # timing noise: no augmentation cost at all
    ],
)
def test_recommend_echo(upstream, downstream, unaugmented, factor, insert):
    result = timing.recommend_echo(
        upstream_seconds=upstream,
        downstream_seconds=downstream,
        unaugmented_upstream_seconds=unaugmented,
    )
    assert result["ratio"] == pytest.approx(upstream / downstream)
    assert result["echo_factor"] == pytest.approx(factor)
    assert result["echo_insert"] == insert
    assert 0.0 <= result["augment_fraction"] <= 1.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_recommend_echo_refuses_non_positive_times(bad):
    with pytest.raises(ValueError, match="downstream_seconds must be > 0 seconds"):
        timing.recommend_echo(
            upstream_seconds=1.0, downstream_seconds=bad, unaugmented_upstream_seconds=1.0
        )


def test_diagnose_flag_writes_a_consistent_diagnosis(
    mnist1d_config_path, data_dir, tmp_path, monkeypatch, capsys
):
    workdir = str(tmp_path)
    argv = [
        "train",
        f"--config={mnist1d_config_path}:smoke",
        f"--workdir={workdir}",
        f"--config.data.data_dir={data_dir}",
        "--config.diagnose_steps=15",
        "--diagnose",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    for name in [name for name in flags.FLAGS if name.startswith("config.")]:
        delattr(flags.FLAGS, name)
    flags.FLAGS(argv)
    try:
        train.main(["train"])
    finally:
        flags.FLAGS.diagnose = False
    with open(os.path.join(workdir, "diagnosis.json")) as file:
        diagnosis = json.load(file)
    assert diagnosis["steps"] == 15
    # Diagnosis only: no training state is written.
    assert not os.path.exists(os.path.join(workdir, "checkpoints"))
    for key in (
        "upstream_seconds_per_step",
        "unaugmented_upstream_seconds_per_step",
        "downstream_seconds_per_step",
        "train_seconds_per_step",
    ):
        assert diagnosis[key] > 0, key
    assert 0.0 <= diagnosis["input_wait_fraction"] < 1.0
    expected = timing.recommend_echo(
        upstream_seconds=diagnosis["upstream_seconds_per_step"],
        downstream_seconds=diagnosis["downstream_seconds_per_step"],
        unaugmented_upstream_seconds=diagnosis["unaugmented_upstream_seconds_per_step"],
    )
    assert diagnosis["ratio"] == pytest.approx(expected["ratio"])
    assert diagnosis["echo_factor"] == pytest.approx(expected["echo_factor"])
    assert diagnosis["echo_insert"] == expected["echo_insert"]
    assert diagnosis["ratio_low"] <= diagnosis["ratio"] <= diagnosis["ratio_high"]
    assert diagnosis["verdict"] in ("input_bound", "not_input_bound", "borderline")
    captured = capsys.readouterr()
    *_, verdict_line = captured.out.strip().splitlines()
    assert verdict_line == diagnosis_module.format_diagnosis(diagnosis).splitlines()[-1]
    words = {"input_bound": "input-bound", "not_input_bound": "not input-bound"}
    assert verdict_line.startswith(f"verdict: {words.get(diagnosis['verdict'], 'borderline')} (")
    # Progress, one line per phase, before the report.
    assert captured.err.count("diagnose: ") == 4


@pytest.mark.parametrize(
    ("low", "high", "verdict", "says", "never_says"),
    [
        (2.5, 3.1, "input_bound", "recommended: echo=2.80, insert=after_augment", "train without"),
        (0.3, 0.9, "not_input_bound", "train without it", "recommended"),
        (0.8, 1.3, "borderline", "measure again on a quiet one", "recommended"),
    ],
)
def test_the_verdict_follows_r_and_its_spread(low, high, verdict, says, never_says):
    """Advice never contradicts the verdict: a factor and point only when input-bound."""
    assert diagnosis_module._verdict(low, high) == verdict
    report = {
        "steps": 30, "upstream_seconds_per_step": 0.028, "downstream_seconds_per_step": 0.01,
        "unaugmented_upstream_seconds_per_step": 0.01, "train_seconds_per_step": 0.03,
        "input_wait_fraction": 0.6, "ratio": 2.8, "ratio_low": low, "ratio_high": high,
        "verdict": verdict, "echo_factor": 2.8, "echo_insert": "after_augment",
        "augment_fraction": 0.64,
    }  # fmt: skip
    last = diagnosis_module.format_diagnosis(report).splitlines()[-1]
    assert f"{low:.2f}-{high:.2f} over 3 rounds" in last
    assert says in last and never_says not in last


@pytest.mark.parametrize(
    ("insert", "buffer", "flag"),
    [
        ("before_augment", 384, " --config.echo_buffer_size=384)"),
        ("after_augment", 384, " --config.echo_buffer_size=384)"),
        ("after_batch", 0, "--config.echo_insert=after_batch)"),
    ],
)
def test_the_recommendation_carries_the_shuffle_that_spreads_the_copies(insert, buffer, flag):
    # Before: echo=8 before_augment with no buffer, which the run then warned is worth little
    # (each example's copies land in the same batch).
    assert diagnosis_module.echo_buffer_size(2.8, insert, 32) == buffer  # 4 batches per copy
    report = {
        "steps": 30, "upstream_seconds_per_step": 0.028, "downstream_seconds_per_step": 0.01,
        "unaugmented_upstream_seconds_per_step": 0.01, "train_seconds_per_step": 0.03,
        "input_wait_fraction": 0.6, "ratio": 2.8, "ratio_low": 2.5, "ratio_high": 3.1,
        "verdict": "input_bound", "echo_factor": 2.8, "echo_insert": insert,
        "augment_fraction": 0.64, "echo_buffer_size": buffer,
    }  # fmt: skip
    last = diagnosis_module.format_diagnosis(report).splitlines()[-1]
    assert last.endswith(flag)
