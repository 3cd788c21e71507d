"""Priorities p_i = ḡ·g_i measured by one forward-mode JVP (``PriorityMeter``), a priority step.

Example::

    import keras
    import numpy as np
    import echoing

    x = np.random.rand(256, 40).astype("float32")
    y = np.random.randint(0, 10, 256)
    model = keras.Sequential([keras.Input((40,)), keras.layers.Dense(10)])
    table = echoing.PriorityTable(256)
    step_fn = echoing.PriorityStep(
        model,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None),
        keras.optimizers.SGD(0.1),
        table,
    )
    ds = echoing.priority_sample(table, {"x": x, "y": y}, batch_size=32, top_ratio=0.25,
                                 renew_ratio=0.75, seed=0)
    for step, batch in enumerate(ds.take(10)):
        metrics = step_fn(batch, step)  # trains, refreshes the batch's priorities in `table`

The priority of example ``i`` is ``p_i = ḡ·g_i`` (Eq. 8 of the paper, Li et al., "prioritized
gradient descent") with ``g_i`` the gradient of its loss and ``ḡ`` the aggregated gradient.
``ḡ·g_i`` is the directional derivative of ``loss_i`` along ``ḡ``, so one forward-mode JVP
(``tf.autodiff.ForwardAccumulator`` with tangents ``ḡ``) over the batch gives every ``p_i`` in the
same forward pass that the backward pass for the mean gradient uses: no per-example gradients are
formed.

``ḡ`` follows Eq. 9, ``ḡ <- (1 - n/N)·ḡ + G``, with ``n`` the examples in the step and ``G`` the
step's *mean* gradient (the gradient the optimizer applies). The authors' code adds a sum of
per-example gradients instead, and one variant updates priorities by loop index: here ``G`` is the
mean and priorities are written by example id. Before the first update ``ḡ = 0`` and every
priority would be 0, so the first step writes no priorities (its examples stay unmeasured).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence

import keras
import tensorflow as tf

from echoing._src.priority.shards import ShardedPriorityTable
from echoing._src.priority.table import PriorityTable

# (labels, predictions) -> per-example losses [batch], e.g. a Keras loss with reduction=None.
PerExampleLoss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def _as_tf_variables(variables: Sequence) -> list[tf.Variable]:
    """Keras 3 variables wrap a tf.Variable in ``.value``; the autodiff APIs need the latter."""
    unwrapped = []
    for variable in variables:
        inner = variable if isinstance(variable, tf.Variable) else getattr(variable, "value", None)
        if not isinstance(inner, tf.Variable):
            raise TypeError(
                f"variables must be tf.Variables or Keras variables (TensorFlow backend), got "
                f"{type(variable).__name__}; pass model.trainable_variables."
            )
        unwrapped.append(inner)
    return unwrapped


class PriorityMeter(tf.Module):
    """Measures priorities: holds ``ḡ`` (Eq. 9) and turns a step's per-example losses into
    priorities ``ḡ·g_i`` by one JVP, which ``update`` writes into the priority table.
    """

    def __init__(
        self,
        table: PriorityTable | ShardedPriorityTable,
        variables: Sequence,
        *,
        name: str | None = None,
    ):
        """Creates ``ḡ = 0`` next to each variable.

        Args:
          table: the ``PriorityTable`` to write priorities into (``N`` = its ``num_examples``),
            or a ``ShardedPriorityTable`` (one shard per input pipeline), which routes each
            GLOBAL id to the shard that owns it.
          variables: the trained variables (``model.trainable_variables``).
          name: optional module name.

        Raises:
          TypeError: ``table`` is not a ``PriorityTable`` or a variable is not a variable.
          ValueError: ``variables`` is empty.
        """
        super().__init__(name=name or "priority_meter")
        if not isinstance(table, PriorityTable | ShardedPriorityTable):
            raise TypeError(
                f"table must be an echoing.PriorityTable or ShardedPriorityTable, got "
                f"{type(table).__name__}."
            )
        self.table = table
        self.variables_ = _as_tf_variables(list(variables))
        if not self.variables_:
            raise ValueError(
                "variables is empty; pass model.trainable_variables after the model is built."
            )
        with self.name_scope:
            # Same device as each variable: ḡ is read as the JVP tangent inside the train step.
            # MEAN aggregation: under a synchronous strategy every replica assigns
            # ``keep * ḡ + replicas * G_replica`` and the mean of those is Eq. 9 with the global
            # mean gradient, identical on all replicas.
            self.aggregated_gradient = [
                tf.Variable(
                    tf.zeros_like(v),
                    trainable=False,
                    name="aggregated_gradient",
                    aggregation=tf.VariableAggregation.MEAN,
                )
                for v in self.variables_
            ]
            self.has_aggregate = tf.Variable(
                False,
                trainable=False,
                name="has_aggregate",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

    def losses_gradients_priorities(
        self,
        per_example_losses_fn: Callable[[], tf.Tensor],
        sample_weight: tf.Tensor | None = None,
        *,
        extra_loss_fn: Callable[[], tf.Tensor] | None = None,
        loss_scale: tf.Tensor | float = 1.0,
    ) -> tuple[tf.Tensor, list[tf.Tensor], tf.Tensor]:
        """Runs the forward pass once; returns per-example losses, mean gradient, priorities.

        Args:
          per_example_losses_fn: computes the batch's per-example losses ``[n]`` from the
            variables (e.g. ``lambda: loss_fn(y, model(x, training=True))``).
          sample_weight: optional ``[n]`` weights for the mean loss (priority sampling's
            importance weights); priorities use the unweighted per-example losses.
          extra_loss_fn: optional scalar added to the trained loss after the forward pass, once
            per global batch (a model's regularization losses, ``model.losses``); it shifts
            every example's priority alike, so priorities leave it out.
          loss_scale: the gradients are of the loss times this (a mixed-precision optimizer's
            loss scale, which its ``apply_gradients`` divides out).

        Returns:
          ``(losses [n], gradients of the (weighted) mean loss, priorities [n] = ḡ·∇loss_i)``.
          Under a synchronous strategy the gradients are this replica's share (the loss is
          divided by the global batch size), so their sum over replicas is the mean gradient.
        """
        with tf.GradientTape() as tape:
            with tf.autodiff.ForwardAccumulator(
                self.variables_, [tf.convert_to_tensor(g) for g in self.aggregated_gradient]
            ) as accumulator:
                losses = per_example_losses_fn()
            # Divides by the GLOBAL batch size (the trainers' convention): under a synchronous
            # strategy the replicas' gradients sum to the mean gradient; alone it is the mean.
            loss = tf.nn.compute_average_loss(
                losses,
                sample_weight=None
                if sample_weight is None
                else tf.cast(sample_weight, losses.dtype),
            )
            if extra_loss_fn is not None:  # each replica's share, as for the mean above
                loss += tf.nn.scale_regularization_loss(tf.cast(extra_loss_fn(), loss.dtype))
            loss *= tf.cast(loss_scale, loss.dtype)
        priorities = accumulator.jvp(losses, unconnected_gradients="zero")
        gradients = tape.gradient(loss, self.variables_, unconnected_gradients="zero")
        return losses, gradients, priorities

    def update(
        self,
        ids: tf.Tensor,
        priorities: tf.Tensor,
        gradients: Sequence[tf.Tensor],
        step: tf.Tensor | int,
    ) -> tf.Tensor:
        """Writes priorities by example id (skipped while ``ḡ`` is still 0), then applies Eq. 9.

        Args:
          ids: int ``[n]`` ids of the examples in the step.
          priorities: ``[n]`` priorities from ``losses_gradients_priorities``.
          gradients: the step's mean gradient ``G`` (under a strategy, this replica's share as
            returned by ``losses_gradients_priorities``), one tensor per variable.
          step: the training step.

        Returns:
          int64 scalar: NaN/inf priorities the table rejected.
        """
        ids = tf.reshape(tf.cast(ids, tf.int64), [-1])
        rejected = tf.cond(
            self.has_aggregate,
            lambda: self.table.update(ids, priorities, step),
            lambda: tf.constant(0, tf.int64),
        )
        replica_context = tf.distribute.get_replica_context()
        replicas = 1 if replica_context is None else replica_context.num_replicas_in_sync
        # n of Eq. 9 is the global batch: every replica's ids.
        examples = tf.cast(tf.size(ids) * replicas, tf.float32)
        # A step whose gradient overflowed (a mixed-precision loss scale too high: the optimizer
        # skips it) leaves ḡ as it was. Arithmetic, not tf.cond: a MEAN-aggregated variable's
        # assign cannot sit in a branch under a tf.distribute strategy.
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in gradients])
        keep = tf.where(finite, 1.0 - examples / float(self.table.num_examples), 1.0)
        for aggregate, gradient in zip(self.aggregated_gradient, gradients, strict=True):
            gradient = tf.convert_to_tensor(gradient, aggregate.dtype)
            aggregate.assign(
                tf.cast(keep, aggregate.dtype) * aggregate
                + float(replicas) * tf.where(finite, gradient, tf.zeros_like(gradient))
            )
        self.has_aggregate.assign(True)
        return rejected


class PriorityStep(tf.Module):
    """One priority-sampling training step: forward once, apply the mean gradient, refresh the
    batch's priorities.

    Every computed gradient is used (the paper's aggressive update): top-k and renewal examples
    alike contribute to the applied gradient, and all of their priorities are written.
    """

    def __init__(
        self,
        model: keras.Model,
        loss_fn: PerExampleLoss,
        optimizer: keras.optimizers.Optimizer,
        table: PriorityTable,
        *,
        features_key: str = "x",
        label_key: str = "y",
    ):
        """Wires a model, a per-example loss and an optimizer to a ``PriorityTable``.

        Args:
          model: a built Keras model mapping ``batch[features_key]`` to predictions.
          loss_fn: ``(labels, predictions) -> [n]`` per-example losses (Keras loss with
            ``reduction=None``).
          optimizer: applies the step's mean gradient.
          table: the ``PriorityTable`` that ``priority_sample`` reads.
          features_key: key of the model inputs in a batch.
          label_key: key of the labels in a batch.

        Raises:
          TypeError: ``loss_fn`` is not callable, or see ``PriorityMeter``.
          ValueError: the model has no trainable variables (build it first).
        """
        super().__init__(name="priority_step")
        if not callable(loss_fn):
            raise TypeError(
                f"loss_fn must be callable (labels, predictions) -> [n], got {loss_fn!r}."
            )
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.features_key = features_key
        self.label_key = label_key
        # ``feedback``, its name from before PriorityMeter, is also its checkpoint key: kept.
        self.feedback = PriorityMeter(table, model.trainable_variables)
        self._step = tf.function(self._train_step)

    def __call__(self, batch: Mapping[str, tf.Tensor], step: tf.Tensor | int) -> dict:
        """Trains on ``batch`` (with ``"id"``, optional ``"sample_weight"``) at ``step``.

        Returns:
          ``{"loss": mean loss, "per_example_loss": [n], "priority": [n], "rejected": int64}``.
        """
        return self._step(dict(batch), tf.cast(step, tf.int64))

    def _train_step(self, batch: dict, step: tf.Tensor) -> dict:
        features, labels = batch[self.features_key], batch[self.label_key]
        losses, gradients, priorities = self.feedback.losses_gradients_priorities(
            lambda: self.loss_fn(labels, self.model(features, training=True)),
            sample_weight=batch.get("sample_weight"),
        )
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables, strict=True))
        rejected = self.feedback.update(batch["id"], priorities, gradients, step)
        return {
            "loss": tf.reduce_mean(losses),
            "per_example_loss": losses,
            "priority": priorities,
            "rejected": rejected,
        }


class PrioritizedStep(PriorityStep):
    """Deprecated, goes in the next release: ``echoing.PriorityStep`` (the same step, renamed)."""

    def __init__(self, *args, **kwargs):
        warnings.warn(
            "echoing.PrioritizedStep is deprecated and goes in the next release: use "
            "echoing.PriorityStep, the same step under priority sampling's one name.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(*args, **kwargs)


class PriorityFeedback(PriorityMeter):
    """Deprecated, goes in the next release: ``echoing.PriorityMeter`` (the same, renamed)."""

    def __init__(self, *args, **kwargs):
        warnings.warn(
            "echoing.PriorityFeedback is deprecated and goes in the next release: use "
            "echoing.PriorityMeter, the same priority measurement under a name that leaves "
            "'feedback' to per-example losses.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(*args, **kwargs)
