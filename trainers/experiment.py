"""One training run from a config: data, model, loop, checkpoints, metrics, final summary.

Example::

    from trainers import experiment

    config = experiment.default_config()
    config.data.num_train, config.data.num_eval = 1_000, 200
    config.num_steps, config.steps_per_loop, config.eval_every_steps = 20, 10, 10
    summary = experiment.run(config, workdir="/tmp/run")
    print(summary["eval_accuracy"], summary["fresh_examples"])

``python -m trainers.train --config=configs/mnist1d.py --workdir=DIR`` is this function behind
absl flags. A run writes into ``workdir``: ``checkpoints/`` (model, optimizer, step, echo meters,
run clock and, when ``checkpoint_iterator``, the input iterator), ``metrics.jsonl`` and
``tensorboard/`` (see ``metrics_writer``), and ``summary.json`` (what ``run`` returns). Running
again with the same workdir resumes from the newest checkpoint.

R (upstream vs downstream time per step) is measured at the end, apart from training: t_up is
the time per batch of the train pipeline alone with echo switched off, t_down the time per train
step of a fresh copy of the model on one cached batch (``timing``), ``timing_steps`` steps each.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence

import keras
import ml_collections
import numpy as np
import tensorflow as tf
import tqdm
from ml_collections import config_dict

import echoing
import pipelines
from echoing import meters as echo_meters
from echoing.priority_distributed import distributed_priority_sample
from echoing.priority_shards import ShardedPriorityTable
from echoing.types import DatasetTransformation
from pipelines import sources
from trainers import checkpointing, loop, metrics_writer, models, strategies, timing

# Strategies experiment.run trains under; "parameter_server" runs trainers.async_partitioned
# (the binary routes it there), so the custom loop refuses it with directions.
STRATEGIES = strategies.SYNCHRONOUS


def default_config() -> ml_collections.ConfigDict:
    """Every field ``run`` reads, at its default (the MNIST-1D CNN baseline)."""
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.data = pipelines.default_data_config()
    # None-valued fields become typed placeholders, so `--config.data.data_dir=DIR` and friends
    # can be set from the command line (config_flags cannot override a plain None).
    for key, kind in (("data_dir", str), ("num_classes", int), ("image_size", int)):
        if config.data[key] is None:
            config.data[key] = config_dict.placeholder(kind)
    config.model = "mnist1d_cnn"
    # AdamW with linear warm-up then cosine decay to 0 over num_steps.
    config.learning_rate = 3e-3
    config.weight_decay = 1e-4
    config.warmup_steps = 100
    config.num_steps = 600
    # Train steps per tf.function call (and per progress/feedback update).
    config.steps_per_loop = 100
    config.eval_every_steps = 200
    # > 0: also evaluate after each inner loop in which the fresh examples training has consumed
    # (batch_size / echo factor per step, counted from the start of the process) cross a
    # multiple of this. With a changing echo factor (AutoEcho) steps are no fixed measure of
    # fresh data; this judges runs at the same fresh-data granularity.
    config.eval_every_fresh_examples = 0
    config.checkpoint_every_steps = 200
    config.max_checkpoints_to_keep = 2
    # Save the tf.data iterator's position (and shuffle buffers) in checkpoints, so a resumed
    # run continues the same stream; set False for pipelines tf.data cannot serialise.
    config.checkpoint_iterator = True
    # Accuracy whose first crossing (at an eval) is reported as steps/time/fresh examples;
    # 0 means no target.
    config.target_accuracy = 0.0
    # True ends training at that first crossing (benchmarks of time to target stop there).
    config.stop_at_target = False
    # default | mirrored | multi_worker | tpu (python -m trainers.train --strategy=... overrides).
    config.strategy = "default"
    # multi_worker: every worker's host:port, comma-separated, the same in every worker, and this
    # process's index in it; empty takes the cluster from TF_CONFIG (one local worker without).
    config.workers = ""
    config.task_index = 0
    # tpu: "local" on a Cloud TPU VM, a TPU name or grpc://host:port; empty reads TPU_NAME.
    config.tpu = ""
    # XLA-compile every train and eval step; unset means True under "tpu", False otherwise.
    config.jit_compile = config_dict.placeholder(bool)
    # Steps (each side) for the t_up / t_down measurement at the end; 0 skips it.
    config.timing_steps = 30
    config.progress_bar = True
    # AutoAssist: an Assistant filter after augmentation keeps each example with probability
    # base_prob + (1 - base_prob)·g(x, y); a background learner trains g from every inner loop's
    # per-example losses. reweight attaches sample_weight = 1 / keep probability.
    config.assist = False
    config.assist_base_prob = 0.3
    config.assist_reweight = False
    # False trains the Assistant inside each feedback call (the paper's "sequential" mode).
    config.assist_asynchronous = True
    # Prioritized gradient descent: batches of the train split (held in memory, no augmentation
    # or echo) chosen from a PriorityTable: top_ratio top-k priorities, renew_ratio round-robin.
    config.pgd = False
    config.pgd_top_ratio = 0.1
    config.pgd_renew_ratio = 0.9
    # > 0: an AutoEcho stage at data.echo_insert moves the echo factor within [1, this] after
    # every inner loop (steps_per_loop steps) from the input wait measured in it (needs
    # data.echo = 1).
    config.auto_echo_max_factor = 0.0
    # Train steps (and batches per timing) of `python -m trainers.train --diagnose`.
    config.diagnose_steps = 300
    return config


def resolve_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Checks ``config`` against ``default_config()``: unknown keys and bad values raise.

    The data section is checked by ``pipelines.resolve_data_config``.

    Raises:
      TypeError: ``config`` is not a ConfigDict.
      ValueError: an unknown key or an out-of-range value, naming the key and what is expected.
    """
    if not isinstance(config, ml_collections.ConfigDict):
        raise TypeError(
            f"config must be an ml_collections.ConfigDict, got {type(config).__name__}; start "
            "from trainers.experiment.default_config()."
        )
    defaults = default_config()
    unknown = sorted(set(config.keys()) - set(defaults.keys()))
    if unknown:
        raise ValueError(
            f"unknown config key(s) {unknown}; valid keys are {sorted(defaults.keys())}."
        )
    # A fresh ConfigDict rather than an update of the defaults: ConfigDict's type locking would
    # otherwise reject some values with a less helpful message than the checks below.
    given = config.to_dict()
    data = pipelines.resolve_data_config(given.pop("data", defaults.data))
    resolved = ml_collections.ConfigDict({**defaults.to_dict(), **given, "data": data.to_dict()})
    for key in ("num_steps", "steps_per_loop", "eval_every_steps", "checkpoint_every_steps"):
        _check_int(key, resolved[key], minimum=1)
    _check_int("max_checkpoints_to_keep", resolved.max_checkpoints_to_keep, minimum=1)
    _check_int("warmup_steps", resolved.warmup_steps, minimum=0)
    _check_int("timing_steps", resolved.timing_steps, minimum=0)
    _check_int("eval_every_fresh_examples", resolved.eval_every_fresh_examples, minimum=0)
    _check_int("seed", resolved.seed, minimum=0)
    if resolved.warmup_steps >= resolved.num_steps:
        raise ValueError(
            f"config warmup_steps={resolved.warmup_steps} must be < num_steps={resolved.num_steps}."
        )
    if not isinstance(resolved.learning_rate, float) or not resolved.learning_rate > 0:
        raise ValueError(
            f"config learning_rate must be a float > 0, got {resolved.learning_rate!r}."
        )
    if not isinstance(resolved.weight_decay, float) or resolved.weight_decay < 0:
        raise ValueError(
            f"config weight_decay must be a float >= 0, got {resolved.weight_decay!r}."
        )
    if not isinstance(resolved.target_accuracy, float) or not 0 <= resolved.target_accuracy <= 1:
        raise ValueError(
            f"config target_accuracy must be a float in [0, 1] (0 = none), got "
            f"{resolved.target_accuracy!r}."
        )
    if resolved.strategy == "parameter_server":
        raise ValueError(
            "config strategy='parameter_server' runs the asynchronous partitioned trainer, not "
            "this loop: use `python -m trainers.train --strategy=parameter_server "
            "--config=configs/passm.py` (a config with a `mode`), or strategy='multi_worker' for "
            "synchronous data parallelism over several workers."
        )
    if resolved.strategy not in STRATEGIES:
        raise ValueError(
            f"config strategy must be one of {list(STRATEGIES)}, got {resolved.strategy!r}."
        )
    if resolved.jit_compile is None:
        resolved.jit_compile = resolved.strategy == "tpu"
    if not isinstance(resolved.jit_compile, bool):
        raise TypeError(
            f"config jit_compile must be True, False or unset, got {resolved.jit_compile!r}."
        )
    for key in ("workers", "tpu"):
        if not isinstance(resolved[key], str):
            raise TypeError(f"config {key} must be a string, got {resolved[key]!r}.")
    _check_int("task_index", resolved.task_index, minimum=0)
    if resolved.pgd and resolved.strategy == "tpu":
        raise ValueError(
            "config pgd=True with strategy='tpu': priorities are written into a host-memory "
            "table after each step, and a TPU step (compiled whole) cannot run those host ops. "
            "Use strategy='default', 'mirrored' or 'multi_worker' for pgd."
        )
    _check_int("diagnose_steps", resolved.diagnose_steps, minimum=1)
    for key in ("assist", "assist_reweight", "assist_asynchronous", "pgd"):
        if not isinstance(resolved[key], bool):
            raise TypeError(f"config {key} must be True or False, got {resolved[key]!r}.")
    for key, low in (("assist_base_prob", 0.0), ("pgd_top_ratio", 0.0), ("pgd_renew_ratio", 0.0)):
        value = resolved[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= 1:
            raise ValueError(f"config {key} must be a number in [0, 1], got {value!r}.")
    if resolved.assist and not resolved.assist_base_prob > 0:
        raise ValueError(
            "config assist_base_prob must be > 0 (0 could starve training), got "
            f"{resolved.assist_base_prob!r}; the paper uses 0.3."
        )
    auto = resolved.auto_echo_max_factor
    if isinstance(auto, bool) or not isinstance(auto, int | float) or not (auto == 0 or auto >= 1):
        raise ValueError(
            f"config auto_echo_max_factor must be 0 (off) or a number >= 1, got {auto!r}; e.g. 8."
        )
    if auto and resolved.data.echo != 1:
        raise ValueError(
            f"config auto_echo_max_factor={auto} sets the echo factor itself; set data.echo=1 "
            f"(got {resolved.data.echo!r}) or auto_echo_max_factor=0."
        )
    if resolved.eval_every_fresh_examples and (resolved.assist or resolved.pgd):
        raise ValueError(
            "config eval_every_fresh_examples counts fresh examples as batch_size / echo factor "
            "per step, which does not hold when the Assistant filters or PGD selects batches; "
            "set it to 0 and use eval_every_steps."
        )
    if resolved.pgd and (resolved.assist or auto or resolved.data.echo != 1):
        raise ValueError(
            "config pgd=True draws batches from a priority table, not from the input pipeline; "
            f"it cannot be combined with assist={resolved.assist}, auto_echo_max_factor={auto} "
            f"or data.echo={resolved.data.echo}. Turn those off."
        )
    if not isinstance(resolved.stop_at_target, bool):
        raise TypeError(f"config stop_at_target must be a bool, got {resolved.stop_at_target!r}.")
    if resolved.stop_at_target and not resolved.target_accuracy:
        raise ValueError(
            "config stop_at_target=True needs a target: set target_accuracy in (0, 1], e.g. 0.9."
        )
    if resolved.model not in models.MODELS:
        raise ValueError(
            f"config model must be one of {sorted(models.MODELS)}, got {resolved.model!r}."
        )
    return resolved


def make_strategy(config: ml_collections.ConfigDict) -> tf.distribute.Strategy:
    """The strategy ``config`` names (``trainers.strategies.make_strategy``)."""
    return strategies.make_strategy(
        config.strategy, workers=config.workers, task_index=config.task_index, tpu=config.tpu
    )


class RunClock(tf.Module):
    """Checkpointed run state: training seconds so far and the first crossing of the target."""

    def __init__(self):
        super().__init__(name="run_clock")
        self.seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="seconds")
        self.target_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="target_step")
        self.target_seconds = tf.Variable(-1.0, dtype=tf.float64, trainable=False)
        self.target_fresh = tf.Variable(-1, dtype=tf.int64, trainable=False)


