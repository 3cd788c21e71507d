"""A resume whose checkpoint no longer fits the data (issue 33): an image folder grown between
runs fails pruning's per-example table, and the message names the variable, both shapes and the
data's change, never num_steps (which a resume may change)."""

import io
import os

import numpy as np
import pytest
from PIL import Image

from trainers import experiment


def _add_images(root, counts: dict[str, int]) -> None:
    """Adds ``counts[class]`` PNGs to ``root/train/<class>/`` and two to ``root/test/<class>/``."""
    for name, count in counts.items():
        for split, number in (("train", count), ("test", 2)):
            folder = os.path.join(root, split, name)
            os.makedirs(folder, exist_ok=True)
            start = len(os.listdir(folder))
            for index in range(start, start + number):
                pixels = np.random.default_rng(index).integers(0, 256, (24, 24, 3), np.uint8)
                buffer = io.BytesIO()
                Image.fromarray(pixels).save(buffer, "PNG")
                with open(os.path.join(folder, f"{index}.png"), "wb") as file:
                    file.write(buffer.getvalue())


def test_a_grown_image_folder_is_named_as_the_cause_not_num_steps(load_config, tmp_path):
    root = tmp_path / "images"
    _add_images(root, {"cat": 10, "dog": 10})
    config = load_config("image_folder", "smoke,prune=1")
    config.data.image_dir, config.progress_bar = str(root), False
    experiment.run(config, str(tmp_path / "run"))
    _add_images(root, {"cat": 3})
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
