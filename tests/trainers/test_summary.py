"""The run summary reports what skip_corrupt skipped and which gs:// reads resumed, and says
how to load the trained model."""

import contextlib
import io
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from echoing import meters
from pipelines.sources.record_reader import ReadStats
from trainers import controller, experiment, inputs, models, summary


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG")
    return buffer.getvalue()


def _image_folder(root) -> str:
    files = {f"train/{c}/{k}.jpg": _jpeg(k) for c in "ab" for k in range(3)}
    files["train/a/bad.jpg"] = b"not a jpeg at all"
    files.update({f"test/{c}/x.jpg": _jpeg(9) for c in "ab"})
    for relative, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, relative)), exist_ok=True)
        with open(os.path.join(root, relative), "wb") as file:
            file.write(data)
    return str(root)


def test_the_datasets_a_run_builds_hand_their_read_stats_to_the_summary(tmp_path):
    config = experiment.default_config()
    config.data.source, config.data.image_dir = "image_folder", _image_folder(tmp_path)
    config.data.image_size, config.data.batch_size, config.data.eval_batch_size = 16, 2, 2
    config.data.skip_corrupt, config.data.augment = True, "image"
    collected = []
    train_fn, eval_fn = inputs.dataset_fns(
        experiment.resolve_config(config), [], meters.EchoMeters(), read_stats=collected
    )
    next(iter(train_fn(tf.distribute.InputContext())))
    next(iter(eval_fn(tf.distribute.InputContext())))
    assert [split for split, _ in collected] == ["train", "eval"]
    report = summary._read_report(collected)
    assert report == {
        "skipped_corrupt_train": 1,
        "skipped_corrupt_eval": 0,
        "lost_file_tails_train": 0,
        "lost_file_tails_eval": 0,
        "reopened_files": 0,
    }


def test_a_record_skipped_in_every_epoch_counts_once_and_the_console_says_so():
    train, evaluation = ReadStats(), ReadStats()
    for _ in range(3):  # three epochs over the same bad record
        train.skip("/data/train-0.tfrecord", 7, 1024, "bad crc")
    train.skip_file("/data/a/bad.jpg", "not an image")
    train.reopen("gs://bucket/train-1.tfrecord", 2048, ConnectionError("reset"), 0.1)
    evaluation.skip("/data/eval-0.tfrecord", 0, 0, "truncated")
    # The same object handed over by two pipelines (an image folder's scan is shared).
    report = summary._read_report([("train", train), ("train", train), ("eval", evaluation)])
    assert report == {
        "skipped_corrupt_train": 2,
        "skipped_corrupt_eval": 1,
        "lost_file_tails_train": 0,
        "lost_file_tails_eval": 0,
        "reopened_files": 1,
    }
    text = _printed(report)
    assert "skip_corrupt: skipped 2 corrupt train and 1 eval records or images" in text
    assert "lost the rest of their file" not in text
    assert "1 gs:// reads resumed after errors" in text


def test_a_skip_that_lost_the_rest_of_a_file_is_said_to_leave_its_records_uncounted(tmp_path):
    # A damaged length header lost 125 records of a file and was reported as 1 skipped record
    # (issue 33): the summary now says the rest of that file went uncounted.
    import numpy as np

    from pipelines.sources import record_reader, tfrecord

    path = tmp_path / "train.tfrecord"
    tfrecord.write(str(path), np.zeros((10, 4, 1), np.float32), np.arange(10) % 2)
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 12] = bytes(12)  # mid-file: framing is lost there
    path.write_bytes(bytes(data))
    stats = ReadStats()

    def open_file(name):
        return io.BytesIO(bytes(data)), len(data)

    kept = list(record_reader.read_records(str(path), open_file, skip_corrupt=True, stats=stats))
    assert len(kept) < 10 and stats.skipped == 1 and len(stats.lost_tails) == 1
    report = summary._read_report([("train", stats)])
    assert report["skipped_corrupt_train"] == 1 and report["lost_file_tails_train"] == 1
    assert (
        "; 1 train and 0 eval of those lost the rest of their file, whose records cannot be "
        "counted (the run read only the records before the damage)"
    ) in _printed(report)


def test_a_clean_run_reports_zero_and_prints_no_line_about_it():
    report = summary._read_report([])
    assert report == {
        "skipped_corrupt_train": 0,
        "skipped_corrupt_eval": 0,
        "lost_file_tails_train": 0,
        "lost_file_tails_eval": 0,
        "reopened_files": 0,
    }
    text = _printed(report)
    assert "skip_corrupt" not in text and "gs://" not in text
    assert text.startswith("step 10: eval accuracy 0.5000")


def _printed(report: dict) -> str:
    return summary.format_summary(
        {
            "step": 10,
            "eval_accuracy": 0.5,
            "eval_loss": 1.0,
            "train_seconds": 1.0,
            "trained_examples": 80,
            "fresh_examples_trained": 80,
            "echo_ratio": 1.0,
            "fresh_examples": 96,
            "target_accuracy": None,
            "upstream_downstream_ratio": None,
            **report,
        }
    )


def test_in_batch_selection_says_how_many_rows_the_gradients_used():
    assert "trained on 80 examples behind 80 fresh" in _printed({})
    text = _printed({"select_ratio": 0.5})
    assert "trained on 80 examples (the gradients used 40 of them: select_ratio 0.5) behind" in text