def run(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    insertions: Sequence[tuple[str, str, DatasetTransformation]] = (),
) -> dict[str, object]:
    """Trains (or resumes) the run ``config`` describes in ``workdir``; returns the summary.

    ``insertions`` are extra train-pipeline stages ``(point, name, transformation)`` a config
    cannot describe (see ``pipelines.make_datasets``), e.g. a user's own preprocessing; they run
    before the Assistant filter and AutoEcho stages at the same point.

    Returns:
      ``{"step", "eval_accuracy", "eval_loss", "fresh_examples", "emitted_examples",
      "echo_ratio", "train_seconds", "target_accuracy", "steps_to_target", "seconds_to_target",
      "fresh_examples_to_target", "upstream_seconds_per_step", "downstream_seconds_per_step",
      "upstream_downstream_ratio"}`` (target/timing entries are None when not measured).

    Raises:
      ValueError / TypeError: a bad config, or a workdir holding an incompatible checkpoint.
    """
    config = resolve_config(config)
    if not isinstance(workdir, str) or not workdir:
        raise ValueError(f"workdir must be a non-empty path, got {workdir!r}.")
    # First: MultiWorkerMirroredStrategy configures the runtime's collectives when created.
    strategy = make_strategy(config)
    workdir = strategies.worker_directory(strategy, workdir)
    tf.io.gfile.makedirs(workdir)
    keras.utils.set_random_seed(config.seed)

    user_insertions = tuple(insertions)
    counts, extras, insertions = _input_stages(
        config, user_insertions, num_pipelines=strategies.num_input_pipelines(strategy)
    )
    # Shapes and classes for the model; the pipelines that train are built per input pipeline
    # (host/worker) by the dataset functions below.
    datasets = pipelines.make_datasets(config.data, seed=config.seed, insertions=insertions)
    with strategy.scope():
        model = models.build_model(config.model, datasets.input_shape, datasets.num_classes)
        optimizer = _make_optimizer(config)
        if config.pgd:
            extras.priority_feedback = echoing.PriorityFeedback(
                extras.table, model.trainable_variables
            )
    train_dataset_fn, eval_dataset_fn = _dataset_fns(config, counts, insertions, extras)
    feedback = []
    if config.assist:
        extras.learner = echoing.AssistantLearner(
            extras.assistant,
            examples=extras.examples,
            asynchronous=config.assist_asynchronous,
        )
        # Built now, eagerly and on the host, so a checkpoint restores its slots at once.
        with tf.device("/cpu:0"):
            extras.learner.optimizer.build(extras.assistant.trainable_variables)
        feedback.append(extras.learner.feedback_ids)
    trainer = loop.Trainer(
        model=model,
        optimizer=optimizer,
        train_dataset_fn=train_dataset_fn,
        eval_dataset_fn=eval_dataset_fn,
        strategy=strategy,
        feedback=feedback,
        priority_feedback=extras.priority_feedback,
        jit_compile=config.jit_compile,
        # Priority selection reads the table when a batch is produced: prefetching batches to
        # the device would select them before the previous step's priorities are written.
        train_input_options=tf.distribute.InputOptions(experimental_fetch_to_device=False)
        if config.pgd
        else None,
    )
    clock = RunClock()
    objects = dict(model=model, optimizer=optimizer, step=trainer.step, meters=counts, clock=clock)
    objects.update(extras.checkpointed())
    if config.checkpoint_iterator:
        if isinstance(trainer.iterator, tf.__internal__.tracking.Trackable):
            objects["iterator"] = trainer.iterator
        else:
            # tf.distribute's multi-device iterators (e.g. MirroredStrategy's) cannot be saved.
            print(
                f"Not checkpointing the input iterator: {type(trainer.iterator).__name__} under "
                f"{type(strategy).__name__} is not saveable; a resumed run restarts the input "
                "stream (model, optimizer, step and meters are still restored).",
                file=sys.stderr,
            )
    manager = checkpointing.make_manager(
        os.path.join(workdir, "checkpoints"),
        max_to_keep=config.max_checkpoints_to_keep,
        **objects,
    )
    restored = checkpointing.restore_latest(manager)
    step = int(trainer.step.numpy())
    if restored:
        print(f"Resumed from {restored} at step {step}.", file=sys.stderr)
    evaluation = {}
    with contextlib.ExitStack() as cleanup, metrics_writer.MetricsWriter(workdir) as writer:
        if extras.learner is not None:
            # Stops the learner thread at the end, also when training raises.
            cleanup.enter_context(extras.learner)
        progress = tqdm.tqdm(
            total=config.num_steps,
            initial=step,
            desc="train",
            unit="step",
            disable=not config.progress_bar,
            file=sys.stderr,
        )
        first_loop = True
        # Fresh examples consumed, and consumed at the last evaluation (eval_every_fresh_examples):
        # the fresh meter counts what entered the pipeline, which runs ahead by its buffers.
        consumed = consumed_at_eval = 0.0
        while step < config.num_steps and not _stopped_at_target(config, clock):
            boundary = min(
                _next_multiple(step, config.steps_per_loop),
                _next_multiple(step, config.eval_every_steps),
                _next_multiple(step, config.checkpoint_every_steps),
                config.num_steps,
            )
            factor = (
                float(extras.auto_echo.factor.numpy())
                if extras.auto_echo is not None
                else float(config.data.echo)
            )
            consumed += (boundary - step) * config.data.batch_size / factor
            start = time.perf_counter()
            result = trainer.train(boundary - step)
            loop_seconds = time.perf_counter() - start
            clock.seconds.assign_add(loop_seconds)
            scalars = {**result, **_echo_scalars(counts)}
            if extras.auto_echo is not None:
                # The first call of a process traces the loop: its time says nothing of input.
                if not first_loop:
                    extras.auto_echo.observe(
                        seconds=loop_seconds,
                        input_wait_seconds=result["input_wait_seconds"],
                        steps=boundary - step,
                    )
                    scalars["input_wait_fraction"] = extras.auto_echo.last_wait_fraction
                scalars["echo_factor"] = float(extras.auto_echo.factor.numpy())
            first_loop = False
            step = int(trainer.step.numpy())
            progress.update(boundary - progress.n)
            if extras.table is not None:
                scalars.update(
                    {
                        f"priority_{key}": float(value)
                        for key, value in extras.table.statistics(step).items()
                    }
                )
            every = config.eval_every_fresh_examples
            fresh_due = every and consumed // every > consumed_at_eval // every
            if step % config.eval_every_steps == 0 or step == config.num_steps or fresh_due:
                consumed_at_eval = consumed
                start = time.perf_counter()
                evaluation = trainer.evaluate()
                # Evaluation is part of the cost of reaching the target, so it is on the clock.
                clock.seconds.assign_add(time.perf_counter() - start)
                scalars.update(evaluation)
                scalars.update(extras.assist_scalars())
                _record_target(clock, config.target_accuracy, evaluation, step, counts)
                progress.set_postfix(accuracy=f"{evaluation['eval_accuracy']:.4f}")
            scalars["train_seconds"] = float(clock.seconds.numpy())
            writer.write(step, scalars)
            if (
                step % config.checkpoint_every_steps == 0
                or step == config.num_steps
                or _stopped_at_target(config, clock)
            ):
                manager.save(checkpoint_number=step)
        progress.close()
    if not evaluation:
        # A finished run restarted: evaluate the restored model for the summary.
        evaluation = trainer.evaluate()

    timings = (
        _measure_ratio(config, datasets, strategy, user_insertions) if config.timing_steps else {}
    )
    summary = _summary(config, step, evaluation, counts, clock, timings)
    with tf.io.gfile.GFile(os.path.join(workdir, "summary.json"), "w") as file:
        file.write(json.dumps(summary, indent=2) + "\n")
    print(format_summary(summary))
    return summary


