"""One training run from a config: the composition of data, techniques, model, loop and outer loop.

Example::

    from trainers import experiment

    config = experiment.default_config()
    config.data.num_train, config.data.num_eval = 1_000, 200
    config.num_steps, config.steps_per_loop, config.eval_every_steps = 20, 10, 10
    summary = experiment.run(config, workdir="/tmp/run")
    print(summary["eval_accuracy"], summary["fresh_examples"])

``python -m trainers.train --config=configs/mnist1d.py --workdir=DIR`` is this function behind
absl flags. A run writes into ``workdir``: ``checkpoints/`` (model, optimizer, step, echo meters,
run clock, every technique's state and, when ``checkpoint_iterator``, the input iterator),
``metrics.jsonl`` and ``tensorboard/`` (see ``metrics_writer``), and ``summary.json`` (what
``run`` returns). Running again with the same workdir resumes from the newest checkpoint.

The pieces: ``run_config`` (fields and checks), ``echoing.techniques`` (everything that changes
what reaches the model, built from the config), ``inputs`` (the per-input-pipeline datasets),
``loop.Trainer`` (the inner loop and the one feedback channel), ``controller`` (the outer loop),
``diagnosis`` (R and ``--diagnose``) and ``summary``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Sequence

import keras
import ml_collections
import tensorflow as tf

import pipelines
from echoing import meters as echo_meters
from echoing import techniques as technique_modules
from echoing.types import DatasetTransformation
from trainers import (
    checkpointing,
    controller,
    diagnosis,
    inputs,
    loop,
    metrics_writer,
    models,
    optimizers,
    strategies,
)
from trainers.diagnosis import diagnose, format_diagnosis
from trainers.inputs import padded_to_full_batches
from trainers.run_config import default_config, resolve_config
from trainers.summary import format_summary, make_summary

__all__ = [
    "RunInterrupted",
    "default_config",
    "diagnose",
    "format_diagnosis",
    "format_summary",
    "padded_to_full_batches",
    "resolve_config",
    "run",
]


def run(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    insertions: Sequence[tuple[str, str, DatasetTransformation]] = (),
) -> dict[str, object]:
    """Trains (or resumes) the run ``config`` describes in ``workdir``; returns the summary.

    ``insertions`` are extra train-pipeline stages ``(point, name, transformation)`` a config
    cannot describe (see ``pipelines.make_datasets``), e.g. a user's own preprocessing; at the
    same point they run after echo and before the other techniques' stages.

    Returns:
      ``{"step", "eval_accuracy", "eval_loss", "eval_perplexity" (text only, else None),
      "trained_examples", "fresh_examples_trained",
      "echo_ratio", "fresh_examples", "emitted_examples", "train_seconds", "target_accuracy",
      "steps_to_target", "seconds_to_target", "fresh_examples_to_target",
      "upstream_seconds_per_step", "downstream_seconds_per_step", "upstream_downstream_ratio"}``
      (see ``trainers.summary``; target/timing entries are None when not measured).

    Raises:
      ValueError / TypeError: a bad config, or a workdir holding an incompatible checkpoint.
    """
    config = resolve_config(config)
    if not isinstance(workdir, str) or not workdir:
        raise ValueError(f"workdir must be a non-empty path, got {workdir!r}.")
    # First: MultiWorkerMirroredStrategy configures the runtime's collectives when created.
    strategy = strategies.from_config(config)
    workdir = strategies.worker_directory(strategy, workdir)
    tf.io.gfile.makedirs(workdir)
    user_stages = technique_modules.Stages(insertions)
    counts = echo_meters.EchoMeters()
    trainer = _build_trainer(config, strategy, counts, user_stages, workdir)
    techniques = trainer.techniques
    print(_headline(config, techniques, workdir), file=sys.stderr)
    clock = controller.RunClock()
    manager = _checkpoint_manager(config, workdir, trainer, techniques, counts, clock)
    # Rows past the restored step (written before a kill) are dropped: no step is logged twice.
    start = int(trainer.step.numpy())
    with (
        contextlib.ExitStack() as cleanup,
        metrics_writer.MetricsWriter(workdir, start_step=start) as writer,
    ):
        for technique in techniques:
            # Stops the techniques' threads at the end, also when training raises.
            cleanup.enter_context(technique)
        outer = _outer_loop(config, trainer, counts, clock, manager, writer)
        step, evaluation = _train_or_save(outer, trainer, manager)
    # A finished run restarted: evaluate the restored model for the summary.
    evaluation = evaluation or trainer.evaluate()
    timings = {}
    if config.timing_steps:
        timings = diagnosis.measure_ratio(config, strategy, inputs.technique_stages([user_stages]))
    summary = make_summary(config, step, evaluation, counts, clock, timings, outer.fresh_trained())
    _report(summary, workdir)
    return summary


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


def _report(summary: dict[str, object], workdir: str) -> None:
    """Writes ``workdir/summary.json`` and prints the human-readable summary."""
    with tf.io.gfile.GFile(os.path.join(workdir, "summary.json"), "w") as file:
        file.write(json.dumps(summary, indent=2) + "\n")
    print(format_summary(summary))


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or the binary's SIGTERM) stopped training; a checkpoint of ``step`` was saved.

    A ``KeyboardInterrupt``, so code that handles those still does; re-running the same
    command with the same workdir resumes from ``checkpoint``.
    """

    def __init__(self, step: int, checkpoint: str | None):
        super().__init__(f"interrupted at step {step}; saved {checkpoint}")
        self.step, self.checkpoint = step, checkpoint


