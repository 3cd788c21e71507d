"""Per-example loss feedback from ``model.fit``'s own train step (``echoing.keras.LossFeedback``).

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

import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence

import keras
import tensorflow as tf

from echoing._src.core import fit_checks

_EVALUATE = inspect.signature(keras.Model.evaluate)

# (ids [B], per-example losses [B]) -> None, run inside the train step.
Observer = Callable[[tf.Tensor, tf.Tensor], object]


class _PerExampleLossModel(keras.Model):
    """A wrapper whose ``compile`` defaults the loss to its ``per_example_loss``'s mean."""

    def compile(self, optimizer="rmsprop", loss=None, *args, **kwargs):
        """``keras.Model.compile``; without a ``loss``, ``per_example_loss``'s weighted mean."""
        if loss is None:
            _require_one_output(self)
            loss = _MeanLoss(self.per_example_loss, type(self).__name__)
        super().compile(optimizer, loss, *args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        """``keras.Model.fit``, refusing or warning first where Keras would train in silence but
        not as meant (``fit_checks``), and refusing a ``ModelCheckpoint`` that would save the
        wrapper (which ``save`` refuses) an epoch in."""
        arguments = fit_checks.fit_arguments(self, x, args, kwargs)
        fit_checks.check_fit(self, arguments)
        watched = fit_checks.with_watches(self, arguments)
        if watched is arguments:
            return super().fit(x, *args, **kwargs)
        # Every argument by name, the watch among the callbacks (fit_arguments filled the rest).
        return super().fit(**{key: value for key, value in watched.items() if key != "self"})

    def evaluate(self, x=None, y=None, *args, **kwargs):
        """``keras.Model.evaluate``, refusing an infinite dataset with no ``steps``, which would
        never end, printing nothing under ``verbose=0`` (``priority_sample``'s batches)."""
        steps = _EVALUATE.bind(self, x, y, *args, **kwargs).arguments.get("steps")
        endless = isinstance(x, tf.data.Dataset) and x.cardinality() == tf.data.INFINITE_CARDINALITY
        if endless and steps is None:
            raise ValueError(
                f"{type(self).__name__}.evaluate: the dataset is infinite (priority_sample's "
                "batches, or a repeat()) and no steps is given, so evaluation would never end; "
                "evaluate on a split that does not pass through the sampler (batched and "
                "mapped with fit_inputs), or pass steps."
            )
        return super().evaluate(x, y, *args, **kwargs)

    def save(self, filepath, *args, **kwargs):
        """Refused: the wrapper only trains; save the model it wraps (``model.model.save``)."""
        raise TypeError(
            f"{type(self).__name__} is a training wrapper and is not saved itself; save the "
            f"model it wraps, which holds every trained weight: model.model.save({filepath!r}) "
            "(keras.models.load_model then loads it without echoing)."
        )

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y is None:  # at trace time, instead of Keras's "None values not supported"
            _require_labels(self, x, y, "fit" if training else "evaluate")
        return super().compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training
        )


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
      observers: callables ``(ids, losses)``, e.g. ``LossTable.update``. They run inside
        fit's compiled train step, on tensors: TensorFlow ops there run every step, while a
        Python side effect (a list's append, numpy) runs once, when fit traces the step; wrap
        one in ``tf.py_function`` to run it every step.
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
        warn_if_own_steps_skipped("LossFeedback", model)
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
            _require_labels(self, x, y)
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


def warn_if_own_steps_skipped(owner: str, model: keras.Model) -> None:
    """Warns when ``model`` overrides a step method that the wrapper, which trains and
    evaluates it with Keras' default steps, never calls: its gradient clipping, added loss or
    custom update would not happen, without a word."""
    skipped = [name for name in _OWN_STEPS if getattr(type(model), name) is not _OWN_STEPS[name]]
    if skipped:
        warnings.warn(
            f"{owner}(model={model.name!r}): the model overrides {', '.join(skipped)}, which "
            f"{owner} never calls: it trains and evaluates the model with steps of its own, so "
            "none of that (gradient clipping, an added loss, a custom update) happens. Clip in "
            "the optimizer (e.g. keras.optimizers.SGD(clipnorm=1.0)) and add losses in layers "
            f"(self.add_loss, regularizers), which {owner}'s steps do run.",
            UserWarning,
            stacklevel=3,  # this check, the wrapper's __init__, then the user's line
        )


_OWN_STEPS = {
    name: getattr(keras.Model, name) for name in ("train_step", "compute_loss", "test_step")
}


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
    if shape is not None and tf.TensorShape(shape).rank is not None and len(shape) > 1:
        raise ValueError(
            f"{owner}: per_example_loss returned shape {tuple(shape)}, one loss per example and "
            "step (a sequence model's per-token losses), or per pair of examples (labels [B] "
            "against predictions [B, 1] broadcast to [B, B]); it must return one loss per "
            "example, shape [B]. Reshape the labels to the predictions' shape, or average over "
            "the other axes in a per_example_loss of your own, e.g. lambda y, p: "
            "tf.reduce_mean(token_loss(y, p), axis=-1) with token_loss built with "
            "reduction=None."
        )
    return _one_per_row(owner, losses, tf.nest.flatten(y_pred)[0])


def _one_per_row(owner: str, losses, predictions):
    """``losses``, checked to hold one loss per row of the batch: a loss of another length
    (a slice, a mean over the wrong axis) would train on part of the batch, or fail in an
    observer's assert that names no per_example_loss."""
    message = (
        f"{owner}: per_example_loss returned {{}} losses for a batch of {{}} rows; it must "
        "return one loss per example, shape [B], in the batch's order"
    )
    have, want = losses.shape[0], predictions.shape[0]
    if have is not None and want is not None:  # known when fit traces: said at once
        if have != want:
            raise ValueError(message.format(have, want) + ".")
        return losses
    check = tf.debugging.assert_equal(  # x and y, the two counts, follow in its message
        tf.shape(losses)[0], tf.shape(predictions)[0], message=message.format("x", "y") + ":"
    )
    with tf.control_dependencies([check]):
        return tf.identity(losses)


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


def _require_labels(owner: keras.Model, x, y, method: str = "fit") -> None:
    """Refuses a batch without labels ``y`` (at trace time). The usual cause: batch dicts
    ``{"inputs", "label", "id"}`` given to ``fit`` or ``evaluate`` unmapped, so the labels sit
    inside ``x`` and Keras would fail deep in the loss with "None values not supported"."""
    if y is not None:
        return
    name, purpose = type(owner).__name__, "train on" if method == "fit" else "evaluate on"
    example = f"model.{method}(batches.map(echoing.keras.fit_inputs))"
    if isinstance(x, dict) and "label" in x:
        raise TypeError(
            f"{name} got no labels y to {purpose}, and x = {_describe(x)}: {method} was given "
            "the batch dicts themselves. Map the batches with echoing.keras.fit_inputs, which "
            f"gives {method} x = {{'inputs', 'id'}} and y = the labels (and any sample "
            f"weights), e.g. {example}."
        )
    raise TypeError(
        f"{name} got no labels y to {purpose} (x = {_describe(x)}); give {method} (x, y) "
        "batches: batch dicts {'inputs', 'label', 'id'} mapped with echoing.keras.fit_inputs, "
        f"e.g. {example}."
    )


def _require_one_output(owner: keras.Model) -> None:
    """Refuses the default loss for a model of several outputs: Keras would give the one loss
    to the first and fail on a label path ("The path: (0,) in the `loss` argument")."""
    outputs = getattr(owner.model, "outputs", None) or ()
    if len(outputs) > 1:
        raise ValueError(
            f"{type(owner).__name__}: the wrapped model has {len(outputs)} outputs, and "
            "compile() without a loss trains on per_example_loss's mean, for one output. Give "
            "compile a loss per output (compile(optimizer, loss=[loss_a, loss_b]); "
            "per_example_loss(y, y_pred) then still feeds the observers, with y_pred the list "
            "of outputs), or wrap a model with one output."
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


def fit_inputs(batch: dict, *more) -> tuple:
    """A batch dict ``{"inputs", "label", "id"[, "sample_weight"]}`` as ``fit``'s
    ``(x, y[, sample_weight])`` with ``x = {"inputs", "id"}``, for ``Dataset.map``.

    ``(x, y)`` batches (which ``Dataset.map`` passes as two arguments) are refused: they hold no
    example ids; give the elements ids first with ``echoing.with_ids``."""
    if more or not isinstance(batch, Mapping):
        got = f"{1 + len(more)} values" if more else _describe(batch)
        raise TypeError(
            f"fit_inputs takes one batch dict {{'inputs', 'label', 'id'}}, got {got}: (x, y) "
            "batches hold no example ids. Give the elements ids first, then batch and map: "
            "echoing.with_ids(dataset).batch(32).map(echoing.keras.fit_inputs)."
        )
    missing = [key for key in ("inputs", "label", "id") if key not in batch]
    if missing:
        raise KeyError(
            f"fit_inputs needs 'inputs', 'label' and 'id' in each batch, {missing} missing; "
            f"got keys {sorted(batch)}. Elements with other keys (with_ids(..., inputs_key=...)"
            ") can be mapped by hand: lambda b: ({'inputs': b[KEY], 'id': b['id']}, "
            "b['label']), and the wrapper built with its default inputs_key."
        )
    left_out = sorted(set(batch) - {"inputs", "label", "id", "sample_weight"})
    if left_out:  # said when the map traces, once per pipeline
        warnings.warn(
            f"fit_inputs leaves out the batch's {left_out}: fit gets x = {{'inputs', 'id'}}, "
            "y = 'label' and the weights under 'sample_weight' only; rename a weight to "
            "'sample_weight', or drop the keys before the map to say so.",
            UserWarning,
            stacklevel=2,
        )
    x = {"inputs": batch["inputs"], "id": batch["id"]}
    if "sample_weight" in batch:
        return x, batch["label"], batch["sample_weight"]
    return x, batch["label"]
