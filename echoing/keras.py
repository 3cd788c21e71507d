"""What a ``model.fit`` user adds: per-example loss feedback, and AutoEcho driven by fit's steps.

Example::

    import keras
    import numpy as np
    import tensorflow as tf
    import echoing

    n = 256
    x = np.random.default_rng(0).normal(size=(n, 8)).astype("float32")
    y = np.arange(n) % 2
    table = echoing.LossTable(n)
    source = echoing.with_ids(tf.data.Dataset.from_tensor_slices((x, y)))
    pruned = source.shuffle(n).apply(echoing.loss_prune(table, num_epochs=3, seed=0))
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model = echoing.keras.LossFeedback(
        net,
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None),
        observers=[table.update],
    )
    model.compile("sgd", metrics=["accuracy"])  # trains on per_example_loss's mean
    model.fit(pruned.batch(32).map(echoing.keras.fit_inputs), epochs=3, verbose=0)
    print(int(table.seen.numpy().sum()))  # 256: every example's loss, from its own train step
    model.evaluate(x, y, verbose=0)  # plain arrays: evaluation and prediction need no ids
    model.predict(x, verbose=0)

``model.fit`` hands neither the example ids nor the per-example losses to anything a user can
reach. ``LossFeedback`` wraps a model so that its training inputs carry the ids (``x =
{"inputs": ..., "id": ...}``, which ``fit_inputs`` builds from a batch dict, itself made from
``(x, y)`` elements by ``echoing.with_ids``) and its ``compute_loss`` also calls every observer
with ``(ids, per_example_losses)`` of the training batch, inside the train step's graph: no extra
forward pass, and under ``tf.distribute`` each replica reports its own rows. Observers must be
graph-safe (``LossTable.update`` is); evaluation (``training=False``) does not report, and takes
the wrapped model's plain inputs as well. The wrapped model is ``model.model``; save or export
that one.
"""

from __future__ import annotations

import math
import numbers
import time
import warnings
from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

from echoing import fit_timing
from echoing.auto_echo import AutoEcho
from echoing.priority_feedback import PriorityFeedback
from echoing.types import is_positive_int

# (ids [B], per-example losses [B]) -> None, run inside the train step.
Observer = Callable[[tf.Tensor, tf.Tensor], object]


class _PerExampleLossModel(keras.Model):
    """A wrapper whose ``compile`` defaults the loss to its ``per_example_loss``'s mean."""

    def compile(self, optimizer="rmsprop", loss=None, *args, **kwargs):
        """``keras.Model.compile``; without a ``loss``, ``per_example_loss``'s weighted mean."""
        if loss is None:
            loss = _MeanLoss(self.per_example_loss, type(self).__name__)
        super().compile(optimizer, loss, *args, **kwargs)


