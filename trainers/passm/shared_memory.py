"""ASSM / PASSM / PASSM+ in shared memory: c worker threads over one model, as the paper runs it.

Example (the binary; one host, so this backend is the default)::

    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/passm

Example (the library)::

    import keras
    import tensorflow as tf
    from trainers.passm import schedule
    from trainers.passm import SharedMemoryTrainer

    model_fn = lambda: keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
    )
    trainer = SharedMemoryTrainer(model_fn, num_workers=2)
    dataset_fn = lambda worker_index: tf.data.Dataset.from_tensors(
        (tf.zeros([4, 8]), tf.zeros([4], tf.int32))
    ).repeat()
    phases = schedule.make_schedule(
        "passm_plus", num_steps=20, num_workers=2, learning_rate=0.1
    )
    result = trainer.run(dataset_fn, phases, eval_every=10)
    print(result["staleness_mean"], result["max_concurrent_writers"])

The paper (§4) runs c processes on one device over one model in shared memory, each with its own
minibatches and momentum. Here the c workers are Python threads of one process, each running its
own compiled steps (`trainers.passm.steps.WorkerSteps`); TensorFlow releases the GIL while a graph
runs, so their steps overlap on the device's cores (or an accelerator's streams). Worker w reads
its own input pipeline (``dataset_fn(w)``: its share of the stream), keeps momentum set w, and
in PASSM writes only block w (`trainers.passm.blocks`), lock-free; in ASSM it writes the whole
model under one ``tf.CriticalSection``. PASSM+ is the schedule's phases
(`trainers.passm.schedule`); between phases every worker finishes its steps.

A phase's steps are claimed from a shared count, ``steps_per_call`` at a time, so a faster worker
runs more of them (as a parameter-server coordinator hands work to whichever worker is free);
in PASSM that worker's block gets more updates. The outer loop (evaluation, checkpoints,
metrics, resume) is `trainers.passm.phased.PhasedTrainer`'s, shared with the other backends.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from trainers.passm.blocks import partition_blocks
from trainers.passm.phased import (
    DatasetFn,
    PhasedTrainer,
    check_bool,
    check_momentum,
    check_positive_int,
)
from trainers.passm.staleness import UpdateMeter
from trainers.passm.state import TrainingState
from trainers.passm.steps import MODES, WorkerSteps


class SharedMemoryTrainer(PhasedTrainer):
    """c concurrent workers in this process over one set of variables (see the module doc).

    Args:
      model_fn: builds the (already built, i.e. with an ``Input``) Keras model, once.
      num_workers: c, the number of worker threads and of PASSM blocks.
      momentum: heavy-ball momentum m in [0, 1); each worker keeps its own buffers.
      steps_per_call: steps a worker runs per compiled call (one graph, GIL released); more
        amortise Python's dispatch, fewer balance the last steps of a phase better.
      weight_prediction: each worker takes its gradient at its read less its own momentum's
        next step, on what it writes (`trainers.passm.steps`); False (the paper's rule) takes
        it at the read.

    Raises:
      ValueError: a count or the momentum out of range, a non-bool ``weight_prediction``, or a
        model with fewer variables than ``num_workers`` (the message names the value and the
        fix).
    """

    def __init__(
        self,
        model_fn: Callable[[], keras.Model],
        *,
        num_workers: int,
        momentum: float = 0.9,
        steps_per_call: int = 10,
        weight_prediction: bool = False,
    ):
        check_positive_int("num_workers", num_workers)
        check_momentum(momentum)
        check_positive_int("steps_per_call", steps_per_call)
        check_bool("weight_prediction", weight_prediction)
        self.strategy = tf.distribute.get_strategy()
        self.num_workers = num_workers
        self.steps_per_call = steps_per_call
        self.model = model_fn()
        sizes = [int(v.shape.num_elements()) for v in self.model.trainable_variables]
        self.blocks = partition_blocks(sizes, num_workers)
        self.state = TrainingState(self.model, self.blocks, momentum, num_momentum_sets=num_workers)
        # Tracked by the state, so checkpoints hold the staleness counts with the model.
        self.state.update_meter = UpdateMeter(num_workers)
        self.meter = self.state.update_meter
        # A lock is a host object on any accelerator; the writes it guards stay where they are.
        with tf.device("/cpu:0"):
            self.lock = tf.CriticalSection(name="assm_write_lock")
        self.workers = [
            WorkerSteps(
                self.model,
                self.state,
                self.meter,
                worker=w,
                lock=self.lock,
                weight_prediction=weight_prediction,
            )
            for w in range(num_workers)
        ]
        self._iterators: list[Any] = []
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._futures: list[concurrent.futures.Future] = []
        self._claim = threading.Lock()
        self._remaining = 0
        self._stop = threading.Event()
        self._last_losses: list[float | None] = [None] * num_workers
        self._modes: list[str] = []
        self._traced: set[str] = set()

    def run(self, dataset_fn: DatasetFn, phases, **kwargs) -> dict[str, Any]:
        """`PhasedTrainer.run`, plus the model-wide staleness of `UpdateMeter.summary`
        (``staleness_mean``, ``staleness_max``, per worker, ``max_concurrent_writers``)."""
        # Compiled in _start, before the training clock starts (tracing is set-up, as building
        # the model is); c workers trace 2c functions, which would otherwise count against c.
        self._modes = sorted({phase.mode for phase in phases} & set(MODES))
        try:
            result = super().run(dataset_fn, phases, **kwargs)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        return {**result, **self.meter.summary(), "num_workers": self.num_workers}

    def _start(self, dataset_fn: DatasetFn) -> None:
        self._iterators = [
            iter(dataset_fn(tf.constant(w, tf.int64))) for w in range(self.num_workers)
        ]
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.num_workers, thread_name_prefix="passm_worker"
        )
        for mode in self._modes:
            self._trace(mode)

    def _trace(self, mode: str) -> list[Callable]:
        """Each worker's compiled steps of ``mode``, traced here, one at a time (Keras layers
        are not safe to trace from several threads); a call of 0 steps runs none."""
        functions = [worker.function(mode) for worker in self.workers]
        if mode not in self._traced:
            for function, iterator in zip(functions, self._iterators, strict=True):
                function(iterator, tf.constant(0.0), tf.constant(0))
            self._traced.add(mode)
        return functions

    def _train_chunk(self, mode: str, num_steps: int, learning_rate: float) -> None:
        if mode not in MODES:
            raise ValueError(
                f"SharedMemoryTrainer runs {MODES} phases, got {mode!r}; build the phases with "
                "trainers.passm.schedule.make_schedule (mode 'sync' trains with "
                "SynchronousTrainer)."
            )
        rate = tf.constant(learning_rate, tf.float32)
        functions = self._trace(mode)  # already traced by _start when run() saw the phases
        self._remaining = num_steps
        self._last_losses = [None] * self.num_workers
        self._stop.clear()
        self._futures = [
            self._pool.submit(self._work, w, functions[w], rate) for w in range(self.num_workers)
        ]

    def _work(self, worker: int, function: Callable, rate: tf.Tensor) -> int:
        """Worker ``worker``'s share of the phase: claims steps until none are left."""
        done = 0
        try:
            while not self._stop.is_set():
                with self._claim:
                    claimed = min(self.steps_per_call, self._remaining)
                    self._remaining -= claimed
                if claimed == 0:
                    break
                loss = function(self._iterators[worker], rate, tf.constant(claimed))
                self._last_losses[worker] = float(loss)
                done += claimed
        except BaseException:
            self._stop.set()  # the others stop after their current call; the error surfaces
            raise
        return done

    def _finish_chunk(self) -> float | None:
        try:
            concurrent.futures.wait(self._futures)
        except BaseException:
            # Ctrl-C lands here: let every worker finish its current call, so the state a
            # checkpoint saves next is not being written.
            self._stop.set()
            concurrent.futures.wait(self._futures)
            raise
        errors = [f.exception() for f in self._futures if f.exception() is not None]
        if errors:
            raise errors[0]
        losses = [loss for loss in self._last_losses if loss is not None]
        return sum(losses) / len(losses) if losses else None
