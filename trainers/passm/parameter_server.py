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
    from trainers import local_cluster
    from trainers.passm import parameter_server, schedule

    cluster = local_cluster.start_in_process(num_workers=2)
    strategy = tf.distribute.ParameterServerStrategy(cluster.resolver)
    model_fn = lambda: keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
    )
    trainer = parameter_server.AsyncPartitionedTrainer(strategy, model_fn, num_workers=2)
    dataset_fn = lambda worker_index: tf.data.Dataset.from_tensors(
        (tf.zeros([4, 8]), tf.zeros([4], tf.int32))
    ).repeat()
    phases = schedule.make_schedule(
        "passm_plus", num_steps=20, num_workers=2, learning_rate=0.1
    )
    result = trainer.run(dataset_fn, phases, eval_every=10)

Update rules (paper Algorithm 1 with the authors' heavy-ball momentum, u ← m·u + g, x ← x − η·u):

- ASSM: each step reads the whole model, computes the full gradient and writes every variable.
- PASSM: the worker with index w owns block w of the parameter list (contiguous ranges balanced
  by element count, `trainers.passm.blocks`). It back-propagates only to its block
  (``GradientTape(watch_accessed_variables=False)`` + ``tape.watch``; inside ``tf.function`` the
  unused part of the backward pass is pruned) and writes only that block, lock-free. Routing uses
  ``experimental_get_current_worker_index()`` + ``tf.switch_case``. Keras optimizers fail inside
  ``switch_case``, so the momentum update is written out on the block's ``tf.Variable``s, with one
  momentum buffer per variable on the parameter servers (per block, so per owning worker).
- PASSM+: a schedule of ASSM and PASSM phases (`trainers.passm.schedule`).

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
by the config, `trainers.passm.experiment.train_and_evaluate` logs a warning and trains
synchronously with the same momentum update (`SynchronousTrainer`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from trainers.passm.blocks import partition_blocks
from trainers.passm.phased import (
    DatasetFn,
    PhasedTrainer,
    check_momentum,
    check_positive_int,
    mean_loss,
)
from trainers.passm.state import TrainingState


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
