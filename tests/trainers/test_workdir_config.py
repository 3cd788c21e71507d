"""Tests for trainers.workdir_config: what a workdir's run started with (config and data), and
the sentence a failed resume adds, which never blames a field a resume may change."""

import json
import os

import pytest
import tensorflow as tf

from trainers import experiment, workdir_config
from trainers.passm import config as passm_config


def _image_folder_config(load_config, root):
    config = load_config("image_folder", "smoke")
    config.data.image_dir = str(root)
    return experiment.resolve_config(config)


def _checkpoint(workdir) -> None:
    """A checkpoint in ``workdir``, as a run that saved leaves: the record is then compared."""
    tf.train.Checkpoint(v=tf.Variable(1.0)).save(os.path.join(workdir, "checkpoints", "ckpt"))


def test_the_first_run_records_its_config_and_what_its_data_holds(
    load_config, tmp_path, add_images
):
    add_images(tmp_path / "images", {"cat": 3, "dog": 3}, eval_count=1)
    config = _image_folder_config(load_config, tmp_path / "images")
    workdir = str(tmp_path / "run")
    assert workdir_config.changes(config, workdir) == []
    saved = json.loads((tmp_path / "run" / workdir_config.FILENAME).read_text())
    assert saved["num_steps"] == 10 and saved["data.batch_size"] == 16
    assert saved["found.train_examples"] == 6 and saved["found.classes"] == 2


def test_a_resume_on_grown_data_names_what_the_data_held_and_holds(
    load_config, tmp_path, add_images
):
    root = tmp_path / "images"
    add_images(root, {"cat": 3, "dog": 3}, eval_count=1)
    workdir = str(tmp_path / "run")
    workdir_config.changes(_image_folder_config(load_config, root), workdir)
    _checkpoint(workdir)
    add_images(root, {"cat": 1, "fox": 2}, eval_count=1)
    config = _image_folder_config(load_config, root)
    config.num_steps = 20
    changed = workdir_config.changes(config, workdir)
    assert changed == [
        "found.classes: 2 -> 3",
        "found.train_examples: 6 -> 9",
        "num_steps: 10 -> 20",
    ]
    assert workdir_config.explain(changed) == (
        "The data differs from what the workdir's run started with (config.json): "
        "found.classes: 2 -> 3, found.train_examples: 6 -> 9: resume with that data, or use a "
        "fresh --workdir."
    )


def test_a_record_from_before_the_data_was_recorded_names_no_data(
    load_config, tmp_path, add_images
):
    root = tmp_path / "images"
    add_images(root, {"cat": 3, "dog": 3}, eval_count=1)
    workdir = tmp_path / "run"
    workdir_config.changes(_image_folder_config(load_config, root), str(workdir))
    _checkpoint(str(workdir))
    path = workdir / workdir_config.FILENAME
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in saved.items() if not k.startswith("found.")}))
    add_images(root, {"cat": 1}, eval_count=1)
    assert workdir_config.changes(_image_folder_config(load_config, root), str(workdir)) == []


def test_a_run_stopped_before_its_first_save_is_recorded_again(load_config, tmp_path, add_images):
    root = tmp_path / "images"
    add_images(root, {"cat": 3, "dog": 3}, eval_count=1)
    workdir = str(tmp_path / "run")
    config = _image_folder_config(load_config, root)
    workdir_config.changes(config, workdir)  # recorded; stopped before any checkpoint
    config.data.batch_size = 8  # the next run starts the workdir with another batch size
    assert workdir_config.changes(config, workdir) == []
    _checkpoint(workdir)
    assert workdir_config.changes(config, workdir) == []  # its record, not the first one's


def test_a_resume_warning_names_what_a_resume_should_not_change():
    assert workdir_config.resume_warning([]) is None
    quiet = ["echo: 2.0 -> 4.0", "data.eval_batch_size: 100 -> 50", "eval_every_steps: 5 -> 9"]
    assert workdir_config.resume_warning(quiet) is None
    # Issue 33: a longer num_steps re-lays the learning-rate schedule from the restored step
    # (a 20-step run's rate 0 jumped to half its peak at 40 steps), without a word.
    note = workdir_config.resume_warning(["num_steps: 10 -> 20", *quiet])
    assert note.startswith("Note: this resume changes num_steps: 10 -> 20. The learning rate's ")
    assert "a fresh --workdir trains that" in note and "Warning" not in note
    for training in ("learning_rate: 0.01 -> 0.5", "echo: 1.0 -> 2.0"):
        assert f"started with (config.json) in {training}. " in workdir_config.resume_warning(
            [training]
        )
    warning = workdir_config.resume_warning(["num_steps: 10 -> 20", "seed: 0 -> 1"])
    assert warning.startswith(
        "Warning: this resume's config or data differs from what the workdir's run started "
        "with (config.json) in seed: 0 -> 1. Training goes on with the new values"
    )
    assert warning.splitlines()[1].startswith("Note: this resume changes num_steps: 10 -> 20.")


