"""What a finished run leaves a user: a loadable ``model.keras``, class names, ``--eval_only``.

Issue 33: a run ended with TF checkpoints only. Now ``trainers.experiment.run`` also writes
``workdir/model.keras`` (and ``classes.txt`` for image folders), and ``--eval_only`` evaluates a
workdir's newest checkpoint without training.
"""

import contextlib
import io
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.util import tensor_util

import pipelines
from echoing import techniques as technique_modules
from pipelines.sources import photos
from trainers import build, experiment, models

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(config, workdir):
    """``experiment.run`` with its console output: (summary, stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        summary = experiment.run(config, workdir)
    return summary, stdout.getvalue(), stderr.getvalue()


def _binary(*flags):
    return subprocess.run(
        [sys.executable, "-m", "trainers.train", *flags],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        timeout=300,
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_dir, load_config):
    """A finished ``configs/mnist1d.py:smoke`` run: (config, workdir, summary, stdout, stderr)."""
    config = load_config("mnist1d", "smoke")
    config.timing_steps, config.progress_bar = 0, False
    config.data.data_dir = data_dir
    workdir = str(tmp_path_factory.mktemp("finished") / "run")
    return (config, workdir, *_run(config, workdir))


def test_a_finished_run_leaves_a_keras_model_that_predicts_as_the_trained_one(finished_run):
    config, workdir, summary, _, _ = finished_run
    loaded = keras.models.load_model(os.path.join(workdir, "model.keras"))
    # The trained model: the run's last checkpoint (step 20) restored into a fresh build.
    datasets = pipelines.make_datasets(experiment.resolve_config(config).data, seed=0)
    trained = models.build_model(config.model, datasets.input_shape, datasets.num_classes)
    checkpoint = tf.train.Checkpoint(model=trained)
    checkpoint.restore(tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")))
    correct = total = 0
    for batch in datasets.eval:
        logits = loaded(batch["inputs"])
        np.testing.assert_allclose(logits, trained(batch["inputs"]), rtol=1e-5, atol=1e-5)
        correct += int(tf.reduce_sum(tf.cast(tf.argmax(logits, -1) == batch["label"], tf.int32)))
        total += int(batch["label"].shape[0])
    assert correct / total == pytest.approx(summary["eval_accuracy"], abs=1e-9)
    # MNIST-1D has no class names: no classes.txt.
    assert not os.path.exists(os.path.join(workdir, "classes.txt"))


def test_a_run_ends_with_the_tensorboard_command_and_tensorboard_reads_its_scalars(finished_run):
    _, workdir, summary, stdout, _ = finished_run
    lines = stdout.splitlines()
    assert lines[-2] == f"trained model: {workdir}/model.keras (keras.models.load_model)"
    assert lines[-1] == f"tensorboard --logdir={workdir}"
    # What that command shows: TensorBoard's reader, as its scalars plugin uses it, finds the
    # run below the workdir and its scalar series.
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(workdir)
    multiplexer.Reload()
    (tags,) = multiplexer.PluginRunToTagToContent("scalars").values()
    assert {"train_loss", "eval_accuracy", "fresh_examples", "echo_ratio"} <= set(tags)
    (run,) = multiplexer.Runs()
    series = [
        (event.step, float(tensor_util.make_ndarray(event.tensor_proto)))
        for event in multiplexer.Tensors(run, "eval_accuracy")
    ]
    assert series[-1] == (20, pytest.approx(summary["eval_accuracy"]))


def test_eval_only_prints_the_checkpoint_accuracy_and_writes_nothing(finished_run, data_dir):
    _, workdir, summary, _, _ = finished_run
    before = sorted(os.listdir(workdir))
    result = _binary(
        f"--config={REPOSITORY}/configs/mnist1d.py:smoke",
        f"--workdir={workdir}",
        f"--config.data.data_dir={data_dir}",
        "--eval_only",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoint = os.path.join(workdir, "checkpoints", "ckpt-20")
    assert result.stdout == (
        f"step 20 ({checkpoint}): eval accuracy {summary['eval_accuracy']:.4f} "
        f"(loss {summary['eval_loss']:.4f}) on 200 examples\n"
    )
    assert "Training" not in result.stderr  # nothing trained
    assert sorted(os.listdir(workdir)) == before


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", r"the workdir \S+ holds no checkpoint to evaluate .*train first"),
        ("empty", r"the workdir \S+ holds no checkpoint to evaluate .*train first"),
        # The field config.json records first, with the evaluation's fix, then what failed.
        (
            "other_model",
            r"^This config differs from the one the workdir's run started with "
            r"\(config\.json\) in model: 'mnist1d_cnn' -> 'mnist1d_mlp': evaluate with those "
            r"values \(the config the workdir's run trained with\)\. What failed: the "
            r"checkpoint .* does not match this run's model",
        ),
    ],
)
def test_evaluate_refuses_a_workdir_without_a_checkpoint_of_this_model(
    case, message, finished_run, tmp_path
):
    config, workdir, _, _, _ = finished_run
    config = experiment.resolve_config(config)
    if case == "missing":
        workdir = str(tmp_path / "never_trained")
    elif case == "empty":
        workdir = str(tmp_path)
    else:
        config.model = "mnist1d_mlp"
    with pytest.raises(ValueError, match=message):
        experiment.evaluate(config, workdir)


def test_eval_only_without_a_checkpoint_is_one_line(tmp_path):
    result = _binary(
        f"--config={REPOSITORY}/configs/mnist1d.py:smoke",
        f"--workdir={tmp_path / 'never_trained'}",
        "--eval_only",
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: the workdir ")
    assert "Traceback" not in result.stderr


def test_an_image_folder_run_writes_its_class_names(tmp_path, data_dir, load_config):
    config = load_config("image_folder", "smoke")
    config.num_steps = config.steps_per_loop = config.eval_every_steps = 2
    config.warmup_steps, config.progress_bar = 0, False
    config.data.data_dir = data_dir
    workdir = str(tmp_path / "run")
    _, stdout, _ = _run(config, workdir)
    assert f", class names: {workdir}/classes.txt\n" in stdout
    with open(os.path.join(workdir, "classes.txt")) as file:
        names = file.read().splitlines()
    assert names == sorted(photos.PHOTOS)
    model = keras.models.load_model(os.path.join(workdir, "model.keras"))
    assert model.output_shape == (None, len(names))


@pytest.mark.parametrize(
    "perplexity, counted", [(None, "on 200 examples"), (12.5, "perplexity 12.5) on 822 tokens")]
)
def test_the_evaluation_line_says_what_it_counted(perplexity, counted):
    # A language model's evaluation counts the tokens it predicted (issue 33: said "examples").
    result = {
        "step": 40, "checkpoint": "/w/checkpoints/ckpt-40", "eval_accuracy": 0.5,
        "eval_loss": 1.0, "eval_perplexity": perplexity,
        "eval_examples": 200 if perplexity is None else 822,
    }  # fmt: skip
    assert experiment.format_evaluation(result).endswith(counted)


def test_eval_only_does_not_warn_about_the_training_schedule(finished_run, recwarn):
    # Issue 33: --eval_only on a prune=1 run printed "prunes nothing in this run" and "needs
    # at least 32 steps": warnings about a training run that is not happening.
    config, workdir, _, _, _ = finished_run
    pruned = experiment.resolve_config(config.copy_and_resolve_references())
    pruned.prune = True
    experiment.evaluate(pruned, workdir)
    assert not [w for w in recwarn if "config prune" in str(w.message)]
    # The same config's training build says it: smoke's 20 steps cover one epoch.
    context = build.technique_context(pruned, tf.distribute.get_strategy())
    with pytest.warns(UserWarning, match=r"config prune=1 prunes nothing in this run"):
        technique_modules.from_config(context)


def test_an_evaluation_with_another_eval_split_says_so(finished_run, capsys):
    # --eval_only with another config evaluated another eval split (10,000 examples instead of
    # the run's 200) without a word (issue 33); the evaluation batch size changes nothing.
    config, workdir, _, _, _ = finished_run
    same = config.copy_and_resolve_references()
    same.data.eval_batch_size = 50
    experiment.evaluate(same, workdir)
    assert "Note: this config" not in capsys.readouterr().err
    other = config.copy_and_resolve_references()
    other.data.num_eval = 100
    assert experiment.evaluate(other, workdir)["eval_examples"] == 100
    assert (
        "Note: this config or data differs from what the workdir's run trained with "
        "(config.json) in data.num_eval: 200 -> 100: the figures are for this config's "
        "evaluation, not the run's"
    ) in capsys.readouterr().err
