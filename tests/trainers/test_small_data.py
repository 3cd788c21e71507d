"""A user's own small data with the defaults: it works, or one line says which flag to change.

Issue 33: an image folder of 53 training images with the default batch of 64, and a 200-step
text run with the config's 200-step warm-up, failed with tracebacks. Now the binary prints what
an image folder holds, scales a warm-up the user did not choose to a shortened run
(``run_config.scale_warmup``), and ends a value that cannot work with one ``error:`` line.
"""

import glob
import os
import shutil
import subprocess
import sys

import ml_collections
import pytest

from pipelines.sources import photos
from trainers import experiment, run_config

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = sorted(
    os.path.basename(path)[: -len(".py")]
    for path in glob.glob(os.path.join(REPOSITORY, "configs", "*.py"))
)
LAYOUT = (("train", "cat", 27), ("train", "dog", 26), ("test", "cat", 3), ("test", "dog", 3))
FOUND = "Found 53 train + 6 eval images in 2 classes in {}: cat (27 + 3), dog (26 + 3)"


@pytest.fixture(scope="module")
def folder(tmp_path_factory, data_dir):
    """An image folder of 53 train and 6 eval JPEGs in two classes (cat 27 + 3, dog 26 + 3)."""
    photo_set = photos.make_folder(data_dir, num_train=64, num_eval=32)
    jpegs = sorted(glob.glob(os.path.join(photo_set, "*", "*", "*.jpg")))
    root = tmp_path_factory.mktemp("own_images")
    for split, name, count in LAYOUT:
        os.makedirs(root / split / name)
        for index in range(count):
            shutil.copy(jpegs.pop(), root / split / name / f"{index}.jpg")
    return str(root)


@pytest.mark.parametrize(
    ("config_name", "argument", "num_steps", "warmup_steps"),
    [
        # The 200-step text run: the config's 200-step warm-up becomes 20 steps.
        ("text_lm", "", 200, 20),
        ("text_lm", "", 250, 25),
        ("image_folder", "", 300, 30),
        ("image_folder", "", 400, 40),  # exactly a quarter: scaled
        ("image_folder", "", 401, 100),  # under a quarter: kept
        ("images", "", 100, 10),
        ("mnist1d", "", 600, 100),  # the config's own run
        ("mnist1d", "smoke", 5, 0),
    ],
)
def test_scale_warmup_shortens_a_warmup_made_for_a_longer_run(
    config_name, argument, num_steps, warmup_steps, load_config
):
    config = load_config(config_name, argument)
    before = config.warmup_steps
    config.num_steps = num_steps
    note = run_config.scale_warmup(config)
    assert config.warmup_steps == warmup_steps
    if warmup_steps == before:
        assert note is None
    else:
        assert note.startswith(
            f"warm-up: the config's warmup_steps={before} would take "
            f"{before / num_steps:.0%} of the {num_steps}-step run; warming up for "
            f"{warmup_steps} steps instead (a tenth of the run); --config.warmup_steps=N sets it."
        )
    experiment.resolve_config(config)  # the scaled warm-up fits


@pytest.mark.parametrize("argument", ["", "smoke"])
@pytest.mark.parametrize("config_name", CONFIGS)
def test_every_config_keeps_its_own_warmup(config_name, argument, load_config):
    config = load_config(config_name, argument)
    if "warmup_steps" not in config:
        pytest.skip(f"configs/{config_name}.py has no warm-up (the asynchronous trainer's)")
    before = config.warmup_steps
    assert run_config.scale_warmup(config) is None
    assert config.warmup_steps == before


def test_an_explicit_warmup_longer_than_the_run_is_refused_naming_the_flag():
    fields = experiment.default_config().to_dict()
    fields.update(warmup_steps=300, num_steps=200)
    with pytest.raises(
        ValueError,
        match=r"config warmup_steps=300 must be < num_steps=200: set --config\.warmup_steps "
        r"below it, e.g\. --config\.warmup_steps=20 \(a tenth of the run\)\.$",
    ):
        experiment.resolve_config(ml_collections.ConfigDict(fields))


