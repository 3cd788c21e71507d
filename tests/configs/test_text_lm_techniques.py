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
