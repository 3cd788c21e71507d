"""``model.fit`` adapters: what a Keras user adds to train with echoing.

- ``LossFeedback(model, per_example_loss=..., observers=[table.update])``: reports each train
  batch's per-example losses by id from fit's own step (pruning's and the Assistant's tables);
- ``fit_inputs``: a batch dict ``{"inputs", "label", "id"[, "sample_weight"]}`` as fit's
  ``(x, y[, w])``, the ids riding in ``x``;
- ``AutoEchoCallback(auto_echo)``: drives an ``echoing.AutoEcho`` factor from fit's steps;
- ``PriorityModel(model, per_example_loss=..., table=...)``: priority sampling (its old name,
  ``PrioritizedModel``, is deprecated: it warns and goes in the next release).

Example::

    import keras
    import numpy as np
    import tensorflow as tf
    import echoing

    x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
    table = echoing.LossTable(64)
    batches = echoing.with_ids(tf.data.Dataset.from_tensor_slices((x, np.arange(64) % 2)))
    model = echoing.keras.LossFeedback(
        keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)]),
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None),
        observers=[table.update],
    )
    model.compile("sgd")
    model.fit(batches.batch(16).map(echoing.keras.fit_inputs), verbose=0)
    assert table.seen.numpy().all()
"""

from echoing._src.core.keras_feedback import LossFeedback, fit_inputs
from echoing._src.echo.keras import AutoEchoCallback
from echoing._src.priority.keras import PrioritizedModel, PriorityModel

__all__ = [
    "AutoEchoCallback",
    "LossFeedback",
    "PrioritizedModel",
    "PriorityModel",
    "fit_inputs",
]
