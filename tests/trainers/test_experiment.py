"""Tests for trainers.experiment: config checks, resume after a kill, incompatible workdirs."""

import functools
import os
import re
import signal
import subprocess
import sys
import time

import ml_collections
import pytest
import tensorflow as tf

from pipelines import sources
from trainers import experiment, metrics_writer


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"num_epochs": 3}, ValueError, r"unknown config key 'num_epochs'\. Valid keys: \["),
        ({"num_steps": 0}, ValueError, "num_steps must be >= 1"),
        ({"steps_per_loop": 2.5}, TypeError, "'steps_per_loop'.*cannot be casted to .*int"),
        ({"warmup_steps": 3000}, ValueError, "warmup_steps=3000 must be < num_steps"),
        ({"learning_rate": -1.0}, ValueError, "learning_rate must be > 0, got -1.0"),
        ({"target_accuracy": 1.5}, ValueError, r"target_accuracy must be in \[0, 1\]"),
        (
            {"strategy": "tpu_pod"},
            ValueError,
            r"strategy must be one of \['default', 'mirrored', 'multi_worker', 'tpu'\]",
        ),
        ({"strategy": "parameter_server"}, ValueError, r"--config=configs/passm\.py"),
        ({"jit_compile": "yes"}, TypeError, "'jit_compile'.*cannot be casted to .*bool"),
        ({"task_index": -1}, ValueError, "task_index must be >= 0"),
        ({"workers": 3}, TypeError, "'workers'.*cannot be casted to .*str"),
        ({"priority": True, "strategy": "tpu"}, ValueError, "priority=True with strategy='tpu'"),
        (
            {"pgd": False, "priority": True},
            ValueError,
            r"sets priority sampling's priority twice: pgd=False \(its old name\) and "
            "priority=True",
        ),
        ({"model": "resnet50"}, ValueError, "model must be one of"),
        (
            {"data": {"batchsize": 8}},
            ValueError,
            "unknown data config key 'batchsize'; did you mean 'batch_size'",
        ),
    ],
)
def test_resolve_config_rejects_bad_configs(overrides, error, message):
    # Built from plain dicts: ConfigDict's own type locking would otherwise refuse some values
    # before resolve_config sees them (configs from files arrive with any values).
    fields = experiment.default_config().to_dict()
    for key, value in overrides.items():
        fields[key] = {**fields[key], **value} if isinstance(value, dict) else value
    with pytest.raises(error, match=message):
        experiment.resolve_config(ml_collections.ConfigDict(fields))


def test_resolve_config_rejects_non_configdict():
    with pytest.raises(TypeError, match=r"ml_collections\.ConfigDict"):
        experiment.resolve_config({"model": "mnist1d_cnn"})


