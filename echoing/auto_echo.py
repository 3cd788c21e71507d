"""An echo factor that tunes itself towards R = t_upstream / t_downstream while training runs.

Example::

    import tensorflow as tf
    import echoing

    auto = echoing.AutoEcho(max_factor=8)
    ds = tf.data.Dataset.range(100).apply(auto.echo(buffer_size=64, seed=0)).batch(8)
    compute_seconds = 0.010  # the train step alone, measured on a cached batch
    for step, batch in enumerate(ds):
        ...  # train; time each step including the wait for input
        auto.observe(step_seconds=0.040, compute_seconds=compute_seconds)
    print(float(auto.factor))  # moved towards 0.040 / 0.010 * 1 = 4

The controller sees only what a training loop can time: the wall time per step (which includes
waiting for input) and the compute time per step (the same step on a batch already in memory,
measured before training). Their difference is the input wait. If the step waits for input for at
least ``input_bound_threshold`` of its time (the TF profiler calls < 5% "not input-bound"),
upstream is the bottleneck and ``t_step ≈ t_upstream / e``, so ``R ≈ e · t_step / t_compute``: the
factor moves to that estimate (smoothed). Otherwise the pipeline keeps up and the factor decays
towards 1 by ``decay`` per observation, because fresh data is worth more than echoed data; where
the pipeline is not input-bound the factor settles at 1 and echo costs nothing.

The compute time measured before training is a lower bound: during training the input
pipeline's threads compete for the host (on a CPU-only machine, for the very cores the step runs
on) and every loop has fixed costs, so the step is slower than the measurement even when it never
waits for input, and a controller trusting it would read that as waiting and raise the factor to
its maximum. So the controller keeps its own estimate of the compute floor, starting at the
measurement and corrected by what it observes: when the factor went up (by more than the
threshold) and the step did not get correspondingly shorter, the step is compute-bound at the new
factor and its time is the floor; a step shorter than the floor lowers it (smoothed, so noise
does not drag it down).
"""

from __future__ import annotations

import collections
import numbers
import statistics

import tensorflow as tf

from echoing.echo import echo
from echoing.types import DatasetTransformation

# A factor change by more than this ratio is beyond what step-time noise can fake.
_CLEAR_CHANGE = 1.2


class AutoEcho(tf.Module):
    """Owns a live echo factor (a host ``tf.Variable``) and the rule that moves it.

    Args:
      max_factor: upper bound for the factor (the paper found echo useful up to e≈4-16).
      initial_factor: where to start (1: no echo until input-boundness is measured).
      input_bound_threshold: input-wait fraction below which the step is not input-bound (the
        factor decays towards 1); from twice this the factor moves towards R; in between it
        holds, so timing noise does not move it.
      smoothing: weight of the old factor when moving towards a new estimate (0: jump at once).
      decay: multiplicative step towards 1 when the step is not input-bound.
    """

    def __init__(
        self,
        max_factor: float = 8.0,
        *,
        initial_factor: float = 1.0,
        input_bound_threshold: float = 0.05,
        smoothing: float = 0.5,
        decay: float = 0.97,
        name: str = "auto_echo",
    ):
        super().__init__(name=name)
        _check_range("max_factor", max_factor, 1.0, float("inf"), "e.g. max_factor=8")
        _check_range("initial_factor", initial_factor, 1.0, max_factor, "within [1, max_factor]")
        _check_range("input_bound_threshold", input_bound_threshold, 0.0, 1.0, "e.g. 0.05")
        _check_range("smoothing", smoothing, 0.0, 1.0, "e.g. 0.5")
        _check_range("decay", decay, 0.0, 1.0, "e.g. 0.97")
        self.max_factor = float(max_factor)
        self.input_bound_threshold = float(input_bound_threshold)
        self.smoothing = float(smoothing)
        self.decay = float(decay)
        with tf.device("/cpu:0"):  # read by the tf.data stage on the host
            self.factor = tf.Variable(float(initial_factor), dtype=tf.float32, trainable=False)
        self.last_wait_fraction = 0.0
        # The compute floor (seconds per step when nothing waits for input), see the module
        # docstring; None until the first observation.
        self.compute_floor: float | None = None
        # (factor, step seconds) when the factor last moved clearly, see _update_floor.
        self._reference: tuple[float, float] | None = None
        self._recent: collections.deque[float] = collections.deque(maxlen=3)

    def echo(
        self, *, buffer_size: int | None = None, seed: int | None = None
    ) -> DatasetTransformation:
        """The echo stage reading this controller's factor live."""
        return echo(self.factor, buffer_size=buffer_size, seed=seed, name="auto_echo")

    def observe(self, *, step_seconds: float, compute_seconds: float) -> float:
        """Updates the factor from one measurement and returns the new factor.

        Args:
          step_seconds: wall time per training step, including any wait for input.
          compute_seconds: time per step of the same computation on a batch in memory.
        """
        if not (step_seconds > 0 and compute_seconds > 0):
            raise ValueError(
                f"step_seconds and compute_seconds must be > 0, got {step_seconds!r} and "
                f"{compute_seconds!r}; time at least one step of each."
            )
        factor = float(self.factor.numpy())
        floor = self._update_floor(factor, step_seconds, compute_seconds)
        # Upstream seconds per fresh batch, e·t_step while input-bound (an upper bound otherwise),
        # as the median of the last few observations: one slow loop must not move the factor.
        self._recent.append(factor * step_seconds)
        upstream_seconds = statistics.median(self._recent)
        wait_fraction = max(0.0, 1.0 - floor * factor / upstream_seconds)
        self.last_wait_fraction = wait_fraction
        if wait_fraction >= 2 * self.input_bound_threshold:
            estimate = upstream_seconds / floor  # ≈ R while input-bound
            factor = self.smoothing * factor + (1 - self.smoothing) * estimate
        elif wait_fraction < self.input_bound_threshold:
            factor = 1.0 + (factor - 1.0) * self.decay
        # In between (hysteresis), the factor holds: timing noise must not move it either way.
        factor = min(max(factor, 1.0), self.max_factor)
        self.factor.assign(factor)
        return factor

    def _update_floor(self, factor: float, step_seconds: float, compute_seconds: float) -> float:
        """The compute floor after observing ``step_seconds`` at ``factor``."""
        floor = self.compute_floor if self.compute_floor is not None else compute_seconds
        tolerance = 1.0 + self.input_bound_threshold
        if self._reference is None:
            self._reference = (factor, step_seconds)
        reference_factor, reference_seconds = self._reference
        if factor > _CLEAR_CHANGE * reference_factor:
            # Input-bound steps shorten in proportion to the factor. A step clearly longer than
            # that since the factor clearly went up (both by more than timing noise could fake)
            # is compute-bound: its time is the floor. Until then the reference stays, so small
            # steps up add up to a clear change.
            input_bound_seconds = reference_seconds * reference_factor / factor
            if step_seconds > _CLEAR_CHANGE * input_bound_seconds:
                floor = max(floor, step_seconds)
                self._reference = (factor, step_seconds)
        elif factor * _CLEAR_CHANGE < reference_factor:
            self._reference = (factor, step_seconds)
        if step_seconds * tolerance < floor:
            floor += 0.25 * (step_seconds - floor)  # slowly: one fast loop may be noise
        self.compute_floor = floor
        return floor


def _check_range(argument: str, value, low: float, high: float, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argument} must be a number, got {value!r}; {fix}.")
    if not low <= value <= high:
        raise ValueError(f"{argument} must be in [{low}, {high}], got {value!r}; {fix}.")
