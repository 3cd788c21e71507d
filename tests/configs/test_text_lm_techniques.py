"""configs/text_lm.py runs AutoEcho with loss-table pruning, and with the Assistant filter, on
text (echo at each point is in tests/pipelines/sources/test_text.py)."""

import pytest

from trainers import experiment, metrics_writer


@pytest.mark.parametrize("technique", ["prune=1", "assist=1"])
def test_auto_echo_runs_with_pruning_or_the_assistant_on_text(
    technique, load_config, data_dir, tmp_path
):
    # One run cannot have both: echoing/_src/compatibility.py (issue 33).
    config = load_config("text_lm", f"echo=auto,max_echo=4,{technique},smoke")
    config.progress_bar, config.data.data_dir = False, data_dir
    # 40 steps of batch 32 are ~12 epochs of 100 lines, so pruning has a table of losses.
    config.data.num_train, config.num_steps = 100, 40
    if technique == "assist=1":
        config.assist_asynchronous = False  # trained in step, so the counts below are exact
    summary = experiment.run(config, str(tmp_path))
    rows = metrics_writer.read_metrics(str(tmp_path))
    assert all(1.0 <= r["echo_factor"] <= 4.0 for r in rows if "echo_factor" in r)
    if technique == "prune=1":  # past its first epoch pruning dropped lines
        assert any(r["prune_keep_rate"] < 1.0 for r in rows if r["prune_epoch"] >= 1)
    else:
        # The Assistant scored each line's bag of words (untrained it keeps 0.3 + 0.7 * 0.5)
        # and trained on every fed-back batch.
        assert 0.3 <= rows[-1]["assist_keep_rate"] < 1.0
        assert rows[-1]["assist_trained_batches"] == rows[-1]["assist_pushed_batches"] > 0
    assert summary["eval_perplexity"] > 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("priority", True, r"config priority=True with data.source='text': a language model's"),
        ("select_ratio", 0.5, r"config select_ratio=0.5 with data.source='text': in-batch"),
    ],
)
def test_techniques_text_cannot_run_are_refused_at_the_config_check(
    load_config, field, value, message
):
    # Issue 33: --config.priority=True failed at the first step with "Dimensions must be equal,
    # but are 31 and 32" in an autograph trace; select_ratio with "needs a static batch size",
    # naming drop_remainder, which the binary has no flag for.
    from echoing import techniques

    config = load_config("text_lm", "smoke")
    config[field] = value
    with pytest.raises(ValueError, match=message + r".*use echo, prune or assist"):
        techniques.check_config(config)
