"""The loop both asynchronous backends share: chunks of a PASSM+ schedule, evaluation,
checkpoints and metrics (`PhasedTrainer`, `PhasedLoop`), and the loss they differentiate.

A backend implements ``_start`` (its input), ``_train_chunk`` (schedule one phase's steps) and
``_finish_chunk`` (wait for them): `trainers.passm.SharedMemoryTrainer` (one host, c threads
over one model) and `trainers.passm.parameter_server.AsyncPartitionedTrainer` (several hosts).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from trainers import checkpointing, controller, metrics_writer
from trainers.passm.schedule import Phase
from trainers.passm.state import TrainingState

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


def logits_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """`mean_loss` of logits already computed (a ``stateless_call`` at other parameters)."""
    return _LOSS(labels, logits)


def check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}.")


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
        resume_warning: str | None = None,
        resumed_trained=None,
        progress_bar: bool = False,
    ) -> dict[str, Any]:
        """Trains through ``phases``; evaluates and checkpoints every ``eval_every`` steps.

        The outer loop is the synchronous trainer's (``trainers.controller``): one inner loop
        per ``eval_every`` steps, each split at phase boundaries into chunks (the coordinator
        waits for all scheduled steps at the end of a chunk; between, workers run freely).

        Args:
          dataset_fn: ``dataset_fn(worker_index)`` -> infinite dataset of (features, labels).
          phases: from `trainers.passm.schedule.make_schedule`.
          eval_every: steps between evaluations/checkpoints.
          evaluate: ``evaluate(model)`` -> accuracy; optional.
          workdir: if set, checkpoints go to ``workdir/checkpoints`` (and a run resumes from
            them), metrics to ``workdir/metrics.jsonl`` and TensorBoard (``metrics_writer``;
            ``trained_examples`` counts the examples of the updates applied, see
            `ExampleCountingWriter`).
          target_accuracy: if set, ``train_seconds_to_target`` is the training time (evaluation
            excluded) at the first evaluation reaching it.
          resume_warning: printed on stderr before the first metrics row of a resumed run
            (``workdir_config.resume_warning``).
          resumed_trained: called then, with no argument (``workdir_config.trained_on``).
          progress_bar: show the steps and the last accuracy on stderr (when it is a terminal).

        Returns:
          A dict of the whole run, across resumes (the clock and history are checkpointed with
          the state): ``history`` (step, mode, learning_rate, train_seconds, loss, accuracy per
          evaluation), ``final_accuracy`` (a run resumed at its last step trains nothing and
          reports the restored model's), ``train_seconds``, ``train_seconds_to_target``,
          ``start_step`` (the step this call resumed at, 0 on a fresh workdir), the counters of
          `TrainingState.counters`, ``retried_steps``, ``duplicate_updates`` and ``blocks``.

        Raises:
          ParameterServerLostError: a parameter server died; the message names the checkpoint.
          checkpointing.CheckpointRestoreError: ``workdir``'s checkpoint does not fit this
            trainer's state (another model or number of workers).
        """
        check_positive_int("eval_every", eval_every)
        phases = list(phases)
        if not phases:
            raise ValueError("phases is empty; build it with passm_schedule.make_schedule.")
        clock, history = controller.RunClock(), RunHistory()
        manager = self._restored_manager(workdir, clock, history) if workdir else None
        inner = PhasedLoop(self, phases, evaluate, clock, history)
        start_step = inner.step
        self._start(dataset_fn)
        schedule = _outer_schedule(phases[-1].stop, eval_every, target_accuracy, progress_bar)
        with contextlib.ExitStack() as stack:
            writer = None
            if workdir:
                notes = (resume_warning, resumed_trained) if start_step else (None, None)
                writer = self._metrics_writer(stack, workdir, start_step, *notes)
            outer = controller.Controller(
                schedule, trainer=inner, clock=clock, manager=manager, writer=writer
            )
            _run_reporting_lost_servers(outer, inner, manager)
        return self._result(inner, clock, start_step, self._final_accuracy(inner, start_step))

    def _final_accuracy(self, inner: PhasedLoop, start_step: int) -> float | None:
        if inner.step == start_step and inner.evaluate_fn is not None:
            # Nothing trained (the workdir's run already reached the end; the controller says
            # so): the result reports the restored model's accuracy, not the history's.
            return float(inner.evaluate_fn(self.model))
        return inner.last_accuracy()

    def _restored_manager(
        self, workdir: str, clock: controller.RunClock, history: RunHistory
    ) -> tf.train.CheckpointManager:
        """Checkpoints of the state, clock and history in ``workdir/checkpoints``, the newest
        restored (one written before the clock and history were saved restores without them:
        the run's time and history then start at the resume)."""
        manager = checkpointing.make_manager(
            os.path.join(workdir, "checkpoints"),
            max_to_keep=2,
            state=self.state,
            clock=clock,
            history=history,
        )
        restored = checkpointing.restore_latest(
            manager,
            first=tf.train.Checkpoint(clock=clock, history=history),
            required=tf.train.Checkpoint(state=self.state),
        )
        if restored:
            step = int(self.state.completed_steps.numpy())
            print(f"Resumed from {restored} at step {step}.", file=sys.stderr)
        return manager

    def _metrics_writer(
        self, stack: contextlib.ExitStack, workdir: str, start_step: int, note, at_first_row
    ) -> metrics_writer.NoteBeforeFirstRow:
        # Rows past the restored step (written before a kill) go: none is logged twice.
        rows = metrics_writer.MetricsWriter(workdir, start_step=start_step)
        counted = ExampleCountingWriter(stack.enter_context(rows), self.state)
        return metrics_writer.NoteBeforeFirstRow(counted, note, at_first_row)

    def _result(
        self,
        inner: PhasedLoop,
        clock: controller.RunClock,
        start_step: int,
        final_accuracy: float | None,
    ) -> dict:
        counters = self.state.counters()
        return {
            "history": inner.history,
            "final_accuracy": final_accuracy,
            "train_seconds": float(clock.seconds.numpy()),
            "train_seconds_to_target": (
                float(clock.target_seconds.numpy()) if clock.reached() else None
            ),
            "start_step": start_step,
            "retried_steps": counters["steps_started"] - counters["completed_steps"],
            "duplicate_updates": counters["updates_applied"] - counters["completed_steps"],
            "blocks": [[b.start, b.stop] for b in self.blocks],
            **counters,
        }


class RunHistory(tf.Module):
    """The run's evaluation records, checkpointed with its state (as JSON in a string
    variable), so that the result of a resumed run covers the whole run."""

    def __init__(self):
        super().__init__(name="run_history")
        self.records_json = tf.Variable("[]", dtype=tf.string, trainable=False)

    def records(self) -> list[dict[str, Any]]:
        return json.loads(self.records_json.numpy().decode())

    def save(self, records: list[dict[str, Any]]) -> None:
        self.records_json.assign(json.dumps(records))


class ExampleCountingWriter:
    """A ``metrics_writer.MetricsWriter`` whose rows count the examples the updates trained on.

    The controller counts steps x ``Schedule.batch_size``, which this trainer cannot give: a
    step is one worker's update on its own batch, and a parameter-server step that a dying worker
    left may run twice. The state counts each applied update's batch (``examples_seen``, summed
    over the workers and checkpointed, so a resumed run counts on), and nothing is echoed, so
    every example trained is fresh.
    """

    def __init__(self, writer: metrics_writer.MetricsWriter, state: TrainingState):
        self.writer = writer
        self.state = state

    def write(self, step: int, scalars: dict[str, float]) -> None:
        """``writer.write`` with ``trained_examples`` and ``fresh_examples_trained`` counted."""
        examples = float(self.state.examples_seen.numpy())
        counts = {"trained_examples": examples, "fresh_examples_trained": examples}
        self.writer.write(step, {**scalars, **counts, "echo_ratio": 1.0})


class PhasedLoop:
    """A trainer's steps through the PASSM+ phases, as ``trainers.controller``'s inner loop.

    ``train(num_steps)`` runs the next ``num_steps`` steps, one chunk per phase they cross
    (each chunk ends when every scheduled step has); ``evaluate()`` records a history entry.
    ``step`` counts the steps the coordinator saw finish, in Python, so it can still be read
    (for the error message) after a parameter server is gone.
    """

    def __init__(
        self,
        trainer: PhasedTrainer,
        phases: Sequence[Phase],
        evaluate: EvaluateFn | None,
        clock: controller.RunClock,
        history: RunHistory,
    ):
        self.trainer = trainer
        self.phases = list(phases)
        self.evaluate_fn = evaluate
        self._clock, self._saved_history = clock, history
        self.step = int(trainer.state.completed_steps.numpy())
        self.history: list[dict[str, Any]] = history.records()  # restored: the whole run's
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
        scalars = {"learning_rate": self._last["learning_rate"], "loop_seconds": seconds}
        if self._last["loss"] is not None:
            scalars["train_loss"] = self._last["loss"]
        return scalars

    def evaluate(self) -> dict[str, float]:
        accuracy = float(self.evaluate_fn(self.trainer.model)) if self.evaluate_fn else None
        # The controller has added the loop's time to the run's (checkpointed) clock.
        seconds = float(self._clock.seconds.numpy())
        record = {"step": self.step, **self._last, "train_seconds": seconds}
        record["accuracy"] = accuracy
        self.history.append(record)
        self._saved_history.save(self.history)  # checkpointed with the state after this
        logging.info("step %d %s", self.step, record)
        return {} if accuracy is None else {"eval_accuracy": accuracy}

    def last_accuracy(self) -> float | None:
        """The newest record's accuracy (None before the first evaluation)."""
        return self.history[-1]["accuracy"] if self.history else None


def _outer_schedule(
    num_steps: int, eval_every: int, target_accuracy: float | None, progress_bar: bool
) -> controller.Schedule:
    """One inner loop per evaluation and checkpoint; evaluation is kept off the clock."""
    return controller.Schedule(
        num_steps=num_steps,
        steps_per_loop=eval_every,
        eval_every_steps=eval_every,
        checkpoint_every_steps=eval_every,
        target_accuracy=target_accuracy or 0.0,
        evaluation_on_clock=False,
        progress_bar=progress_bar,
    )


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
