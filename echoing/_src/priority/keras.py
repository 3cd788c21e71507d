"""Priority sampling under ``model.fit``: ``echoing.keras.PriorityModel``."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import keras
import tensorflow as tf

from echoing._src.core.keras_feedback import (
    _model_inputs,
    _per_example_losses,
    _PerExampleLossModel,
    _require_ids,
    _require_labels,
    warn_if_own_steps_skipped,
)
from echoing._src.priority.meter import PriorityMeter, _as_tf_variables


class PriorityModel(_PerExampleLossModel):
    """``model`` for ``fit``, trained on batches chosen by priority sampling.

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
        model = echoing.keras.PriorityModel(
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
    aggregated gradient ḡ, no per-example gradients (see ``echoing.PriorityMeter``). The
    sampler reads the table to pick the next batches, so a run is
    ``priority_sample -> fit_inputs -> fit``. Under ``tf.distribute`` build it (and compile it)
    inside ``strategy.scope()``, where ḡ's variables are created; each replica then writes its
    own rows and ḡ is kept in step on every replica. ``compile`` needs only the optimizer (and any
    metrics); the step trains on ``per_example_loss`` plus the model's own losses
    (``model.losses``: regularizers), and ``evaluate`` reports its weighted mean (unless
    ``compile`` is given a ``loss``, which warns). A mixed-precision optimizer's loss scale is
    applied and divided out as in Keras's own step; a step that overflows leaves ḡ as it was.
    Set ``layer.trainable`` before wrapping: ḡ is kept per trainable variable. Like
    ``LossFeedback``, it takes plain inputs in ``evaluate`` and ``predict``. The wrapped model is
    ``model.model``.

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
                f"{type(self).__name__}(model={model!r}): expected a built keras.Model with "
                "trainable variables (give it an Input, or call it once, first)."
            )
        if not callable(per_example_loss):
            raise TypeError(
                f"{type(self).__name__}(per_example_loss={per_example_loss!r}): expected a "
                "callable (y_true, y_pred) -> [B], e.g. keras.losses.SparseCategoricalCrossentropy("
                "from_logits=True, reduction=None)."
            )
        warn_if_own_steps_skipped(type(self).__name__, model)
        super().__init__(name=f"{model.name}_priority")
        self.model = model
        self.per_example_loss = per_example_loss
        self.inputs_key, self.id_key = inputs_key, id_key
        # ``feedback``, its name from before PriorityMeter, is also its checkpoint key: kept.
        self.feedback = PriorityMeter(table, model.trainable_variables)

    def compile(self, optimizer="rmsprop", loss=None, *args, **kwargs):
        """``keras.Model.compile``. The step trains on ``per_example_loss`` (priorities are its
        gradients), so a ``loss`` given here is what ``evaluate`` reports, said once."""
        if loss is not None:
            warnings.warn(
                f"{type(self).__name__}.compile(loss={loss!r}): the train step trains on "
                "per_example_loss (priorities are its gradients), so this loss is only what "
                "evaluate reports; leave loss out to evaluate per_example_loss's weighted mean.",
                UserWarning,
                stacklevel=2,
            )
        super().compile(optimizer, loss, *args, **kwargs)

    def call(self, x, training=None):
        return self.model(_model_inputs(self, x, training), training=training)

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        _require_ids(self, x)
        _require_labels(self, x, y)
        _require_same_trainable_variables(self)
        predictions = []

        def per_example_losses():
            predictions.append(self(x, training=True))
            return _per_example_losses(self, y, predictions[0])

        step = tf.identity(self.optimizer.iterations)  # this step's number, before it counts
        # 1 unless the optimizer scales the loss (mixed precision), then divides it out.
        scale = tf.cast(self.optimizer.scale_loss(1.0), tf.float32)
        losses, gradients, priorities = self.feedback.losses_gradients_priorities(
            per_example_losses,
            sample_weight,
            extra_loss_fn=(lambda: tf.add_n(self.model.losses)) if self.model.losses else None,
            loss_scale=scale,
        )
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables, strict=True))
        gradients = [gradient / tf.cast(scale, gradient.dtype) for gradient in gradients]
        self.feedback.update(x[self.id_key], priorities, gradients, step)
        weights = 1.0 if sample_weight is None else tf.cast(sample_weight, losses.dtype)
        # Keras's pattern for a custom train_step: its "loss" tracker and the compiled metrics.
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(tf.reduce_mean(losses * weights))
            else:
                metric.update_state(y, predictions[0], sample_weight=sample_weight)
        return {metric.name: metric.result() for metric in self.metrics}


def _require_same_trainable_variables(model: PriorityModel) -> None:
    """At trace time: the wrapped model's trainable variables are those ḡ was made for."""
    now = [id(variable) for variable in _as_tf_variables(model.model.trainable_variables)]
    if now != [id(variable) for variable in model.feedback.variables_]:
        raise ValueError(
            f"{type(model).__name__}: the wrapped model's trainable variables changed after it "
            f"was wrapped ({len(model.feedback.variables_)} then, {len(now)} now: a "
            "layer's trainable was set afterwards), and ḡ is kept per trainable variable; set "
            "layer.trainable before wrapping the model, and wrap it again after a change."
        )


class PrioritizedModel(PriorityModel):
    """Deprecated, goes in the next release: ``echoing.keras.PriorityModel`` (renamed)."""

    def __init__(self, model: keras.Model, **arguments):
        warnings.warn(
            "echoing.keras.PrioritizedModel is deprecated and goes in the next release: use "
            "echoing.keras.PriorityModel, the same model under priority sampling's one name.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(model, **arguments)