def _input_stages(config, insertions, *, num_pipelines: int):
    """The host state and extra stages of the input pipelines: meters, Assistant filter,
    AutoEcho, PGD priority table (one shard per input pipeline). Returns
    ``(counts, extras, insertions)``, all created outside any strategy scope."""
    # Meters live outside the strategy scope: they are host counters, never mirrored.
    counts = echo_meters.EchoMeters()
    extras = _Extras()
    insertions = list(insertions)
    if config.assist or config.pgd:
        extras.examples, source = _examples_by_id(config.data)
    if config.assist:
        extras.assistant = echoing.Assistant(
            source.num_classes, input_shape=tuple(source.input_shape)
        )
        extras.filter = echoing.assistant_filter(
            extras.assistant,
            base_prob=float(config.assist_base_prob),
            reweight=config.assist_reweight,
            seed=config.seed,
        )
        insertions.append(("after_augment", "assistant", extras.filter))
    if config.auto_echo_max_factor:
        extras.auto_echo = echoing.AutoEcho(float(config.auto_echo_max_factor))
        insertions.append(
            (
                config.data.echo_insert,
                "auto_echo",
                extras.auto_echo.echo(
                    buffer_size=config.data.echo_buffer_size or None, seed=config.seed + 2
                ),
            )
        )
    if config.pgd:
        # Outside the strategy scope: host state read by the input pipelines. With several input
        # pipelines (workers) each owns a shard of the ids and selects its own top-k there, the
        # paper's worker design (echoing.distributed_priority_sample).
        num_examples = len(extras.examples["label"])
        if num_pipelines == 1:
            extras.table = echoing.PriorityTable(num_examples)
        else:
            extras.table = ShardedPriorityTable(num_examples, num_shards=num_pipelines)
    return counts, extras, insertions