class LossFeedback(_PerExampleLossModel):
    """``model`` for ``fit``, reporting each train batch's ids and per-example losses.

    Training needs ``x = {inputs_key: ..., id_key: ...}`` (``echoing.with_ids`` then
    ``fit_inputs``) and refuses plain inputs when ``fit`` traces its step. Evaluation and
    prediction (``training`` falsy) also take what the wrapped model takes: a dict holding
    ``inputs_key`` gives the model ``x[inputs_key]``, anything else (an array, a tensor, a dict of
    named inputs) is passed to it as it is.

    ``compile(optimizer)`` without a ``loss`` trains on ``per_example_loss``'s mean, weighted by
    the data's ``sample_weight`` like any compiled Keras loss (``sum(loss * w) / batch_size``,
    the default ``"sum_over_batch_size"`` reduction), so the loss is written once; a ``loss``
    given to ``compile`` trains instead. ``metrics`` work as for any model.

    Args:
      model: the Keras model to train; it receives ``x[inputs_key]``.
      per_example_loss: ``(y_true, y_pred) -> [B]`` unreduced, e.g. a Keras loss built with
        ``reduction=None``; what the observers receive, and what trains unless ``compile`` is
        given a ``loss``.
      observers: callables ``(ids, losses)``, e.g. ``LossTable.update``.
      inputs_key, id_key: the keys of ``x`` holding the model's input and the example ids.
    """

    def __init__(
        self,
        model: keras.Model,
        *,
        per_example_loss: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
        observers: Sequence[Observer],
        inputs_key: str = "inputs",
        id_key: str = "id",
    ):
        if not isinstance(model, keras.Model):
            raise TypeError(f"LossFeedback(model={model!r}): expected a keras.Model.")
        if not callable(per_example_loss):
            raise TypeError(
                f"LossFeedback(per_example_loss={per_example_loss!r}): expected a callable "
                "(y_true, y_pred) -> [B], e.g. keras.losses.SparseCategoricalCrossentropy("
                "from_logits=True, reduction=None)."
            )
        observers = _observer_list(observers)
        for observer in observers:
            if not callable(observer):
                raise TypeError(
                    f"LossFeedback observers must be callables (ids, losses), got {observer!r}; "
                    "pass e.g. table.update for an echoing.LossTable."
                )
        super().__init__(name=f"{model.name}_with_loss_feedback")
        self.model = model
        self.per_example_loss = per_example_loss
        self.observers = observers
        self.inputs_key, self.id_key = inputs_key, id_key

    def call(self, x, training=None):
        return self.model(_model_inputs(self, x, training), training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if training:
            _require_ids(self, x)  # before the loss: the observers need the ids
        loss = super().compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training
        )
        if training:
            losses = tf.stop_gradient(_per_example_losses(self, y, y_pred))
            ids = x[self.id_key]
            if not ids.dtype.is_integer:  # a cast would truncate 1.7 to 1, another example's id
                raise TypeError(
                    f"LossFeedback: x[{self.id_key!r}] must hold integer example ids, got dtype "
                    f"{ids.dtype.name}; give the examples int ids (echoing.with_ids)."
                )
            ids = tf.cast(ids, tf.int64)
            # Stateful ops in fit's tf.function: they run every step, no dependency needed.
            for observe in self.observers:
                observe(ids, losses)
        return loss


class PrioritizedModel(_PerExampleLossModel):
    """``model`` for ``fit``, trained by prioritized gradient descent (PGD).

    Example::

        import keras
        import numpy as np
        import echoing

        n = 256
        arrays = {"inputs": np.random.rand(n, 8).astype("float32"), "label": np.arange(n) % 2}
        table = echoing.PriorityTable(n)
        batches = echoing.priority_sample(table, arrays, batch_size=32, top_ratio=0.25,
                                          renew_ratio=0.75, seed=0)
        net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
        model = echoing.keras.PrioritizedModel(
            net,
            per_example_loss=keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=None),
            table=table,
        )
        model.compile(keras.optimizers.SGD(0.1), metrics=["accuracy"])
        model.fit(batches.map(echoing.keras.fit_inputs), steps_per_epoch=8, epochs=2, verbose=0)

    Each train step runs the forward pass once, applies the batch's mean gradient (weighted by
    the importance weights ``priority_sample`` attaches, if any), and writes the priorities
    ``p_i = ḡ·g_i`` of the batch's examples into ``table`` by id: one forward-mode JVP along the
    aggregated gradient ḡ, no per-example gradients (see ``echoing.PriorityFeedback``). The
    sampler reads the table to pick the next batches, so a run is
    ``priority_sample -> fit_inputs -> fit``. Under ``tf.distribute`` build it (and compile it)
    inside ``strategy.scope()``, where ḡ's variables are created; each replica then writes its
    own rows and ḡ is kept in step on every replica. ``compile`` needs only the optimizer (and any
    metrics); the step trains on ``per_example_loss``, and ``evaluate`` reports its weighted mean
    (unless ``compile`` is given a ``loss``). Like ``LossFeedback``, it takes plain inputs in
    ``evaluate`` and ``predict``. The wrapped model is ``model.model``.

    Args:
      model: the Keras model to train; it receives ``x[inputs_key]``.
      per_example_loss: ``(y_true, y_pred) -> [B]`` unreduced (a Keras loss with
        ``reduction=None``).
      table: the ``echoing.PriorityTable`` (or ``ShardedPriorityTable``) that the sampler reads.
      inputs_key, id_key: the keys of ``x`` holding the model's input and the example ids.
    """

    def __init__(
        self,
        model: keras.Model,
        *,
        per_example_loss: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
        table,
        inputs_key: str = "inputs",
        id_key: str = "id",
    ):
        if not isinstance(model, keras.Model) or not model.trainable_variables:
            raise TypeError(
                f"PrioritizedModel(model={model!r}): expected a built keras.Model with "
                "trainable variables (give it an Input, or call it once, first)."
            )
        if not callable(per_example_loss):
            raise TypeError(
                f"PrioritizedModel(per_example_loss={per_example_loss!r}): expected a callable "
                "(y_true, y_pred) -> [B], e.g. keras.losses.SparseCategoricalCrossentropy("
                "from_logits=True, reduction=None)."
            )
        super().__init__(name=f"{model.name}_prioritized")
        self.model = model
        self.per_example_loss = per_example_loss
        self.inputs_key, self.id_key = inputs_key, id_key
        self.feedback = PriorityFeedback(table, model.trainable_variables)

    def call(self, x, training=None):
        return self.model(_model_inputs(self, x, training), training=training)

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        predictions = []

        def per_example_losses():
            predictions.append(self(x, training=True))
            return _per_example_losses(self, y, predictions[0])

        step = tf.identity(self.optimizer.iterations)  # this step's number, before it counts
        losses, gradients, priorities = self.feedback.losses_gradients_priorities(
            per_example_losses, sample_weight
        )
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables, strict=True))
        self.feedback.update(x[self.id_key], priorities, gradients, step)
        weights = 1.0 if sample_weight is None else tf.cast(sample_weight, losses.dtype)
        # Keras's pattern for a custom train_step: its "loss" tracker and the compiled metrics.
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(tf.reduce_mean(losses * weights))
            else:
                metric.update_state(y, predictions[0], sample_weight=sample_weight)
        return {metric.name: metric.result() for metric in self.metrics}


