"""An echo factor that tunes itself towards R = t_upstream / t_downstream while training runs.

Example::

    import tensorflow as tf
    import echoing

    auto = echoing.AutoEcho(max_factor=8)
    ds = tf.data.Dataset.range(100).apply(auto.echo(buffer_size=64, seed=0)).batch(8)
    for step, batch in enumerate(ds):
        ...  # train; time each step, and the part of it spent blocked on the iterator
        auto.observe(seconds=0.040, input_wait_seconds=0.030, steps=1)
    print(float(auto.factor))  # moved towards 1 · 0.040 / (0.040 - 0.030) = 4

The controller sees what a training loop can time: the wall time of some steps and, within it,
the time they were blocked on the input iterator (``trainers.loop.Trainer`` measures it in the
graph with ``tf.timestamp`` around ``next(iterator)``, which is what the TF profiler counts as
input wait). The rest is compute *as it runs*, with the input pipeline's threads competing for
the host, which no measurement before training gives.

Short inner loops time noisily (a loop of a few steps is tens of milliseconds), and upstream can
be bursty (a reader fetching large blocks stalls, then serves many batches from memory). So
every observation goes into sums over a sliding window of about ``window_seconds`` of wall time
(exponential forgetting), and the controller acts on the window: upstream delivered ``fresh``
batches in ``time`` seconds while the steps computed for ``time - wait`` seconds, so

    R ≈ (steps / fresh) · time / (time - wait)

(at a constant factor e this is e / (1 - wait fraction)). If the window waited for at least twice
``input_bound_threshold`` of its time (the TF profiler calls < 5% "not input-bound"), the factor
moves towards that estimate (smoothed). Otherwise the pipeline keeps up and the factor decays
towards 1 by ``decay`` per second of training, because fresh data is worth more than echoed data:
an over-echoed pipeline shows no wait, so decaying is the only way to find out how much echo is
enough, and where the pipeline is not input-bound the factor stays at 1 and echo costs nothing.
In steady state the factor settles where the window waits about ``2 * input_bound_threshold``,
just under R.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import weakref

import tensorflow as tf

from echoing._src.core import dataset_graph
from echoing._src.core.checks import in_interval, is_positive_int, is_real
from echoing._src.core.types import DatasetTransformation
from echoing._src.echo.counts import READ_HOOK_ATTRIBUTE
from echoing._src.echo.echo import MAX_FACTOR, echo

# The attribute AutoEcho.echo sets on the dataset it returns: a weak reference to the controller.
_STAGE_ATTRIBUTE = "_echoing_auto_echo_stage"


class AutoEcho(tf.Module):
    """Owns a live echo factor (a host ``tf.Variable``) and the rule that moves it.

    Args:
      max_factor: upper bound for the factor (the paper found echo useful up to e≈4-16), at
        most 1000 (``MAX_FACTOR`` in ``echoing/_src/echo/echo.py``, the bound ``echo`` enforces).
      initial_factor: where to start (1: no echo until input-boundness is measured).
      input_bound_threshold: from twice this input-wait fraction over the window, the factor
        moves towards R; below it, it decays towards 1.
      window_seconds: the time constant of the window the controller judges by (0: each
        observation alone). Longer windows average more noise but react later.
      smoothing: weight of the old factor when moving towards a new estimate (0: jump at once).
      decay: the factor that ``factor - 1`` is multiplied by per second while not input-bound.

    Nothing moves the factor but ``observe``: an echo stage whose factor nothing observes
    echoes at ``initial_factor`` for ever. So once the stage has read its factor for
    ``UnobservedCheck.BATCHES`` batches (``UnobservedCheck.EXAMPLES`` examples, plus its
    ``buffer_size``) with no ``observe`` call, it says so once on stderr (``unobserved_check``).
    """

    def __init__(
        self,
        max_factor: float = 8.0,
        *,
        initial_factor: float = 1.0,
        input_bound_threshold: float = 0.05,
        window_seconds: float = 1.0,
        smoothing: float = 0.5,
        decay: float = 0.8,
        name: str = "auto_echo",
    ):
        super().__init__(name=name)
        # echo() refuses a live factor above MAX_FACTOR while iterating; refuse it here, at once.
        _check_range("max_factor", max_factor, 1.0, MAX_FACTOR, "e.g. max_factor=8")
        _check_range("initial_factor", initial_factor, 1.0, max_factor, "within [1, max_factor]")
        _check_range("input_bound_threshold", input_bound_threshold, 0.0, 0.5, "e.g. 0.05")
        _check_range("window_seconds", window_seconds, 0.0, float("inf"), "e.g. 1")
        _check_range("smoothing", smoothing, 0.0, 1.0, "e.g. 0.5")
        _check_range("decay", decay, 0.0, 1.0, "e.g. 0.8")
        self.max_factor = float(max_factor)
        self.input_bound_threshold = float(input_bound_threshold)
        self.window_seconds = float(window_seconds)
        self.smoothing = float(smoothing)
        self.decay = float(decay)
        with tf.device("/cpu:0"):  # read by the tf.data stage on the host
            self.factor = tf.Variable(float(initial_factor), dtype=tf.float32, trainable=False)
        self.last_wait_fraction = 0.0
        # Exponentially forgotten sums over the window: seconds, seconds waited, steps run, and
        # fresh batches those steps consumed (steps / factor).
        self._time = self._wait = self._steps = self._fresh = 0.0
        # Whether a stage was built inside a function (interleave's, flat_map's), where a walk
        # of the pipeline's stages (has_stage) cannot see it.
        self._stage_in_function = False
        self.unobserved_check = UnobservedCheck(self.factor)

    def echo(
        self, *, buffer_size: int | None = None, seed: int | None = None
    ) -> DatasetTransformation:
        """The echo stage reading this controller's factor live."""
        stage = echo(self.factor, buffer_size=buffer_size, seed=seed, name="auto_echo")
        controller = weakref.ref(self)

        def apply(dataset: tf.data.Dataset) -> tf.data.Dataset:
            # Read while stage(dataset) traces echo's reads of the factor, in this call.
            batches = dataset_graph.elements_are_batches(dataset)
            limit = self.unobserved_check.limit(batches=batches, buffer_size=buffer_size)
            on_read = functools.partial(self.unobserved_check.on_read, limit=limit, batches=batches)
            setattr(self.factor, READ_HOOK_ATTRIBUTE, on_read)
            echoed = stage(dataset)
            if tf.inside_function():
                self._stage_in_function = True
            # So that AutoEchoCallback.stamp can tell whether the pipeline it receives has this
            # controller's stage (has_stage); a dataset that refuses attributes is not read.
            with contextlib.suppress(Exception):
                setattr(echoed, _STAGE_ATTRIBUTE, controller)
            return echoed

        return apply

    def observe(self, *, seconds: float, input_wait_seconds: float, steps: int) -> float:
        """Adds one measurement to the window, updates the factor and returns it.

        Args:
          seconds: wall time of ``steps`` training steps, including any wait for input.
          input_wait_seconds: the part of ``seconds`` spent blocked on the input iterator.
          steps: how many steps (each at the current factor) the measurement covers.

        Raises:
          ValueError: ``seconds <= 0``, a wait that is negative or longer than ``seconds``, or
            ``steps < 1``.
        """
        if not seconds > 0:
            raise ValueError(f"seconds must be > 0, got {seconds!r}; time at least one step.")
        if not in_interval(input_wait_seconds, 0, seconds * 1.001):  # clocks may round
            raise ValueError(
                f"input_wait_seconds must be in [0, seconds={seconds!r}], got "
                f"{input_wait_seconds!r}; it is the part of the steps spent waiting for input."
            )
        if not is_positive_int(steps, numpy=True):
            raise ValueError(f"steps must be an int >= 1, got {steps!r}.")
        self.unobserved_check.silence()
        factor = float(self.factor.numpy())
        forget = math.exp(-seconds / self.window_seconds) if self.window_seconds else 0.0
        self._time = forget * self._time + seconds
        self._wait = forget * self._wait + min(input_wait_seconds, seconds)
        self._steps = forget * self._steps + steps
        self._fresh = forget * self._fresh + steps / factor
        wait_fraction = self._wait / self._time
        self.last_wait_fraction = wait_fraction
        if wait_fraction >= 2 * self.input_bound_threshold:
            compute = max(self._time - self._wait, 1e-3 * self._time)
            estimate = self._steps / self._fresh * self._time / compute  # ≈ R
            factor = self.smoothing * factor + (1 - self.smoothing) * estimate
        else:
            factor = 1.0 + (factor - 1.0) * self.decay**seconds
        factor = min(max(factor, 1.0), self.max_factor)
        self.factor.assign(factor)
        return factor


