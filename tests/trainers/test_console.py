"""The binary's console: a handful of lines a person reads, library chatter only with --verbose."""

import os
import re
import subprocess
import sys

import pytest

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _train(tmp_path, *flags):
    command = [sys.executable, "-m", "trainers.train", "--config=configs/mnist1d.py:smoke"]
    command += [f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={tmp_path / 'data'}"]
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [*command, *flags],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def quiet_output(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("console"))


def test_the_smoke_run_prints_what_it_trains_and_its_results_only(quiet_output, console_noise):
    lines = quiet_output.splitlines()
    assert not [line for line in lines if console_noise.search(line)], quiet_output
    # What is trained, the one-time data generation, the final evaluation and the summary.
    assert any(line.startswith("Training mnist1d_cnn on mnist1d") for line in lines)
    assert any(line.startswith("Generating MNIST-1D (1000 train / 200 eval") for line in lines)
    assert any(line.startswith("step 20: eval accuracy") for line in lines)
    assert len(lines) <= 8, quiet_output


def test_verbose_brings_the_library_messages_back(tmp_path):
    assert re.search(r"I0000|oneDNN", _train(tmp_path, "--verbose"))


def test_gcsfs_retry_records_are_dropped_and_errors_of_others_kept():
    import logging

    from trainers import console

    def record(pathname, level):
        return logging.LogRecord("x", level, pathname, 1, "message", None, None)

    chatter = console._DropLibraryChatter()
    gcsfs_retry = os.path.join("site-packages", "gcsfs", "retry.py")
    assert not chatter.filter(record(gcsfs_retry, logging.ERROR))  # its traceback, per request
    tfds = os.path.join("site-packages", "tensorflow_datasets", "core", "x.py")
    assert not chatter.filter(record(tfds, logging.WARNING))
    assert chatter.filter(record(tfds, logging.ERROR))
    assert chatter.filter(record(os.path.join("trainers", "loop.py"), logging.WARNING))


def test_a_library_warning_is_one_line_without_the_librarys_file_and_source():
    import warnings

    from trainers import console

    before = warnings.formatwarning
    try:
        console.quiet_python_logs()
        shown = warnings.formatwarning("num_steps ends the run first", UserWarning, "/x.py", 7)
        moved = warnings.formatwarning("the keys moved", FutureWarning, "/x.py", 7, "code")
        # TensorFlow's own (e.g. tf.data's under MirroredStrategy) read as the library's before.
        package = "/v/lib/python3.11/site-packages/tensorflow/python/data/ops/options.py"
        theirs = warnings.formatwarning("To make it possible", UserWarning, package, 7)
    finally:
        warnings.formatwarning = before
    assert shown == "Warning: num_steps ends the run first\n"
    assert moved == "Warning (FutureWarning): the keys moved\n"
    assert theirs == "Warning from tensorflow: To make it possible\n"
