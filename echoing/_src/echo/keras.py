"""AutoEcho driven by ``model.fit``'s own steps: ``echoing.keras.AutoEchoCallback``."""

from __future__ import annotations

import time
import warnings

import keras
import tensorflow as tf

from echoing._src.core import dataset_graph, fit_timing
from echoing._src.core.checks import is_positive_int, is_real
from echoing._src.core.types import as_element
from echoing._src.echo.auto_echo import AutoEcho, has_stage


class AutoEchoCallback(keras.callbacks.Callback):
    """Drives an ``echoing.AutoEcho`` factor from ``model.fit``'s own batches.

    Example::

        auto = echoing.AutoEcho(max_factor=8)
        callback = echoing.keras.AutoEchoCallback(auto)
        train = (slow_batches.apply(auto.echo())     # batch echoing, the factor read live
                 .prefetch(2).apply(callback.stamp))  # last: stamps each batch's ready time
        model.fit(train, steps_per_epoch=100, epochs=3, callbacks=[callback])
        print(float(auto.factor))

    ``fit`` does not say how long a step waited for its batch, so ``stamp`` (applied as the
    pipeline's last transformation, after ``prefetch``) records in host variables when each
    batch became ready and when the train step took it (``echoing._src.core.fit_timing``). A call of
    ``fit``'s train function (``steps_per_execution`` steps, 1 by default) lasts from
    ``on_train_batch_begin`` to ``on_train_batch_end``; its first step waited from the call's
    start to its batch's ready time (0 when the batch was ready before), and the later steps'
    waits follow from the gaps between one batch's hand-over and the next one's ready time
    (``fit_timing.execution_wait``). The calls of every ``observe_seconds`` (and of each
    epoch's end) are one ``AutoEcho.observe``, so that a fast step does not pay for a Python
    update each time; the first call of a fit (tracing) is skipped. ``stamp`` turns off
    tf.data's injected final prefetch (``inject_prefetch``), which would run the recording ahead
    of the steps and credit each step with a later batch's time: that made every step look
    input-bound, and the factor climbed to its bound on pipelines that kept up. The factor is
    added to the epoch logs (``History``, TensorBoard) as ``echo_factor``; list this callback
    before ``CSVLogger``/``TensorBoard`` in ``callbacks=``, which write the logs when their turn
    comes (``History`` always runs last). A fit whose first
    epoch (or whole run, if shorter) ran train steps but stamped no batch warns, once per fit,
    that ``stamp`` is missing: without it nothing is observed and the factor stays where it is.
    One that trained on stamped batches whose pipeline has no echo stage of ``auto_echo`` (built
    without ``auto.echo()``, or with another ``AutoEcho``'s; ``stamp`` reads the stages it
    receives, and counts the batches of such a pipeline) warns, once per fit, that the factor it
    reports echoes nothing. ``stamp`` refuses elements that are not batches (applied before
    ``batch()``, it would time examples as steps).

    For factors above 2 or 3, echo examples rather than batches where the pipeline allows it
    (``unbatch()``, the echo stage, a ``shuffle`` and ``batch()`` again): copies of an example
    then land in different batches, which loses less per echoed step than training on the
    same batch several times in a row (``benchmarks/keras_fit.py`` measures both).

    Args:
      auto_echo: the ``echoing.AutoEcho`` whose factor the pipeline's echo stage reads.
      max_steps_per_execution: the most steps one call may run (the stamps kept).
      observe_seconds: how often the controller is updated (the calls of that much time are
        one observation).
    """

    def __init__(
        self, auto_echo, *, max_steps_per_execution: int = 4096, observe_seconds: float = 0.05
    ):
        _check_callback_arguments(auto_echo, max_steps_per_execution, observe_seconds)
        super().__init__()
        self.auto_echo = auto_echo
        self._stamps = fit_timing.BatchStamps(capacity=max_steps_per_execution)
        self.observe_seconds = float(observe_seconds)
        self._begin = None
        self._traced = False
        self._read = 0  # batches whose stamps were read
        self._calls = []  # (begin, end, batches taken by its end) of calls not yet observed
        self.observations = 0  # calls timed
        self._fit_calls = 0  # calls of fit's train function in this fit
        self._stamped_before_fit = 0  # the stamps' count when this fit began
        with tf.device("/cpu:0"):  # batches stamped from a pipeline without auto_echo's stage
            self._unechoed = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._unechoed_before_fit = 0
        self._stamp_checked = False  # whether this fit's stamps were checked (warned once)

    def stamp(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """The pipeline's last transformation: records when each batch was ready and taken.

        Warns (``UserWarning``) when an echo stage without ``buffer_size`` feeds ``batch()`` in
        ``dataset`` with no shuffle between (``echoing._src.core.dataset_graph``).

        Raises:
          ValueError: ``dataset``'s elements are not batches (an ``unbatch()`` or no batching
            stage before it, or a scalar component): each step takes a batch, so stamps of
            examples would time the steps wrong. Where its stages cannot be read (a
            ``flat_map``, a source) and its element spec does not look batched either, it
            warns instead.
        """
        _check_stamps_batches(dataset)
        dataset_graph.warn_if_echo_feeds_batch(
            dataset,
            fix="Shuffle the copies apart: auto.echo(buffer_size=1024) (echo(e, buffer_size=...)"
            "), or .shuffle(1024) between echo and batch(); or echo after batch() (batch echoing).",
            stacklevel=3,  # the caller of stamp (Dataset.apply or the user)
        )
        if has_stage(dataset, self.auto_echo) is False:
            # Counted per batch, where fit takes it, so that a fit on it warns (_check_stamped).
            unechoed, spec = self._unechoed, dataset.element_spec

            def count(*element):
                with tf.control_dependencies([unechoed.assign_add(1)]):
                    element = tf.nest.map_structure(tf.identity, element)
                return as_element(element, spec)

            dataset = dataset.map(count, name="without_auto_echo")
        return self._stamps.stamp(dataset)

    def on_train_begin(self, logs=None):
        # This fit drives the factor (or warns when its batches are not stamped): AutoEcho's
        # warning for a factor nothing observes is not for it, however long a call runs.
        self.auto_echo.unobserved_check.silence()
        self._traced = False
        self._calls.clear()
        self._fit_calls, self._stamp_checked = 0, False
        self._stamped_before_fit = self._stamps.count
        self._unechoed_before_fit = int(self._unechoed.numpy())
        steps = int(getattr(self.model, "steps_per_execution", 1) or 1)
        if steps > self._stamps.capacity:
            raise ValueError(
                f"AutoEchoCallback keeps the stamps of {self._stamps.capacity} steps, but the "
                f"model runs {steps} per execution; pass max_steps_per_execution={steps}."
            )

    def on_train_batch_begin(self, batch, logs=None):
        self._begin = time.time()

    def on_train_batch_end(self, batch, logs=None):
        end = time.time()
        taken = self._stamps.count
        self._fit_calls += 1
        if self._begin is None or not self._traced:
            self._traced = True  # the first call of a fit traces and compiles: not timed
            self._read = taken
            return
        self._calls.append((self._begin, end, taken))
        # Timing is per call, the controller's update per ~observe_seconds: a fast step
        # should not pay for a Python update each time (its window is ~1 s anyway).
        pending = taken - self._read
        if end - self._calls[0][0] >= self.observe_seconds or 2 * pending > self._stamps.capacity:
            self._observe_calls()

    def on_train_end(self, logs=None):
        self._observe_calls()
        self._check_stamped()
        # Nothing observes after this fit: a later read without the callback is said.
        self.auto_echo.unobserved_check.rearm()

    def _check_stamped(self) -> None:
        """Warns (once per fit) when fit ran train steps but no batch passed ``stamp``, or
        stamped batches came from a pipeline without an echo stage of ``auto_echo``."""
        if self._stamp_checked or not self._fit_calls:
            return
        self._stamp_checked = True
        stamped = self._stamps.count - self._stamped_before_fit
        if stamped and int(self._unechoed.numpy()) > self._unechoed_before_fit:
            # The controller saw the waits and moved its factor, but no stage reads it here.
            warnings.warn(
                "AutoEchoCallback: fit trained on stamped batches, but the echo stage of the "
                "callback's AutoEcho never ran in the data fit consumed (its pipeline has no "
                "auto.echo() of this AutoEcho), so nothing was echoed and the echo_factor it "
                f"reports ({float(self.auto_echo.factor.numpy()):g}) applies to no batch. Apply "
                "auto.echo() of the same AutoEcho that the callback was given "
                "(callback.auto_echo) before batch(), e.g. examples.apply(auto.echo())"
                ".shuffle(1024).batch(64).prefetch(2), then the stamp last; an echo stage of "
                "another AutoEcho, or echoing.echo(e), does not read this factor.",
                UserWarning,
                stacklevel=2,
            )
        if not stamped:
            # A warning, not an error: the training itself is right, only without echo.
            warnings.warn(
                f"AutoEchoCallback: fit trained ({self._fit_calls} calls of its train function) "
                "but no batch was stamped, so nothing was observed and the echo factor stays at "
                f"{float(self.auto_echo.factor.numpy()):g}. Apply the callback's stamp as the "
                "pipeline's last stage (after prefetch) and fit on that dataset: "
                "train = train.apply(callback.stamp).",
                UserWarning,
                stacklevel=2,
            )

    def _observe_calls(self) -> None:
        """One ``AutoEcho.observe`` of the calls since the last: their time, waits and steps."""
        if not self._calls:
            return
        ready, handed = self._stamps.since(self._read)
        seconds = wait = 0.0
        steps, start = 0, self._read
        for begin, end, taken in self._calls:
            rows = slice(start - self._read, taken - self._read)
            start = taken
            call_ready, call_handed = ready[rows], handed[rows]
            if not len(call_ready):
                continue
            duration = max(end - begin, 1e-6)
            first = min(max(call_ready[0] - begin, 0.0), duration)
            wait += fit_timing.execution_wait(first, call_ready[1:] - call_handed[:-1], duration)
            seconds, steps = seconds + duration, steps + len(call_ready)
            self.observations += 1
        self._read = start
        self._calls.clear()
        if steps:
            self.auto_echo.observe(seconds=seconds, input_wait_seconds=wait, steps=steps)

    def on_epoch_end(self, epoch, logs=None):
        self._observe_calls()
        self._check_stamped()  # after the first epoch: a long run learns of it early
        if logs is not None:
            logs["echo_factor"] = float(self.auto_echo.factor.numpy())


def _check_stamps_batches(dataset) -> None:
    """Refuses a ``dataset`` whose elements are not batches; warns where that cannot be read."""
    if not isinstance(dataset, tf.data.Dataset):
        return  # not a dataset: nothing to read (the stamp itself fails on it, as before)
    batched = dataset_graph.comes_out_of_batch(dataset)
    if batched:
        return
    specs = tf.nest.flatten(dataset.element_spec)
    scalar = any(getattr(getattr(spec, "shape", None), "rank", None) == 0 for spec in specs)
    if batched is False or scalar:
        why = "it has a scalar component" if scalar else "no batch() is in force before it"
        raise ValueError(
            "AutoEchoCallback.stamp must be applied to batches, but these elements are not "
            f"batched ({why}; element spec {dataset.element_spec}). fit takes one element per "
            "step, so stamps of examples record when examples were ready, not batches, and "
            "understate the wait and the echo factor. Apply the stamp after batch(), as the "
            "pipeline's last stage: train = examples.batch(64).prefetch(2)"
            ".apply(callback.stamp)."
        )
    if not dataset_graph.elements_are_batches(dataset):
        warnings.warn(
            "AutoEchoCallback.stamp cannot tell whether these elements are batches (no "
            "batching stage is visible before it, and the components do not share a leading "
            f"dimension: element spec {dataset.element_spec}). If they are examples, apply the "
            "stamp after batch(), as the pipeline's last stage: "
            "train = examples.batch(64).prefetch(2).apply(callback.stamp).",
            UserWarning,
            stacklevel=4,  # the caller of stamp (Dataset.apply or the user)
        )


def _check_callback_arguments(auto_echo, max_steps_per_execution, observe_seconds) -> None:
    """``AutoEchoCallback``'s argument checks: each bad value a clear error, at construction."""
    if not isinstance(auto_echo, AutoEcho):
        raise TypeError(
            f"AutoEchoCallback(auto_echo={auto_echo!r}): expected an echoing.AutoEcho, the one "
            "whose echo stage the pipeline applies, e.g. auto = echoing.AutoEcho(max_factor=8); "
            "AutoEchoCallback(auto); dataset.apply(auto.echo())."
        )
    if not is_positive_int(max_steps_per_execution):
        raise ValueError(
            f"AutoEchoCallback(max_steps_per_execution={max_steps_per_execution!r}): expected "
            "an int >= 1, at least the steps_per_execution given to model.compile."
        )
    if not is_real(observe_seconds) or observe_seconds <= 0:
        raise ValueError(
            f"AutoEchoCallback(observe_seconds={observe_seconds!r}): expected a finite number "
            "of seconds > 0, how often the echo factor is updated (default 0.05)."
        )
