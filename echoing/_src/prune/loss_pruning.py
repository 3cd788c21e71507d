"""Loss-based pruning with rescaling (InfoBatch): skip examples the model already fits well.

Example::

    import numpy as np
    import tensorflow as tf
    import echoing

    table = echoing.LossTable(num_examples=8)
    table.update(tf.range(8), [0.1, 0.2, 0.3, 0.4, 2.0, 2.0, 2.0, 2.0])  # mean 1.125
    prune = echoing.loss_prune(table, prune_ratio=0.5, num_epochs=4, seed=0)

    # By id (in-memory arrays, a TFDS data source): pruned examples are never read.
    arrays = {"inputs": np.zeros([8, 3], "float32"), "label": np.arange(8) % 2}
    for batch in prune.read(arrays, batch_size=4):  # one epoch; iterate again for the next
        print(batch["id"].numpy(), batch["sample_weight"].numpy())
    # ids 4-7 (at or above the mean) always, weight 1; each of 0-3 with probability 0.5, weight 2

    # On a stream of examples that carry an "id" (TFRecords): before batch(), before decoding.
    stream = tf.data.Dataset.from_tensor_slices({"id": tf.range(8, dtype=tf.int64)})
    kept = stream.apply(prune)

Each epoch the stage takes the mean of the table's last-seen losses; then an example whose loss
is at or above that mean is kept, and one below it is kept with probability ``1 - prune_ratio``
and weighted by ``1 / (1 - prune_ratio)``, so the expected weighted gradient equals the full data
set's. Examples with no recorded loss are always kept, and the last ``anneal_fraction`` of
``num_epochs`` train on every example, as InfoBatch does to remove the remaining bias. With a
learning-rate schedule indexed by epoch (``epochs_read()``), the saving is the steps the pruned
examples would have taken.

Two ways to apply it, with the same decisions for the same seed and table:

- **By id** (``epoch_ids``, ``read``), as InfoBatch's sampler does: at an epoch's start one
  vectorised op decides every id, and the kept ids come out in a fresh random order. Only they
  are then read, decoded and augmented: a pruned example costs no pipeline work. Each iteration
  of the dataset is the next epoch (``model.fit`` iterates once per epoch; ``.repeat()`` runs
  them all). The table is read when the epoch starts: with read-ahead, the last few batches of
  the previous epoch may not have reported yet and keep their older loss (``by_id.py``).
- **On a stream** (``dataset.apply(stage)``), for sources read in order (TFRecord shards): insert
  it as early as the elements carry their ``"id"``, before decoding. Elements are grouped
  ``group_size`` at a time and one sequential map decides a group from the table's live losses
  (every ``examples_per_epoch`` inputs is an epoch; ``stream.py``). Batch with
  ``drop_remainder=True`` after it for fixed shapes.
"""

from __future__ import annotations

import math
import random

import tensorflow as tf

from echoing._src.core import meters
from echoing._src.core.checks import is_positive_int, is_seed, require
from echoing._src.core.loss_table import LossTable, _host_variable
from echoing._src.prune.by_id import ByIdPruning
from echoing._src.prune.checks import (
    check_number,
    pruned_epochs,
    say_past_end,
    warn_if_no_pruned_epoch,
    warn_if_unfed,
)
from echoing._src.prune.stream import StreamPruning
from echoing._src.prune.trained import TrainedEpochs