def test_a_folder_smaller_than_a_batch_says_what_it_found_and_which_flag(
    folder, tmp_path, load_config, capsys
):
    config = load_config("image_folder")
    config.data.image_dir = folder
    with pytest.raises(
        ValueError,
        match=r"^the train split has 53 images, fewer than one batch of data\.batch_size=64, so "
        r"it yields no batch: set --config\.data\.batch_size=32 \(or smaller\), or add training "
        r"data\.$",
    ):
        experiment.run(config, str(tmp_path / "run"))
    assert FOUND.format(folder) in capsys.readouterr().err.splitlines()
    assert not os.path.exists(tmp_path / "run" / "checkpoints")  # refused before building


def _binary(tmp_path, *flags):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.train",
            f"--config={REPOSITORY}/configs/image_folder.py",
            f"--workdir={tmp_path / 'run'}",
            "--config.progress_bar=False",
            *flags,
        ],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("flags", "last_line"),
    [
        ((), "error: the train split has 53 images, fewer than one batch of data.batch_size=64"),
        (
            ("--config.num_steps=4", "--config.warmup_steps=8"),
            "error: config warmup_steps=8 must be < num_steps=4: set --config.warmup_steps below",
        ),
    ],
)
def test_the_binary_ends_a_value_that_cannot_work_with_one_line(flags, last_line, folder, tmp_path):
    result = _binary(tmp_path, f"--config.data.image_dir={folder}", *flags)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(last_line), result.stderr[-3000:]
    # A warm-up the user chose is checked, never scaled.
    assert not [line for line in lines if line.startswith("warm-up:")]


def test_the_binary_trains_a_small_folder_with_a_smaller_batch_and_a_scaled_warmup(
    folder, tmp_path
):
    result = _binary(
        tmp_path,
        f"--config.data.image_dir={folder}",
        "--config.data.batch_size=32",
        "--config.num_steps=4",
        "--config.steps_per_loop=2",
        "--config.timing_steps=0",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert FOUND.format(folder) in lines
    assert (
        "warm-up: the config's warmup_steps=100 would take 2500% of the 4-step run; warming up "
        "for 0 steps instead (a tenth of the run); --config.warmup_steps=N sets it."
    ) in lines
    assert result.stdout.startswith("step 4: eval accuracy")
    with open(tmp_path / "run" / "classes.txt") as file:
        assert file.read() == "cat\ndog\n"


def test_a_folder_of_one_class_names_it_and_asks_for_another(folder, tmp_path, load_config):
    one_class = tmp_path / "one_class"
    for split in ("train", "test"):
        shutil.copytree(os.path.join(folder, split, "cat"), one_class / split / "cat")
    config = load_config("image_folder")
    config.data.image_dir, config.data.batch_size = str(one_class), 8
    with pytest.raises(
        ValueError,
        match=rf"^the image folder '{one_class}' has one class folder, 'cat'; a classifier needs "
        r"two or more: add a folder of images per class",
    ):
        experiment.run(config, str(tmp_path / "run"))


def _text_source(learned: int):
    from types import SimpleNamespace

    split = SimpleNamespace
    return SimpleNamespace(
        train=split(num_examples=5_120), eval=split(num_examples=1_300), vocab_size=learned,
        vocab_file="/cache/vocab.txt",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("learned", "said"),
    [
        (3_900, "a 3,900-token WordPiece vocabulary, /cache/vocab.txt"),  # WordPiece's shortfall
        # Before: vocab_size=3000 learned 318 tokens and nothing said so (issue 33).
        (2_717, "a 2,717-token WordPiece vocabulary (of vocab_size=4000: fewer words recur "
                "often enough for WordPiece to learn more), /cache/vocab.txt"),
        (1_000, "a 1,000-token WordPiece vocabulary, /cache/vocab.txt"),  # the source warns
    ],
)  # fmt: skip
def test_a_text_run_says_what_its_corpus_holds_and_the_vocabulary_it_learned(
    load_config, learned, said
):
    from trainers import data_summary

    config = load_config("text_lm")
    assert data_summary.text_line(config, _text_source(learned)) == (
        "Found 5,120 train + 1,300 eval examples of at most 64 tokens in the embedded corpus; "
        + said
    )