def _dataset_fns(config, counts, insertions, extras) -> tuple[loop.DatasetFn, loop.DatasetFn]:
    """``InputContext -> Dataset`` functions for the train and eval sets, one per input pipeline.

    Each input pipeline (one per worker/host) reads its own shard of the source and batches per
    replica (``pipelines.make_datasets(input_context=...)``), so echo, the Assistant filter and
    the meters run on every worker over its shard. Train batches have static shapes
    (drop_remainder=True; filters come before the fixed-size batching), as XLA/TPUs need. PGD
    batches are selected per input pipeline from its shard of the priority table
    (``echoing.distributed_priority_sample``), also of static shape.
    """
    eval_sets = {}

    def train_dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        if extras.table is not None:
            dataset = (
                distributed_priority_sample(
                    extras.table,
                    extras.examples,
                    context,
                    global_batch_size=config.data.batch_size,
                    top_ratio=float(config.pgd_top_ratio),
                    renew_ratio=float(config.pgd_renew_ratio),
                    seed=config.seed,
                )
                .apply(counts.fresh.count(rows=True))
                .apply(counts.emitted.count(rows=True))
            )
        else:
            dataset = pipelines.make_datasets(
                config.data,
                seed=config.seed,
                meters=counts,
                insertions=insertions,
                input_context=context,
            ).train
        # The stream never ends (read repeats), but filters hide that from tf.data; said
        # explicitly, MultiWorkerMirrored keeps the static batch shape and skips its per-step
        # "does every worker still have data" all-reduce.
        dataset = dataset.apply(
            tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY)
        )
        if config.checkpoint_iterator:
            # The echo meters' counters are variables the pipeline writes: external state to
            # tf.data, which refuses to checkpoint such an iterator by default. The counters are
            # saved by the checkpoint itself (`meters=`), so the iterator may ignore them.
            options = tf.data.Options()
            options.experimental_external_state_policy = (
                tf.data.experimental.ExternalStatePolicy.IGNORE
            )
            dataset = dataset.with_options(options)
        return dataset

    def eval_dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Each input pipeline evaluates its shard; the loop sums across them. Built once per
        # context: every evaluate() asks again.
        key = (context.num_input_pipelines, context.input_pipeline_id, context.num_replicas_in_sync)
        if key not in eval_sets:
            datasets = pipelines.make_datasets(config.data, seed=config.seed, input_context=context)
            eval_sets[key] = datasets.eval
            if config.jit_compile:
                eval_sets[key] = padded_to_full_batches(
                    datasets.eval, datasets.num_shard_eval_examples, datasets.eval_batch_size
                )
        return eval_sets[key]

    return train_dataset_fn, eval_dataset_fn