def _load_in_a_fresh_python(line: str, cwd) -> subprocess.CompletedProcess:
    """Loads the model a ``trained model: PATH (HOW)`` line names as it says, in a new Python
    process started in ``cwd``: HOW is the code to run, or ``keras.models.load_model`` alone
    (then ``import keras; keras.models.load_model(PATH)``)."""
    path, how = line.removeprefix("trained model: ").split(" (", 1)
    how = how.rsplit(")", 1)[0]
    if how == "keras.models.load_model":
        how = f"import keras; keras.models.load_model({path!r})"
    return subprocess.run(
        [sys.executable, "-c", how], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_a_model_with_custom_layers_is_named_with_the_code_that_loads_it(tmp_path):
    path = str(tmp_path / "model.keras")
    models.build_model("transformer_lm_small", (None,), 40).save(path)
    line = summary.trained_model_line(path)
    assert line == (
        f"trained model: {path} (import keras, trainers.models; keras.models.load_model({path!r}))"
    )
    loaded = _load_in_a_fresh_python(line, cwd=tmp_path)  # not the repository: installed
    assert loaded.returncode == 0, loaded.stderr


def test_a_model_of_keras_layers_only_loads_with_load_model_alone(tmp_path):
    path = str(tmp_path / "model.keras")
    models.build_model("mnist1d_mlp", (40,), 10).save(path)
    assert summary.custom_modules(path) == ()
    line = summary.trained_model_line(path, class_names=["/w/classes.txt"])
    assert line == f"trained model: {path} (keras.models.load_model), class names: /w/classes.txt"


def test_a_file_that_is_not_a_keras_model_gets_the_plain_line(tmp_path):
    (tmp_path / "model.keras").write_text("not a zip")
    assert summary.custom_modules(str(tmp_path / "model.keras")) == ()
    assert summary.custom_modules(str(tmp_path / "missing.keras")) == ()


def test_a_language_model_run_names_the_code_that_loads_its_model(load_config, tmp_path):
    lines = [
        f"the cat {i % 7} sat on the mat while dog {i % 5} ran past the barn" for i in range(100)
    ]
    (tmp_path / "train.txt").write_text("\n".join(lines[:80]) + "\n")
    (tmp_path / "eval.txt").write_text("\n".join(lines[80:]) + "\n")
    config = load_config("text_lm", "smoke")
    config.progress_bar, config.data.data_dir = False, str(tmp_path / "data")
    config.data.train_files, config.data.eval_files = (
        str(tmp_path / "train.txt"),
        str(tmp_path / "eval.txt"),
    )
    config.data.num_train, config.data.num_eval, config.data.vocab_size = 80, 20, 100
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        experiment.run(config, str(tmp_path / "run"))
    line = next(x for x in printed.getvalue().splitlines() if x.startswith("trained model: "))
    loaded = _load_in_a_fresh_python(line, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr


@pytest.mark.parametrize(("ratio", "used"), [(0.02, 20), (0.3, 200), (0.5, 320)])
def test_the_rows_the_gradients_used_follow_the_selections_rounding(load_config, ratio, used):
    # 20 steps of batch 32: select_ratio 0.02 trains max(1, round(0.64)) = 1 row a step (20 in
    # all), 0.3 trains 10 (200); trained * ratio said 13 and 192.
    config = experiment.resolve_config(load_config("mnist1d", "smoke"))
    config.select_ratio, config.data.batch_size = ratio, 32
    made = summary.make_summary(
        config,
        20,
        {"eval_accuracy": 0.5, "eval_loss": 1.0},
        meters.EchoMeters(),
        controller.RunClock(),
        {},
        640,
    )
    assert made["selected_examples"] == used
    assert f"(the gradients used {used} of them: select_ratio {ratio:g})" in (
        summary.format_summary(made)
    )


def test_an_auto_echo_runs_ratio_is_said_to_be_nominal():
    # Counted at the factor set each loop, which an example-level stage applies late: a run
    # reported 1,920 rows "behind 520 fresh ones (echo ratio 3.69)" over batches of 828+.
    assert "(echo ratio 1.00)" in _printed({})
    text = _printed({"echo_ratio_nominal": True})
    assert "(echo ratio 1.00, nominal: rows / the echo factor; AutoEcho's stage" in text


@pytest.mark.parametrize(
    ("argument", "nominal"),
    [("smoke,echo=auto", True), ("smoke,echo=2,assist=1", True), ("smoke,echo=2", False),
     ("smoke,assist=1", False), ("smoke,echo=1.5", True)],
)  # fmt: skip
def test_the_ratio_is_nominal_where_rows_over_the_factor_is_not_what_was_consumed(
    load_config, argument, nominal
):
    # echo=2 with the Assistant after it reported "behind 8000 fresh ones (echo ratio 2.00)"
    # where the filter, dropping copies one by one, had the pipeline read ~1.1 rows per example.
    config = experiment.resolve_config(load_config("mnist1d", argument))
    made = summary.make_summary(
        config, 20, {"eval_accuracy": 0.5, "eval_loss": 1.0}, meters.EchoMeters(),
        controller.RunClock(), {}, 320,
    )  # fmt: skip
    assert made["echo_ratio_nominal"] is nominal
