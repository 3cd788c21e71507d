"""Prioritized gradient descent as a technique: batches chosen from a priority table.

Example::

    import numpy as np
    from echoing.techniques import ExamplesById, PriorityTechnique

    examples = ExamplesById(
        {"inputs": np.random.rand(256, 8).astype("float32"), "label": np.arange(256) % 2},
        num_classes=2,
        input_shape=(8,),
    )
    technique = PriorityTechnique(
        examples, global_batch_size=32, top_ratio=0.1, renew_ratio=0.9, seed=0
    )
    # The trainer calls technique.build(model) under strategy.scope(), draws the train batches
    # from technique.train_dataset(input_context), and lets technique.gradients/after_step
    # compute every example's priority ḡ·g_i by one forward-mode JVP and write it to the table.

Each input pipeline (worker) selects its own top-k and renewal from its shard of the table
(``echoing.priority_sample(..., input_context=...)``); the input pipeline's stages
(augmentation, echo) are not used. Config fields: ``pgd``, ``pgd_top_ratio``, ``pgd_renew_ratio``.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from echoing._src.core import config_checks
from echoing._src.core.technique import Context, ExamplesById, Feedback, Technique
from echoing._src.priority.feedback import PriorityFeedback
from echoing._src.priority.sampling import priority_sample
from echoing._src.priority.shards import ShardedPriorityTable
from echoing._src.priority.table import PriorityTable


class PriorityGradients(Technique):
    """Each train step through ``feedback``: the mean gradient and every example's priority.

    For a trainer fed by your own ``echoing.priority_sample`` dataset; ``PriorityTechnique``
    also selects the batches.
    """

    name = "priority"
    replaces_gradients = True

    def __init__(self, feedback: PriorityFeedback | None = None):
        if feedback is not None and not isinstance(feedback, PriorityFeedback):
            raise TypeError(
                "feedback must be an echoing.PriorityFeedback or None, got "
                f"{type(feedback).__name__}."
            )
        self.feedback = feedback

    def gradients(self, loss_fn: Callable[[], tf.Tensor], sample_weight: tf.Tensor | None):
        return self.feedback.losses_gradients_priorities(loss_fn, sample_weight=sample_weight)

    def after_step(self, ids, aux, gradients, step) -> None:
        # Outside the compiled step: the priority table is host state (CPU variables the input
        # pipeline reads), and ḡ's MEAN-aggregated assign is a cross-replica merge. The batch
        # for step t was selected from the table at step t: write at the same step.
        self.feedback.update(ids, aux, gradients, step)

    def input_options(self) -> tf.distribute.InputOptions:
        # Selection reads the table when a batch is produced: prefetching batches to the
        # device would select them before the previous step's priorities are written.
        return tf.distribute.InputOptions(experimental_fetch_to_device=False)


class PriorityTechnique(PriorityGradients):
    """Selects every train batch from a priority table (one shard per input pipeline)."""

    def __init__(
        self,
        examples: ExamplesById,
        *,
        global_batch_size: int,
        top_ratio: float,
        renew_ratio: float,
        seed: int | None = None,
        num_input_pipelines: int = 1,
    ):
        super().__init__()
        self._examples = examples.arrays
        num_examples = len(self._examples["label"])
        # Outside the strategy scope: host state read by the input pipelines. With several
        # input pipelines (workers) each owns a shard of the ids and selects its own top-k
        # there, the paper's worker design.
        if num_input_pipelines == 1:
            self.table = PriorityTable(num_examples)
        else:
            self.table = ShardedPriorityTable(num_examples, num_shards=num_input_pipelines)
        self._selection = dict(
            batch_size=global_batch_size,
            top_ratio=float(top_ratio),
            renew_ratio=float(renew_ratio),
            seed=seed,
        )
        self._step = 0

    def build(self, model) -> None:
        self.feedback = PriorityFeedback(self.table, model.trainable_variables)

    def train_dataset(self, input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return priority_sample(
            self.table, self._examples, input_context=input_context, **self._selection
        )

    def observe(self, feedback: Feedback) -> None:
        self._step = feedback.step

    def checkpointed(self) -> dict[str, object]:
        return {"priority_table": self.table, "priority_feedback": self.feedback}

    def scalars(self) -> dict[str, float]:
        statistics = self.table.statistics(self._step)
        return {f"priority_{key}": float(value) for key, value in statistics.items()}


def default_config(config) -> None:
    # Prioritized gradient descent: batches of the train split (held in memory, no augmentation
    # or echo) chosen from a PriorityTable: top_ratio top-k priorities, renew_ratio round-robin.
    config.pgd = False
    config.pgd_top_ratio = 0.1
    config.pgd_renew_ratio = 0.9


def check_config(config) -> None:
    for key in ("pgd_top_ratio", "pgd_renew_ratio"):
        config_checks.fraction(key, config[key])
    if not config.pgd:
        return
    if config.strategy == "tpu":
        raise ValueError(
            "config pgd=True with strategy='tpu': priorities are written into a host-memory "
            "table after each step, and a TPU step (compiled whole) cannot run those host ops. "
            "Use strategy='default', 'mirrored' or 'multi_worker' for pgd."
        )
    config_checks.refuse_fresh_evaluation(config, "PGD selects batches")


def from_config(context: Context) -> PriorityTechnique | None:
    config = context.config
    if not config.pgd:
        return None
    return PriorityTechnique(
        context.examples(),
        global_batch_size=config.data.batch_size,
        top_ratio=config.pgd_top_ratio,
        renew_ratio=config.pgd_renew_ratio,
        seed=config.seed,
        num_input_pipelines=context.num_input_pipelines,
    )