def test_the_asynchronous_trainers_changes_are_named_and_judged_as_the_run_config_holds_them():
    flat = ["eval_every: 100 -> 50", "steps_per_closure: 10 -> 5", "decay_factor: 0.1 -> 0.2"]
    named = passm_config.as_run_config_names([*flat, "num_workers: 2 -> 3", "seed: 0 -> 1"])
    assert named == [
        "eval_every_steps: 100 -> 50",
        "passm.steps_per_call: 10 -> 5",
        "passm.decay_factor: 0.1 -> 0.2",
        "passm.num_workers: 2 -> 3",
        "seed: 0 -> 1",
    ]
    assert workdir_config.resume_warning(named[:2]) is None  # when it evaluates, how it calls
    assert " in passm.decay_factor: 0.1 -> 0.2. " in workdir_config.resume_warning(named[:3])
    assert "in passm.num_workers: 2 -> 3: resume with" in workdir_config.explain(named[3:4])


def test_a_record_that_cannot_be_read_is_named_with_the_fixes(load_config, tmp_path, add_images):
    root = tmp_path / "images"
    add_images(root, {"cat": 3, "dog": 3}, eval_count=1)
    workdir = tmp_path / "run"
    config = _image_folder_config(load_config, root)
    workdir_config.changes(config, str(workdir))
    _checkpoint(str(workdir))
    (workdir / workdir_config.FILENAME).write_text("{bad")
    with pytest.raises(ValueError) as raised:
        workdir_config.changes(config, str(workdir))
    assert str(raised.value) == (
        f"{workdir}/config.json cannot be read (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)): it records the config this workdir's run started "
        "with, to check a resume against. Restore it, or delete it to resume unchecked, or use "
        "a fresh --workdir."
    )
    (workdir / workdir_config.FILENAME).unlink()
    assert workdir_config.changes(config, str(workdir)) == []  # the fix it names


@pytest.mark.parametrize(
    "differences, expected",
    [
        ([], ""),
        (["num_steps: 10 -> 20"],
         "The config differs from the one the workdir's run started with (config.json) only in "
         "num_steps: 10 -> 20, which a resume may change: what changed is something config.json "
         "does not record, such as the data (e.g. images or classes added to its folder); a "
         "fresh --workdir starts over."),
        (["data.batch_size: 32 -> 16", "num_steps: 10 -> 20"],
         "This config differs from the one the workdir's run started with (config.json) in "
         "data.batch_size: 32 -> 16: resume with those values, or use a fresh --workdir."),
        (["found.train_examples: 38 -> 45", "model: 'a' -> 'b'", "echo: 2.0 -> 4.0"],
         "The data differs from what the workdir's run started with (config.json): "
         "found.train_examples: 38 -> 45; and this config in model: 'a' -> 'b': resume with that "
         "data and those values, or use a fresh --workdir."),
        # Echo turned on adds a stage the checkpointed input iterator does not have.
        (["echo: 1.0 -> 2.0", "num_steps: 10 -> 20"],
         "This config differs from the one the workdir's run started with (config.json) in "
         "echo: 1.0 -> 2.0: resume with those values, or use a fresh --workdir."),
        ([f"passm.k{i}: 1 -> 2" for i in range(8)],
         "This config differs from the one the workdir's run started with (config.json) in "
         "passm.k0: 1 -> 2, passm.k1: 1 -> 2, passm.k2: 1 -> 2, passm.k3: 1 -> 2, passm.k4: "
         "1 -> 2, passm.k5: 1 -> 2 and 2 more: resume with those values, or use a fresh "
         "--workdir."),
    ],
)  # fmt: skip
def test_explain_never_blames_a_field_a_resume_may_change(differences, expected):
    assert workdir_config.explain(differences) == expected
