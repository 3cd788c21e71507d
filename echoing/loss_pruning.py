"""Loss-based pruning with rescaling (InfoBatch): skip examples the model already fits well.

Example::

    import tensorflow as tf
    import echoing

    table = echoing.LossTable(num_examples=8)
    table.update(tf.range(8), [0.1, 0.2, 0.3, 0.4, 2.0, 2.0, 2.0, 2.0])  # mean 1.125
    stage = echoing.loss_prune(table, prune_ratio=0.5, num_epochs=4, seed=0)
    ds = tf.data.Dataset.from_tensor_slices({"id": tf.range(8, dtype=tf.int64)}).apply(stage)
    for element in ds:
        print(element["id"].numpy(), element["sample_weight"].numpy())
    # ids 4-7 (at or above the mean) always, weight 1; each of 0-3 with probability 0.5, weight 2

Each epoch (every ``examples_per_epoch`` inputs) the stage takes the mean of the table's
last-seen losses; then an example whose loss is at or above that mean is kept, and one below it
is kept with probability ``1 - prune_ratio`` and weighted by ``1 / (1 - prune_ratio)``, so the
expected weighted gradient equals the full data set's. Examples with no recorded loss are always
kept, and the last ``anneal_fraction`` of ``num_epochs`` train on every example, as InfoBatch
does to remove the remaining bias. With a learning-rate schedule indexed by epoch (not step),
the saving is the steps the pruned examples would have taken.

It runs in the tf.data graph: elements are grouped ``group_size`` at a time, one sequential map
reads the table (live: the trainer's updates are seen at once) and draws one seeded uniform per
element from ``Dataset.random`` (re-randomised every epoch), and the group is masked. Insert it
before ``batch()`` (the pipelines' ``after_augment``); batch with ``drop_remainder=True`` for
fixed shapes. Elements need an int64 ``"id"`` in ``[0, table.num_examples)``.
"""

from __future__ import annotations

import math
import numbers

import tensorflow as tf

from echoing import grouping, meters
from echoing.loss_table import LossTable, _host_variable