class LossPruning(ByIdPruning, StreamPruning, tf.Module):
    """The transformation :func:`loss_prune` returns; a ``tf.Module`` (checkpoint it with the run).

    ``stage.stats()`` reports inputs decided and kept, the epoch and its threshold so far;
    ``stage.epochs_read()`` the epochs handed downstream (a fraction), for schedules.
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
        epoch_size_given=True,
    ):
        super().__init__(name=name)
        self.epoch_size_given = epoch_size_given
        self.table = table
        self.prune_ratio = prune_ratio
        self.num_epochs = num_epochs
        self.anneal_fraction = anneal_fraction
        self.examples_per_epoch = examples_per_epoch
        # Epochs from this one on train on every example (the anneal).
        self.full_data_epoch = pruned_epochs(num_epochs, anneal_fraction)
        # Without a seed each run draws its own, and every epoch still draws anew.
        self.seed = random.SystemRandom().randrange(1 << 31) if seed is None else seed
        self.id_key = id_key
        self.group_size = group_size
        self.seen_inputs = meters.ElementCounter(f"{name}_seen")
        self.kept_inputs = meters.ElementCounter(f"{name}_kept")
        self.threshold = _host_variable(tf.constant(0.0), "threshold")
        self.threshold_epoch = _host_variable(tf.constant(-1, tf.int64), "threshold_epoch")
        self.warned_unfed = _host_variable(tf.constant(False), "warned_unfed")  # warn_if_unfed
        self.says_past_end = True  # say_past_end, set when the stage's datasets are built
        # The epoch's keep draws, one per id: by id and on a stream decide alike.
        self.draws = _host_variable(tf.zeros([table.num_examples], tf.float32), "draws")
        # By id: the epochs started, and how many of the current epoch's kept ids go out.
        self.epochs_started = _host_variable(tf.constant(0, tf.int64), "epochs_started")
        self.epoch_kept = _host_variable(tf.constant(0, tf.int64), "epoch_kept")
        # The current epoch's kept ids in their order, their weights, and the iteration of the
        # dataset that decided it: restoring a checkpointed iterator calls the epoch's function
        # again with that iteration, and the epoch must then go on as it was decided.
        self.iterations = _host_variable(tf.constant(0, tf.int64), "iterations")
        self.epoch_iteration = _host_variable(tf.constant(-1, tf.int64), "epoch_iteration")
        self.epoch_order = _host_variable(tf.zeros([table.num_examples], tf.int64), "order")
        self.epoch_weights = _host_variable(tf.zeros([table.num_examples]), "order_weights")
        self.epoch_size = _host_variable(tf.constant(0, tf.int64), "epoch_size")
        self._epochs_read = _host_variable(tf.constant(0.0, tf.float64), "epochs_read")
        self.trained = TrainedEpochs(num_epochs)  # the epochs as training took them

    def epochs_read(self) -> tf.Tensor:
        """Epochs handed downstream so far, a float64 (2.5: half-way through the third)."""
        return self._epochs_read.read_value()

    def epochs_trained(self) -> float:
        """Epochs training has taken (``trained.record(ids)`` after each step), a float."""
        return self.trained.epochs(*self._opened())

    def examples_to_train(self) -> float | None:
        """Fresh examples to train until ``num_epochs`` are taken (None: last epoch not yet
        decided in full)."""
        return self.trained.remaining(self.num_epochs, *self._opened())

    def examples_to_train_at_least(self) -> float | None:
        """At least ``examples_to_train()``, known before the last epoch is decided (None until
        the first epoch opens: by id, its inputs are the ids it reads). The binary's loop ends
        there and asks again, so that a run stops at its epochs, not a loop past them."""
        # Read in the order the pipeline's threads write, later first: the plan, the inputs,
        # the epochs. What they decide between the reads then counts as not yet decided.
        decided, seen = float(self.trained.planned.numpy()), float(self.seen_inputs.value())
        if int(self.threshold_epoch.numpy()) < 0:
            return None
        started = int(self.epochs_started.numpy())  # by id, where an epoch's inputs are its ids
        inputs = seen / started if started else self.examples_per_epoch

        def fewest_kept(epoch: int, share: float) -> float:
            n = share * inputs
            if epoch >= self.full_data_epoch:  # the anneal keeps every input
                return n
            # At worst every input is below the mean, each kept with probability 1 - r; fewer
            # than the mean less 4 standard deviations are kept with probability under 1e-4.
            r = self.prune_ratio
            return max(0.0, n * (1.0 - r) - 4.0 * math.sqrt(n * r * (1.0 - r)))

        return self.trained.remaining_at_least(
            self.num_epochs, decided, *self._opened(), fewest_kept
        )

    def _opened(self) -> tuple[int, float]:
        """(epochs begun, share of the last one's inputs decided): by id an epoch is decided
        whole when it opens; on a stream, by what the stage has read of examples_per_epoch.
        The input pipeline's threads decide on meanwhile: the epoch is read once, before the
        inputs (an epoch's start is written before its first inputs are counted)."""
        epoch, started = int(self.threshold_epoch.numpy()), int(self.epochs_started.numpy())
        if started > 0 or epoch < 0:
            return max(started, epoch + 1), 1.0
        read = float(self.seen_inputs.value()) - epoch * self.examples_per_epoch
        return epoch + 1, min(1.0, max(0.0, read / self.examples_per_epoch))

    def epoch(self) -> int:
        """The epoch the next input belongs to."""
        return math.floor(float(self._epochs_read.numpy()))

    def keep_rate(self) -> float:
        """Kept / decided so far (0 before any input)."""
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

    # ------------------------------------------------------------------------------ shared

    def _start_epoch(self, epoch: tf.Tensor) -> tf.Tensor:
        """Takes the epoch's threshold (the table's mean) and draws; returns the threshold."""
        seed = self._seed(epoch, stream=0)
        draws = tf.random.stateless_uniform([self.table.num_examples], seed=seed)
        updates = [self.threshold_epoch.assign(epoch), self.draws.assign(draws)]
        updates.append(warn_if_unfed(self.table, epoch, self.warned_unfed))
        if self.says_past_end:  # not where the run ends at num_epochs (the trainer's)
            updates.append(say_past_end(epoch, self.num_epochs))
        with tf.control_dependencies(updates):
            return tf.identity(self.threshold.assign(self.table.mean()))

    def _seed(self, epoch: tf.Tensor, *, stream: int) -> tf.Tensor:
        # Two independent streams per epoch: the keep draws (0) and the order of the kept (1).
        return tf.stack([tf.constant(self.seed, tf.int64), 2 * tf.cast(epoch, tf.int64) + stream])

    def _keep_rule(self, epoch, losses, seen, threshold, draws):
        """(keep, easy): below-mean ids are easy, kept with probability 1 - prune_ratio."""
        easy = seen & (losses < threshold) & (epoch < self.full_data_epoch)
        return tf.logical_not(easy) | (draws >= self.prune_ratio), easy

    def _weights(self, kept_easy: tf.Tensor) -> tf.Tensor:
        # The weights as constants: a float reciprocal of 1.0 can come out as 0.99999994.
        return tf.where(kept_easy, 1.0 / (1.0 - self.prune_ratio), 1.0)


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
      examples_per_epoch: inputs per epoch reaching this stage as a stream (default: all the
        table's); ``read`` and ``epoch_ids`` do not read it: their epoch is the ids they read.
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
    check_number("prune_ratio", prune_ratio, 0.0, 1.0, "[0, 1)", upper_open=True)
    check_number("anneal_fraction", anneal_fraction, 0.0, 1.0, "[0, 1]", upper_open=False)
    epoch_size_given = examples_per_epoch is not None
    if not epoch_size_given:
        examples_per_epoch = table.num_examples
    for arg, value in (
        ("num_epochs", num_epochs),
        ("examples_per_epoch", examples_per_epoch),
        ("group_size", group_size),
    ):
        if not is_positive_int(value, numpy=True):
            raise ValueError(f"loss_prune({arg}={value!r}): expected an int >= 1.")
    require(is_seed(seed), f"loss_prune(seed={seed!r}): expected an int or None.", TypeError)
    if not isinstance(id_key, str):
        raise TypeError(f"loss_prune(id_key={id_key!r}): expected a string key.")
    warn_if_no_pruned_epoch(num_epochs, anneal_fraction)
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
        epoch_size_given=epoch_size_given,
    )
