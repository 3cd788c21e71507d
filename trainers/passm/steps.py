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

Weight prediction (``weight_prediction=True``; after SpecTrain, Chen et al. 2018): a step's
gradient is about one update stale (`benchmarks/async_staleness_ablation.py`: one stale update
under momentum 0.9 costs ~13 points). So worker w takes it not at its read x but one step of
its own momentum further, x − η·m·u_w, on what w writes (every variable in ASSM, its block in
PASSM). At c = 2 in ASSM, u_w stands for the momentum of the update that lands in between (the
other worker's is statistically the same); it is also Nesterov's look-ahead for w's own next
update (measured: ASSM −0.9 points vs sequential with it, −9.05 without; PASSM −10.6 and
−12.3). The ablation's literal rule, the other workers' buffers (x − η·m·Σ_{v≠w} u_v on what
each writes), was measured first and did worse (ASSM −7.3 points vs sequential, PASSM −29.7
against −13.3 without prediction; docs/studies/async_partitioned.md has both). In PASSM only
w's own block is predicted (w is its only writer); the other blocks are read as they are. The
forward pass runs at those values with ``keras.Model.stateless_call``; the shared variables
are not touched.

A call runs ``num_steps`` steps in one graph (``tf.range`` loop): Python is off the hot path and
the GIL is released for the whole call, so c workers' calls run at the same time. Each step
reads the versions (model and blocks) before its forward pass and records its staleness at
write time (`trainers.passm.staleness`).
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from trainers.passm.phased import check_bool, logits_loss, mean_loss
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
      weight_prediction: take each gradient at the read less this worker's next momentum step
        (see the module doc); False takes it at the read, as the paper does.
    """

    def __init__(
        self,
        model: keras.Model,
        state: TrainingState,
        meter: UpdateMeter,
        *,
        worker: int,
        lock: tf.CriticalSection,
        weight_prediction: bool = False,
    ):
        check_bool("weight_prediction", weight_prediction)
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
        self.weight_prediction = weight_prediction
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
        loss, gradients = self._gradients(
            "assm", features, labels, rate, after=[model_version, *block_versions]
        )

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
        loss, gradients = self._gradients(
            "passm", features, labels, rate, after=[model_version, block_version]
        )

        def update() -> list[tf.Tensor]:
            written = state.apply(indices, gradients, rate, momentum_set=self.worker)
            return [*written, *state.record(block, block_version, written)]

        written = meter.write(self.worker, model_version, update)
        state.finish_step(tf.shape(labels)[0], written)
        return loss

    def _gradients(self, mode, features, labels, rate, *, after) -> tuple:
        """The loss and the gradients of what ``mode`` writes (every variable in ASSM, block w
        in PASSM), at the parameters read after ``after`` (the version reads: read first, or TF
        may order them last and every step would look fresh), or at their prediction."""
        state = self.state
        writes = range(len(state.parameters)) if mode == "assm" else state.blocks[self.worker]
        with tf.control_dependencies(after):
            if not self.weight_prediction:
                variables = [state.parameters[i] for i in writes]
                with tf.GradientTape(watch_accessed_variables=False) as tape:
                    tape.watch(variables)
                    loss = mean_loss(self.model, features, labels)
                return loss, tape.gradient(loss, variables)
            point = self._predicted_parameters(mode, rate)
            buffers = [b.read_value() for b in state.buffers]
        watched = [point[i] for i in writes]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(watched)
            logits, buffers = self.model.stateless_call(point, buffers, features, training=True)
            loss = logits_loss(labels, logits)
        # What a stateful forward pass would have written (e.g. batch-norm statistics).
        for variable, value in zip(state.buffers, buffers, strict=True):
            variable.assign(value)
        return loss, tape.gradient(loss, watched)

    def _predicted_parameters(self, mode: str, rate) -> list[tf.Tensor]:
        """The read x less η·m·u_w on every variable worker w writes in ``mode`` (u_w its own
        buffer, which only w writes): its momentum's next step, the part of the coming updates
        known at the read (their gradients are not)."""
        state = self.state
        point = [p.read_value() for p in state.parameters]
        if state.momentum == 0:
            return point
        momenta = state.momentum_sets[self.worker]
        writes = range(len(point)) if mode == "assm" else state.blocks[self.worker]
        for i in writes:
            step = tf.cast(rate, point[i].dtype) * state.momentum
            point[i] = point[i] - step * momenta[i].read_value()
        return point