class LossPruning(tf.Module):
    """The transformation :func:`loss_prune` returns; a ``tf.Module`` (checkpoint it with the run).

    ``stage.stats()`` reports inputs seen and kept, the epoch and its threshold so far.
    """

    def __init__(
        self,
        table,
        *,
        prune_ratio,
        num_epochs,
        anneal_fraction,
        examples_per_epoch,
        seed,
        id_key,
        group_size,
        name,
    ):
        super().__init__(name=name)
        self.table = table
        self.prune_ratio = prune_ratio
        self.num_epochs = num_epochs
        self.anneal_fraction = anneal_fraction
        self.examples_per_epoch = examples_per_epoch
        # Epochs from this one on train on every example: InfoBatch prunes epoch e while
        # e < (1 - δ)·E; the 1e-9 keeps e.g. (1 - 0.125)·8 = 7 from rounding up to 8.
        self.full_data_epoch = math.ceil((1.0 - anneal_fraction) * num_epochs - 1e-9)
        self.seed = seed
        self.id_key = id_key
        self.group_size = group_size
        self.seen_inputs = meters.ElementCounter(f"{name}_seen")
        self.kept_inputs = meters.ElementCounter(f"{name}_kept")
        self.threshold = _host_variable(tf.constant(0.0), "threshold")
        self.threshold_epoch = _host_variable(tf.constant(-1, tf.int64), "threshold_epoch")

    def epoch(self) -> int:
        """The epoch the next input belongs to (inputs seen // examples_per_epoch)."""
        return self.seen_inputs.value() // self.examples_per_epoch

    def keep_rate(self) -> float:
        """Kept / seen so far (0 before any input)."""
        seen = self.seen_inputs.value()
        return self.kept_inputs.value() / seen if seen else 0.0

    def stats(self) -> dict[str, float]:
        """``{"prune_seen", "prune_kept", "prune_keep_rate", "prune_epoch", "prune_threshold",
        "prune_nonfinite_losses"}`` so far."""
        return {
            "prune_seen": float(self.seen_inputs.value()),
            "prune_kept": float(self.kept_inputs.value()),
            "prune_keep_rate": self.keep_rate(),
            "prune_epoch": float(self.epoch()),
            "prune_threshold": float(self.threshold.numpy()),
            "prune_nonfinite_losses": float(self.table.nonfinite_skipped.numpy()),
        }

    def __call__(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        spec = dataset.element_spec
        grouping.require_key(spec, self.id_key, "loss_prune", "id_key")
        if not spec[self.id_key].dtype.is_integer or spec[self.id_key].shape.rank != 0:
            raise TypeError(
                f"loss_prune: element[{self.id_key!r}] must be a scalar integer id, got "
                f"{spec[self.id_key]}; insert the stage before batch()."
            )
        random = tf.data.Dataset.random(seed=self.seed, rerandomize_each_iteration=True)
        return (
            tf.data.Dataset.zip(dataset, random)
            .batch(grouping.group_size(spec, self.group_size))
            # Sequential: each group's epoch and threshold follow from the groups before it.
            .map(self._keep_group, name=f"{self.name}_keep")
            .unbatch(name=f"{self.name}_unbatch")
        )

    def _keep_group(self, batch, random):
        ids = tf.cast(batch[self.id_key], tf.int64)
        size = tf.size(ids, out_type=tf.int64)
        epoch = self.seen_inputs.variable.read_value() // self.examples_per_epoch
        # A new epoch takes the table's mean once, at its first group.
        new_epoch = tf.not_equal(epoch, self.threshold_epoch.read_value())
        threshold = tf.cond(new_epoch, lambda: self._start_epoch(epoch), self.threshold.read_value)
        losses, seen = self.table.lookup(ids)
        pruning = epoch < self.full_data_epoch
        easy = seen & (losses < threshold) & pruning
        keep_prob = tf.where(easy, 1.0 - self.prune_ratio, 1.0)
        keep = grouping.uniform(random) < keep_prob
        updates = [
            self.seen_inputs.variable.assign_add(size),
            self.kept_inputs.variable.assign_add(tf.reduce_sum(tf.cast(keep, tf.int64))),
        ]
        with tf.control_dependencies(updates):
            kept = {key: tf.boolean_mask(value, keep) for key, value in batch.items()}
        # The weights as constants: a float reciprocal of 1.0 can come out as 0.99999994.
        weight = tf.where(tf.boolean_mask(easy, keep), 1.0 / (1.0 - self.prune_ratio), 1.0)
        if "sample_weight" in kept:  # an upstream weight (e.g. another filter's) multiplies
            weight *= tf.cast(kept["sample_weight"], tf.float32)
        kept["sample_weight"] = weight
        return kept

    def _start_epoch(self, epoch: tf.Tensor) -> tf.Tensor:
        with tf.control_dependencies([self.threshold_epoch.assign(epoch)]):
            return tf.identity(self.threshold.assign(self.table.mean()))


def loss_prune(
    table: LossTable,
    *,
    num_epochs: int,
    prune_ratio: float = 0.5,
    anneal_fraction: float = 0.125,
    examples_per_epoch: int | None = None,
    seed: int | None = None,
    id_key: str = "id",
    group_size: int = 128,
    name: str = "loss_prune",
) -> LossPruning:
    """Returns a stage that prunes examples whose last-seen loss is below the epoch's mean.

    Args:
      table: the :class:`echoing.LossTable` the trainer updates with per-example losses.
      num_epochs: the run's length in epochs (the annealing epochs are its last ones).
      prune_ratio: r in [0, 1): the probability of dropping a below-mean example (InfoBatch: 0.5).
      anneal_fraction: δ in [0, 1]: the fraction of ``num_epochs``, at the end, trained on
        every example (InfoBatch trains the last 12.5% on the full data).
      examples_per_epoch: inputs per epoch reaching this stage (default: all the table's).
      seed: seeds the keep draws; same seed and inputs, same kept examples.
      id_key: the element key holding the example id.
      group_size: elements decided per table read (static shapes only).
      name: prefix for the tf.data op names and the counters.

    Returns:
      A :class:`LossPruning`, a ``Dataset -> Dataset`` function for ``Dataset.apply``.

    Raises:
      ValueError/TypeError: at once, for a bad argument.
    """
    if not isinstance(table, LossTable):
        raise TypeError(f"loss_prune(table={table!r}): expected an echoing.LossTable.")
    _check_number("prune_ratio", prune_ratio, 0.0, 1.0, "[0, 1)", upper_open=True)
    _check_number("anneal_fraction", anneal_fraction, 0.0, 1.0, "[0, 1]", upper_open=False)
    if examples_per_epoch is None:
        examples_per_epoch = table.num_examples
    for arg, value in (
        ("num_epochs", num_epochs),
        ("examples_per_epoch", examples_per_epoch),
        ("group_size", group_size),
    ):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"loss_prune({arg}={value!r}): expected an int >= 1.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"loss_prune(seed={seed!r}): expected an int or None.")
    if not isinstance(id_key, str):
        raise TypeError(f"loss_prune(id_key={id_key!r}): expected a string key.")
    return LossPruning(
        table,
        prune_ratio=float(prune_ratio),
        num_epochs=int(num_epochs),
        anneal_fraction=float(anneal_fraction),
        examples_per_epoch=int(examples_per_epoch),
        seed=seed,
        id_key=id_key,
        group_size=int(group_size),
        name=name,
    )


def _check_number(arg, value, low, high, interval, *, upper_open) -> None:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, numbers.Real)
        and math.isfinite(value)
        and low <= value <= high
        and not (upper_open and value == high)
    )
    if not ok:
        raise ValueError(
            f"loss_prune({arg}={value!r}): expected a number in {interval}. prune_ratio is the "
            "probability of dropping a below-mean example (1 would drop them all); "
            "anneal_fraction the share of epochs, at the end, on the full data."
        )