def padded_to_full_batches(
    dataset: tf.data.Dataset, num_examples: int, batch_size: int
) -> tf.data.Dataset:
    """``dataset``'s batches, the last one filled up with masked-out rows: one static shape.

    Every row gets ``"mask"`` (1.0; 0.0 for the padding rows, which are zeros), which the loop's
    eval step uses to leave padding out of accuracy, loss and count. XLA would compile the eval
    step again for a smaller last batch, and a TPU needs static shapes.

    Args:
      dataset: batches of dicts, all full but the last, holding ``num_examples`` rows.
      num_examples: rows in ``dataset``.
      batch_size: rows per full batch.
    """
    rows = dataset.unbatch().map(lambda row: {**row, "mask": tf.constant(1.0)})
    missing = -num_examples % batch_size
    if missing:
        padding = rows.take(1).map(lambda row: {k: tf.zeros_like(v) for k, v in row.items()})
        rows = rows.concatenate(padding.repeat(missing))
    return rows.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


@dataclasses.dataclass
class _Extras:
    """The optional stages of a run (Assistant filter, PGD, AutoEcho) and their state."""

    examples: dict[str, np.ndarray] | None = None
    assistant: echoing.Assistant | None = None
    filter: echoing.AssistantFilter | None = None
    learner: echoing.AssistantLearner | None = None
    table: echoing.PriorityTable | None = None
    priority_feedback: echoing.PriorityFeedback | None = None
    auto_echo: echoing.AutoEcho | None = None

    def checkpointed(self) -> dict[str, object]:
        """The extra objects a checkpoint saves, by name."""
        objects = {}
        if self.assistant is not None:
            objects["assistant"] = self.assistant
            objects["assistant_optimizer"] = self.learner.optimizer
        if self.table is not None:
            objects["priority_table"] = self.table
            objects["priority_feedback"] = self.priority_feedback
        if self.auto_echo is not None:
            objects["auto_echo"] = self.auto_echo
        return objects

    def assist_scalars(self) -> dict[str, float]:
        """Filter keep rate and learner statistics, or nothing without an Assistant."""
        if self.filter is None:
            return {}
        stats = self.learner.stats()
        return {
            "assist_keep_rate": self.filter.keep_rate(),
            "assistant_accuracy": stats["assistant_accuracy"],
            "assist_queue_drops": stats["queue_drops"],
            "assist_nonfinite_losses": stats["nonfinite_losses"],
            "assist_pushed_batches": stats["pushed_batches"],
            "assist_trained_batches": stats["trained_batches"],
        }


