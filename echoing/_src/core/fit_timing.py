"""How long ``model.fit``'s steps waited for their batches, from stamps the pipeline records.

Example::

    import time
    import tensorflow as tf
    from echoing._src.core.fit_timing import BatchStamps, execution_wait

    stamps = BatchStamps()
    batches = tf.data.Dataset.range(10).apply(stamps.stamp)  # the pipeline's last stage
    begin = time.time()
    iterator = iter(batches)
    for _ in range(4):  # one execution of 4 steps
        next(iterator)
    ready, handed = stamps.since(0)
    seconds = time.time() - begin
    first = min(max(ready[0] - begin, 0.0), seconds)
    print(execution_wait(first, ready[1:] - handed[:-1], seconds))  # >= first, <= seconds

``fit`` runs ``steps_per_execution`` steps per call and tells callbacks only when the call began
and ended. ``BatchStamps.stamp`` records, for every batch the train step takes, when the batch
became ready (before a one-element buffer of the stage's own) and when it was handed over; the
callback reads the records of each call. The first step's wait is from the call's start to its
batch's ready time. A later step i waited ``x_i - c``, where ``x_i`` is the time from handing
over batch i-1 to batch i being ready and ``c`` the step's compute (when ``x_i <= c`` the batch
was ready before it was asked for: no wait); ``c`` is the one value for which the call's
duration is ``k c`` plus the waits (``execution_wait``), steps of one call costing the same.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from echoing._src.core.checks import is_positive_int
from echoing._src.core.types import as_element


class BatchStamps:
    """Host variables in which a pipeline's last stage records each batch's times.

    Args:
      capacity: how many batches' records are kept (a ring); at least the steps of one
        ``fit`` execution (``steps_per_execution``).
    """

    def __init__(self, capacity: int = 4096):
        if not is_positive_int(capacity):
            raise ValueError(
                f"capacity must be an int >= 1 (at least fit's steps_per_execution), got "
                f"{capacity!r}."
            )
        self.capacity = capacity
        with tf.device("/cpu:0"):  # written by the tf.data stage on the host
            self._ready = tf.Variable(tf.zeros([capacity], tf.float64), trainable=False)
            self._handed = tf.Variable(tf.zeros([capacity], tf.float64), trainable=False)
            self._count = tf.Variable(0, dtype=tf.int64, trainable=False)

    @property
    def count(self) -> int:
        """Batches handed over so far."""
        return int(self._count.numpy())

    def stamp(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """The pipeline's last transformation: records each batch's ready and hand-over times."""
        ready_times, handed_times, count = self._ready, self._handed, self._count
        capacity = self.capacity

        spec = dataset.element_spec

        def tag(*element):
            return element, tf.timestamp()

        def record(element, ready):
            slot = [[tf.math.floormod(count, capacity)]]
            writes = [
                ready_times.scatter_nd_update(slot, [ready]),
                handed_times.scatter_nd_update(slot, [tf.timestamp()]),
            ]
            with tf.control_dependencies(writes):  # the count last: it publishes the record
                counted = count.assign_add(1)
            with tf.control_dependencies([counted]):
                element = tf.nest.map_structure(tf.identity, element)
            return as_element(element, spec)

        # Ready is stamped before a one-element buffer and read after it: a batch waiting in the
        # buffer when its step began counts no wait, however long fit takes to dispatch the step.
        tagged = dataset.map(tag, name="batch_ready").prefetch(1)
        # tf.data would add an autotuned buffer after a pipeline's last synchronous map: the
        # recording would then run ahead of the steps, crediting each with a later batch.
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        return tagged.map(record, name="batch_handed").with_options(options)

    def since(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """(ready, handed) times of the batches handed over from the ``start``-th on."""
        end = self.count
        if end - start > self.capacity:
            raise ValueError(
                f"{end - start} batches since the last read, but only the last {self.capacity} "
                "are kept; build the stamps with a capacity of at least steps_per_execution."
            )
        slots = np.arange(start, end) % self.capacity
        return self._ready.numpy()[slots], self._handed.numpy()[slots]


def execution_wait(first_wait: float, gaps, seconds: float) -> float:
    """Input wait of one call of ``len(gaps) + 1`` steps lasting ``seconds``.

    Args:
      first_wait: the first step's wait (from the call's start to its batch's ready time).
      gaps: for each later step, the time from the previous batch's hand-over to its batch
        being ready (negative when it was ready earlier).
      seconds: the call's duration.

    Solves ``seconds = k c + first_wait + sum(max(0, gap - c))`` for the compute ``c`` of a step
    (the right side grows with ``c``, so there is one solution) and returns the waits' sum.
    """
    gaps = np.sort(np.asarray(gaps, dtype=np.float64))[::-1]
    steps, budget = len(gaps) + 1, max(seconds - first_wait, 0.0)
    compute = budget / steps
    for waited in range(len(gaps) + 1):  # the number of later steps that waited
        compute = (budget - gaps[:waited].sum()) / (steps - waited)
        if waited == len(gaps) or gaps[waited] <= compute:
            break
    compute = max(compute, 0.0)
    return float(min(first_wait + np.maximum(gaps - compute, 0.0).sum(), seconds))
