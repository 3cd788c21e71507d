"""A resume or an evaluation on data whose labels or token ids mean something else (issue 33,
silent): a class folder renamed ``Zebra`` -> ``zebra`` sorted into another label order, and the
restored model trained on, or was evaluated against, labels that meant other classes."""

import os
import shutil

import pytest

from trainers import experiment, label_maps


def _config(load_config, root):
    config = load_config("image_folder", "smoke")
    config.data.image_dir, config.progress_bar, config.timing_steps = str(root), False, 0
    config.num_steps = config.steps_per_loop = config.eval_every_steps = 2
    config.warmup_steps, config.data.batch_size = 0, 4
    return config


@pytest.fixture(scope="module")
def trained(tmp_path_factory, load_config, add_images):
    """A finished run on classes Zebra, cat, dog, and a copy of its folder with 'zebra'."""
    tmp = tmp_path_factory.mktemp("maps")
    add_images(tmp / "images", dict.fromkeys(["Zebra", "cat", "dog"], 6), size=16)
    experiment.run(_config(load_config, tmp / "images"), str(tmp / "run"))
    shutil.copytree(tmp / "images", tmp / "renamed")
    for split in ("train", "test"):
        os.rename(tmp / "renamed" / split / "Zebra", tmp / "renamed" / split / "zebra")
    return tmp


def test_eval_only_on_classes_that_sort_otherwise_is_refused(trained, load_config):
    config = _config(load_config, trained / "renamed")
    with pytest.raises(ValueError, match=r"label 0 is 'Zebra' there and 'cat' now"):
        experiment.evaluate(config, str(trained / "run"))
    # The folder the run trained on still evaluates.
    assert experiment.evaluate(_config(load_config, trained / "images"), str(trained / "run"))


def test_a_resume_on_classes_that_sort_otherwise_is_refused_and_keeps_classes_txt(
    trained, load_config
):
    config = _config(load_config, trained / "renamed")
    config.num_steps = 4
    with pytest.raises(ValueError, match=r"classes differ from the ones this workdir's model"):
        experiment.run(config, str(trained / "run"))
    saved = (trained / "run" / "classes.txt").read_text().splitlines()
    assert saved == ["Zebra", "cat", "dog"]  # before: overwritten with cat, dog, zebra


def test_a_vocabulary_that_differs_is_named_by_its_first_token(tmp_path):
    (tmp_path / "vocab.txt").write_text("<pad>\nthe\ncat\n")
    (tmp_path / "new.txt").write_text("<pad>\nthe\ndog\n")
    with pytest.raises(ValueError, match=r"token id 2 is 'cat' there and 'dog' now.*train_files"):
        label_maps.check(str(tmp_path), vocab_file=str(tmp_path / "new.txt"))
    label_maps.check(str(tmp_path), vocab_file=str(tmp_path / "vocab.txt"))  # the same: passes
    label_maps.check(str(tmp_path / "fresh"), class_names=("a", "b"))  # nothing saved: passes


def test_more_classes_than_saved_names_the_first_new_one(tmp_path):
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    with pytest.raises(ValueError, match=r"label 2 is None there and 'eel' now \(2 classes there"):
        label_maps.check(str(tmp_path), class_names=("cat", "dog", "eel"))