class UnobservedCheck:
    """Says once, on stderr, when an ``AutoEcho``'s echo stage reads its factor and nothing
    calls ``observe``: without it the factor stays at ``initial_factor`` (1: no echo) for ever,
    with no sign. Counted in the graph, at each read of the factor (``counts._read_factor``).

    The host variables live in this plain object, not in the ``tf.Module``, so that
    ``AutoEcho``'s checkpoints hold what they held before. A trainer that observes on a
    cadence of its own calls ``silence`` (``trainers``' ``AutoEchoTechnique`` does); one that
    stops observing calls ``rearm`` (``AutoEchoCallback`` at the end of each fit), so that
    reads after it, a fit without the callback, say that the factor stays where it was left.
    """

    BATCHES = 1_000  # a fit's or loop's first observation comes long before this
    # Examples are read ahead by the shuffles after echo (its own buffer_size is added).
    EXAMPLES = 50_000

    def __init__(self, factor: tf.Variable):
        self.factor = factor  # its value is said, as the warning runs
        self._silenced = False
        with tf.device("/cpu:0"):  # read and set in the tf.data graph, on the host
            self.inputs = tf.Variable(0, dtype=tf.int64, trainable=False, name="unobserved")
            self.quiet = tf.Variable(False, trainable=False, name="unobserved_quiet")

    def limit(self, *, batches: bool, buffer_size: int | None) -> int:
        """The elements, copies included, a stage may put out before it warns (by steps, not
        inputs: at a factor of 8, 1,000 inputs are 8,000 steps)."""
        return self.BATCHES if batches else self.EXAMPLES + (buffer_size or 0)

    def silence(self) -> None:
        """No warning from now on (something observes); one variable write, the first time."""
        if not self._silenced:
            self._silenced = True
            self.quiet.assign(True)

    def rearm(self) -> None:
        """Counts reads anew (nothing observes from now on): ``limit`` more say so."""
        self._silenced = False
        self.inputs.assign(0)
        self.quiet.assign(False)

    def on_read(self, inputs: tf.Tensor, *, limit: int, batches: bool) -> tf.Tensor:
        """The op run with each read of the factor, for ``inputs`` inputs (in the graph)."""
        quiet, seen, factor = self.quiet, self.inputs, self.factor
        message = _UNOBSERVED.format("{}", "batches" if batches else "examples", "{}")

        def count():
            # The elements these inputs become at the factor read: the steps they feed.
            copies = tf.cast(inputs, tf.float32) * factor.read_value()
            total = seen.assign_add(tf.cast(tf.round(copies), tf.int64))

            def warn():
                said = tf.strings.format(message, (total, factor.read_value()))
                printed = tf.print(said, output_stream=sys.stderr)
                with tf.control_dependencies([printed]):
                    return quiet.assign(True)

            return tf.cond(total >= limit, warn, lambda: tf.identity(quiet))

        return tf.cond(quiet, lambda: tf.identity(quiet), count)


