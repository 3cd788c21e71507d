"""One asynchronous partitioned run (ASSM / PASSM / PASSM+) from a ``configs/passm.py`` config.

Example::

    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/passm

    from trainers.passm import experiment
    result = experiment.train_and_evaluate(config, "/tmp/passm")  # config: passm.py's

``mode`` in assm/passm/passm_plus trains asynchronously on the backend ``config.backend`` names
(`trainers.passm.backend`): by default shared memory on one host (c worker threads over one
model, `trainers.passm.SharedMemoryTrainer`), a ``ParameterServerStrategy`` cluster when
``config.cluster_spec`` names one (or ``backend = "parameter_server"``: a loopback cluster started
here). Under a synchronous strategy (``strategy = "default"`` / ``"mirrored"``, or one passed in)
the run logs a warning and trains synchronously (same momentum update, same steps and
learning-rate decays). The outer loop is ``trainers.controller``'s, and the data path
``pipelines.make_datasets``, as for every run: the arrays ``pipelines.sources.generated`` makes
(in the dataset graph, so workers need no filesystem), one seeded stream dealt out among the
workers (`train_dataset_fn`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sys
from typing import Any

import keras
import ml_collections
import tensorflow as tf
from absl import logging

import pipelines
from pipelines.sources import generated
from trainers import (
    checkpointing,
    experiment,
    models,
    passm,
    strategies,
    workdir_config,
    workdir_lock,
)
from trainers.passm import config as passm_config
from trainers.passm import parameter_server
from trainers.passm import schedule as passm_schedule

# Strategies the asynchronous trainer runs under (the synchronous ones as a fallback).
STRATEGIES = ("parameter_server", "default", "mirrored")
RESULT_FILENAME = "result.json"


def train_and_evaluate(
    config, workdir: str | None, strategy: tf.distribute.Strategy | None = None
) -> dict[str, Any]:
    """Runs ``config`` (see ``configs/passm.py``) under ``strategy`` (default: the config's).

    Returns `trainers.passm.phased.PhasedTrainer.run`'s dict (with the shared-memory backend, also
    the model-wide ``staleness_mean`` / ``staleness_max`` of `trainers.passm.UpdateMeter`) plus
    ``mode`` (the mode actually run), ``requested_mode``, ``backend`` (``shared_memory``,
    ``parameter_server`` or ``synchronous``), ``strategy``, ``num_workers`` and ``phases``;
    writes it to ``workdir/result.json`` when ``workdir`` is set, with ``model_path``: the
    trained model, ``workdir/model.keras``. The config is saved as ``workdir/config.json``
    when a workdir starts (``trainers.workdir_config``). A resumed run's result is the whole
    run's (its history and training time are checkpointed), so rerunning a finished run
    reports it again, with the restored model's accuracy.

    Raises:
      checkpointing.CheckpointRestoreError: the workdir's checkpoint does not fit this config
        (another model or ``num_workers``); the message names the fields that changed.
    """
    config = passm_config.flat_view(config)
    # One run per workdir, checked first: a second run would interleave metrics and delete the
    # first's saves, and is refused before any cluster starts.
    with workdir_lock.WorkdirLock(workdir) if workdir else contextlib.nullcontext():
        return _train_and_evaluate(config, workdir, strategy)


def _train_and_evaluate(config, workdir, strategy) -> dict[str, Any]:
    _check_mode(config, strategy)
    backend = passm.resolve_backend(config, strategy)
    _check_weight_prediction(config, backend)
    if backend != "shared_memory" and strategy is None:
        strategy = strategies.from_config(config)
    mode = config.mode
    if mode != "sync" and backend == passm.backend.SYNCHRONOUS:
        logging.warning(
            "mode=%s needs asynchronous updates (the shared-memory backend on one host, or a "
            "ParameterServerStrategy); %s is synchronous, so training falls back to synchronous "
            "SGD with momentum (mode=sync, same steps and learning-rate decays).",
            mode,
            type(strategy).__name__,
        )
        mode = "sync"
    data = data_config(config)
    num_workers = 1 if backend == passm.backend.SYNCHRONOUS else config.num_workers
    trainer = _make_trainer(config, strategy, data, num_workers, backend)
    phases = _phases(config, mode, num_workers)
    # Once the config passed its checks (a refused one is not recorded), before the restore.
    changed = workdir_config.changes(config, workdir) if workdir else []
    changed = passm_config.as_run_config_names(changed)
    if workdir:
        print(_headline(config, mode, backend, num_workers, workdir), file=sys.stderr)
    try:
        result = trainer.run(
            train_dataset_fn(data, seed=config.seed, num_workers=num_workers),
            phases,
            eval_every=config.eval_every,
            evaluate=make_evaluate(data, seed=config.seed),
            workdir=workdir,
            target_accuracy=config.get("target_accuracy"),
            resume_warning=workdir_config.resume_warning(changed),
            resumed_trained=functools.partial(
                workdir_config.trained_on, config, workdir, passm_config.as_run_config_names
            ),
            progress_bar=bool(config.get("progress_bar", False)),
        )
    except checkpointing.CheckpointRestoreError as error:  # name the fields that changed
        message = workdir_config.failed_resume(str(error), changed, summary=error.summary)
        raise checkpointing.CheckpointRestoreError(message) from None
    result.update(
        mode=mode,
        requested_mode=config.mode,
        backend=backend,
        # Shared-memory workers are threads of this process, under no tf.distribute strategy.
        strategy=None if backend == "shared_memory" else type(trainer.strategy).__name__,
        num_workers=num_workers,
        phases=[dataclasses.asdict(p) for p in phases],
    )
    if workdir:
        # What a finished synchronous run leaves too: the model for keras.models.load_model.
        result["model_path"] = experiment.export_model(trainer.model, workdir)
        _write_result(result, workdir)
    return result


def _headline(config, mode: str, backend: str, num_workers: int, workdir: str) -> str:
    """One line saying what the run trains, how, for how long and where it writes."""
    return (
        f"Training {config.model} on {config.dataset} with {mode} ({num_workers} worker"
        f"{'s' if num_workers != 1 else ''}, {backend} backend; batch {config.batch_size} per "
        f"step) for {config.num_steps} steps; writing to {workdir}"
    )


def _write_result(result: dict[str, Any], workdir: str) -> None:
    """Writes ``workdir/result.json`` under a temporary name and renames it, so a kill leaves
    the previous result whole."""
    path = os.path.join(workdir, RESULT_FILENAME)
    with open(path + ".unfinished", "w") as output:
        json.dump(result, output, indent=1)
    os.replace(path + ".unfinished", path)


def _check_mode(config, strategy) -> None:
    """Checks the strategy and mode names before any cluster starts."""
    if strategy is None and config.strategy not in STRATEGIES:
        raise ValueError(f"config.strategy must be one of {STRATEGIES}, got {config.strategy!r}.")
    if config.mode not in passm_schedule.MODES:
        raise ValueError(
            f"config.passm.mode must be one of {passm_schedule.MODES}, got {config.mode!r}."
        )
    workers = config.num_workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(
            f"config.passm.num_workers must be an int >= 1, got {workers!r}; e.g. "
            "--config.passm.num_workers=2."
        )
    _check_dataset_and_model(config)
    if strategy is None:
        is_ps = config.strategy == "parameter_server"
    else:
        is_ps = isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)
    if config.mode == "sync" and is_ps:
        raise ValueError(
            "passm.mode='sync' with a ParameterServerStrategy: parameter-server training is "
            "asynchronous; use passm.mode='assm' for full-gradient async steps, or "
            "strategy='default' / 'mirrored' for synchronous SGD."
        )


# The models each generated data set fits: 1-D signals, or 32×32 images.
_MODELS_FOR = {
    "mnist1d": ("mnist1d_mlp", "mnist1d_cnn"),
    "generated_images": ("resnet_small", "resnet_imagenet_tiny"),
}


def _check_dataset_and_model(config) -> None:
    """Names ``passm.dataset`` and ``model`` as flags when either cannot train, before the
    model is built or the data generated."""
    if config.dataset not in generated.NAMES:
        raise ValueError(
            f"config passm.dataset={config.dataset!r}: the asynchronous trainer trains on a "
            f"generated data set, one of {list(generated.NAMES)}; set --config.passm.dataset="
            f"{generated.NAMES[0]} (e.g. with configs/passm.py) or {generated.NAMES[1]} "
            "(configs/passm.py:resnet)."
        )
    fitting = _MODELS_FOR[config.dataset]
    if config.model not in fitting:
        raise ValueError(
            f"config model={config.model!r} does not fit passm.dataset={config.dataset!r}; set "
            f"--config.model to {' or '.join(fitting)}, or --config.passm.dataset to the data "
            "it takes."
        )


def _check_weight_prediction(config, backend: str) -> None:
    """``passm.weight_prediction`` is a bool; a backend that cannot predict says it trains without.

    On by default (the setting that reaches synchronous accuracy in
    docs/studies/async_partitioned.md), so a run on another backend warns rather than refuses:
    its momentum is not per worker (parameter server) or it is synchronous (nothing is stale)."""
    predict = config.get("weight_prediction", False)
    if not isinstance(predict, bool):
        raise ValueError(
            f"config.passm.weight_prediction must be True or False, got {predict!r}; set "
            "--config.passm.weight_prediction=true (or false)."
        )
    if predict and backend != "shared_memory":
        config.weight_prediction = False
        if backend == passm.backend.SYNCHRONOUS:
            return  # nothing is stale to predict; the fallback to synchronous SGD is logged
        logging.warning(
            "config.passm.weight_prediction applies to the shared-memory backend only, and this "
            "run trains on %r: it trains without weight prediction (set "
            "--config.passm.weight_prediction=false to say so and silence this).",
            backend,
        )


def _make_trainer(config, strategy, data, num_workers: int, backend: str):
    input_shape = data.train_arrays.inputs.shape[1:]

    def model_fn() -> keras.Model:
        keras.utils.set_random_seed(config.seed)
        return models.build_model(config.model, input_shape, data.num_classes)

    if num_workers > 1:  # one worker takes the whole model: no model built just to count
        _check_blocks(config, len(model_fn().trainable_variables), num_workers)
    if backend == "shared_memory":
        return passm.SharedMemoryTrainer(
            model_fn,
            num_workers=num_workers,
            momentum=config.momentum,
            steps_per_call=config.steps_per_closure,
            weight_prediction=config.get("weight_prediction", False),
        )
    if backend == "parameter_server":
        return parameter_server.AsyncPartitionedTrainer(
            strategy,
            model_fn,
            num_workers=num_workers,
            momentum=config.momentum,
            steps_per_closure=config.steps_per_closure,
        )
    return parameter_server.SynchronousTrainer(strategy, model_fn, momentum=config.momentum)


def _check_blocks(config, num_variables: int, num_workers: int) -> None:
    """PASSM gives each worker a block of whole variables: at most one worker per variable."""
    if num_workers > num_variables:
        raise ValueError(
            f"config passm.num_workers={num_workers}: PASSM splits the model's variables into "
            f"one block per worker, and {config.model} has {num_variables}; use at most "
            f"{num_variables} workers (--config.passm.num_workers={num_variables}) or a model "
            "with more variables."
        )


def _phases(config, mode: str, num_workers: int) -> list[passm_schedule.Phase]:
    return passm_schedule.make_schedule(
        mode,
        num_steps=config.num_steps,
        num_workers=max(num_workers, 2) if mode == "passm_plus" else num_workers,
        learning_rate=config.learning_rate,
        decay_fractions=tuple(config.decay_fractions),
        decay_factor=config.decay_factor,
        assm_warmup_fraction=config.assm_warmup_fraction,
        assm_window_fraction=config.assm_window_fraction,
    )


def data_config(config) -> ml_collections.ConfigDict:
    """The run's data through the one data path (``pipelines.make_datasets``): in-memory arrays
    (``pipelines.sources.generated``), fully shuffled, no augmentation."""
    config = passm_config.flat_view(config)
    data = pipelines.default_data_config()
    data.source, data.augment = "arrays", "none"
    data.train_arrays, data.eval_arrays = generated.arrays(
        config.dataset, num_train=config.num_train, num_eval=config.num_eval, seed=config.data_seed
    )
    data.num_classes = generated.NUM_CLASSES
    data.batch_size = config.batch_size
    data.shuffle_buffer = config.num_train
    data.prefetch = 2
    return data


def train_dataset_fn(data: ml_collections.ConfigDict, *, seed: int, num_workers: int):
    """``dataset_fn(worker_index)``: the train pipeline as ``(inputs, label)`` batches.

    The c workers split one seeded stream (the synchronous run's order): worker w reads its
    elements w, w + c, w + 2c, ... (``Dataset.shard`` after the shuffle and repeat), as the paper's
    processes draw non-overlapping samples of one permutation per epoch. So concurrent steps see
    different examples, the c workers together see each example once per epoch, as synchronous
    SGD does, and each worker still sees every example over the epochs (each epoch's shuffle
    deals it to a worker afresh): PASSM never gives a block only a fixed shard of the data.
    (Reading the one stream from c offsets instead would have every worker read the same order,
    shifted: together they would see each example twice per epoch of the stream.)
    """

    def dataset_fn(worker_index: tf.Tensor) -> tf.data.Dataset:
        insertions = []
        if num_workers > 1:
            index = tf.cast(worker_index, tf.int64)
            split = lambda dataset: dataset.shard(num_workers, index)  # noqa: E731
            insertions.append(("after_read", "worker_shard", split))
        train = pipelines.make_datasets(data, seed=seed, insertions=insertions).train
        return train.map(lambda batch: (batch["inputs"], batch["label"]))

    return dataset_fn


def make_evaluate(data: ml_collections.ConfigDict, *, seed: int):
    """``evaluate(model)``: accuracy on the eval split, run where it is called."""
    dataset = pipelines.make_datasets(data, seed=seed).eval

    def evaluate(model: keras.Model) -> float:
        correct = total = 0
        for batch in dataset:
            logits = model(batch["inputs"], training=False)
            predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
            labels = tf.cast(batch["label"], tf.int32)
            correct += int(tf.reduce_sum(tf.cast(predictions == labels, tf.int32)))
            total += int(tf.size(labels))
        return correct / total

    return evaluate
