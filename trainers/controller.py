"""The outer loop, in Orbit's shape: train N steps, evaluate, checkpoint, log, feed back.

Example::

    from trainers import controller

    outer = controller.Controller(
        controller.Schedule.from_run_config(config), trainer=trainer, techniques=techniques,
        counts=counts, manager=manager, writer=writer,
    )
    step, evaluation = outer.run()

The inner loop is ``trainers.loop.Trainer.train(num_steps)`` (one ``tf.function`` call, after
which every technique observes the loop's feedback) or the asynchronous partitioned trainer's
(``trainers.passm.parameter_server``: closures scheduled on parameter-server workers). Around it the
controller runs to ``schedule.num_steps`` in loops that end at every multiple of ``steps_per_loop``,
``eval_every_steps`` and ``checkpoint_every_steps``; evaluates there (and when the fresh
examples consumed cross a multiple of ``eval_every_fresh_examples``); records the first
crossing of ``target_accuracy`` (and stops there with ``stop_at_target``); ends, evaluates and
checkpoints early when a technique's ``progress()`` reaches 1 (a run pruning measures in
epochs, ``num_steps`` being its upper bound); writes one metrics
row per loop with the techniques' scalars and the counts (``trained_examples``, steps x batch;
``fresh_examples_trained``, the fresh examples behind them; their ``echo_ratio``, 1.0 exactly
without echo; and the pipeline's own ``fresh_examples`` and ``emitted_examples``, which include
what its buffers read ahead); and saves checkpoints (also at the step reached when
Ctrl-C or the binary's SIGTERM interrupts it: ``RunInterrupted``). Evaluation is on the run's
clock (part of the cost of reaching the target) unless ``Schedule.evaluation_on_clock`` is off.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import tensorflow as tf
import tqdm

from echoing import meters as echo_meters
from echoing.techniques import Technique
from trainers import checkpointing, interrupts, metrics_writer
from trainers.run_stops import RunInterrupted, TrainingDiverged, check_finite, checkpoint_step

__all__ = ["Controller", "InnerLoop", "RunClock", "RunInterrupted", "Schedule", "TrainingDiverged"]


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When the outer loop stops to evaluate, checkpoint and log, and when it ends.

    Attributes:
      num_steps: the step training ends at.
      steps_per_loop: most train steps per inner loop (one ``train`` call).
      eval_every_steps, checkpoint_every_steps: every multiple of these ends a loop there.
      eval_every_fresh_examples: > 0 also evaluates after the loop in which the fresh examples
        consumed (``batch_size`` / echo factor per step) cross a multiple of it.
      batch_size: global batch size, for ``eval_every_fresh_examples``.
      target_accuracy: its first crossing at an evaluation is recorded (0: no target).
      stop_at_target: end at that crossing.
      evaluation_on_clock: count evaluation time as training time (the cost of reaching the
        target); False keeps the clock to training alone.
      progress_bar: show a tqdm bar on stderr (when it is a terminal).
    """

    num_steps: int
    steps_per_loop: int
    eval_every_steps: int
    checkpoint_every_steps: int
    eval_every_fresh_examples: int = 0
    batch_size: int = 0
    target_accuracy: float = 0.0
    stop_at_target: bool = False
    evaluation_on_clock: bool = True
    progress_bar: bool = False

    @classmethod
    def from_run_config(cls, config) -> Schedule:
        """The schedule of a ``trainers.run_config`` config."""
        return cls(
            num_steps=config.num_steps,
            steps_per_loop=config.steps_per_loop,
            eval_every_steps=config.eval_every_steps,
            checkpoint_every_steps=config.checkpoint_every_steps,
            eval_every_fresh_examples=config.eval_every_fresh_examples,
            batch_size=config.data.batch_size,
            target_accuracy=config.target_accuracy,
            stop_at_target=config.stop_at_target,
            progress_bar=config.progress_bar,
        )


class InnerLoop(Protocol):
    """What the controller drives: ``trainers.loop.Trainer`` or the asynchronous trainer.

    ``step`` is the global step (a ``tf.Variable`` or an int); ``train(num_steps)`` returns
    scalars including ``"loop_seconds"`` (its wall time); ``evaluate()`` returns scalars, with
    ``"eval_accuracy"`` when there is an eval set.
    """

    step: Any

    def train(self, num_steps: int) -> dict[str, float]: ...

    def evaluate(self) -> dict[str, float]: ...