_UNOBSERVED = (
    "echoing.AutoEcho: its echo stage has put out {} {} (copies included) and nothing has "
    "called observe(), so the "
    "factor stays at {} (nothing moves it but observe). In fit, pass "
    "echoing.keras.AutoEchoCallback(auto) in callbacks and apply its stamp last "
    "(dataset.apply(callback.stamp)); in a loop of your own, call auto.observe(seconds=..., "
    "input_wait_seconds=..., steps=...) every few steps."
)


def has_stage(dataset: tf.data.Dataset, auto_echo: AutoEcho) -> bool | None:
    """Whether ``dataset``'s stages include an echo stage of ``auto_echo`` (its ``echo()``).

    ``None`` (unknown) when the walk fails, or when a stage could hide one: a function that
    captures a dataset (``flat_map(lambda _: echoed)``), or a stage of ``auto_echo`` built inside
    a function (an ``interleave``'s), which no walk of ``Dataset._inputs()`` reaches.
    """
    try:
        hidden = auto_echo._stage_in_function
        pending, seen = [dataset], set()
        while pending:
            node = pending.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if len(seen) > dataset_graph._MAX_STAGES:
                return None
            controller = getattr(node, _STAGE_ATTRIBUTE, None)
            if controller is not None and controller() is auto_echo:
                return True
            echo_stage = getattr(node, dataset_graph._ECHO_ATTRIBUTE, None)
            if echo_stage is not None:  # an echo stage: its input, not its internal stages
                pending.append(echo_stage[0])
                continue
            for function in node._functions():
                captured = function.function.captured_inputs
                hidden = hidden or any(tensor.dtype == tf.variant for tensor in captured)
            pending.extend(node._inputs())
        return None if hidden else False
    except Exception:
        return None


def _check_range(argument: str, value, low: float, high: float, fix: str) -> None:
    if not is_real(value, finite=False):
        raise TypeError(f"{argument} must be a number, got {value!r}; {fix}.")
    if not in_interval(value, low, high):
        raise ValueError(f"{argument} must be in [{low}, {high}], got {value!r}; {fix}.")
