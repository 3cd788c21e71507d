"""Priority sampling as a technique: batches chosen from a priority table.

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
(augmentation, echo) are not used. Config fields: ``priority``, ``priority_top_ratio``,
``priority_renew_ratio``; their names before (``pgd``, ``pgd_top_ratio``, ``pgd_renew_ratio``) are
read, with a FutureWarning that names the new key, for one more release (``renamed_fields``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import tensorflow as tf
from ml_collections import config_dict

from echoing._src.core import config_checks
from echoing._src.core.technique import Context, ExamplesById, Feedback, Technique
from echoing._src.priority.checks import ids_per_batch
from echoing._src.priority.meter import PriorityMeter
from echoing._src.priority.sampling import priority_sample
from echoing._src.priority.shards import ShardedPriorityTable
from echoing._src.priority.table import PriorityTable


class PriorityGradients(Technique):
    """Each train step through ``meter``: the mean gradient and every example's priority.

    For a trainer fed by your own ``echoing.priority_sample`` dataset; ``PriorityTechnique``
    also selects the batches. ``feedback=``, the argument's name before ``echoing.PriorityMeter``,
    is read with a DeprecationWarning for one more release.
    """

    name = "priority"
    replaces_gradients = True

    def __init__(
        self, meter: PriorityMeter | None = None, *, feedback: PriorityMeter | None = None
    ):
        if feedback is not None:
            warnings.warn(
                "PriorityGradients(feedback=...) is deprecated and goes in the next release: "
                "use PriorityGradients(meter=...), the same echoing.PriorityMeter.",
                DeprecationWarning,
                stacklevel=2,
            )
            if meter is not None:
                raise TypeError(
                    "PriorityGradients got both meter= and feedback= (its old name); keep meter=."
                )
            meter = feedback
        if meter is not None and not isinstance(meter, PriorityMeter):
            raise TypeError(
                f"meter must be an echoing.PriorityMeter or None, got {type(meter).__name__}."
            )
        self.meter = meter

    def gradients(self, loss_fn: Callable[[], tf.Tensor], sample_weight: tf.Tensor | None):
        return self.meter.losses_gradients_priorities(loss_fn, sample_weight=sample_weight)

    def after_step(self, ids, aux, gradients, step) -> None:
        # Outside the compiled step: the priority table is host state (CPU variables the input
        # pipeline reads), and ḡ's MEAN-aggregated assign is a cross-replica merge. The batch
        # for step t was selected from the table at step t: write at the same step.
        self.meter.update(ids, aux, gradients, step)

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
        self.meter = PriorityMeter(self.table, model.trainable_variables)

    def train_dataset(self, input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return priority_sample(
            self.table, self._examples, input_context=input_context, **self._selection
        )

    def observe(self, feedback: Feedback) -> None:
        self._step = feedback.step

    def checkpointed(self) -> dict[str, object]:
        # "priority_feedback", from before PriorityMeter: the key earlier checkpoints hold ḡ by.
        return {"priority_table": self.table, "priority_feedback": self.meter}

    def scalars(self) -> dict[str, float]:
        statistics = self.table.statistics(self._step)
        return {f"priority_{key}": float(value) for key, value in statistics.items()}


# The config keys before (pgd: prioritized gradient descent) -> their names now, and the type
# of the old key's placeholder. The old keys stay unset placeholders, so that
# ``--config.pgd=True`` still parses; ``renamed_fields`` reads them for one more release.
RENAMED_KEYS = {
    "pgd": ("priority", bool),
    "pgd_top_ratio": ("priority_top_ratio", float),
    "pgd_renew_ratio": ("priority_renew_ratio", float),
}


def default_config(config) -> None:
    # Priority sampling: batches of the train split (held in memory, no augmentation or echo)
    # chosen from a PriorityTable: top_ratio top-k priorities, renew_ratio round-robin.
    config.priority = False
    config.priority_top_ratio = 0.1
    config.priority_renew_ratio = 0.9
    for old, (_, kind) in RENAMED_KEYS.items():
        config[old] = config_dict.placeholder(kind)


def renamed_fields(config) -> dict:
    """The old keys (``pgd*``) ``config`` sets (not None), as ``{new key: value}``, with a
    FutureWarning that names the new keys; ``{}`` when it sets none.

    Example::

        renamed_fields({"pgd": True, "pgd_top_ratio": None})  # {"priority": True}, and a warning
    """
    renamed = {
        RENAMED_KEYS[old][0]: config[old] for old in RENAMED_KEYS if config.get(old) is not None
    }
    if renamed:
        warnings.warn(
            "priority sampling's config keys are renamed: "
            + ", ".join(
                f"--config.{old} is now --config.{new}"
                for old, (new, _) in RENAMED_KEYS.items()
                if new in renamed
            )
            + "; the old ones are read for one more release.",
            FutureWarning,
            stacklevel=3,
        )
    return renamed


def check_config(config) -> None:
    for key in ("priority_top_ratio", "priority_renew_ratio"):
        config_checks.fraction(key, config[key])
    if not config.priority:
        config_checks.refuse_options_when_off(config, "priority")
        return
    if config.strategy == "tpu":
        raise ValueError(
            "config priority=True with strategy='tpu': priorities are written into a host-memory "
            "table after each step, and a TPU step (compiled whole) cannot run those host ops. "
            "Use strategy='default', 'mirrored' or 'multi_worker' for priority sampling."
        )
    config_checks.refuse_fresh_evaluation(config, "priority sampling selects batches")
    if config.data.source == "text":
        raise ValueError(
            "config priority=True with data.source='text': a language model's losses are per "
            "token, of windows batched by length, and priority sampling measures one gradient "
            "per example and draws fixed-size batches by id; on text, use echo, prune or "
            "assist (configs/text_lm.py's arguments)."
        )
    if config.data.service_address:
        raise ValueError(
            f"config priority=True with data.service_address={config.data.service_address!r}: "
            "priority sampling draws the train batches by id from the decoded examples, so the "
            "tf.data service would serve nothing; set data.service_address=''."
        )
    top, renew = config.priority_top_ratio, config.priority_renew_ratio
    if top + renew > 1:  # named here: the sampler's own message knows no config field
        raise ValueError(
            f"config priority_top_ratio={top} + priority_renew_ratio={renew} = {top + renew:g}: "
            "they are fractions of one batch, so they must add up to at most 1 (the rest is "
            f"drawn at random); lower priority_renew_ratio to {1 - top:g} or less (the config "
            f"argument renew_ratio={1 - top:g}, with top_ratio={top})."
        )
    for key in ("priority_top_ratio", "priority_renew_ratio"):
        ids_per_batch(config[key], config.data.batch_size, names=(key, "data.batch_size"))


def from_config(context: Context) -> PriorityTechnique | None:
    config = context.config
    if not config.priority:
        return None
    if config.data.augment != "none":
        warnings.warn(
            f"config priority=True with data.augment={config.data.augment!r}: priority "
            "sampling draws the train batches by id from the decoded examples, so the "
            "augmentation does not run; set data.augment='none' to say so.",
            UserWarning,
            stacklevel=2,
        )
    if config.strategy in ("mirrored", "multi_worker"):
        # The distributed iterator reads ahead even without prefetching to the devices.
        warnings.warn(
            f"config priority=True with strategy={config.strategy!r}: the distributed input "
            "reads about two batches ahead of the steps, so the sampler picks each batch from "
            "priorities about two steps old, and top-k batches repeat (measured with "
            "top_ratio=1: 224 examples reached in 20 steps, against 608 on the default "
            "strategy). For exact selection, train on one device with --strategy=default.",
            UserWarning,
            stacklevel=2,
        )
    return PriorityTechnique(
        context.examples(),
        global_batch_size=config.data.batch_size,
        top_ratio=config.priority_top_ratio,
        renew_ratio=config.priority_renew_ratio,
        seed=config.seed,
        num_input_pipelines=context.num_input_pipelines,
    )
