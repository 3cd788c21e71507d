"""Every config the training binary runs: its smoke variant, through the binary's main()."""

import glob
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from absl import flags

from pipelines.sources import text
from trainers import metrics_writer
from trainers import train as _defines_the_binarys_flags  # noqa: F401  (--config, --workdir)

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def training_binary_configs():
    """configs/*.py whose opening comment runs `python -m trainers.train` (others, such as
    configs/passm.py, belong to other binaries and are tested with them)."""
    paths = []
    for path in sorted(glob.glob(os.path.join(REPOSITORY, "configs", "*.py"))):
        with open(path) as file:
            if "-m trainers.train " in file.readline():
                paths.append(path)
    return paths


CONFIGS = training_binary_configs()


def _load_config(path: str):
    """The config file's smoke variant, as the binary read it."""
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3] + "_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config("smoke")


def test_the_default_config_is_discovered():
    assert any(path.endswith(os.path.join("configs", "mnist1d.py")) for path in CONFIGS)


# mnist1d's smoke run goes through the binary in tests/trainers/test_console.py (with a fresh data
# directory, so it also sees the one-time generation message); one process is enough.
BINARY_SMOKE_CONFIGS = [path for path in CONFIGS if os.path.basename(path) != "mnist1d.py"]


@pytest.mark.parametrize("path", BINARY_SMOKE_CONFIGS, ids=os.path.basename)
def test_smoke_variant_runs_through_the_binary_quietly(path, tmp_path, data_dir, console_noise):
    """As a user runs it: ``python -m trainers.train``, in a process of its own, so that the
    console is what a person sees (TF's C++ notices come at its first import)."""
    workdir = str(tmp_path)
    command = [
        sys.executable,
        "-m",
        "trainers.train",
        f"--config={path}:smoke",
        f"--workdir={workdir}",
        f"--config.data.data_dir={data_dir}",
    ]
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=REPOSITORY, env=environment, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    console = result.stdout + result.stderr
    assert not [line for line in console.splitlines() if console_noise.search(line)], console
    config = _load_config(path)
    with open(os.path.join(workdir, "summary.json")) as file:
        summary = json.load(file)
    assert summary["step"] == config.num_steps
    assert 0.0 <= summary["eval_accuracy"] <= 1.0
    assert summary["fresh_examples"] > 0
    assert summary["emitted_examples"] >= config.num_steps * config.data.batch_size
    if config.timing_steps:  # the R measurement after training
        assert summary["upstream_seconds_per_step"] > 0
        assert summary["downstream_seconds_per_step"] > 0
    records = metrics_writer.read_metrics(workdir)
    assert records[-1]["step"] == config.num_steps
    assert all("train_loss" in r and "fresh_examples" in r for r in records)
    assert any("eval_accuracy" in r for r in records)
    checkpoint = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
    assert checkpoint.endswith(f"ckpt-{config.num_steps}")
    assert os.listdir(os.path.join(workdir, "tensorboard"))
    if config.data.source == "text":  # a language model: perplexity, and its vocabulary saved
        assert summary["eval_perplexity"] == math.exp(summary["eval_loss"])
        with open(os.path.join(workdir, "vocab.txt"), encoding="utf-8") as file:
            tokens = file.read().splitlines()
        assert tuple(tokens[: len(text.RESERVED_TOKENS)]) == text.RESERVED_TOKENS
    else:
        assert summary["eval_perplexity"] is None


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("ecno=2", r"unknown config argument key 'ecno'"),
        ("echo=two", "must be a float"),
        ("smoke,smoke", "given twice"),
    ],
)
@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_bad_config_arguments_are_refused(path, argument, message, monkeypatch):
    argv = ["train", f"--config={path}:{argument}", "--workdir=/unused"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(flags.IllegalFlagValueError, match=message):
        flags.FLAGS(argv)