def _examples_by_id(data_config) -> tuple[dict[str, np.ndarray], object]:
    """The decoded (not augmented) train split in memory, row i = example id i, and its source."""
    source = sources.load(pipelines.resolve_data_config(data_config))
    count = source.train.num_examples
    decoded = source.train.dataset.map(source.train.decode).batch(count)
    batch = next(iter(decoded))
    order = np.argsort(batch["id"].numpy())
    ids = batch["id"].numpy()[order]
    if not np.array_equal(ids, np.arange(count)):
        raise ValueError(
            f"the train split's ids are not 0..{count - 1}; the Assistant learner and PGD "
            "look examples up by id, so the source must number its examples from 0."
        )
    examples = {
        "inputs": batch["inputs"].numpy()[order],
        "label": batch["label"].numpy()[order],
    }
    return examples, source


def diagnose(config: ml_collections.ConfigDict, workdir: str) -> dict[str, object]:
    """Times the input pipeline and the train step; recommends an echo factor and where to echo.

    Runs ``config.diagnose_steps`` train steps of a fresh model on the echo-free pipeline (the
    input-wait fraction ``1 - t_down / t_step``), and times, over as many batches, the pipeline
    alone (t_up), the pipeline without augmentation and the train step on a cached batch (t_down).
    Nothing is checkpointed; the result is printed and written to ``workdir/diagnosis.json``.

    Returns:
      ``{"steps", "upstream_seconds_per_step", "unaugmented_upstream_seconds_per_step",
      "downstream_seconds_per_step", "train_seconds_per_step", "input_wait_fraction", "ratio",
      "echo_factor", "echo_insert", "augment_fraction"}`` (see ``timing.recommend_echo``).
    """
    config = resolve_config(config)
    if not isinstance(workdir, str) or not workdir:
        raise ValueError(f"workdir must be a non-empty path, got {workdir!r}.")
    tf.io.gfile.makedirs(workdir)
    keras.utils.set_random_seed(config.seed)
    strategy = make_strategy(config)
    steps = config.diagnose_steps
    data = _echo_free(config.data)
    datasets = pipelines.make_datasets(data, seed=config.seed)
    unaugmented = ml_collections.ConfigDict(data.to_dict())
    unaugmented.augment = "none"
    t_up = timing.seconds_per_batch(datasets.train, num_batches=steps)
    t_plain = timing.seconds_per_batch(
        pipelines.make_datasets(unaugmented, seed=config.seed).train, num_batches=steps
    )
    t_down = _downstream_seconds(config, datasets, strategy, num_steps=steps)
    with strategy.scope():
        model = models.build_model(config.model, datasets.input_shape, datasets.num_classes)
        optimizer = _make_optimizer(config)
    trainer = loop.Trainer(
        model=model,
        optimizer=optimizer,
        train_dataset_fn=loop.per_replica_batches(
            lambda: datasets.train, global_batch_size=config.data.batch_size
        ),
        strategy=strategy,
        jit_compile=config.jit_compile,
    )
    trainer.train(3)  # traces
    start = time.perf_counter()
    input_wait = trainer.train(steps)["input_wait_seconds"]
    t_step = (time.perf_counter() - start) / steps
    result = {
        "steps": steps,
        "upstream_seconds_per_step": t_up,
        "unaugmented_upstream_seconds_per_step": t_plain,
        "downstream_seconds_per_step": t_down,
        "train_seconds_per_step": t_step,
        # Measured in the loop (time blocked on the iterator), as AutoEcho sees it.
        "input_wait_fraction": min(1.0, input_wait / steps / t_step),
        **timing.recommend_echo(
            upstream_seconds=t_up,
            downstream_seconds=t_down,
            unaugmented_upstream_seconds=t_plain,
        ),
    }
    with tf.io.gfile.GFile(os.path.join(workdir, "diagnosis.json"), "w") as file:
        file.write(json.dumps(result, indent=2) + "\n")
    print(format_diagnosis(result))
    return result