def _wait_for_checkpoint(directory, process, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tf.train.latest_checkpoint(directory) is not None:
            return
        if process.poll() is not None:
            stderr = process.stderr.read().decode()[-3000:]
            raise AssertionError(f"the run ended (code {process.returncode}): {stderr}")
        time.sleep(0.5)
    raise AssertionError(f"no checkpoint in {directory} after {timeout} s")


def test_resume_after_kill_continues_and_other_model_is_refused(
    tmp_path, data_dir, mnist1d_config_path, load_config, capsys
):
    workdir = str(tmp_path / "run")
    checkpoints = os.path.join(workdir, "checkpoints")
    # A run far too long to finish, checkpointing every 10 steps; killed after the first one.
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainers.train",
            f"--config={mnist1d_config_path}:smoke",
            f"--workdir={workdir}",
            "--config.num_steps=100000",
            f"--config.data.data_dir={data_dir}",
            "--config.progress_bar=False",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for_checkpoint(checkpoints, process, timeout=240)
    finally:
        process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, stderr.decode()[-2000:]
    saved_step = int(tf.train.latest_checkpoint(checkpoints).rsplit("-", 1)[1])
    assert 10 <= saved_step < 100000
    before = metrics_writer.read_metrics(workdir)
    fresh_at_checkpoint = next(r["fresh_examples"] for r in before if r["step"] == saved_step)

    get_config = functools.partial(load_config, "mnist1d")
    config = get_config("smoke")
    config.num_steps = saved_step + 10
    config.timing_steps = 0
    config.progress_bar = False
    config.data.data_dir = data_dir
    summary = experiment.run(config, workdir)
    assert f"Resumed from {checkpoints}/ckpt-{saved_step} at step {saved_step}" in (
        capsys.readouterr().err
    )
    assert summary["step"] == saved_step + 10
    records = metrics_writer.read_metrics(workdir)
    # Rows the killed run wrote past its checkpoint are gone: every step is logged once.
    steps = [r["step"] for r in records]
    assert steps == sorted(set(steps))
    after = [r for r in records if r["step"] > saved_step]
    # Continues from the checkpoint: the first new record is 10 steps on, not step 10 again,
    # and the echo meters were restored (not reset to 0).
    assert [r["step"] for r in after] == [saved_step + 10]
    assert after[0]["fresh_examples"] > fresh_at_checkpoint
    # The input pipeline reads ahead (prefetch) while the run finishes, so the final count can
    # only be higher than the last logged one.
    assert summary["fresh_examples"] >= after[0]["fresh_examples"]
    assert tf.train.latest_checkpoint(checkpoints).endswith(f"ckpt-{saved_step + 10}")

    other = get_config("smoke,model=mnist1d_mlp")
    other.data.data_dir = data_dir
    with pytest.raises(ValueError) as raised:
        experiment.run(other, workdir)
    # The change first, then what failed, without the checkpoint's guesses at other causes.
    assert re.fullmatch(
        r"This config differs .* in model: 'mnist1d_cnn' -> 'mnist1d_mlp': resume with those "
        r"values, or use a fresh --workdir\. What failed: the checkpoint \S+ does not match this "
        r"run's model or data: its variable \S+ has shape \(.*\) there and \(.*\) in this run\.",
        str(raised.value),
    ), str(raised.value)


def test_mirrored_strategy_run_resumes_without_the_iterator(
    tmp_path, data_dir, load_config, capsys
):
    get_config = functools.partial(load_config, "mnist1d")
    config = get_config("smoke")
    config.strategy = "mirrored"
    config.num_steps, config.timing_steps, config.progress_bar = 10, 0, False
    config.data.data_dir = data_dir
    workdir = str(tmp_path)
    assert experiment.run(config, workdir)["step"] == 10
    assert "Not checkpointing the input iterator" in capsys.readouterr().err
    config.num_steps = 20
    assert experiment.run(config, workdir)["step"] == 20
    assert "at step 10" in capsys.readouterr().err
    assert [r["step"] for r in metrics_writer.read_metrics(workdir)] == [10, 20]


def test_a_run_that_generates_its_data_trains_as_one_that_finds_it_cached(
    load_config, tmp_path, monkeypatch
):
    """Generating MNIST-1D draws from the global generators; the model must not see that."""
    loads = []
    loader = sources._LOADERS["mnist1d"]
    monkeypatch.setitem(sources._LOADERS, "mnist1d", lambda c: loads.append(1) or loader(c))
    config = load_config("mnist1d", "smoke")
    config.data.data_dir = str(tmp_path / "data")  # empty: the first run generates the data
    config.progress_bar = False
    generated = experiment.run(config, str(tmp_path / "first"))
    cached = experiment.run(config, str(tmp_path / "second"))
    assert cached["eval_loss"] == generated["eval_loss"]
    # Each run opens the data set once for its train, eval and timing pipelines.
    assert len(loads) == 2


def test_a_diverging_run_stops_at_the_first_nan_loss_and_saves_nothing(
    tmp_path, data_dir, load_config
):
    config = load_config("mnist1d", "smoke")
    config.data.data_dir = data_dir
    config.num_steps, config.learning_rate, config.checkpoint_every_steps = 40, 1e30, 10
    with pytest.raises(
        experiment.TrainingDiverged,
        match=r"the training loss is (nan|-?inf) in the steps up to 10: training diverged\. "
        r"Lower the learning rate \(--config\.learning_rate.*Nothing was saved\.",
    ):
        experiment.run(config, str(tmp_path))
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")) is None
    assert not os.path.exists(tmp_path / "model.keras")


def test_a_resume_that_cannot_fit_names_the_fields_that_changed(tmp_path, data_dir, load_config):
    config = load_config("mnist1d", "smoke")
    config.data.data_dir = data_dir
    config.num_steps, config.checkpoint_every_steps, config.timing_steps = 10, 10, 0
    experiment.run(config, str(tmp_path))
    assert os.path.exists(tmp_path / "config.json")  # what the run started with
    config.num_steps, config.data.batch_size = 20, 16  # the saved iterator holds batches of 32
    with pytest.raises(
        ValueError,
        # The field first, then TensorFlow's own words, not its "Graph execution error:".
        match=r"^This config differs from the one the workdir's run started with "
        r"\(config\.json\) in data\.batch_size: 32 -> 16: resume with those values, or use a "
        r"fresh --workdir\. What failed: the run resumed at step 10: Incompatible shapes",
    ):
        experiment.run(config, str(tmp_path))
