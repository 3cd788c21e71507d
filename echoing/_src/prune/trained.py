"""Pruning's epochs as training took them, not as the input pipeline read them.

Example::

    import echoing

    table = echoing.LossTable(8)
    stage = echoing.loss_prune(table, num_epochs=2, seed=0)
    batches = stage.epoch_ids(batch_size=4).repeat()
    iterator = iter(batches)
    for _ in range(3):  # 12 ids: the first epoch (every id: no loss yet) and half the second
        ids = next(iterator)["id"]
        stage.trained.record(ids)  # after the step that trained on them
    print(stage.epochs_read(), stage.epochs_trained())  # ~2.0 read ahead; 1.5 trained

The stage reads ahead of training by the pipeline's buffers (a shuffle buffer as large as the
data set holds a whole epoch), so its ``epochs_read()`` can reach the run's last epoch while
training has taken a fraction of it. ``TrainedEpochs`` counts instead the fresh examples
training reports (rows / echo factor), and ``epochs()`` places that count in the epochs'
cumulative sizes. A stream decides an epoch as it reads it, so the epoch being read counts
only its decided share of its inputs. An example a filter after the stage drops never counts
(the binary refuses the Assistant's filter with pruning for that reason).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from echoing._src.core.loss_table import _host_variable

_SLOTS = 1024  # 8 KiB: the epochs whose sizes any run up to 1020 epochs keeps


class TrainedEpochs(tf.Module):
    """The epochs' sizes as a pruning stage decides them, and the examples training took.

    Args:
      num_epochs: the run's epochs; sizes are kept for those and a few read ahead beyond them.
    """

    def __init__(self, num_epochs: int):
        super().__init__(name="trained_epochs")
        self.count = _host_variable(tf.constant(0.0, tf.float64), "count")  # fresh, trained
        # Cumulative examples handed out by the end of each epoch (the last slot takes later
        # epochs, beyond the run). At least _SLOTS of them, whatever the run's length: a run
        # resumed with another num_steps (so other num_epochs) restores the same shape.
        slots = max(num_epochs + 4, _SLOTS)
        self.ends = _host_variable(tf.zeros([slots], tf.int64), "ends")
        self.planned = _host_variable(tf.constant(0, tf.int64), "planned")

    def plan(self, epoch: tf.Tensor, examples: tf.Tensor) -> tf.Tensor:
        """Adds ``examples`` to ``epoch``'s size (graph: when the stage decides them)."""
        total = self.planned.assign_add(tf.cast(examples, tf.int64))
        slot = tf.minimum(tf.cast(epoch, tf.int64), self.ends.shape[0] - 1)
        return self.ends.scatter_update(tf.IndexedSlices(total[None], slot[None]))

    def record(self, ids, echo_factor: float = 1.0) -> None:
        """Counts the rows ``ids`` training took (any shape) as ``size / echo_factor`` fresh
        examples: echo's copies of an example count once together."""
        if not echo_factor > 0:
            raise ValueError(f"TrainedEpochs.record: echo_factor must be > 0, got {echo_factor!r}.")
        self.count.assign_add(float(np.size(ids)) / float(echo_factor))

    def remaining(self, epochs: int, opened: int, open_read: float = 1.0) -> float | None:
        """Fresh examples still to train until ``epochs`` are taken, once the stage has decided
        the last of them in full (``opened`` epochs begun, of which the last has had
        ``open_read`` of its inputs decided; None before)."""
        if opened < epochs or epochs > self.ends.shape[0]:
            return None
        if opened == epochs and open_read < 1.0:
            return None  # the last epoch's size is not known yet (a stream decides it as it reads)
        end = float(self.ends.numpy()[epochs - 1])
        if end == 0:
            return None  # begun, its size not yet written: the pipeline's thread is between writes
        return max(0.0, end - float(self.count.numpy()))

    def remaining_at_least(
        self,
        epochs: int,
        decided: float,
        opened: int,
        open_read: float,
        fewest_kept: Callable[[int, float], float],
    ) -> float:
        """At least the fresh examples still to train until ``epochs`` are taken, known before
        the stage has decided them all (``remaining``, exact, once it has): what it decided and
        training has not taken yet, plus ``fewest_kept(epoch, share)``, the fewest examples
        ``share`` of ``epoch``'s inputs can keep, for the rest of the open epoch and for each
        epoch not yet begun.

        ``decided``: ``planned``, read before ``opened`` and ``open_read``. The input pipeline
        decides on in its own threads; what it decides between the reads then counts as not
        yet decided, at its fewest, which keeps the result a lower bound.
        """
        exact = self.remaining(epochs, opened, open_read)
        if exact is not None:
            return exact
        undecided = [(opened - 1, 1.0 - open_read)] if opened else []
        undecided += [(epoch, 1.0) for epoch in range(opened, epochs)]
        at_least = decided + sum(fewest_kept(epoch, share) for epoch, share in undecided)
        return max(0.0, at_least - float(self.count.numpy()))

    def epochs(self, opened: int, open_read: float = 1.0) -> float:
        """Epochs trained (2.5: half of the third), of the ``opened`` epochs the stage began.

        ``open_read``: the share of the last begun epoch's inputs the stage has decided so far
        (1 by id, where an epoch is decided whole when it opens; on a stream, what it has read).
        That epoch's size so far is then the size of its decided part, so training caught up
        with a stream that reads little ahead is ``open_read`` of the epoch, not all of it."""
        ends = self.ends.numpy()[: max(0, min(opened, self.ends.shape[0]))]
        if not len(ends):
            return 0.0
        trained = float(self.count.numpy())
        done, last = int(np.searchsorted(ends, trained, side="right")), len(ends) - 1
        if done > last:  # all that was decided is trained
            return float(len(ends)) if open_read >= 1.0 else last + open_read
        start = ends[done - 1] if done else 0
        fraction = (trained - start) / max(1, ends[done] - start)
        return done + (fraction * open_read if done == last else fraction)
