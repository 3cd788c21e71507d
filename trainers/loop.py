"""One custom training loop in Orbit's shape: ``train(num_steps)`` runs an inner ``tf.function``.

Example::

    import tensorflow as tf
    from echoing import techniques
    from trainers import loop, models

    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        model = models.build_model("mnist1d_mlp", (40,), 10)
        optimizer = tf.keras.optimizers.Adam(1e-3)
    examples = {
        "inputs": tf.random.stateless_normal([64, 40], seed=[0, 0]),
        "label": tf.range(64, dtype=tf.int64) % 10,
        "id": tf.range(64, dtype=tf.int64),
    }
    train = tf.data.Dataset.from_tensor_slices(examples).repeat().batch(16, drop_remainder=True)
    trainer = loop.Trainer(
        model=model,
        optimizer=optimizer,
        train_dataset_fn=loop.per_replica_batches(lambda: train, global_batch_size=16),
        eval_dataset_fn=loop.per_replica_batches(
            lambda: tf.data.Dataset.from_tensor_slices(examples).batch(16), global_batch_size=16
        ),
        strategy=strategy,
        techniques=[
            techniques.FeedbackCallback(
                lambda ids, losses, step: print(step, ids.shape, losses.shape)
            )
        ],
    )
    print(trainer.train(10))  # {"train_loss": ...}; the callback saw ids/losses of shape [10, 16]
    print(trainer.evaluate())  # {"eval_accuracy": ..., "eval_loss": ..., "eval_examples": 64.0}

The loop does not use Keras ``model.fit`` (Keras 3 ``fit`` does not support MultiWorkerMirrored or
ParameterServer strategies); it only calls the Keras model and applies the Keras optimizer, so it
runs under the default strategy, ``MirroredStrategy`` and other synchronous strategies.

Batches are dicts with ``"inputs"`` (float), ``"label"`` (int64), ``"id"`` (int64) and optionally
``"sample_weight"`` (float, multiplies each example's loss, e.g. 1/keep-probability of a filter).
Eval batches may carry ``"mask"`` (float, 1 for real rows, 0 for padding that fills the last
batch to the static batch size XLA/TPUs need): masked rows count nowhere. Sequence batches
(language models) have ``"label"`` [batch, length] and ``"label_mask"`` [batch, length] (1 for
real tokens, 0 for padding): an example's loss is the mean over its real tokens, and eval
accuracy and loss are per real token.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

from echoing.techniques import Feedback, Technique, replaces_gradients, selects_rows
from trainers import loop_checks

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


def per_replica_batches(
    make_dataset: Callable[[], tf.data.Dataset], global_batch_size: int
) -> DatasetFn:
    """Adapts a dataset of global batches to ``strategy.distribute_datasets_from_function``.

    The function it returns shards the dataset across input pipelines (hosts) and rebatches it to
    the per-replica batch size, so each replica's slice of a global step is consecutive rows of
    one global batch (batch echoing therefore still repeats whole global batches).

    Args:
      make_dataset: builds the dataset of global batches (called once per input pipeline).
      global_batch_size: rows per global batch; must divide evenly across replicas.
    """
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int):
        raise TypeError(f"global_batch_size must be an int, got {global_batch_size!r}.")
    if global_batch_size <= 0:
        raise ValueError(f"global_batch_size must be positive, got {global_batch_size}.")

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = context.get_per_replica_batch_size(global_batch_size)
        dataset = make_dataset()
        if context.num_input_pipelines > 1:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        if context.num_replicas_in_sync == 1:
            return dataset
        # Full global batches split evenly: keep the per-replica shape static (for XLA/TPUs).
        static = all(
            spec.shape.rank and spec.shape[0] == global_batch_size
            for spec in tf.nest.flatten(dataset.element_spec)
        )
        infinite = dataset.cardinality() == tf.data.INFINITE_CARDINALITY
        dataset = dataset.rebatch(per_replica, drop_remainder=static)
        if infinite:
            # rebatch forgets that its input never ends; MultiWorkerMirrored then plans for a
            # partial last batch and relaxes the batch dimension to None.
            dataset = dataset.apply(
                tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY)
            )
        return dataset

    return dataset_fn


class Trainer(tf.Module):
    """Runs train steps in an inner ``tf.function`` loop and evaluates, under any sync strategy.

    The model and optimizer must be created under ``strategy.scope()``. The trainer owns the global
    ``step`` variable and the distributed train ``iterator`` (both checkpointable), and after every
    inner loop hands one ``echoing.techniques.Feedback`` record to each technique.

    Args:
      model: maps ``batch["inputs"]`` to logits; created under ``strategy.scope()``.
      optimizer: a Keras optimizer created under ``strategy.scope()``.
      train_dataset_fn: ``InputContext -> Dataset`` of infinite per-replica batches
        (see ``per_replica_batches``), passed to ``distribute_datasets_from_function``.
      eval_dataset_fn: the same for the finite eval set, or None (``evaluate`` then raises).
      strategy: defaults to the current strategy (``tf.distribute.get_strategy()``).
      techniques: ``echoing.techniques.Technique``s (already ``build`` for ``model``): each
        gets a ``Feedback`` after every inner loop; the ids and per-example losses in it
        are gathered only if one of them ``wants_losses``. At most one may replace the
        backward pass (``Technique.gradients``, e.g. priority sampling's JVP); its
        ``after_step`` runs after every step.
      jit_compile: compile each replica's train step and eval step with XLA
        (``tf.function(jit_compile=True)``; what TPUs need, and often faster on GPUs).
        Batches must then have static shapes (``drop_remainder=True``) or each new shape
        compiles again. What stays outside the compiled step, and why: the step counter and
        feedback arrays (the host loop's), a technique's ``after_step`` (host state such as
        a priority table), and under Mirrored/MultiWorkerMirrored on CPU devices the
        gradient all-reduce and optimizer update (a `merge_call`, and XLA's CPU backend
        has no collectives).
      train_input_options: passed to ``distribute_datasets_from_function`` for the train
        set; defaults to the one technique's ``input_options()`` that gives any.

    Raises:
      ValueError: ``jit_compile`` with train batches of unknown shape, or under a strategy
        XLA cannot compile for (MirroredStrategy over several CPU devices: XLA's CPU
        backend is one device); two techniques that both replace the backward pass.
    """

    def __init__(
        self,
        *,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        train_dataset_fn: DatasetFn,
        eval_dataset_fn: DatasetFn | None = None,
        strategy: tf.distribute.Strategy | None = None,
        techniques: Sequence[Technique] = (),
        jit_compile: bool = False,
        train_input_options: tf.distribute.InputOptions | None = None,
    ):
        """Builds the optimizer's slots, the step counter and the distributed train iterator."""
        super().__init__(name="trainer")
        loop_checks.check_arguments(
            model, optimizer, train_dataset_fn, eval_dataset_fn, jit_compile
        )
        self.strategy = strategy or tf.distribute.get_strategy()
        loop_checks.check_placed(model, self.strategy)
        self.model = model
        self.optimizer = optimizer
        self.techniques = loop_checks.check_techniques(techniques)
        hooks = [t for t in self.techniques if replaces_gradients(t)]
        self._gradient_technique = hooks[0] if hooks else None
        self._selecting = [t for t in self.techniques if selects_rows(t)]
        self._collect = any(t.wants_losses for t in self.techniques)
        self._traced = False
        self.jit_compile = jit_compile
        # On CPU devices under Mirrored/MultiWorkerMirrored, Keras optimizers aggregate through
        # `merge_call`, which cannot run inside a nested compiled tf.function, and XLA's CPU
        # backend has no collectives ("Collectives are not yet implemented for CPU devices when
        # compiling with XLA", TF 2.21): there only the forward/backward pass is compiled and the
        # all-reduce + update run outside. On GPUs/TPUs (no merge_call in XLA context) and under
        # the default strategy the update is compiled too.
        self._compiled_update = not loop_checks.on_cpu(self.strategy, jit_compile)
        with self.strategy.scope():
            # Build the slots now, so a checkpoint restores them instead of deferring the restore.
            if not self.optimizer.built:
                self.optimizer.build(model.trainable_variables)
            self.step = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        if train_input_options is None:
            options = [t.input_options() for t in self.techniques]
            train_input_options = next((o for o in options if o is not None), None)
        self.train_dataset = self.strategy.distribute_datasets_from_function(
            train_dataset_fn, train_input_options
        )
        if jit_compile:
            loop_checks.check_static_shapes(self.train_dataset.element_spec)
        self.iterator = iter(self.train_dataset)
        self._eval_dataset_fn = eval_dataset_fn
        self._compile_steps(jit_compile)

    def _compile_steps(self, jit_compile: bool) -> None:
        if jit_compile:
            self._forward_backward = tf.function(self._forward_backward_body, jit_compile=True)
            self._step_and_update = tf.function(self._step_and_update_body, jit_compile=True)
            self._eval_step = tf.function(self._eval_step_body, jit_compile=True)
        else:
            self._forward_backward = self._forward_backward_body
            self._step_and_update = self._step_and_update_body
            self._eval_step = self._eval_step_body
        self._train_loop = tf.function(self._train_loop_body)
        self._eval_loop = tf.function(self._eval_loop_body)

    # ----------------------------------------------------------------------------------- train

    def _train_step(self, batch):
        """One replica's step: returns (per-example losses, ids, this replica's share of loss)."""
        for technique in self._selecting:
            # In-batch selection: the rows trained on, by an inference-mode forward pass.
            batch = technique.select(batch, self._inference_losses, self.step.read_value())
        if self._compiled_update:
            per_example, loss, gradients, aux = self._step_and_update(batch)
        else:
            per_example, loss, gradients, aux = self._forward_backward(batch)
            self._apply(gradients)
        if self._gradient_technique is not None:
            # Outside the compiled step (host state; see jit_compile in __init__).
            self._gradient_technique.after_step(batch["id"], aux, gradients, self.step.read_value())
        return per_example, batch["id"], loss

    def _inference_losses(self, batch):
        return self._example_losses(batch, self.model(batch["inputs"], training=False))

    def _example_losses(self, batch, logits):
        """[batch] losses; a sequence's is the mean over its ``label_mask``-ed (real) tokens."""
        losses = self._loss(batch["label"], logits)
        if "label_mask" not in batch:
            return losses
        mask = tf.cast(batch["label_mask"], losses.dtype)
        return tf.reduce_sum(losses * mask, axis=-1) / tf.maximum(tf.reduce_sum(mask, axis=-1), 1.0)

    def _forward_backward_body(self, batch):
        """Per-example losses, this replica's loss share, its gradients and a technique's aux."""
        sample_weight = batch.get("sample_weight")
        if self._gradient_technique is not None:
            per_example, gradients, aux = self._gradient_technique.gradients(
                lambda: self._example_losses(batch, self.model(batch["inputs"], training=True)),
                sample_weight,
            )
            loss = tf.nn.compute_average_loss(_weighted(per_example, sample_weight))
            return per_example, loss, gradients, aux
        with tf.GradientTape() as tape:
            logits = self.model(batch["inputs"], training=True)
            per_example = self._example_losses(batch, logits)
            # Divides by the global batch size, so summing replicas' gradients gives the mean.
            loss = tf.nn.compute_average_loss(_weighted(per_example, sample_weight))
            if self.model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
        gradients = tape.gradient(loss, self.model.trainable_variables)
        return per_example, loss, gradients, None

    def _apply(self, gradients):
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables, strict=True))

    def _step_and_update_body(self, batch):
        per_example, loss, gradients, aux = self._forward_backward_body(batch)
        self._apply(gradients)
        return per_example, loss, gradients, aux

    def _train_loop_body(self, iterator, num_steps):
        collect = self._collect
        losses_array = tf.TensorArray(tf.float32, size=num_steps if collect else 0)
        ids_array = tf.TensorArray(tf.int64, size=num_steps if collect else 0)
        loss_sum = tf.constant(0.0, tf.float32)
        input_wait = tf.constant(0.0, tf.float64)
        for i in tf.range(num_steps):
            # The time blocked on the iterator, as the TF profiler counts input wait: near zero
            # while the prefetch buffer holds a batch, the shortfall of upstream otherwise.
            start = tf.timestamp()
            with tf.control_dependencies([start]):
                batch = next(iterator)
            with tf.control_dependencies(tf.nest.flatten(batch, expand_composites=True)):
                input_wait += tf.timestamp() - start
            per_example, ids, loss = self.strategy.run(self._train_step, args=(batch,))
            loss_sum += tf.cast(
                self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), tf.float32
            )
            self.step.assign_add(1)
            if collect:
                losses_array = losses_array.write(
                    i, tf.cast(self.strategy.gather(per_example, axis=0), tf.float32)
                )
                ids_array = ids_array.write(i, self.strategy.gather(ids, axis=0))
        mean_loss = loss_sum / tf.cast(num_steps, tf.float32)
        if collect:
            return mean_loss, input_wait, ids_array.stack(), losses_array.stack()
        return mean_loss, input_wait, None, None

    def train(self, num_steps: int) -> dict[str, float]:
        """Runs ``num_steps`` train steps in one ``tf.function`` call, then feeds back.

        Every technique then observes the same ``Feedback`` record (see ``__init__``).

        Returns:
          ``{"train_loss": mean of the steps' mean losses, "input_wait_seconds": time the
          steps spent waiting for the input iterator, summed, "loop_seconds": the call's wall
          time}``.
        """
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps <= 0:
            raise ValueError(f"num_steps must be a positive int, got {num_steps!r}.")
        start = time.perf_counter()
        echo_factor = math.prod(t.echo_factor() for t in self.techniques)  # the loop's rows'
        mean_loss, input_wait, ids, losses = self._train_loop(
            self.iterator, tf.constant(num_steps, tf.int32)
        )
        feedback = Feedback(
            ids=ids,
            losses=losses,
            step=int(self.step.numpy()),
            steps=num_steps,
            seconds=time.perf_counter() - start,
            input_wait_seconds=float(input_wait),
            traced=not self._traced,
            echo_factor=echo_factor,
        )
        self._traced = True
        for technique in self.techniques:
            technique.observe(feedback)
        return {
            "train_loss": float(mean_loss),
            "input_wait_seconds": feedback.input_wait_seconds,
            "loop_seconds": time.perf_counter() - start,
        }

    # ------------------------------------------------------------------------------------ eval

    def _eval_step_body(self, batch):
        logits = self.model(batch["inputs"], training=False)
        labels = tf.cast(batch["label"], tf.int64)
        if "mask" in batch:
            mask = tf.cast(batch["mask"], tf.float32)
        else:
            mask = tf.ones(tf.shape(labels)[:1], tf.float32)
        if "label_mask" in batch:  # sequences: accuracy and loss per real token
            mask = tf.cast(batch["label_mask"], tf.float32) * mask[:, tf.newaxis]
        hits = tf.cast(tf.equal(tf.argmax(logits, axis=-1), labels), tf.float32)
        correct = tf.reduce_sum(hits * mask)
        loss_sum = tf.reduce_sum(tf.cast(self._loss(labels, logits), tf.float32) * mask)
        return correct, loss_sum, tf.reduce_sum(mask)

    def _eval_loop_body(self, dataset):
        correct = loss_sum = count = tf.constant(0.0)
        for batch in dataset:
            replica_correct, replica_loss_sum, replica_count = self.strategy.run(
                self._eval_step, args=(batch,)
            )
            correct += self.strategy.reduce(tf.distribute.ReduceOp.SUM, replica_correct, axis=None)
            loss_sum += self.strategy.reduce(
                tf.distribute.ReduceOp.SUM, replica_loss_sum, axis=None
            )
            count += self.strategy.reduce(tf.distribute.ReduceOp.SUM, replica_count, axis=None)
        return correct, loss_sum, count

    def evaluate(self) -> dict[str, float]:
        """Accuracy and mean loss over one pass of the eval dataset.

        Returns:
          ``{"eval_accuracy", "eval_loss", "eval_examples"}``.
        """
        if self._eval_dataset_fn is None:
            raise ValueError("evaluate() needs eval_dataset_fn; pass it to Trainer(...).")
        dataset = self.strategy.distribute_datasets_from_function(self._eval_dataset_fn)
        correct, loss_sum, count = (float(value) for value in self._eval_loop(dataset))
        if count == 0:
            raise ValueError("the eval dataset is empty; check the eval split and num_eval.")
        return {
            "eval_accuracy": correct / count,
            "eval_loss": loss_sum / count,
            "eval_examples": count,
        }


def _weighted(per_example: tf.Tensor, sample_weight: tf.Tensor | None) -> tf.Tensor:
    if sample_weight is None:
        return per_example
    return per_example * tf.cast(sample_weight, per_example.dtype)