def _observer_list(observers) -> tuple:
    """``LossFeedback``'s ``observers`` as a tuple; one callable alone is refused, not iterated."""
    if callable(observers):
        raise TypeError(
            f"LossFeedback(observers={observers!r}): expected a list of callables (ids, losses), "
            "got a single callable; pass a list, e.g. observers=[table.update]."
        )
    try:
        return tuple(observers)
    except TypeError:
        raise TypeError(
            f"LossFeedback(observers={observers!r}): expected a list of callables (ids, losses), "
            "e.g. observers=[table.update] for an echoing.LossTable."
        ) from None


def _per_example_losses(owner: keras.Model, y, y_pred) -> tf.Tensor:
    """``owner.per_example_loss(y, y_pred)``, refused (when fit traces its step) if reduced."""
    return _checked_losses(type(owner).__name__, owner.per_example_loss(y, y_pred), y_pred)


def _checked_losses(owner: str, losses, y_pred):
    """``losses`` unless it is one value for the batch (a Keras loss built without
    ``reduction=None``): the observers, the table and the weighting need one per example."""
    shape = getattr(losses, "shape", None)
    if shape is not None and tf.TensorShape(shape).rank == 0:
        predictions = getattr(tf.nest.flatten(y_pred)[0], "shape", None)
        predictions = tuple(predictions) if predictions is not None else "unknown"
        raise ValueError(
            f"{owner}: per_example_loss returned shape () for predictions of shape "
            f"{predictions}; it must return one loss per example, shape [B]. A Keras loss "
            "reduces the batch to one value unless told not to: build it with reduction=None, "
            "e.g. keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)."
        )
    return losses


def _require_ids(owner: keras.Model, x) -> None:
    """Refuses training inputs without the example ids a wrapper reports by (at trace time)."""
    if not isinstance(x, dict) or owner.inputs_key not in x or owner.id_key not in x:
        raise TypeError(
            f"{type(owner).__name__} needs x = {{{owner.inputs_key!r}: ..., {owner.id_key!r}: "
            f"...}} to train, so that it can report by example id, got {_describe(x)}; give (x, y) "
            "elements ids with echoing.with_ids(dataset) and map its batches with "
            "echoing.keras.fit_inputs, e.g. echoing.with_ids(dataset).batch(32).map("
            "echoing.keras.fit_inputs). Evaluation and prediction take plain inputs."
        )


