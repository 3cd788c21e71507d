"""``model.fit`` with per-example loss feedback from the batches actually trained on.

Example::

    import keras
    import numpy as np
    import tensorflow as tf
    import echoing

    n = 256
    table = echoing.LossTable(n)
    source = tf.data.Dataset.from_tensor_slices({
        "inputs": np.random.default_rng(0).normal(size=(n, 8)).astype("float32"),
        "label": np.arange(n) % 2, "id": np.arange(n),
    })
    pruned = source.shuffle(n).apply(echoing.loss_prune(table, num_epochs=3, seed=0))
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model = echoing.keras.LossFeedback(
        net,
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None),
        observers=[table.update],
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(pruned.batch(32).map(echoing.keras.fit_inputs), epochs=3, verbose=0)
    print(int(table.seen.numpy().sum()))  # 256: every example's loss, from its own train step

``model.fit`` hands neither the example ids nor the per-example losses to anything a user can
reach. ``LossFeedback`` wraps a model so that its inputs carry the ids (``x = {"inputs": ...,
"id": ...}``, which ``fit_inputs`` builds from a batch dict) and its ``compute_loss`` also calls
every observer with ``(ids, per_example_losses)`` of the training batch, inside the train step's
graph: no extra forward pass, and under ``tf.distribute`` each replica reports its own rows.
Observers must be graph-safe (``LossTable.update`` is); evaluation (``training=False``) does
not report. The wrapped model is ``model.model``; save or export that one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

# (ids [B], per-example losses [B]) -> None, run inside the train step.
Observer = Callable[[tf.Tensor, tf.Tensor], object]


class LossFeedback(keras.Model):
    """``model`` for ``fit``, reporting each train batch's ids and per-example losses.

    Args:
      model: the Keras model to train; it receives ``x[inputs_key]``.
      per_example_loss: ``(y_true, y_pred) -> [B]`` unreduced, e.g. a Keras loss built with
        ``reduction=None``; what the observers receive (the compiled loss still trains).
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
        observers = tuple(observers)
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
        if not isinstance(x, dict) or self.inputs_key not in x or self.id_key not in x:
            raise TypeError(
                f"LossFeedback needs x = {{{self.inputs_key!r}: ..., {self.id_key!r}: ...}} so "
                f"that it can report losses by example id, got {x!r}; map batch dicts with "
                "echoing.keras.fit_inputs first."
            )
        return self.model(x[self.inputs_key], training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training
        )
        if training:
            losses = tf.stop_gradient(self.per_example_loss(y, y_pred))
            ids = tf.cast(x[self.id_key], tf.int64)
            # Stateful ops in fit's tf.function: they run every step, no dependency needed.
            for observe in self.observers:
                observe(ids, losses)
        return loss


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