def _train_or_save(outer, trainer, manager):
    """``outer.run()``; on KeyboardInterrupt, a checkpoint of the step reached, then
    ``RunInterrupted``."""
    try:
        return outer.run()
    except KeyboardInterrupt as interrupt:
        # An interrupt arrives between TF calls: model, optimizer and step agree at this point.
        step = int(trainer.step.numpy())
        latest = manager.latest_checkpoint
        if latest is None or not latest.endswith(f"-{step}"):
            latest = manager.save(checkpoint_number=step)
        raise RunInterrupted(step, latest) from interrupt


def _build_trainer(config, strategy, counts, user_stages, workdir) -> loop.Trainer:
    """The run's techniques, model, optimizer and ``Trainer``, in the order seeds expect; a
    text run's vocabulary is copied to ``workdir/vocab.txt``, beside the model it trains."""
    # Shapes and classes for the model, and the data prepared (generated on first use) before
    # seeding: generation draws from the global generators, and a run must initialise its
    # Assistant and model as a run that finds the data cached does. The pipelines that train
    # are built per input pipeline (host/worker) by the dataset functions.
    datasets = inputs.make_datasets(config)
    if datasets.vocab_file:
        tf.io.gfile.copy(datasets.vocab_file, os.path.join(workdir, "vocab.txt"), overwrite=True)
    keras.utils.set_random_seed(config.seed)
    # Host state (meters, technique tables and filters) lives outside the strategy scope.
    techniques = technique_modules.from_config(
        _technique_context(config, strategy), extra=[user_stages]
    )
    with strategy.scope():
        model = models.build_model(config.model, datasets.input_shape, datasets.num_classes)
        optimizer = optimizers.make_optimizer(config, progress=_run_progress(techniques))
        for technique in techniques:
            technique.build(model)
    train_dataset_fn, eval_dataset_fn = inputs.dataset_fns(config, techniques, counts)
    return loop.Trainer(
        model=model,
        optimizer=optimizer,
        train_dataset_fn=train_dataset_fn,
        eval_dataset_fn=eval_dataset_fn,
        strategy=strategy,
        techniques=techniques,
        jit_compile=config.jit_compile,
    )


def _headline(config, techniques, workdir: str) -> str:
    """One line saying what this run trains, on what, for how long, and where it writes."""
    data = config.data.name or config.data.source
    used = ", ".join(technique.name for technique in techniques if technique.name != "stages")
    return (
        f"Training {config.model} on {data} (batch {config.data.batch_size}) for "
        f"{config.num_steps} steps under the {config.strategy} strategy"
        f"{f' with {used}' if used else ''}; writing to {workdir}"
    )


def _run_progress(techniques):
    """The fraction of the run done, for a run a technique measures in its own units (epochs
    for pruning), or None for a run measured in steps."""
    measured = [technique for technique in techniques if technique.progress() is not None]
    if not measured:
        return None
    return lambda: tf.reduce_max([technique.progress() for technique in measured])


def _technique_context(config, strategy) -> technique_modules.Context:
    return technique_modules.Context(
        config=config,
        stage_seed=lambda stage: pipelines.stage_seed(config.seed, stage),
        num_input_pipelines=strategies.num_input_pipelines(strategy),
        examples=lambda: pipelines.examples_by_id(config.data),
        num_examples=lambda: pipelines.num_train_examples(config.data),
    )


def _checkpoint_manager(config, workdir, trainer, techniques, counts, clock):
    """A manager over everything a resumed run needs, restored from the newest checkpoint."""
    objects = dict(
        model=trainer.model,
        optimizer=trainer.optimizer,
        step=trainer.step,
        meters=counts,
        clock=clock,
    )
    for technique in techniques:
        objects.update(technique.checkpointed())
    if config.checkpoint_iterator:
        if isinstance(trainer.iterator, tf.__internal__.tracking.Trackable):
            objects["iterator"] = trainer.iterator
        else:
            # tf.distribute's multi-device iterators (e.g. MirroredStrategy's) cannot be saved.
            print(
                f"Not checkpointing the input iterator: {type(trainer.iterator).__name__} under "
                f"{type(trainer.strategy).__name__} is not saveable; a resumed run restarts the "
                "input stream (model, optimizer, step and meters are still restored).",
                file=sys.stderr,
            )
    manager = checkpointing.make_manager(
        os.path.join(workdir, "checkpoints"),
        max_to_keep=config.max_checkpoints_to_keep,
        **objects,
    )
    restored = checkpointing.restore_latest(manager)
    if restored:
        print(f"Resumed from {restored} at step {int(trainer.step.numpy())}.", file=sys.stderr)
    return manager