def _describe(x) -> str:
    """``x`` in a few words for an error message (not its values: they can be large)."""
    if isinstance(x, dict):
        return f"a dict with keys {sorted(map(str, x))}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        dtype = getattr(x.dtype, "name", x.dtype)
        return f"a {type(x).__name__} of shape {tuple(x.shape)} and dtype {dtype}"
    return f"a {type(x).__name__}"


def _model_inputs(owner: keras.Model, x, training):
    """What the wrapped model receives: ``x[inputs_key]`` of the id form, else ``x`` itself
    (not in training, which needs the ids)."""
    if training:
        _require_ids(owner, x)
    if isinstance(x, dict) and owner.inputs_key in x:
        return x[owner.inputs_key]
    return x


class _MeanLoss(keras.losses.Loss):
    """A per-example loss as a compiled Keras loss: Keras weights and reduces what it returns
    (``"sum_over_batch_size"``: ``sum(loss * sample_weight) / batch_size``, masks included)."""

    def __init__(self, per_example_loss: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], owner: str):
        super().__init__(name=getattr(per_example_loss, "name", "per_example_loss"))
        self.per_example_loss = per_example_loss
        self.owner = owner  # the wrapper's name, for errors

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Loss.__call__ casts y_true to a float: per_example_loss gets y as the observers do,
        # and Loss.__call__ then reduces its values with y_pred's mask and the sample weights.
        losses = _checked_losses(self.owner, self.per_example_loss(y_true, y_pred), y_pred)
        return super().__call__(losses, y_pred, sample_weight)

    def call(self, losses, y_pred):
        return losses


def fit_inputs(batch: dict) -> tuple:
    """A batch dict ``{"inputs", "label", "id"[, "sample_weight"]}`` as ``fit``'s
    ``(x, y[, sample_weight])`` with ``x = {"inputs", "id"}``, for ``Dataset.map``."""
    missing = [key for key in ("inputs", "label", "id") if key not in batch]
    if missing:
        raise KeyError(
            f"fit_inputs needs 'inputs', 'label' and 'id' in each batch, {missing} missing; "
            f"got keys {sorted(batch)}."
        )
    x = {"inputs": batch["inputs"], "id": batch["id"]}
    if "sample_weight" in batch:
        return x, batch["label"], batch["sample_weight"]
    return x, batch["label"]


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
    batch became ready and when the train step took it (``echoing.fit_timing``). A call of
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
    added to the epoch logs (``History``, TensorBoard) as ``echo_factor``. A fit whose first
    epoch (or whole run, if shorter) ran train steps but stamped no batch warns, once per fit,
    that ``stamp`` is missing: without it nothing is observed and the factor stays where it is.

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
        self._stamp_checked = False  # whether this fit's stamps were checked (warned once)

    def stamp(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """The pipeline's last transformation: records when each batch was ready and taken."""
        return self._stamps.stamp(dataset)

    def on_train_begin(self, logs=None):
        self._traced = False
        self._calls.clear()
        self._fit_calls, self._stamp_checked = 0, False
        self._stamped_before_fit = self._stamps.count
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

    def _check_stamped(self) -> None:
        """Warns (once per fit) when fit ran train steps but no batch passed ``stamp``."""
        if self._stamp_checked or not self._fit_calls:
            return
        self._stamp_checked = True
        if self._stamps.count == self._stamped_before_fit:
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
    if (
        isinstance(observe_seconds, bool)
        or not isinstance(observe_seconds, numbers.Real)
        or not math.isfinite(observe_seconds)
        or observe_seconds <= 0
    ):
        raise ValueError(
            f"AutoEchoCallback(observe_seconds={observe_seconds!r}): expected a finite number "
            "of seconds > 0, how often the echo factor is updated (default 0.05)."
        )

__all__ = ["AutoEchoCallback", "LossFeedback", "PrioritizedModel", "fit_inputs"]