class RunClock(tf.Module):
    """Checkpointed run state: training seconds so far and the first crossing of the target."""

    def __init__(self):
        super().__init__(name="run_clock")
        self.seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="seconds")
        self.target_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="target_step")
        self.target_seconds = tf.Variable(-1.0, dtype=tf.float64, trainable=False)
        self.target_fresh = tf.Variable(-1, dtype=tf.int64, trainable=False)
        # Fresh examples behind the steps so far (-1: unknown, a checkpoint from before it):
        # saved, because the echo factor a resumed run starts with may not be the one before.
        self.fresh_trained = tf.Variable(-1.0, dtype=tf.float64, trainable=False)

    def reached(self) -> bool:
        return int(self.target_step.numpy()) >= 0

    def record_target(self, target: float, accuracy: float, step: int, fresh: int) -> None:
        """Records ``step`` as the target's first crossing if ``accuracy`` reaches it."""
        if target and not self.reached() and accuracy >= target:
            self.target_step.assign(step)
            self.target_seconds.assign(self.seconds.numpy())
            self.target_fresh.assign(fresh)


class Controller:
    """Drives an ``InnerLoop`` to ``schedule.num_steps`` (see the module docstring)."""

    def __init__(
        self,
        schedule: Schedule,
        *,
        trainer: InnerLoop,
        techniques: Sequence[Technique] = (),
        counts: echo_meters.EchoMeters | None = None,
        clock: RunClock | None = None,
        manager: tf.train.CheckpointManager | None = None,
        writer: metrics_writer.MetricsWriter | None = None,
    ):
        self.schedule = schedule
        self.trainer = trainer
        self.techniques = tuple(techniques)
        self.counts = counts
        self.clock = clock or RunClock()
        self.manager = manager
        self.writer = writer
        # Fresh examples behind the batches trained on (batch / echo factor per step), and at the
        # last evaluation: the fresh meter counts what entered the pipeline, which runs ahead by
        # its buffers, so it is not what training consumed.
        self._consumed = self._consumed_at_eval = 0.0
        # Decided once per inner loop (before its scalars are read, so the logged counts agree).
        self._finished = False
        self._last_progress = None  # (step, progress) after the last inner loop
        self._logged_step = self._start_step = 0

    def fresh_trained(self) -> int:
        """Fresh examples behind the batches trained on so far (batch / echo factor per step)."""
        return round(self._consumed)

    def _trained_counts(self, step: int) -> dict[str, float]:
        """What the steps so far trained on, and the fresh examples behind it (no read-ahead)."""
        trained = step * self.schedule.batch_size
        fresh = self._consumed
        return {
            "trained_examples": float(trained),
            "fresh_examples_trained": float(round(fresh)),
            "echo_ratio": trained / fresh if fresh else 1.0,
        }

    def stopped(self) -> bool:
        return (self.schedule.stop_at_target and self.clock.reached()) or self._finished

    def _echo_factor(self) -> float:
        """The techniques' echo factors together: each fresh example's rows in the batches."""
        return math.prod(t.echo_factor() for t in self.techniques)

    def _run_done(self) -> bool:
        """Whether a technique measuring the run in its own units (pruning: epochs) says the
        run is done; checked after each inner loop."""
        return self._run_progress() >= 1.0

    def _run_progress(self) -> float:
        """The furthest of the techniques' ``progress()`` (0 when none measures the run)."""
        progress = [t.progress() for t in self.techniques]
        return max([float(value) for value in progress if value is not None] or [0.0])

    def _steps_to_run_end(self, step: int) -> int | None:
        """Steps until the techniques' progress reaches 1 (from the fresh examples a technique
        says are left at least, else at the last loop's rate), so that the loop that ends the
        run stops there instead of running to its full length."""
        progress = self._run_progress()
        last, self._last_progress = self._last_progress, (step, progress)
        known = [t.fresh_examples_to_end() for t in self.techniques if t.progress() is not None]
        known = [examples for examples in known if examples is not None]
        if known:  # the examples left (or at least that many), at the loop's echo factor
            echo_factor = self._echo_factor()
            fresh_per_step = self.schedule.batch_size / echo_factor
            return max(1, math.ceil(min(known) / fresh_per_step))
        if last is None or step <= last[0] or progress <= last[1]:
            return None
        rate = (progress - last[1]) / (step - last[0])
        return max(1, math.ceil((1.0 - progress) / rate))

    def run(self) -> tuple[int, dict[str, float]]:
        """Trains to the end (or the target); returns the step reached and the last evaluation.

        Raises:
          RunInterrupted: Ctrl-C (or the binary's SIGTERM) arrived; with a ``manager``, a
            checkpoint of the step reached was saved first.
        """
        try:
            return self._run()
        except KeyboardInterrupt as interrupt:
            if isinstance(interrupt, RunInterrupted):
                raise
            # An interrupt arrives between TF calls: model, optimizer and step agree here.
            step = _current_step(self.trainer)
            if self.manager is None:
                raise RunInterrupted(step, None) from interrupt
            saved = self.manager.latest_checkpoint
            if (saved is not None and saved.endswith(f"-{step}")) or step == self._start_step:
                # Saved already, or nothing trained since the run (re)started.
                raise RunInterrupted(step, saved, resume_step=checkpoint_step(saved)) from interrupt
            if self.writer is not None and self._logged_step != step:
                # A second signal, at once, after the loop's steps and before its row: keep the
                # last checkpoint, whose row is in the log (a resume drops the rows after it).
                kept = checkpoint_step(saved)
                raise RunInterrupted(step, saved, resume_step=kept) from interrupt
            raise RunInterrupted(step, checkpointing.save(self.manager, step)) from interrupt

    def _run(self) -> tuple[int, dict[str, float]]:
        step = _current_step(self.trainer)
        consumed = float(self.clock.fresh_trained.numpy())
        if consumed < 0:  # a checkpoint without the count: the steps at today's echo factor
            echo_factor = self._echo_factor()
            consumed = step * self.schedule.batch_size / echo_factor
        self._consumed = self._consumed_at_eval = consumed
        self._logged_step = self._start_step = step  # the last metrics row is the restored one
        for technique in self.techniques:
            technique.restored()
        self._finished = self._run_done()
        if step and step >= self.schedule.num_steps:
            print(
                f"The workdir's run is at step {step}, which num_steps="
                f"{self.schedule.num_steps} does not pass: nothing to train (raise "
                "--config.num_steps to train further; the restored model is evaluated).",
                file=sys.stderr,
            )
        evaluation = {}
        progress = tqdm.tqdm(
            total=self.schedule.num_steps,
            initial=step,
            desc="train",
            unit="step",
            # None: no bar when stderr is not a terminal (a log file gets no \r redraws).
            disable=None if self.schedule.progress_bar else True,
            file=sys.stderr,
        )
        with progress:
            if step < self.schedule.num_steps and not self.stopped():
                interrupts.raise_if_requested()  # asked during set-up: stop before training
            while step < self.schedule.num_steps and not self.stopped():
                step, evaluated = self._loop(step, progress)
                evaluation = evaluated or evaluation
                if step < self.schedule.num_steps and not self.stopped():
                    # A signal's stop, where row and step agree; after the last loop the run
                    # ends anyway, and the caller may skip what is left (interrupts.requested).
                    interrupts.raise_if_requested()
        if self._finished and step < self.schedule.num_steps:
            print(self._why_it_ended(step), file=sys.stderr)
        elif step >= self.schedule.num_steps:
            for line in self._cut_short():
                print(line, file=sys.stderr)
        for note in filter(None, (t.end_note() for t in self.techniques)):
            print(note, file=sys.stderr)
        return step, evaluation

    def _cut_short(self) -> list[str]:
        """For each technique whose progress had not reached 1 when the run reached
        ``num_steps``: how far it got and what that cost."""
        return [
            f"The run reached num_steps={self.schedule.num_steps} with {t.name}'s progress at "
            f"{float(t.progress()):.2f} of 1: {t.run_cut_reason}."
            for t in self.techniques
            if t.run_cut_reason and t.progress() is not None and float(t.progress()) < 0.999
        ]

    def _why_it_ended(self, step: int) -> str:
        """Why a technique's progress ended the run before ``num_steps``, and what the input
        pipeline read beyond what training took."""
        reasons = [
            t.run_end_reason
            for t in self.techniques
            if t.progress() is not None and float(t.progress()) >= 1.0
        ]
        line = (
            f"The run ended at step {step} of num_steps={self.schedule.num_steps}: "
            + "; ".join(reasons or ["a technique's progress reached 1"])
            + "."
        )
        unused = _pipeline_counts(self.counts).get("fresh_examples", 0) - self.fresh_trained()
        if unused > 0:
            line += (
                f" The input pipeline read {unused:.0f} examples beyond those training took "
                "(its buffers' read-ahead past the run's end, and what a filter dropped)."
            )
        return line

    def _loop(self, step: int, progress: tqdm.tqdm) -> tuple[int, dict[str, float]]:
        """One inner loop and what follows it; returns the new step and any evaluation."""
        schedule = self.schedule
        boundary = min(
            _next_multiple(step, schedule.steps_per_loop),
            _next_multiple(step, schedule.eval_every_steps),
            _next_multiple(step, schedule.checkpoint_every_steps),
            schedule.num_steps,
        )
        to_end = self._steps_to_run_end(step)
        if to_end is not None:
            boundary = min(boundary, step + to_end)
        echo_factor = self._echo_factor()
        self._consumed += (boundary - step) * schedule.batch_size / echo_factor
        result = self.trainer.train(boundary - step)
        # Stop at a NaN/inf loss, before the loop's state is evaluated, written or saved.
        check_finite(result.get("train_loss"), boundary, self.manager)
        self.clock.seconds.assign_add(result.pop("loop_seconds"))
        self.clock.fresh_trained.assign(self._consumed)
        self._finished = self._run_done()
        step = _current_step(self.trainer)
        scalars = {**result, **_pipeline_counts(self.counts), **self._trained_counts(step)}
        for technique in self.techniques:
            scalars.update(technique.scalars())
        progress.update(boundary - progress.n)
        evaluation = {}
        if self._evaluation_due(step) or self._finished:
            evaluation = self._evaluate(step)
            scalars.update(evaluation)
            if "eval_accuracy" in evaluation:
                progress.set_postfix(accuracy=f"{evaluation['eval_accuracy']:.4f}")
        scalars["train_seconds"] = float(self.clock.seconds.numpy())
        if self.writer is not None:
            self.writer.write(step, scalars)
            self._logged_step = step
        checkpoint_due = step % schedule.checkpoint_every_steps == 0 or step == schedule.num_steps
        if self.manager is not None and (checkpoint_due or self.stopped()):
            checkpointing.save(self.manager, step)
        return step, evaluation

    def _evaluation_due(self, step: int) -> bool:
        every = self.schedule.eval_every_fresh_examples
        fresh_due = every and self._consumed // every > self._consumed_at_eval // every
        return bool(
            step % self.schedule.eval_every_steps == 0
            or step == self.schedule.num_steps
            or fresh_due
        )

    def _evaluate(self, step: int) -> dict[str, float]:
        self._consumed_at_eval = self._consumed
        start = time.perf_counter()
        evaluation = self.trainer.evaluate()
        if self.schedule.evaluation_on_clock:
            # Evaluation is part of the cost of reaching the target, so it is on the clock.
            self.clock.seconds.assign_add(time.perf_counter() - start)
        if "eval_accuracy" in evaluation:
            self.clock.record_target(
                self.schedule.target_accuracy,
                evaluation["eval_accuracy"],
                step,
                self.fresh_trained(),
            )
        return evaluation


def _current_step(trainer: InnerLoop) -> int:
    # A tf.Variable (the synchronous loop) or a Python int (the asynchronous trainer's count of
    # steps the coordinator saw finish, readable when a parameter server is gone).
    return int(np.asarray(trainer.step))


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def _pipeline_counts(counts: echo_meters.EchoMeters | None) -> dict[str, float]:
    """What the input pipeline's meters counted, including what its buffers read ahead."""
    if counts is None:
        return {}
    result = counts.result()
    return {key: result[key] for key in ("fresh_examples", "emitted_examples")}
