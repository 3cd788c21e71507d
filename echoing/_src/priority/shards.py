"""Priority tables split over input pipelines: pipeline ``i`` owns ids ``i, i+P, i+2P, ...``.

Example::

    import echoing

    table = echoing.ShardedPriorityTable(10, num_shards=2)  # shard 0: ids 0,2,..,8; 1: 1,3,..,9
    table.update(ids=[3, 4], priorities=[2.0, 0.5], step=0)  # global ids, routed to their owner
    table.shards[1].estimate(0)  # [inf, 2.0, inf, inf, inf]: local id 1 is global id 3
    table.global_ids(1, [1])  # [3]

The paper's parameter-server design has each worker select the top-k over its own examples.
Under ``tf.distribute`` each input pipeline (``InputContext.input_pipeline_id``) is such a worker:
it selects from ``shards[input_pipeline_id]``, a ``PriorityTable`` over its ``ceil((N - i) / P)``
examples, and its batches carry GLOBAL ids, so the train step's priorities (``update`` with the
batch's ids, e.g. through ``PriorityMeter``) land in the owning shard's table.

Strided shards (``i::P``), not contiguous ranges, because that is what ``Dataset.shard(P, i)``
does elsewhere in the input pipelines, the mapping is a division (local ``= id // P``, owner
``= id % P``) whatever ``N``, and shard sizes differ by at most one example.

In one process (``MirroredStrategy``) all shards live here and every replica's ``update`` routes
its ids; with one process per worker each process builds the same ``ShardedPriorityTable`` and
only its own pipeline's shard is read and written (the others stay unmeasured, 16 bytes per
example of host memory).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from echoing._src.core.checks import in_interval, is_int
from echoing._src.core.ids import integer_ids
from echoing._src.priority.table import PriorityTable, check_ids, table_statistics


class ShardedPriorityTable(tf.Module):
    """``num_shards`` ``PriorityTable``s over the strided shards of ``num_examples`` global ids.

    Attributes:
      num_examples: ``N``, global ids are ``0 .. N-1``.
      num_shards: ``P``, the number of input pipelines.
      shards: ``P`` ``PriorityTable``s; ``shards[i]`` holds global ids ``i::P`` as local ids
        ``0, 1, ...``.
    """

    def __init__(
        self, num_examples: int, num_shards: int, *, decay: float = 0.8, name: str | None = None
    ):
        """Creates every shard's table with every example unmeasured.

        Args:
          num_examples: ``N``, the size of the random-access source.
          num_shards: ``P >= 1``, the number of input pipelines
            (``InputContext.num_input_pipelines``), at most ``N``.
          decay: ``λ`` of every shard (see ``PriorityTable``).
          name: optional module name.

        Raises:
          TypeError: a count is not an int (or see ``PriorityTable``).
          ValueError: ``num_shards < 1`` or ``num_shards > num_examples`` (a shard would be
            empty), or see ``PriorityTable``.
        """
        super().__init__(name=name or "sharded_priority_table")
        for label, value in (("num_examples", num_examples), ("num_shards", num_shards)):
            if not is_int(value, numpy=True):
                raise TypeError(f"{label} must be an int, got {value!r} ({type(value).__name__}).")
        if not in_interval(num_shards, 1, max(num_examples, 1)):
            raise ValueError(
                f"num_shards must be in [1, num_examples={num_examples}] (one shard per input "
                f"pipeline, none empty), got {num_shards}."
            )
        self.num_examples = int(num_examples)
        self.num_shards = int(num_shards)
        self.shards = [
            PriorityTable(self.shard_size(index), decay=decay, name=f"shard_{index}")
            for index in range(self.num_shards)
        ]
        self.decay = self.shards[0].decay

    def shard_size(self, index: int) -> int:
        """Number of ids ``index, index + P, ... < N`` that shard ``index`` owns."""
        return -(-(self.num_examples - index) // self.num_shards)

    def global_ids(self, index: int, local_ids: tf.Tensor) -> tf.Tensor:
        """Global ids of shard ``index``'s ``local_ids``: ``local * P + index``, int64."""
        return tf.cast(local_ids, tf.int64) * self.num_shards + index

    @property
    def num_rejected(self) -> tf.Tensor:
        """NaN/inf priorities dropped by ``update`` so far, over all shards (int64)."""
        return tf.add_n([shard.num_rejected.read_value() for shard in self.shards])

    def update(self, ids: tf.Tensor, priorities: tf.Tensor, step: tf.Tensor | int) -> tf.Tensor:
        """Routes measurements of GLOBAL ``ids`` to their shards; as ``PriorityTable.update``.

        Returns:
          int64 scalar: NaN/inf priorities rejected by this call (all shards).

        Raises:
          ValueError: (eager) an id outside ``[0, N)`` (named with ``N``) or a length mismatch.
          tf.errors.InvalidArgumentError: the same checks inside a ``tf.function``.
        """
        ids = integer_ids(ids, "ShardedPriorityTable.update")
        priorities = tf.reshape(tf.cast(priorities, tf.float32), [-1])
        ids = check_ids(ids, priorities, self.num_examples)
        owner = tf.cast(ids % self.num_shards, tf.int32)
        local_ids = tf.dynamic_partition(ids // self.num_shards, owner, self.num_shards)
        local_priorities = tf.dynamic_partition(priorities, owner, self.num_shards)
        rejected = [
            shard.update(shard_ids, shard_priorities, step)
            for shard, shard_ids, shard_priorities in zip(
                self.shards, local_ids, local_priorities, strict=True
            )
        ]
        return tf.add_n(rejected)

    def log_estimate(self, step: tf.Tensor | int) -> tf.Tensor:
        """``ln p̂`` of every example in GLOBAL id order, float32 ``[N]``."""
        return tf.dynamic_stitch(
            [
                tf.range(index, self.num_examples, self.num_shards, dtype=tf.int32)
                for index in range(self.num_shards)
            ],
            [shard.log_estimate(step) for shard in self.shards],
        )

    def estimate(self, step: tf.Tensor | int) -> tf.Tensor:
        """Estimated priorities in GLOBAL id order, float32 ``[N]``."""
        return tf.exp(self.log_estimate(step))

    def statistics(self, step: tf.Tensor | int) -> dict[str, tf.Tensor]:
        """``PriorityTable.statistics`` over all shards together."""
        return table_statistics(
            step,
            tf.concat([shard.measured_step.read_value() for shard in self.shards], axis=0),
            tf.concat([shard.log_priority.read_value() for shard in self.shards], axis=0),
            tf.concat([shard.log_estimate(step) for shard in self.shards], axis=0),
        )


@dataclasses.dataclass(frozen=True)
class PipelineShare:
    """What one input pipeline selects from: its table, its batch and how its ids map back."""

    table: PriorityTable  # the pipeline's shard (or the whole table with one pipeline)
    batch_size: int  # examples it selects per step, for all the replicas it feeds
    shard_index: int  # local id j is global id j * num_shards + shard_index
    num_shards: int
    num_splits: int  # the replicas it feeds: each step's batch is split into this many
    seed: int | None  # distinct per pipeline, the same for every run with this seed


def pipeline_share(
    table: ShardedPriorityTable | PriorityTable,
    input_context: tf.distribute.InputContext | None,
    global_batch_size: int,
    seed: int | None,
) -> PipelineShare:
    """This input pipeline's share of a priority selection (``priority_sample``): pipeline
    ``i`` of ``P`` selects ``global_batch_size / P`` examples a step from ``table.shards[i]`` and
    splits them over the ``num_replicas_in_sync / P`` replicas it feeds. Without an
    ``input_context`` the one pipeline selects the whole batch from the whole (unsharded) table.

    Raises:
      TypeError / ValueError: see ``echoing.priority_sample`` (``input_context``).
    """
    if input_context is None:
        if isinstance(table, ShardedPriorityTable):
            raise TypeError(
                "a ShardedPriorityTable is selected from per input pipeline: pass the "
                "input_context your dataset_fn receives (strategy.distribute_datasets_from_"
                "function), or use a PriorityTable."
            )
        # PrioritySampler checks the table and the batch size with the other arguments.
        return PipelineShare(table, global_batch_size, 0, 1, 1, seed)
    if not isinstance(input_context, tf.distribute.InputContext):
        raise TypeError(
            f"input_context must be the tf.distribute.InputContext given to the dataset_fn of "
            f"strategy.distribute_datasets_from_function, got {type(input_context).__name__}."
        )
    pipelines = input_context.num_input_pipelines
    pipeline = input_context.input_pipeline_id
    replicas = input_context.num_replicas_in_sync
    sharded = isinstance(table, ShardedPriorityTable)
    if sharded and table.num_shards != pipelines:
        raise ValueError(
            f"table has {table.num_shards} shards but there are {pipelines} input pipelines; "
            f"build it as echoing.ShardedPriorityTable(N, num_shards={pipelines}) (one shard "
            "per input pipeline)."
        )
    if not sharded and not (isinstance(table, PriorityTable) and pipelines == 1):
        raise TypeError(
            f"table must be an echoing.ShardedPriorityTable with one shard per input pipeline "
            f"(num_shards={pipelines}) or, with one pipeline, an echoing.PriorityTable; got "
            f"{type(table).__name__}."
        )
    if replicas % pipelines:
        raise ValueError(
            f"num_replicas_in_sync={replicas} is not a multiple of num_input_pipelines="
            f"{pipelines}; every input pipeline must feed the same number of replicas."
        )
    if not is_int(global_batch_size):
        raise TypeError(f"batch_size must be an int, got {global_batch_size!r}.")
    if global_batch_size < 1 or global_batch_size % replicas:
        raise ValueError(
            "with an input_context, batch_size is the global batch: a positive multiple of "
            f"num_replicas_in_sync={replicas}, got {global_batch_size}."
        )
    if is_int(seed):
        seed = int(np.random.SeedSequence([seed, pipeline]).generate_state(1)[0] % (2**31 - 1))
    return PipelineShare(
        table=table.shards[pipeline] if sharded else table,
        batch_size=global_batch_size // pipelines,
        shard_index=pipeline if sharded else 0,
        num_shards=pipelines if sharded else 1,
        num_splits=replicas // pipelines,
        seed=seed,
    )
