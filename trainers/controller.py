"""The outer loop, in Orbit's shape: train N steps, evaluate, checkpoint, log, feed back.

Example::

    from trainers import controller

    clock = controller.RunClock()
    outer = controller.Controller(
        config, trainer=trainer, techniques=techniques, counts=counts, clock=clock,
        manager=manager, writer=writer,
    )
    step, evaluation = outer.run()

The inner loop is ``trainers.loop.Trainer.train(num_steps)`` (one ``tf.function`` call, after
which every technique observes the loop's feedback). Around it the controller runs to
``config.num_steps`` in loops that end at every multiple of ``steps_per_loop``,
``eval_every_steps`` and ``checkpoint_every_steps``; evaluates there (and when the fresh
examples consumed cross a multiple of ``eval_every_fresh_examples``); records the first
crossing of ``target_accuracy`` (and stops there with ``stop_at_target``); writes one metrics
row per loop with the techniques' scalars; and saves checkpoints. Evaluation is on the run's
clock: it is part of the cost of reaching the target.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence

import tensorflow as tf
import tqdm

from echoing import meters as echo_meters
from echoing.techniques import Technique
from trainers import loop, metrics_writer


class RunClock(tf.Module):
    """Checkpointed run state: training seconds so far and the first crossing of the target."""

    def __init__(self):
        super().__init__(name="run_clock")
        self.seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="seconds")
        self.target_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="target_step")
        self.target_seconds = tf.Variable(-1.0, dtype=tf.float64, trainable=False)
        self.target_fresh = tf.Variable(-1, dtype=tf.int64, trainable=False)

    def reached(self) -> bool:
        return int(self.target_step.numpy()) >= 0

    def record_target(self, target: float, accuracy: float, step: int, fresh: int) -> None:
        """Records ``step`` as the target's first crossing if ``accuracy`` reaches it."""
        if target and not self.reached() and accuracy >= target:
            self.target_step.assign(step)
            self.target_seconds.assign(self.seconds.numpy())
            self.target_fresh.assign(fresh)


class Controller:
    """Drives one run's ``Trainer`` to ``config.num_steps`` (see the module docstring)."""

    def __init__(
        self,
        config,
        *,
        trainer: loop.Trainer,
        techniques: Sequence[Technique],
        counts: echo_meters.EchoMeters,
        clock: RunClock,
        manager: tf.train.CheckpointManager,
        writer: metrics_writer.MetricsWriter,
    ):
        self.config = config
        self.trainer = trainer
        self.techniques = tuple(techniques)
        self.counts = counts
        self.clock = clock
        self.manager = manager
        self.writer = writer
        # Fresh examples consumed, and consumed at the last evaluation (eval_every_fresh_examples):
        # the fresh meter counts what entered the pipeline, which runs ahead by its buffers.
        self._consumed = self._consumed_at_eval = 0.0

    def stopped(self) -> bool:
        return self.config.stop_at_target and self.clock.reached()

    def run(self) -> tuple[int, dict[str, float]]:
        """Trains to the end (or the target); returns the step reached and the last evaluation."""
        step = int(self.trainer.step.numpy())
        evaluation = {}
        progress = tqdm.tqdm(
            total=self.config.num_steps,
            initial=step,
            desc="train",
            unit="step",
            disable=not self.config.progress_bar,
            file=sys.stderr,
        )
        with progress:
            while step < self.config.num_steps and not self.stopped():
                step, evaluated = self._loop(step, progress)
                evaluation = evaluated or evaluation
        return step, evaluation

    def _loop(self, step: int, progress: tqdm.tqdm) -> tuple[int, dict[str, float]]:
        """One inner loop and what follows it; returns the new step and any evaluation."""
        config = self.config
        boundary = min(
            _next_multiple(step, config.steps_per_loop),
            _next_multiple(step, config.eval_every_steps),
            _next_multiple(step, config.checkpoint_every_steps),
            config.num_steps,
        )
        echo_factor = math.prod(t.echo_factor() for t in self.techniques)
        self._consumed += (boundary - step) * config.data.batch_size / echo_factor
        result = self.trainer.train(boundary - step)
        self.clock.seconds.assign_add(result.pop("loop_seconds"))
        scalars = {**result, **_echo_scalars(self.counts)}
        for technique in self.techniques:
            scalars.update(technique.scalars())
        step = int(self.trainer.step.numpy())
        progress.update(boundary - progress.n)
        evaluation = {}
        if self._evaluation_due(step):
            evaluation = self._evaluate(step)
            scalars.update(evaluation)
            progress.set_postfix(accuracy=f"{evaluation['eval_accuracy']:.4f}")
        scalars["train_seconds"] = float(self.clock.seconds.numpy())
        self.writer.write(step, scalars)
        if step % config.checkpoint_every_steps == 0 or step == config.num_steps or self.stopped():
            self.manager.save(checkpoint_number=step)
        return step, evaluation

    def _evaluation_due(self, step: int) -> bool:
        every = self.config.eval_every_fresh_examples
        fresh_due = every and self._consumed // every > self._consumed_at_eval // every
        return bool(
            step % self.config.eval_every_steps == 0 or step == self.config.num_steps or fresh_due
        )

    def _evaluate(self, step: int) -> dict[str, float]:
        self._consumed_at_eval = self._consumed
        start = time.perf_counter()
        evaluation = self.trainer.evaluate()
        # Evaluation is part of the cost of reaching the target, so it is on the clock.
        self.clock.seconds.assign_add(time.perf_counter() - start)
        self.clock.record_target(
            self.config.target_accuracy,
            evaluation["eval_accuracy"],
            step,
            self.counts.fresh.value(),
        )
        return evaluation


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def _echo_scalars(counts: echo_meters.EchoMeters) -> dict[str, float]:
    result = counts.result()
    return {key: result[key] for key in ("fresh_examples", "emitted_examples", "echo_ratio")}
