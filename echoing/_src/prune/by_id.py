"""Loss-table pruning by id (``stage.epoch_ids``, ``stage.read``): the part of
:class:`~echoing._src.prune.loss_pruning.LossPruning` for sources read by id (arrays, TFDS data
sources), as InfoBatch's sampler does.

At an epoch's start one vectorised op decides every id from the table, and the kept ids go out
in a fresh random order; only they are then read, decoded and augmented, so a pruned example
costs no pipeline work. The state (table, counters, the epoch's threshold and draws) and the
keep rule are the stage's own (``loss_pruning.py``), shared with the stream path.

Example::

    import echoing

    table = echoing.LossTable(8)
    stage = echoing.loss_prune(table, num_epochs=2, seed=0)
    for batch in stage.epoch_ids(batch_size=4):  # one epoch: every id (no loss yet), shuffled
        print(batch["id"].numpy())
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from echoing._src.core import dataset_graph, meters
from echoing._src.core.sources import random_access_source
from echoing._src.prune.checks import (
    check_batch_fits,
    check_batch_size,
    check_epoch_ids,
    check_read_source,
)

# Ids decided per counting map on the by-id path: the count costs one small op per chunk.
_CHUNK = 256


class ByIdPruning:
    """``LossPruning``'s by-id path (a mixin: the state and rule are ``LossPruning``'s)."""

    def epoch_ids(
        self, ids=None, *, batch_size: int | None = None, drop_remainder: bool = False
    ) -> tf.data.Dataset:
        """One epoch of the kept ids, ``{"id": int64, "sample_weight": float32}`` elements.

        Every iteration of the returned dataset is the next epoch: its ids decided afresh from
        the table at its start and put in a new random order. ``.repeat()`` gives the whole run.

        Args:
          ids: the ids this input pipeline reads (default: every id of the table), e.g. a
            shard's; int, 1-D, in ``[0, table.num_examples)``.
          batch_size: if given, batches of that many ids, cut from the epoch's order in one op
            each (no per-id work in tf.data: what ``read`` uses).
          drop_remainder: with ``batch_size``, drop the epoch's last, smaller batch.
        """
        universe = self._universe(ids)
        if batch_size is not None:
            check_batch_size("epoch_ids", batch_size)
            check_batch_fits("epoch_ids", batch_size, drop_remainder, int(universe.shape[0]))

        width = batch_size or _CHUNK  # ids per chunk cut from the epoch's order
        chunks_at_most = -(-int(universe.shape[0]) // width)

        def one_epoch(iteration):
            # A restored iterator calls this again for the epoch in progress (same iteration):
            # that epoch stays; its chunks read the epoch's order from the stage's variables
            # when they go out, so the restore may bring those back before or after this call.
            opened = tf.cond(
                tf.equal(iteration, self.epoch_iteration),
                lambda: tf.constant(False),
                lambda: self._open_epoch(iteration, universe, width, drop_remainder),
            )
            with tf.control_dependencies([opened]):
                positions = tf.data.Dataset.range(tf.constant(chunks_at_most, tf.int64))
            chunks = positions.take_while(lambda k: k < self._epoch_chunks(width, drop_remainder))
            chunks = chunks.map(lambda k: self._chunk(k, width), name=f"{self.name}_emitted")
            return chunks if batch_size is not None else chunks.unbatch()

        # Each iteration of the dataset numbers itself once; a restored iterator passes the
        # saved number to one_epoch again (tf.data does not run this map again for it).
        iteration = tf.data.Dataset.range(1).map(
            lambda _: self.iterations.assign_add(1), name=f"{self.name}_iteration"
        )
        # The stage's variables hold its state: the iterator checkpoint may ignore them. Marked
        # as the stream's output is, so that fit's checks (fit_checks) see it in read's too.
        epochs = meters.checkpointable(iteration.flat_map(one_epoch, name=f"{self.name}_epoch"))
        return dataset_graph.mark_per_pass(epochs, "loss_prune", self)

    def _open_epoch(self, iteration, universe, width, drop_remainder) -> tf.Tensor:
        """Decides the next epoch's kept ids and their order, kept until the next epoch opens."""
        epoch = self.epochs_started.assign_add(1) - 1
        threshold = self._start_epoch(epoch)
        with tf.control_dependencies([threshold]):
            kept, weights = self._decide(epoch, universe, threshold)
        order = tf.random.experimental.stateless_shuffle(
            tf.range(tf.size(kept)), seed=self._seed(epoch, stream=1)
        )
        count = tf.size(kept, out_type=tf.int64)
        emitted = count // width * width if drop_remainder else count  # what will go out
        started = [
            self.epoch_kept.assign(tf.maximum(emitted, 1)),
            self.epoch_iteration.assign(iteration),
            self.trained.plan(epoch, emitted),
            self.epoch_size.assign(count),
            self.epoch_order[:count].assign(tf.gather(kept, order)),
            self.epoch_weights[:count].assign(tf.gather(weights, order)),
            self._epochs_read.assign(tf.cast(epoch, tf.float64)),
            self.seen_inputs.variable.assign_add(tf.size(universe, out_type=tf.int64)),
            self.kept_inputs.variable.assign_add(count),
        ]
        with tf.control_dependencies(started):
            return tf.constant(True)

    def _epoch_chunks(self, width: int, drop_remainder: bool) -> tf.Tensor:
        size = self.epoch_size.read_value()
        return size // width if drop_remainder else (size + width - 1) // width

    def _chunk(self, k, width: int) -> dict[str, tf.Tensor]:
        """Chunk ``k`` of the epoch's order, counted in the epochs handed on (for schedules)."""
        start, end = k * width, tf.minimum((k + 1) * width, self.epoch_size)
        epoch = tf.cast(self.epochs_started - 1, tf.float64)
        fraction = tf.cast(end, tf.float64) / tf.cast(self.epoch_kept, tf.float64)
        # A gather reads just the chunk (a slice of the variable would copy all of it).
        positions = tf.range(start, end)
        with tf.control_dependencies([self._epochs_read.assign(epoch + fraction)]):
            return {
                "id": self.epoch_order.sparse_read(positions),
                "sample_weight": self.epoch_weights.sparse_read(positions),
            }

    def read(
        self, source, *, batch_size: int, drop_remainder: bool = False, ids=None
    ) -> tf.data.Dataset:
        """One epoch of batches of the kept examples, read by id from ``source``.

        Args:
          source: ``{"name": array with N rows}`` (row ``i`` is example ``i``), a TFDS data
            source (record ``i``), or an ``random_access_source`` (``echoing._src.core.sources``).
          batch_size: examples per batch.
          drop_remainder: drop the epoch's last, smaller batch (static shapes).
          ids: as in ``epoch_ids``.

        Returns:
          Batches of the source's entries plus ``"id"`` and ``"sample_weight"``; iterate again
          for the next epoch. ``model.fit`` warns once that the input "ran out of data": a
          pruned epoch is shorter than the first (whole) one, and fit goes on to the next.
        """
        if not hasattr(source, "gather"):
            source = random_access_source(source)
        check_read_source(source.num_examples, self.table.num_examples)
        check_batch_size("read", batch_size)
        size = source.num_examples if ids is None else len(np.asarray(ids))
        check_batch_fits("read", batch_size, drop_remainder, size)
        # Whole batches of ids from the epoch's order, then one gather per batch and key.
        return self.epoch_ids(ids, batch_size=batch_size, drop_remainder=drop_remainder).map(
            lambda batch: {**source.gather(batch["id"]), **batch}, name=f"{self.name}_read"
        )

    def _universe(self, ids) -> tf.Tensor:
        if ids is None:
            return tf.range(self.table.num_examples, dtype=tf.int64)
        values = check_epoch_ids(ids, self.table.num_examples)
        return tf.constant(values, tf.int64)

    def _decide(self, epoch, ids, threshold) -> tuple[tf.Tensor, tf.Tensor]:
        """The kept ``ids`` of ``epoch`` and their weights."""
        losses, seen = self.table.lookup(ids)
        keep, easy = self._keep_rule(epoch, losses, seen, threshold, tf.gather(self.draws, ids))
        weights = self._weights(tf.boolean_mask(easy, keep))
        return tf.boolean_mask(ids, keep), weights
