"""One training run from a config: the composition of data, techniques, model, loop and outer loop.

Example::

    from trainers import experiment

    config = experiment.default_config()
    config.data.num_train, config.data.num_eval = 1_000, 200
    config.num_steps, config.steps_per_loop, config.eval_every_steps = 20, 10, 10
    config.warmup_steps = 2
    summary = experiment.run(config, workdir="/tmp/run")
    print(summary["eval_accuracy"], summary["fresh_examples"])

``python -m trainers.train --config=configs/mnist1d.py --workdir=DIR`` is this function behind
absl flags. A run writes into ``workdir``: ``checkpoints/`` (model, optimizer, step, echo meters,
run clock, every technique's state and, when ``checkpoint_iterator``, the input iterator),
``metrics.jsonl`` and ``tensorboard/`` (see ``metrics_writer``), and ``summary.json`` (what
``run`` returns). Running again with the same workdir resumes from the newest checkpoint. A run
holds the workdir's lock (``workdir/run.lock``) until it returns or raises, so a second run in
the same workdir at the same time is refused, naming the first one's process.

A finished run also leaves what a Keras user can use: ``model.keras``, the trained model
(``keras.models.load_model``; it maps a batch of inputs as the eval pipeline decodes them to
logits, without softmax; a language model's custom layer loads once ``trainers.models`` is
imported), beside ``vocab.txt`` (text) or ``classes.txt`` (image folders: the class names, line
``i`` naming label ``i``)::

    import keras
    import tensorflow as tf
    from pipelines.sources import images

    model = keras.models.load_model("/tmp/run/model.keras")
    pixels = images.decode_center_crop(tf.io.read_file("cat.jpg"), size=64)  # as eval decodes
    classes = open("/tmp/run/classes.txt").read().splitlines()
    print(classes[int(tf.argmax(model(pixels[None])[0]))])

``evaluate(config, workdir)`` (the binary's ``--eval_only``) evaluates the newest checkpoint of
a workdir without training.

The pieces: ``run_config`` (fields and checks), ``build`` (techniques, model, optimizer and
``loop.Trainer`` from the config; ``echoing.techniques`` is everything that changes what reaches
the model), ``inputs`` (the per-input-pipeline datasets), ``loop.Trainer`` (the inner loop and
the one feedback channel), ``checkpointing`` (what a resumed run restores), ``controller`` (the
outer loop, and the checkpoint on Ctrl-C), ``diagnosis`` (R and ``--diagnose``) and ``summary``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shlex
import sys
from collections.abc import Sequence

import ml_collections
import tensorflow as tf

from echoing import meters as echo_meters
from echoing import techniques as technique_modules
from echoing._src.core.types import DatasetTransformation
from pipelines import sources
from trainers import (
    build,
    checkpointing,
    controller,
    data_summary,
    diagnosis,
    inputs,
    interrupts,
    label_maps,
    metrics_writer,
    strategies,
    workdir_config,
    workdir_lock,
)
from trainers.controller import RunInterrupted, TrainingDiverged
from trainers.diagnosis import diagnose, format_diagnosis
from trainers.inputs import padded_to_full_batches
from trainers.run_config import default_config, resolve_config
from trainers.summary import format_summary, make_summary, trained_model_line

__all__ = [
    "RunInterrupted",
    "TrainingDiverged",
    "default_config",
    "diagnose",
    "evaluate",
    "format_diagnosis",
    "format_evaluation",
    "format_summary",
    "padded_to_full_batches",
    "resolve_config",
    "run",
]

MODEL_FILENAME = "model.keras"
CLASSES_FILENAME = label_maps.CLASSES_FILENAME  # the class names, beside the model


def run(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    insertions: Sequence[tuple[str, str, DatasetTransformation]] = (),
) -> dict[str, object]:
    """Trains (or resumes) the run ``config`` describes in ``workdir``; returns the summary.

    An image folder's classes and images per class are printed first, on stderr.
    ``insertions`` are extra train-pipeline stages ``(point, name, transformation)`` a config
    cannot describe (see ``pipelines.make_datasets``), e.g. a user's own preprocessing; at the
    same point they run after echo and before the other techniques' stages.

    Returns:
      ``{"step", "eval_accuracy", "eval_loss", "eval_perplexity" (text only, else None),
      "trained_examples", "select_ratio" (None without in-batch selection),
      "fresh_examples_trained",
      "echo_ratio", "fresh_examples", "emitted_examples", "train_seconds", "target_accuracy",
      "steps_to_target", "seconds_to_target", "fresh_examples_to_target",
      "upstream_seconds_per_step", "downstream_seconds_per_step", "upstream_downstream_ratio",
      "skipped_corrupt_train", "skipped_corrupt_eval", "reopened_files"}``
      (see ``trainers.summary``; target/timing entries are None when not measured).

    Raises:
      ValueError / TypeError: a bad config (also a train split smaller than one batch), or a
        workdir holding an incompatible checkpoint; each message names the value and the fix.
      workdir_lock.WorkdirInUseError: another run is using ``workdir`` (the message names its
        process): wait for it to finish, or use another workdir.
    """
    config = resolve_config(config)
    if not isinstance(workdir, str) or not workdir:
        raise ValueError(f"workdir must be a non-empty path, got {workdir!r}.")
    # First: MultiWorkerMirroredStrategy configures the runtime's collectives when created.
    strategy = strategies.from_config(config)
    workdir = strategies.worker_directory(strategy, workdir)
    workdir_lock.make_workdir(workdir)
    # Before anything reads or rewrites the workdir (the checkpoint restore removes unfinished
    # saves, the metrics writer drops rows past the restored step): one run at a time.
    with workdir_lock.WorkdirLock(workdir), sources.loaded_once():
        return _run(config, workdir, strategy, insertions)


def _run(config, workdir: str, strategy, insertions) -> dict[str, object]:
    data_summary.check_data(config)
    changed = workdir_config.changes(config, workdir)
    user_stages = technique_modules.Stages(insertions)
    counts, read_stats = echo_meters.EchoMeters(), []
    trainer = build.build_trainer(
        config, strategy, counts, workdir, extra=[user_stages], read_stats=read_stats
    )
    techniques = trainer.techniques
    print(build.headline(config, techniques, workdir), file=sys.stderr)
    clock = controller.RunClock()
    read_in_python = any(split == "train" for split, _ in read_stats)
    try:
        manager = checkpointing.run_manager(
            config, workdir, trainer, techniques, counts, clock, train_read_in_python=read_in_python
        )
    except ValueError as error:  # the checkpoints do not fit: name the fields that changed
        summary = getattr(error, "summary", None)
        raise ValueError(
            workdir_config.failed_resume(str(error), changed, summary=summary)
        ) from None
    # Rows past the restored step (written before a kill) are dropped: no step is logged twice.
    start = int(trainer.step.numpy())
    with (
        contextlib.ExitStack() as cleanup,
        metrics_writer.MetricsWriter(workdir, start_step=start) as writer,
    ):
        for technique in techniques:
            # Stops the techniques' threads at the end, also when training raises.
            cleanup.enter_context(technique)
        # A fitting resume's warning, once its first loop trained (else the failure is said).
        warning, trained_on = None, None
        if start:
            warning = workdir_config.resume_warning(changed)
            trained_on = functools.partial(workdir_config.trained_on, config, workdir)
        notes = metrics_writer.NoteBeforeFirstRow(writer, warning, trained_on)
        outer = _outer_loop(config, trainer, counts, clock, manager, notes)
        try:
            step, evaluation = outer.run()
        except (tf.errors.InvalidArgumentError, tf.errors.InternalError) as error:
            if not (start and changed):
                raise
            # E.g. another batch size: the restored iterator's batches no longer fit the step;
            # another shuffle buffer: its checkpointed state no longer fits the pipeline.
            reason = f"the run resumed at step {start}: {checkpointing.error_line(error)}"
            raise ValueError(workdir_config.failed_resume(reason, changed)) from None
    # A finished run restarted: evaluate the restored model for the summary.
    evaluation = evaluation or trainer.evaluate()
    exported = _export(config, trainer.model, workdir)
    timings = _timings(config, strategy, user_stages)
    summary = make_summary(
        config, step, evaluation, counts, clock, timings, outer.fresh_trained(), read_stats
    )
    _report(summary, workdir, exported)
    return summary


def _timings(config, strategy, user_stages) -> dict[str, float]:
    """The summary's upstream/downstream seconds per step (``diagnosis.measure_ratio``); none
    when ``config.timing_steps`` is 0 or a signal asks the run to stop (in its last loop, or
    during the measurement: it then stops at once, as the outputs are already written)."""
    if not config.timing_steps:
        return {}
    try:
        with interrupts.raise_at_once():
            return diagnosis.measure_ratio(config, strategy, inputs.technique_stages([user_stages]))
    except KeyboardInterrupt:
        print(
            "Interrupted after training had finished: the run ends with its outputs, without "
            "the timing measurement (--config.timing_steps).",
            file=sys.stderr,
        )
        return {}


def _outer_loop(config, trainer, counts, clock, manager, writer) -> controller.Controller:
    return controller.Controller(
        controller.Schedule.from_run_config(config),
        trainer=trainer,
        techniques=trainer.techniques,
        counts=counts,
        clock=clock,
        manager=manager,
        writer=writer,
    )


def export_model(model, workdir: str) -> str:
    """Writes ``workdir/model.keras`` (``keras.models.load_model``) under a temporary name and
    renames it, so a kill leaves the previous version whole; returns its path."""
    path = os.path.join(workdir, MODEL_FILENAME)
    temporary = os.path.join(workdir, f"unfinished.{MODEL_FILENAME}")
    model.save(temporary)
    tf.io.gfile.rename(temporary, path, overwrite=True)
    return path


def _export(config, model, workdir: str) -> list[str]:
    """Writes ``workdir/model.keras`` and, for image folders, ``workdir/classes.txt``; returns
    their paths.

    Each file is written under a temporary name and renamed, so a kill leaves the previous
    version whole."""
    written = [export_model(model, workdir)]
    names = class_names(config)
    if names:
        path = os.path.join(workdir, CLASSES_FILENAME)
        with tf.io.gfile.GFile(path + ".unfinished", "w") as file:
            file.write("".join(f"{name}\n" for name in names))
        tf.io.gfile.rename(path + ".unfinished", path, overwrite=True)
        written.append(path)
    return written


def class_names(config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """The class names of ``config``'s data (label ``i`` is the ``i``-th), or ``()`` for sources
    without names (arrays, MNIST-1D, TFRecords, text). ``config`` must be resolved; inside a run
    the source is the one the run loaded."""
    return tuple(getattr(sources.load(config.data), "class_names", ()))


def evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, object]:
    """Evaluates the newest checkpoint in ``workdir`` on ``config``'s eval split, without training.

    Restores only the model (and step) of the checkpoint a run of ``config`` wrote, so the eval
    data may differ from the training run's (e.g. another ``data.image_dir`` with the same
    classes). Reads the workdir and writes nothing, so it can run beside the training run.

    Example::

        result = experiment.evaluate(config, "/tmp/run")
        print(experiment.format_evaluation(result))  # step 600 (...): eval accuracy 0.9...

    Returns:
      ``{"step", "checkpoint", "eval_accuracy", "eval_loss", "eval_perplexity" (text only, else
      None), "eval_examples"}``.

    Raises:
      ValueError: a bad config; ``workdir`` holds no checkpoint (train first with the same
        ``--config`` and ``--workdir``); or its checkpoint was written by another model; or
        the data's class names or vocabulary differ from the workdir's (``label_maps``).
    """
    config = resolve_config(config)
    if not isinstance(workdir, str) or not workdir:
        raise ValueError(f"workdir must be a non-empty path, got {workdir!r}.")
    strategy = strategies.from_config(config)
    directory = os.path.join(strategies.worker_directory(strategy, workdir), "checkpoints")
    if tf.train.latest_checkpoint(directory) is None:
        raise ValueError(
            f"the workdir {workdir} holds no checkpoint to evaluate (none in {directory}): "
            "train first with the same --config and --workdir, or pass the --workdir of a run "
            "that saved one."
        )
    with sources.loaded_once():
        trainer = build.build_trainer(
            config,
            strategy,
            echo_meters.EchoMeters(),
            workdir=None,
            restores_from=workdir,
            trains=False,
        )
        checkpoint = tf.train.Checkpoint(model=trainer.model, step=trainer.step)
        manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=None)
        try:
            path = checkpointing.restore_latest(manager, partial=True)
        except checkpointing.CheckpointRestoreError as error:  # name what config.json changed
            differences = workdir_config.changes(config, workdir)
            explanation = workdir_config.explain(differences, evaluating=True)
            what = f"{explanation} What failed: {error}" if explanation else str(error)
            raise checkpointing.CheckpointRestoreError(what) from None
        note = workdir_config.evaluation_note(workdir_config.changes(config, workdir))
        if note:
            print(note, file=sys.stderr)
        evaluation = trainer.evaluate()
    loss = evaluation["eval_loss"]
    return {
        "step": int(trainer.step.numpy()),
        "checkpoint": path,
        "eval_accuracy": evaluation["eval_accuracy"],
        "eval_loss": loss,
        "eval_perplexity": math.exp(min(loss, 700.0)) if config.data.source == "text" else None,
        "eval_examples": int(evaluation["eval_examples"]),
    }


def format_evaluation(result: dict[str, object]) -> str:
    """``evaluate``'s result as one line."""
    perplexity = result.get("eval_perplexity")
    return (
        f"step {result['step']} ({result['checkpoint']}): eval accuracy "
        f"{result['eval_accuracy']:.4f} (loss {result['eval_loss']:.4f}"
        + (f", perplexity {perplexity:.1f}" if perplexity is not None else "")
        # A language model's evaluation counts the tokens it predicted, not lines.
        + f") on {result['eval_examples']} {'tokens' if perplexity is not None else 'examples'}"
    )


def _report(summary: dict[str, object], workdir: str, exported: Sequence[str]) -> None:
    """Writes ``workdir/summary.json``; prints the human-readable summary, what the run leaves
    and the command that opens its TensorBoard summaries."""
    with tf.io.gfile.GFile(os.path.join(workdir, "summary.json"), "w") as file:
        file.write(json.dumps(summary, indent=2) + "\n")
    print(format_summary(summary))
    model, *names = exported
    print(trained_model_line(model, names))
    # TensorBoard finds the event files (workdir/tensorboard) below the workdir.
    print(f"tensorboard --logdir={shlex.quote(workdir)}")
