r"""Asynchronous partitioned-gradient training: ASSM, PASSM and PASSM+ on a parameter server.

This is the backend for several hosts; on one host the default is the shared-memory backend
(`trainers.passm.SharedMemoryTrainer`: c worker threads over one model, the paper's regime),
over the same block partition, schedule, update rule and outer loop (`PhasedTrainer`).

Example (the binary; an in-process loopback cluster is started for it)::

    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/passm_ps \
        --strategy=parameter_server

Example (the library)::

    import keras
    import tensorflow as tf
    from trainers import async_partitioned, local_cluster, passm_schedule

    cluster = local_cluster.start_in_process(num_workers=2)
    strategy = tf.distribute.ParameterServerStrategy(cluster.resolver)
    model_fn = lambda: keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
    )
    trainer = async_partitioned.AsyncPartitionedTrainer(strategy, model_fn, num_workers=2)
    dataset_fn = lambda worker_index: tf.data.Dataset.from_tensors(
        (tf.zeros([4, 8]), tf.zeros([4], tf.int32))
    ).repeat()
    phases = passm_schedule.make_schedule(
        "passm_plus", num_steps=20, num_workers=2, learning_rate=0.1
    )
    result = trainer.run(dataset_fn, phases, eval_every=10)

Update rules (paper Algorithm 1 with the authors' heavy-ball momentum, u ← m·u + g, x ← x − η·u):

- ASSM: each step reads the whole model, computes the full gradient and writes every variable.
- PASSM: the worker with index w owns block w of the parameter list (contiguous ranges balanced
  by element count, `trainers.block_partition`). It back-propagates only to its block
  (``GradientTape(watch_accessed_variables=False)`` + ``tape.watch``; inside ``tf.function`` the
  unused part of the backward pass is pruned) and writes only that block, lock-free. Routing uses
  ``experimental_get_current_worker_index()`` + ``tf.switch_case``. Keras optimizers fail inside
  ``switch_case``, so the momentum update is written out on the block's ``tf.Variable``s, with one
  momentum buffer per variable on the parameter servers (per block, so per owning worker).
- PASSM+: a schedule of ASSM and PASSM phases (`trainers.passm_schedule`).

Counters are ``tf.Variable.assign_add``s on the parameter servers, because Keras 3's
``optimizer.iterations`` loses increments under concurrent writes. Each block has a version
(its number of updates); a step's staleness is how many other updates landed on the block between
the step reading the version and writing its own update. ``retried_steps`` counts steps that
started more than once (a counter bumped first thing in every step, minus the steps completed);
``duplicate_updates`` counts updates
applied more than the steps scheduled: a ``ClusterCoordinator`` runs a closure again on another
worker when its worker dies (at-least-once), and if the first run had already written, the update
lands twice.

Under a synchronous strategy (default, Mirrored, MultiWorkerMirrored, TPU) passed in or named
by the config, `trainers.async_experiment.train_and_evaluate` logs a warning and trains
synchronously with the same momentum update (`SynchronousTrainer`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from trainers import checkpointing, controller, metrics_writer
from trainers.async_state import TrainingState
from trainers.block_partition import partition_blocks
from trainers.passm_schedule import Phase

# dataset_fn(worker_index) -> infinite dataset of (features, labels) batches; worker_index is a
# scalar int64 tensor so each worker can draw its own order.
DatasetFn = Callable[[tf.Tensor], tf.data.Dataset]
# evaluate(model) -> accuracy in [0, 1], run on the coordinator between training chunks.
EvaluateFn = Callable[[keras.Model], float]

_LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


class ParameterServerLostError(RuntimeError):
    """A parameter server stopped answering; the run can resume from its last checkpoint."""


def mean_loss(model: keras.Model, features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """The training loss every update rule here differentiates (mean cross-entropy on logits)."""
    return _LOSS(labels, model(features, training=True))


def check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")


def check_momentum(momentum: Any) -> None:
    if isinstance(momentum, bool) or not isinstance(momentum, int | float) or not 0 <= momentum < 1:
        raise ValueError(f"momentum must be a float in [0, 1), got {momentum!r}.")


class PhasedTrainer:
    """The loop shared by the async and sync trainers: chunks, evaluation, checkpoints, logs.

    A trainer implements ``_start`` (its input), ``_train_chunk`` (schedule one phase's steps)
    and ``_finish_chunk`` (wait for them); `trainers.passm.SharedMemoryTrainer` is one.
    """

    strategy: tf.distribute.Strategy
    model: keras.Model
    state: TrainingState
    blocks: list[range]

    def _start(self, dataset_fn: DatasetFn) -> None:
        raise NotImplementedError

    def _train_chunk(self, mode: str, num_steps: int, learning_rate: float) -> None:
        raise NotImplementedError

    def _finish_chunk(self) -> float | None:
        """Waits for the chunk's steps; returns the last loss seen."""
        raise NotImplementedError

    def run(
        self,
        dataset_fn: DatasetFn,
        phases: Sequence[Phase],
        *,
        eval_every: int,
        evaluate: EvaluateFn | None = None,
        workdir: str | None = None,
        target_accuracy: float | None = None,
    ) -> dict[str, Any]:
        """Trains through ``phases``; evaluates and checkpoints every ``eval_every`` steps.

        The outer loop is the synchronous trainer's (``trainers.controller``): one inner loop
        per ``eval_every`` steps, each split at phase boundaries into chunks (the coordinator
        waits for all scheduled steps at the end of a chunk; between, workers run freely).

        Args:
          dataset_fn: ``dataset_fn(worker_index)`` -> infinite dataset of (features, labels).
          phases: from `trainers.passm_schedule.make_schedule`.
          eval_every: steps between evaluations/checkpoints.
          evaluate: ``evaluate(model)`` -> accuracy; optional.
          workdir: if set, checkpoints go to ``workdir/checkpoints`` (and a run resumes from
            them), metrics to ``workdir/metrics.jsonl`` and TensorBoard (``metrics_writer``).
          target_accuracy: if set, ``train_seconds_to_target`` is the training time (evaluation
            excluded) at the first evaluation reaching it.

        Returns:
          A dict: ``history`` (step, mode, learning_rate, train_seconds, loss, accuracy per
          evaluation), ``final_accuracy``, ``train_seconds``, ``train_seconds_to_target``,
          ``start_step``, the counters of `TrainingState.counters`, ``retried_steps``,
          ``duplicate_updates`` and ``blocks``.

        Raises:
          ParameterServerLostError: a parameter server died; the message names the checkpoint.
        """
        check_positive_int("eval_every", eval_every)
        phases = list(phases)
        if not phases:
            raise ValueError("phases is empty; build it with passm_schedule.make_schedule.")
        manager = self._restored_manager(workdir) if workdir else None
        inner = PhasedLoop(self, phases, evaluate)
        start_step = inner.step
        self._start(dataset_fn)
        # One inner loop per evaluation; evaluation time is kept off the training clock.
        every = dict(steps_per_loop=eval_every, eval_every_steps=eval_every)
        schedule = controller.Schedule(
            num_steps=phases[-1].stop,
            checkpoint_every_steps=eval_every,
            target_accuracy=target_accuracy or 0.0,
            evaluation_on_clock=False,
            **every,
        )
        clock = controller.RunClock()
        with contextlib.ExitStack() as stack:
            writer = stack.enter_context(metrics_writer.MetricsWriter(workdir)) if workdir else None
            outer = controller.Controller(
                schedule, trainer=inner, clock=clock, manager=manager, writer=writer
            )
            _run_reporting_lost_servers(outer, inner, manager)
        return self._result(inner, clock, start_step)

    def _restored_manager(self, workdir: str) -> tf.train.CheckpointManager:
        """Checkpoints of the state in ``workdir/checkpoints``, the newest restored."""
        manager = checkpointing.make_manager(
            os.path.join(workdir, "checkpoints"), max_to_keep=2, state=self.state
        )
        if checkpointing.restore_latest(manager):
            logging.info("Resumed from %s", manager.latest_checkpoint)
        return manager

    def _result(self, inner: PhasedLoop, clock: controller.RunClock, start_step: int) -> dict:
        counters = self.state.counters()
        return {
            "history": inner.history,
            "final_accuracy": inner.history[-1]["accuracy"] if inner.history else None,
            "train_seconds": inner.train_seconds,
            "train_seconds_to_target": (
                float(clock.target_seconds.numpy()) if clock.reached() else None
            ),
            "start_step": start_step,
            "retried_steps": counters["steps_started"] - counters["completed_steps"],
            "duplicate_updates": counters["updates_applied"] - counters["completed_steps"],
            "blocks": [[b.start, b.stop] for b in self.blocks],
            **counters,
        }


class PhasedLoop:
    """A trainer's steps through the PASSM+ phases, as ``trainers.controller``'s inner loop.

    ``train(num_steps)`` runs the next ``num_steps`` steps, one chunk per phase they cross
    (each chunk ends when every scheduled step has); ``evaluate()`` records a history entry.
    ``step`` counts the steps the coordinator saw finish, in Python, so it can still be read
    (for the error message) after a parameter server is gone.
    """

    def __init__(
        self, trainer: PhasedTrainer, phases: Sequence[Phase], evaluate: EvaluateFn | None
    ):
        self.trainer = trainer
        self.phases = list(phases)
        self._evaluate = evaluate
        self.step = int(trainer.state.completed_steps.numpy())
        self.history: list[dict[str, Any]] = []
        self.train_seconds = 0.0
        self._last = {"mode": None, "learning_rate": None, "loss": None}

    def train(self, num_steps: int) -> dict[str, float]:
        began = time.perf_counter()
        stop = self.step + num_steps
        for phase in self.phases:
            first, last = max(self.step, phase.start), min(stop, phase.stop)
            if first >= last:
                continue
            self.trainer._train_chunk(phase.mode, last - first, phase.learning_rate)
            loss = self.trainer._finish_chunk()
            self._last = {"mode": phase.mode, "learning_rate": phase.learning_rate, "loss": loss}
        self.step = stop
        self.trainer.state.completed_steps.assign(stop)
        seconds = time.perf_counter() - began
        self.train_seconds += seconds
        scalars = {"learning_rate": self._last["learning_rate"], "loop_seconds": seconds}
        if self._last["loss"] is not None:
            scalars["train_loss"] = self._last["loss"]
        return scalars

    def evaluate(self) -> dict[str, float]:
        accuracy = float(self._evaluate(self.trainer.model)) if self._evaluate else None
        record = {"step": self.step, **self._last, "train_seconds": self.train_seconds}
        record["accuracy"] = accuracy
        self.history.append(record)
        logging.info("step %d %s", self.step, record)
        return {} if accuracy is None else {"eval_accuracy": accuracy}


def _run_reporting_lost_servers(outer: controller.Controller, inner: PhasedLoop, manager) -> None:
    """``outer.run()``; a parameter server's death becomes a ``ParameterServerLostError``."""
    try:
        outer.run()
    except tf.errors.OpError as error:
        if "/job:ps" not in str(error) and not isinstance(error, tf.errors.UnavailableError):
            raise
        where = manager.latest_checkpoint if manager else None
        raise ParameterServerLostError(
            f"a parameter server stopped answering after step {inner.step} "
            f"({type(error).__name__}). "
            + (
                f"Last checkpoint: {where}. Restart the parameter server and rerun the same "
                f"command with the same workdir to resume from it."
                if where
                else "No checkpoint was written (no workdir, or before the first "
                "evaluation); pass workdir= and a smaller eval_every to make runs resumable."
            )
        ) from error


class AsyncPartitionedTrainer(PhasedTrainer):
    """ASSM/PASSM steps scheduled on a ``ParameterServerStrategy`` cluster.

    Args:
      strategy: a ``tf.distribute.ParameterServerStrategy``.
      model_fn: builds the (already built, i.e. with an ``Input``) Keras model; called under
        ``strategy.scope()`` so its variables live on the parameter servers.
      num_workers: c, the number of workers and of PASSM blocks; defaults to the cluster's.
      momentum: heavy-ball momentum m in [0, 1).
      steps_per_closure: steps each scheduled function runs back to back on one worker; more
        amortise the coordinator's dispatch cost, fewer let it rebalance work sooner.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model_fn: Callable[[], keras.Model],
        *,
        num_workers: int | None = None,
        momentum: float = 0.9,
        steps_per_closure: int = 1,
    ):
        if not isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
            raise TypeError(
                f"AsyncPartitionedTrainer needs a tf.distribute.ParameterServerStrategy, got "
                f"{type(strategy).__name__}; use train_and_evaluate (which falls back to "
                "synchronous training) or SynchronousTrainer for other strategies."
            )
        cluster_workers = strategy.extended._num_workers  # no public accessor
        num_workers = cluster_workers if num_workers is None else num_workers
        check_positive_int("num_workers", num_workers)
        check_momentum(momentum)
        check_positive_int("steps_per_closure", steps_per_closure)
        self.strategy = strategy
        self.num_workers = num_workers
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            self.model = model_fn()
            sizes = [int(v.shape.num_elements()) for v in self.model.trainable_variables]
            self.blocks = partition_blocks(sizes, num_workers)
            self.state = TrainingState(self.model, self.blocks, momentum)
        self.steps_per_closure = steps_per_closure
        self._assm_steps = self._steps_fn(self._assm_step)
        self._passm_steps = self._steps_fn(self._passm_step)
        self._last_loss = None
        self._iterator = None

    def _assm_step(self, iterator, rate):
        state = self.state
        state.steps_started.assign_add(1)
        features, labels = next(iterator)
        versions_read = [v.read_value() for v in state.versions]
        # Control dependencies make the version reads happen before the forward pass reads the
        # parameters; otherwise TF may run them last and every step would look fresh.
        with tf.control_dependencies(versions_read), tf.GradientTape() as tape:
            loss = mean_loss(self.model, features, labels)
        gradients = tape.gradient(loss, state.parameters)
        written = state.apply(range(len(state.parameters)), gradients, rate)
        for block, version in enumerate(versions_read):
            state.record(block, version, [written[i] for i in state.blocks[block]])
        state.finish_step(tf.shape(labels)[0], written)
        return loss

    def _passm_step(self, iterator, rate):
        state = self.state
        state.steps_started.assign_add(1)
        features, labels = next(iterator)

        def block_step(block: int) -> Callable[[], tf.Tensor]:
            def update() -> tf.Tensor:
                version_read = state.versions[block].read_value()
                indices = state.blocks[block]
                variables = [state.parameters[i] for i in indices]
                with (
                    tf.control_dependencies([version_read]),
                    tf.GradientTape(watch_accessed_variables=False) as tape,
                ):
                    tape.watch(variables)
                    loss = mean_loss(self.model, features, labels)
                written = state.apply(indices, tape.gradient(loss, variables), rate)
                state.record(block, version_read, written)
                return loss

            return update

        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        block = tf.cast(worker % len(state.blocks), tf.int32)
        # The Case op returns only after its branch's writes, so the count follows them.
        loss = tf.switch_case(block, [block_step(b) for b in range(len(state.blocks))])
        state.finish_step(tf.shape(labels)[0], [loss])
        return loss

    def _steps_fn(self, step: Callable[[Any, tf.Tensor], tf.Tensor]):
        def steps(iterator, rate, num_steps):
            # Several steps per scheduled closure: dispatching a closure costs the coordinator
            # ~10 ms of Python, more than a small model's step; every step still reads and
            # writes the parameter servers on its own, so the steps stay asynchronous.
            loss = tf.constant(0.0)
            for _ in tf.range(num_steps):
                loss = step(iterator, rate)
            return loss

        return tf.function(steps)

    def _start(self, dataset_fn: DatasetFn) -> None:
        def per_worker_dataset() -> tf.data.Dataset:
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            return dataset_fn(tf.cast(worker, tf.int64))

        self._iterator = iter(self.coordinator.create_per_worker_dataset(per_worker_dataset))

    def _train_chunk(self, mode: str, num_steps: int, learning_rate: float) -> None:
        if mode not in ("assm", "passm"):
            raise ValueError(
                f"AsyncPartitionedTrainer runs 'assm' or 'passm' phases, got {mode!r}."
            )
        steps_fn = self._passm_steps if mode == "passm" else self._assm_steps
        rate = tf.constant(learning_rate, tf.float32)
        while num_steps > 0:
            closure_steps = min(num_steps, self.steps_per_closure)
            self._last_loss = self.coordinator.schedule(
                steps_fn, args=(self._iterator, rate, tf.constant(closure_steps))
            )
            num_steps -= closure_steps

    def _finish_chunk(self) -> float | None:
        self.coordinator.join()
        return float(self._last_loss.fetch()) if self._last_loss is not None else None


class SynchronousTrainer(PhasedTrainer):
    """Synchronous SGD with the same momentum update, under any non-PS strategy.

    Gradients are averaged across replicas (``strategy.reduce``) and applied in cross-replica
    context, so the arithmetic is ASSM's with zero staleness. Several steps run per
    ``tf.function`` call (``tf.range`` loop) to keep Python off the hot path.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model_fn: Callable[[], keras.Model],
        *,
        momentum: float = 0.9,
    ):
        if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
            raise TypeError("use AsyncPartitionedTrainer (or mode='sync' through it) for PS.")
        check_momentum(momentum)
        self.strategy = strategy
        with strategy.scope():
            self.model = model_fn()
            self.blocks = [range(len(self.model.trainable_variables))]
            self.state = TrainingState(self.model, self.blocks, momentum)
        self._train_steps = tf.function(self._train_steps_fn)
        self._last_loss = None

    def _train_steps_fn(self, iterator, rate, num_steps):
        state = self.state
        strategy = self.strategy

        def replica_step(features, labels):
            with tf.GradientTape() as tape:
                loss = mean_loss(self.model, features, labels)
            return loss, tape.gradient(loss, state.parameters), tf.shape(labels)[0]

        loss = tf.constant(0.0)
        for _ in tf.range(num_steps):
            state.steps_started.assign_add(1)
            version = state.versions[0].read_value()
            with tf.control_dependencies([version]):
                losses, gradients, sizes = strategy.run(replica_step, args=next(iterator))
            mean = tf.distribute.ReduceOp.MEAN
            gradients = [strategy.reduce(mean, g, axis=None) for g in gradients]
            loss = strategy.reduce(mean, losses, axis=None)
            written = state.apply(range(len(state.parameters)), gradients, rate)
            state.record(0, version, written)
            state.finish_step(
                strategy.reduce(tf.distribute.ReduceOp.SUM, sizes, axis=None), written
            )
        return loss

    def _start(self, dataset_fn: DatasetFn) -> None:
        distributed = self.strategy.distribute_datasets_from_function(
            lambda context: dataset_fn(tf.constant(context.input_pipeline_id, tf.int64))
        )
        self._iterator = iter(distributed)
        # Compiled here, before the training clock starts (as `trainers.passm` does), so that
        # time to a target compares training, not tracing; a call of 0 steps runs none.
        self._train_steps(self._iterator, tf.constant(0.0), tf.constant(0))

    def _train_chunk(self, mode: str, num_steps: int, learning_rate: float) -> None:
        self._last_loss = self._train_steps(
            self._iterator, tf.constant(learning_rate, tf.float32), tf.constant(num_steps)
        )

    def _finish_chunk(self) -> float | None:
        return float(self._last_loss.numpy())
