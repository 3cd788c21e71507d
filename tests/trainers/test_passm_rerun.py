"""Rerunning a PASSM workdir (issue 33): a finished run's result survives a rerun that trains
nothing, a longer rerun continues it, metrics.jsonl counts the examples trained, and the
workdir's config.json names what a resume that cannot fit changed."""

import json
import os
import re

import pytest

from trainers import checkpointing, metrics_writer, workdir_config
from trainers.passm import experiment as async_experiment

BATCH_SIZE = 16  # configs/passm.py:smoke's, per worker and step


@pytest.fixture
def finished(load_config, tmp_path, monkeypatch):
    """A workdir of a finished configs/passm.py:smoke run (16 steps, evaluated at 8 and 16)
    and the result.json it wrote."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    workdir = str(tmp_path / "run")
    async_experiment.train_and_evaluate(load_config("passm", "smoke"), workdir)
    return workdir, _written(workdir)


def _written(workdir: str) -> dict:
    with open(os.path.join(workdir, "result.json")) as file:
        return json.load(file)


def test_rerunning_a_finished_workdir_reports_its_result_again(finished, load_config, capsys):
    workdir, first = finished
    assert first["final_accuracy"] is not None and [h["step"] for h in first["history"]] == [8, 16]
    returned = async_experiment.train_and_evaluate(load_config("passm", "smoke"), workdir)
    assert "16, which num_steps=16 does not pass: nothing to train" in capsys.readouterr().err
    rerun = _written(workdir)
    assert returned["final_accuracy"] == rerun["final_accuracy"]
    # The restored model is the one the first run ended with.
    assert rerun["final_accuracy"] == pytest.approx(first["final_accuracy"])
    for key in ("history", "train_seconds", "train_seconds_to_target"):
        assert rerun[key] == first[key], key
    assert first["start_step"] == 0 and rerun["start_step"] == 16  # where each call started
    for key in ("completed_steps", "updates_applied", "examples_seen", "block_updates"):
        assert rerun[key] == first[key], key


def test_a_longer_rerun_continues_the_finished_result(finished, load_config):
    workdir, first = finished
    config = load_config("passm", "smoke")
    config.num_steps = 32
    async_experiment.train_and_evaluate(config, workdir)
    longer = _written(workdir)
    assert [h["step"] for h in longer["history"]] == [8, 16, 24, 32]
    assert longer["history"][:2] == first["history"] and longer["start_step"] == 16
    # Its training time counts from the first run's start.
    assert longer["history"][2]["train_seconds"] > first["train_seconds"]
    assert longer["train_seconds"] > first["train_seconds"]
    assert longer["examples_seen"] == 32 * BATCH_SIZE


def test_each_resume_notes_num_steps_against_the_run_before_it(finished, load_config, capsys):
    # Issue 33: the note compared with the first run's config.json: 16 -> 32 for a run laid
    # over 24 steps.
    workdir, _ = finished
    config = load_config("passm", "smoke")
    for num_steps, noted in ((24, "16 -> 24"), (32, "24 -> 32")):
        config.num_steps = num_steps
        capsys.readouterr()
        async_experiment.train_and_evaluate(config, workdir)
        assert f"Note: this resume changes num_steps: {noted}." in capsys.readouterr().err


def test_metrics_count_the_examples_the_updates_trained_on(finished, load_config):
    workdir, first = finished
    config = load_config("passm", "smoke")
    config.num_steps = 24
    async_experiment.train_and_evaluate(config, workdir)
    rows = metrics_writer.read_metrics(workdir)
    counts = [(r["step"], r["trained_examples"], r["fresh_examples_trained"]) for r in rows]
    # Counted by the checkpointed state, so the resumed run's row counts on from 256.
    assert counts == [(step, step * BATCH_SIZE, step * BATCH_SIZE) for step in (8, 16, 24)]
    assert rows[1]["trained_examples"] == first["examples_seen"]
    assert all(r["echo_ratio"] == 1.0 for r in rows)


def test_a_resume_that_cannot_fit_names_the_field_that_changed(finished, load_config):
    workdir, _ = finished
    with open(os.path.join(workdir, workdir_config.FILENAME)) as file:
        saved = json.load(file)
    assert saved["num_workers"] == 2 and saved["num_steps"] == 16  # the flat view's keys
    config = load_config("passm", "smoke")
    config.passm.num_workers, config.num_steps = 3, 32  # each worker keeps its own momentum
    with pytest.raises(checkpointing.CheckpointRestoreError) as raised:
        async_experiment.train_and_evaluate(config, workdir)
    message = str(raised.value)
    assert message.startswith(
        "This config differs from the one the workdir's run started with (config.json) in "
        "passm.num_workers: 2 -> 3: resume with those values, or use a fresh --workdir. "
        "What failed: "
        f"the checkpoint {workdir}/checkpoints/ckpt-16 does not match this run's model or data: "
        "13 of this run's variables are not in it ("
    )
    assert re.search(r"not in it \(\w+_2(_\d)?, \w+_2(_\d)?, \w+_2(_\d)?, \.\.\.\)", message)
    assert "numpy=" not in message  # the third worker's variables by name, not their values


def test_an_unreadable_result_is_replaced_by_the_whole_runs(finished, load_config):
    workdir, first = finished
    path = os.path.join(workdir, "result.json")
    with open(path, "w") as file:
        file.write('{"history": [')  # cut short
    async_experiment.train_and_evaluate(load_config("passm", "smoke"), workdir)
    rerun = _written(workdir)  # from the checkpoint, which holds the history and the clock
    assert rerun["final_accuracy"] == pytest.approx(first["final_accuracy"])
    assert rerun["history"] == first["history"] and rerun["train_seconds"] == first["train_seconds"]


def test_more_workers_than_the_model_has_variables_names_the_flag(load_config, tmp_path):
    # It said "num_blocks must be between 1 and the number of variables (6), got 8" (issue 33).
    config = load_config("passm", "smoke")
    config.passm.num_workers = 8
    with pytest.raises(ValueError) as raised:
        async_experiment.train_and_evaluate(config, str(tmp_path))
    assert str(raised.value) == (
        "config passm.num_workers=8: PASSM splits the model's variables into one block per "
        "worker, and mnist1d_mlp has 6; use at most 6 workers (--config.passm.num_workers=6) or "
        "a model with more variables."
    )