def format_diagnosis(diagnosis: dict[str, object]) -> str:
    """The human-readable ``--diagnose`` report."""
    return "\n".join(
        [
            f"t_up {1e3 * diagnosis['upstream_seconds_per_step']:.2f} ms/batch (without "
            f"augmentation {1e3 * diagnosis['unaugmented_upstream_seconds_per_step']:.2f}), "
            f"t_down {1e3 * diagnosis['downstream_seconds_per_step']:.2f} ms/step: "
            f"R = {diagnosis['ratio']:.2f}",
            f"train step with input {1e3 * diagnosis['train_seconds_per_step']:.2f} ms: input "
            f"wait {100 * diagnosis['input_wait_fraction']:.1f}% of the step "
            f"({diagnosis['steps']} steps)",
            f"recommended: echo={diagnosis['echo_factor']:.2f}, "
            f"insert={diagnosis['echo_insert']} (augmentation is "
            f"{100 * diagnosis['augment_fraction']:.0f}% of t_up)",
        ]
    )


def format_summary(summary: dict[str, object]) -> str:
    """The human-readable end-of-run report."""
    lines = [
        f"step {summary['step']}: eval accuracy {summary['eval_accuracy']:.4f} "
        f"(loss {summary['eval_loss']:.4f}) after {summary['train_seconds']:.1f} s of training",
        f"fresh examples read {summary['fresh_examples']}, examples emitted "
        f"{summary['emitted_examples']} (echo ratio {summary['echo_ratio']:.2f})",
    ]
    if summary["target_accuracy"]:
        if summary["steps_to_target"] is None:
            lines.append(f"target accuracy {summary['target_accuracy']} not reached")
        else:
            lines.append(
                f"target accuracy {summary['target_accuracy']} reached at step "
                f"{summary['steps_to_target']} after {summary['seconds_to_target']:.1f} s and "
                f"{summary['fresh_examples_to_target']} fresh examples"
            )
    if summary["upstream_downstream_ratio"] is not None:
        lines.append(
            f"t_up {1e3 * summary['upstream_seconds_per_step']:.2f} ms/batch (input pipeline "
            f"alone), t_down {1e3 * summary['downstream_seconds_per_step']:.2f} ms/step (cached "
            f"batch): R = {summary['upstream_downstream_ratio']:.2f}"
        )
    return "\n".join(lines)


