"""One shared-memory worker's compiled steps: ASSM under the write lock, PASSM on its block.

Example::

    import keras
    import tensorflow as tf
    from trainers.passm.state import TrainingState
    from trainers.passm.staleness import UpdateMeter
    from trainers.passm.steps import WorkerSteps

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(3)])
    state = TrainingState(model, [range(0, 2), range(2, 4)], 0.9, num_momentum_sets=2)
    meter = UpdateMeter(num_workers=2)
    steps = WorkerSteps(model, state, meter, worker=1, lock=tf.CriticalSection())
    data = tf.data.Dataset.from_tensors((tf.zeros([8, 4]), tf.zeros([8], tf.int32))).repeat()
    loss = steps.function("passm")(iter(data), tf.constant(0.1), tf.constant(3))
    # 3 updates of block 1 (the second Dense layer) with worker 1's own momentum.

Update rules (paper Algorithm 1 with heavy-ball momentum u ← m·u + g, x ← x − η·u, through
`TrainingState.apply`; worker w uses momentum set w, its own, as the paper's processes do):

- ASSM: read the model (lock-free), compute the full gradient, then write every variable inside
  a ``tf.CriticalSection``: no two updates interleave their writes.
- PASSM: worker w back-propagates only to block w (``GradientTape(watch_accessed_variables=False)``
  + ``tape.watch``; inside ``tf.function`` the rest of the backward pass is never built) and
  writes block w without a lock; it is block w's only writer.

A call runs ``num_steps`` steps in one graph (``tf.range`` loop): Python is off the hot path and
the GIL is released for the whole call, so c workers' calls run at the same time. Each step
reads the versions (model and blocks) before its forward pass and records its staleness at
write time (`trainers.passm.staleness`).
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from trainers.passm.phased import mean_loss
from trainers.passm.staleness import UpdateMeter
from trainers.passm.state import TrainingState

MODES = ("assm", "passm")


class WorkerSteps:
    """Worker ``worker``'s ``steps(iterator, rate, num_steps) -> last loss`` per mode.

    Args:
      model: the shared Keras model (its variables are ``state.parameters``).
      state: the shared `TrainingState`, with one momentum set per worker.
      meter: the shared `UpdateMeter`.
      worker: w in [0, c); PASSM writes block w, momentum set w is the worker's own.
      lock: the ``tf.CriticalSection`` every worker's ASSM writes go through.
    """

    def __init__(
        self,
        model: keras.Model,
        state: TrainingState,
        meter: UpdateMeter,
        *,
        worker: int,
        lock: tf.CriticalSection,
    ):
        if not 0 <= worker < len(state.blocks):
            raise ValueError(
                f"worker must be in [0, {len(state.blocks)}) (one PASSM block per worker), "
                f"got {worker}."
            )
        if len(state.momentum_sets) <= worker:
            raise ValueError(
                f"state has {len(state.momentum_sets)} momentum sets, worker {worker} needs its "
                f"own; build it with TrainingState(..., num_momentum_sets={len(state.blocks)})."
            )
        self.model, self.state, self.meter = model, state, meter
        self.worker, self.lock = worker, lock
        self._functions: dict[str, Callable] = {}

    def function(self, mode: str) -> Callable:
        """The compiled ``steps(iterator, rate, num_steps)`` of ``mode`` ('assm' or 'passm')."""
        if mode not in MODES:
            raise ValueError(f"a shared-memory worker runs {MODES} steps, got mode {mode!r}.")
        if mode not in self._functions:
            step = self._assm_step if mode == "assm" else self._passm_step

            def steps(iterator, rate, num_steps):
                loss = tf.constant(0.0)
                for _ in tf.range(num_steps):
                    loss = step(iterator, rate)
                return loss

            self._functions[mode] = tf.function(steps)
        return self._functions[mode]

    def _assm_step(self, iterator, rate) -> tf.Tensor:
        state, meter = self.state, self.meter
        state.steps_started.assign_add(1)
        features, labels = next(iterator)
        model_version = meter.read()
        block_versions = [v.read_value() for v in state.versions]
        # The version reads must precede the forward pass's parameter reads, or TF may order
        # them last and every step would look fresh.
        with (
            tf.control_dependencies([model_version, *block_versions]),
            tf.GradientTape() as tape,
        ):
            loss = mean_loss(self.model, features, labels)
        gradients = tape.gradient(loss, state.parameters)

        def update() -> list[tf.Tensor]:
            written = state.apply(
                range(len(state.parameters)), gradients, rate, momentum_set=self.worker
            )
            recorded = [
                op
                for block, version in enumerate(block_versions)
                for op in state.record(block, version, [written[i] for i in state.blocks[block]])
            ]
            return [*written, *recorded]

        def locked_write() -> list[tf.Tensor]:
            return meter.write(self.worker, model_version, update)

        # Not exclusive: the forward passes read the same variables outside the lock (reads are
        # lock-free in ASSM; only the read-modify-write of the update is serialised).
        written = self.lock.execute(locked_write, exclusive_resource_access=False)
        state.finish_step(tf.shape(labels)[0], written)
        return loss

    def _passm_step(self, iterator, rate) -> tf.Tensor:
        state, meter, block = self.state, self.meter, self.worker
        state.steps_started.assign_add(1)
        features, labels = next(iterator)
        model_version = meter.read()
        block_version = state.versions[block].read_value()
        indices = state.blocks[block]
        variables = [state.parameters[i] for i in indices]
        with (
            tf.control_dependencies([model_version, block_version]),
            tf.GradientTape(watch_accessed_variables=False) as tape,
        ):
            tape.watch(variables)
            loss = mean_loss(self.model, features, labels)
        gradients = tape.gradient(loss, variables)

        def update() -> list[tf.Tensor]:
            written = state.apply(indices, gradients, rate, momentum_set=self.worker)
            return [*written, *state.record(block, block_version, written)]

        written = meter.write(self.worker, model_version, update)
        state.finish_step(tf.shape(labels)[0], written)
        return loss
