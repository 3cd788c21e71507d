"""A resume whose checkpoint no longer fits the data (issue 33): an image folder grown between
runs fails pruning's per-example table, and the message names the variable, both shapes and the
data's change, never num_steps (which a resume may change)."""

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
    assert "does not match this run's model or data: its variable draws:0 has shape (20,) " in (
        message
    )
    assert "there and (23,) in this run" in message
    assert message.endswith(
        "The data differs from what the workdir's run started with (config.json): "
        "found.train_examples: 20 -> 23: resume with that data, or use a fresh --workdir."
    )
    assert "num_steps" not in message