def _make_optimizer(config) -> keras.optimizers.Optimizer:
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if config.warmup_steps else config.learning_rate,
        decay_steps=config.num_steps - config.warmup_steps,
        warmup_target=config.learning_rate if config.warmup_steps else None,
        warmup_steps=config.warmup_steps,
    )
    return keras.optimizers.AdamW(learning_rate=schedule, weight_decay=config.weight_decay)


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def _echo_scalars(counts: echo_meters.EchoMeters) -> dict[str, float]:
    result = counts.result()
    return {
        "fresh_examples": result["fresh_examples"],
        "emitted_examples": result["emitted_examples"],
        "echo_ratio": result["echo_ratio"],
    }


def _stopped_at_target(config, clock) -> bool:
    return config.stop_at_target and int(clock.target_step.numpy()) >= 0


def _record_target(clock, target, evaluation, step, counts) -> None:
    if target and clock.target_step.numpy() < 0 and evaluation["eval_accuracy"] >= target:
        clock.target_step.assign(step)
        clock.target_seconds.assign(clock.seconds.numpy())
        clock.target_fresh.assign(counts.fresh.value())


def _measure_ratio(config, datasets, strategy, insertions=()) -> dict[str, float]:
    """t_up on the echo-free train pipeline, t_down on a fresh model copy (see module doc).

    The user's own ``insertions`` are input work, so t_up includes them.
    """
    upstream = pipelines.make_datasets(
        _echo_free(config.data), seed=config.seed, insertions=insertions
    ).train
    t_up = timing.seconds_per_batch(upstream, num_batches=config.timing_steps)
    return {"upstream": t_up, "downstream": _downstream_seconds(config, datasets, strategy)}


def _echo_free(data_config) -> ml_collections.ConfigDict:
    data = ml_collections.ConfigDict(data_config.to_dict())
    data.echo, data.echo_buffer_size = 1.0, 0
    return data


def _downstream_seconds(config, datasets, strategy, num_steps: int | None = None) -> float:
    """Seconds per train step of a fresh model copy on one cached batch (no input cost)."""
    with strategy.scope():
        # A fresh model and optimizer, so the measurement never touches the trained weights.
        copy = models.build_model(config.model, datasets.input_shape, datasets.num_classes)
        optimizer = _make_optimizer(config)
    # From a meter-free, echo-free pipeline: the run's counters never see this batch.
    cached = timing.cached_batch(
        pipelines.make_datasets(_echo_free(config.data), seed=config.seed).train
    )
    trainer = loop.Trainer(
        model=copy,
        optimizer=optimizer,
        train_dataset_fn=loop.per_replica_batches(
            lambda: cached, global_batch_size=config.data.batch_size
        ),
        strategy=strategy,
        jit_compile=config.jit_compile,
    )
    return timing.seconds_per_step(trainer.train, num_steps=num_steps or config.timing_steps)


def _summary(config, step, evaluation, counts, clock, timings) -> dict[str, object]:
    reached = int(clock.target_step.numpy()) >= 0
    result = counts.result()
    return {
        "step": step,
        "eval_accuracy": evaluation["eval_accuracy"],
        "eval_loss": evaluation["eval_loss"],
        "fresh_examples": result["fresh_examples"],
        "emitted_examples": result["emitted_examples"],
        "echo_ratio": result["echo_ratio"],
        "train_seconds": float(clock.seconds.numpy()),
        "target_accuracy": config.target_accuracy or None,
        "steps_to_target": int(clock.target_step.numpy()) if reached else None,
        "seconds_to_target": float(clock.target_seconds.numpy()) if reached else None,
        "fresh_examples_to_target": int(clock.target_fresh.numpy()) if reached else None,
        "upstream_seconds_per_step": timings.get("upstream"),
        "downstream_seconds_per_step": timings.get("downstream"),
        "upstream_downstream_ratio": (
            timings["upstream"] / timings["downstream"] if timings else None
        ),
    }


def _check_int(key: str, value, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"config {key} must be an int, got {value!r} ({type(value).__name__}).")
    if value < minimum:
        raise ValueError(f"config {key} must be >= {minimum}, got {value!r}.")
