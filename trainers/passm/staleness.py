"""How stale each asynchronous update is, and how many updates were writing at once.

Example::

    import tensorflow as tf
    from trainers.passm.staleness import UpdateMeter

    meter = UpdateMeter(num_workers=2)
    variable = tf.Variable(1.0)
    version_read = meter.read()  # before the forward pass
    meter.write(0, version_read, lambda: [variable.assign_sub(0.1)])
    print(meter.summary())  # {'staleness_mean': 0.0, 'staleness_max': 0, ...}

A step reads the model version (the number of updates written to the model so far) before its
forward pass and writes its update later; the updates that landed in between, anywhere in the
model, are its staleness. The model-wide count matters for PASSM too: a PASSM worker is the only
writer of its block (its block staleness is always 0), but its gradient was taken at the other
blocks' values of its read, which the other workers have moved since. The per-block counts of
`trainers.passm.state.TrainingState` are kept beside this one.

Each worker accumulates into its own counters (only it writes them, so the running maximum needs
no lock); ``summary()`` combines them. ``writing`` counts updates between their first and last
write right now: its largest value seen is 1 when every update holds the ASSM lock, and up to c
for lock-free PASSM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf


def _counter(name: str) -> tf.Variable:
    return tf.Variable(0, dtype=tf.int64, trainable=False, name=name)


class UpdateMeter(tf.Module):
    """The model version, each worker's staleness counts and the concurrent-writer probe.

    Args:
      num_workers: c; worker ``w`` records into its own counters.
    """

    def __init__(self, num_workers: int):
        super().__init__(name="update_meter")
        self.num_workers = num_workers
        self.version = _counter("model_version")  # updates written to the model so far
        self.updates = [_counter(f"updates_{w}") for w in range(num_workers)]
        self.staleness_sum = [_counter(f"staleness_sum_{w}") for w in range(num_workers)]
        self.staleness_max = [_counter(f"staleness_max_{w}") for w in range(num_workers)]
        self.writing = _counter("writing")
        self.most_writing = [_counter(f"most_writing_{w}") for w in range(num_workers)]

    def read(self) -> tf.Tensor:
        """The model version now; read it before the forward pass (control dependency)."""
        return self.version.read_value()

    def write(
        self,
        worker: int,
        version_read: tf.Tensor,
        update: Callable[[], Sequence[tf.Tensor]],
    ) -> list[tf.Tensor]:
        """Runs ``update()`` (it writes the parameters, returns the written values) and records
        the update's staleness against ``version_read``; returns the written values and the
        counters it moved."""
        entered = self.writing.assign_add(1)
        seen = self.most_writing[worker]
        seen.assign(tf.maximum(seen, entered))
        # Automatic control dependencies chain ops on the same variable only: order the writes
        # after the probe's entry and the version after the writes explicitly.
        with tf.control_dependencies([entered]):
            written = list(update())
        with tf.control_dependencies(written):
            version_written = self.version.assign_add(1)
            left = self.writing.assign_sub(1)
        staleness = version_written - 1 - version_read
        counted = self.updates[worker].assign_add(1)
        total = self.staleness_sum[worker].assign_add(staleness)
        most = self.staleness_max[worker]
        # Returned with the writes: a tf.CriticalSection releases its lock once its function's
        # outputs have run, and the probe must leave inside it.
        return [*written, left, counted, total, most.assign(tf.maximum(most, staleness))]

    def summary(self) -> dict[str, Any]:
        """``staleness_mean`` / ``staleness_max`` over every update, per worker as well, and
        ``max_concurrent_writers`` (1 under the ASSM lock)."""
        updates = [int(v.numpy()) for v in self.updates]
        sums = [int(v.numpy()) for v in self.staleness_sum]
        maxima = [int(v.numpy()) for v in self.staleness_max]
        total = sum(updates)
        return {
            "staleness_mean": sum(sums) / total if total else 0.0,
            "staleness_max": max(maxima),
            "worker_updates": updates,
            "worker_staleness_mean": [
                s / n if n else 0.0 for s, n in zip(sums, updates, strict=True)
            ],
            "worker_staleness_max": maxima,
            "max_concurrent_writers": max(int(v.numpy()) for v in self.most_writing),
        }
