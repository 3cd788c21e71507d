"""A resume whose checkpoint no longer fits the data (issue 33): an image folder grown between
runs fails pruning's per-example table, and the message names the variable, both shapes and the
data's change, never num_steps (which a resume may change). A resume whose checkpoint still fits
another config or data says so instead of mixing two runs silently."""

import shutil

import pytest

from trainers import experiment


def test_a_grown_image_folder_is_named_as_the_cause_not_num_steps(
    load_config, tmp_path, add_images
):
    root = tmp_path / "images"
    add_images(root, {"cat": 10, "dog": 10}, size=24)
    config = load_config("image_folder", "smoke,prune=1")
    config.data.image_dir, config.progress_bar = str(root), False
    experiment.run(config, str(tmp_path / "run"))
    add_images(root, {"cat": 3}, size=24)
    config = load_config("image_folder", "smoke,prune=1")
    config.data.image_dir, config.progress_bar, config.num_steps = str(root), False, 20
    with pytest.raises(ValueError) as raised:
        experiment.run(config, str(tmp_path / "run"))
    message = str(raised.value)
    assert message.startswith(
        "The data differs from what the workdir's run started with (config.json): "
        "found.train_examples: 20 -> 23: resume with that data, or use a fresh --workdir. What "
        "failed: the checkpoint "
    )
    assert "does not match this run's model or data: its variable draws:0 has shape (20,) " in (
        message
    )
    assert "there and (23,) in this run" in message
    assert "num_steps" not in message


def test_a_resume_that_fits_but_changes_the_data_warns_naming_the_change(
    load_config, tmp_path, capsys
):
    config = _ten_steps(load_config, tmp_path, "smoke,echo=2", capsys)
    config.num_steps, config.data.num_train = 20, 2 * config.data.num_train
    summary = experiment.run(config, str(tmp_path / "run"))
    assert summary["step"] == 20
    err = capsys.readouterr().err
    assert (
        "Warning: this resume's config or data differs from what the workdir's run started with "
        "(config.json) in data.num_train: 1000 -> 2000, found.train_examples: 1000 -> 2000. "
        "Training goes on with the new values from the restored step"
    ) in err
    # A resume may change num_steps: it is not among the causes (the list ends above), only
    # noted for the schedule it re-lays.
    assert "Note: this resume changes num_steps: 10 -> 20." in err


def test_a_resume_changing_only_num_steps_notes_the_schedule_without_a_warning(
    load_config, tmp_path, capsys
):
    config = _ten_steps(load_config, tmp_path, "smoke", capsys)
    config.num_steps = 20
    experiment.run(config, str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert "Warning: this resume" not in err
    assert "Note: this resume changes num_steps: 10 -> 20. The learning rate's schedule" in err
    # Issue 33: the next resume compares with what this one trained with, not the first run:
    # it said 10 -> 30 for a run laid over 20 steps, and 10 -> 20 again at an unchanged 20.
    config.num_steps = 30
    experiment.run(config, str(tmp_path / "run"))
    assert "Note: this resume changes num_steps: 20 -> 30." in capsys.readouterr().err
    config.num_steps = 30  # finished: a restart notes nothing
    experiment.run(config, str(tmp_path / "run"))
    assert "this resume changes" not in capsys.readouterr().err


def test_a_resume_keeps_the_first_runs_values_of_what_a_resume_may_not_change(
    load_config, tmp_path, capsys
):
    # A fitting resume with another seed trains on, warned; the record keeps the first run's
    # seed, so every later resume warns again, and takes its num_steps for the next note.
    config = _ten_steps(load_config, tmp_path, "smoke", capsys)
    config.num_steps, config.seed = 20, 1
    experiment.run(config, str(tmp_path / "run"))
    assert "in seed: 0 -> 1." in capsys.readouterr().err
    config.num_steps = 30
    experiment.run(config, str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert "in seed: 0 -> 1." in err and "Note: this resume changes num_steps: 20 -> 30." in err


def test_a_resume_whose_input_no_longer_fits_fails_in_one_line_without_a_warning(
    load_config, tmp_path, capsys
):
    config = _ten_steps(load_config, tmp_path, "smoke", capsys)
    config.num_steps, config.data.shuffle_buffer = 20, 100  # the iterator's buffer was 1000
    with pytest.raises(ValueError) as raised:
        experiment.run(config, str(tmp_path / "run"))
    assert str(raised.value) == (  # the cause first, TensorFlow's symptom after it
        "This config differs from the one the workdir's run started with (config.json) in "
        "data.shuffle_buffer: 1000 -> 100: resume with those values, or use a fresh --workdir. "
        "What failed: the run resumed at step 10: Expected 3 components but got 0."
    )
    assert "Warning: this resume" not in capsys.readouterr().err  # it did not go on


def test_a_resume_whose_iterator_no_longer_fits_says_what_failed_without_guessing(
    load_config, tmp_path, capsys
):
    # The iterator's failure was followed by TensorFlow's iterator dump and "They are corrupt
    # or truncated", which read like a damaged workdir (issue 33).
    config = _ten_steps(load_config, tmp_path, "smoke,echo=2,buffer=100", capsys)
    config.num_steps, config.echo_insert = 20, "after_batch"
    with pytest.raises(ValueError) as raised:
        experiment.run(config, str(tmp_path / "run"))
    checkpoints = tmp_path / "run" / "checkpoints"
    assert str(raised.value) == (
        "This config differs from the one the workdir's run started with (config.json) in "
        "echo_insert: 'before_augment' -> 'after_batch': resume with those values, or use a "
        "fresh --workdir. What failed: no checkpoint in the workdir can be restored "
        f"({checkpoints}/ckpt-10): Failed to restore dataset iterator from checkpoint."
    )


def test_a_run_over_an_earlier_runs_logs_without_its_checkpoints_says_it_starts_over(
    load_config, tmp_path, capsys
):
    # Issue 33: with the checkpoints deleted a rerun started at step 0 without a word, replacing
    # metrics.jsonl's rows beside the old TensorBoard events.
    config = _ten_steps(load_config, tmp_path, "smoke", capsys)
    shutil.rmtree(tmp_path / "run" / "checkpoints")
    experiment.run(config, str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert "holds an earlier run's metrics.jsonl or TensorBoard events but no checkpoint" in err
    experiment.run(config, str(tmp_path / "fresh"))
    assert "earlier run" not in capsys.readouterr().err


def _ten_steps(load_config, tmp_path, argument: str, capsys):
    """The config of a 10-step MNIST-1D run (``argument``) finished in ``tmp_path/run``, with
    its output read, to resume with changes."""
    config = load_config("mnist1d", argument)
    config.progress_bar, config.num_steps = False, 10
    experiment.run(config, str(tmp_path / "run"))
    capsys.readouterr()
    return config
