"""An echo factor that tunes itself towards R = t_upstream / t_downstream while training runs.

Example::

    import tensorflow as tf
    import echoing

    auto = echoing.AutoEcho(max_factor=8)
    ds = tf.data.Dataset.range(100).apply(auto.echo(buffer_size=64, seed=0)).batch(8)
    for step, batch in enumerate(ds):
        ...  # train; time each step, and the part of it spent blocked on the iterator
        auto.observe(step_seconds=0.040, input_wait_seconds=0.030)
    print(float(auto.factor))  # moved towards 1 · 0.040 / (0.040 - 0.030) = 4

The controller sees what a training loop can time: the wall time per step and, within it, the
time the step was blocked on the input iterator (``trainers.loop.Trainer`` measures it in the
graph with ``tf.timestamp`` around ``next(iterator)``, which is what the TF profiler counts as
input wait). The rest is the step's compute time *as it runs*, with the input pipeline's threads
competing for the host, which no measurement before training gives. If the step waits for input
for at least twice ``input_bound_threshold`` of its time (the TF profiler calls < 5% "not
input-bound"), upstream is the bottleneck: it delivers one fresh batch per ``e · t_step``, so
``R ≈ e · t_step / t_compute = e / (1 - wait fraction)``, and the factor moves towards that
estimate (smoothed, from the median of the last three estimates, so one slow loop does not move
it). Below the threshold the pipeline keeps up and the factor decays towards 1 by ``decay`` per
observation, because fresh data is worth more than echoed data: an over-echoed pipeline shows no
wait, so decaying is the only way to find out how much echo is enough, and where the pipeline is
not input-bound the factor stays at 1 and echo costs nothing. In between it holds, so timing noise
moves it neither way.
"""

from __future__ import annotations

import collections
import numbers
import statistics

import tensorflow as tf

from echoing.echo import echo
from echoing.types import DatasetTransformation

# The largest wait fraction trusted in R = e / (1 - fraction): beyond it, R is max_factor anyway.
_MAX_WAIT_FRACTION = 0.99


class AutoEcho(tf.Module):
    """Owns a live echo factor (a host ``tf.Variable``) and the rule that moves it.

    Args:
      max_factor: upper bound for the factor (the paper found echo useful up to e≈4-16).
      initial_factor: where to start (1: no echo until input-boundness is measured).
      input_bound_threshold: input-wait fraction below which the step is not input-bound (the
        factor decays towards 1); from twice this the factor moves towards R; in between it
        holds, so timing noise does not move it.
      smoothing: weight of the old factor when moving towards a new estimate (0: jump at once).
      decay: multiplicative step of ``factor - 1`` towards 0 when the step is not input-bound.
    """

    def __init__(
        self,
        max_factor: float = 8.0,
        *,
        initial_factor: float = 1.0,
        input_bound_threshold: float = 0.05,
        smoothing: float = 0.5,
        decay: float = 0.9,
        name: str = "auto_echo",
    ):
        super().__init__(name=name)
        _check_range("max_factor", max_factor, 1.0, float("inf"), "e.g. max_factor=8")
        _check_range("initial_factor", initial_factor, 1.0, max_factor, "within [1, max_factor]")
        _check_range("input_bound_threshold", input_bound_threshold, 0.0, 0.5, "e.g. 0.05")
        _check_range("smoothing", smoothing, 0.0, 1.0, "e.g. 0.5")
        _check_range("decay", decay, 0.0, 1.0, "e.g. 0.9")
        self.max_factor = float(max_factor)
        self.input_bound_threshold = float(input_bound_threshold)
        self.smoothing = float(smoothing)
        self.decay = float(decay)
        with tf.device("/cpu:0"):  # read by the tf.data stage on the host
            self.factor = tf.Variable(float(initial_factor), dtype=tf.float32, trainable=False)
        self.last_wait_fraction = 0.0
        self._estimates: collections.deque[float] = collections.deque(maxlen=3)

    def echo(
        self, *, buffer_size: int | None = None, seed: int | None = None
    ) -> DatasetTransformation:
        """The echo stage reading this controller's factor live."""
        return echo(self.factor, buffer_size=buffer_size, seed=seed, name="auto_echo")

    def observe(self, *, step_seconds: float, input_wait_seconds: float) -> float:
        """Updates the factor from one measurement and returns the new factor.

        Args:
          step_seconds: wall time per training step, including any wait for input.
          input_wait_seconds: the part of ``step_seconds`` spent blocked on the input iterator.

        Raises:
          ValueError: ``step_seconds <= 0``, or a wait that is negative or longer than the step.
        """
        if not step_seconds > 0:
            raise ValueError(
                f"step_seconds must be > 0, got {step_seconds!r}; time at least one step."
            )
        if not 0 <= input_wait_seconds <= step_seconds * 1.001:  # clocks may round
            raise ValueError(
                f"input_wait_seconds must be in [0, step_seconds={step_seconds!r}], got "
                f"{input_wait_seconds!r}; it is the part of the step spent waiting for input."
            )
        factor = float(self.factor.numpy())
        wait_fraction = min(input_wait_seconds / step_seconds, 1.0)
        self.last_wait_fraction = wait_fraction
        if wait_fraction >= 2 * self.input_bound_threshold:
            # Each estimate uses the factor it was measured at, so older ones stay valid.
            self._estimates.append(factor / (1.0 - min(wait_fraction, _MAX_WAIT_FRACTION)))
            estimate = statistics.median(self._estimates)  # ≈ R while input-bound
            factor = self.smoothing * factor + (1 - self.smoothing) * estimate
        elif wait_fraction < self.input_bound_threshold:
            factor = 1.0 + (factor - 1.0) * self.decay
            self._estimates.clear()  # upstream keeps up now: older estimates are stale
        # In between (hysteresis), the factor holds: timing noise must not move it either way.
        factor = min(max(factor, 1.0), self.max_factor)
        self.factor.assign(factor)
        return factor


def _check_range(argument: str, value, low: float, high: float, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argument} must be a number, got {value!r}; {fix}.")
    if not low <= value <= high:
        raise ValueError(f"{argument} must be in [{low}, {high}], got {value!r}; {fix}.")
