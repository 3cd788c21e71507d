"""Per-input-pipeline priority sampling for ``strategy.distribute_datasets_from_function``:
``echoing.priority_sample(..., input_context=...)``.

Example::

    import numpy as np
    import tensorflow as tf
    import echoing

    source = {"x": np.random.rand(1000, 40).astype("float32"), "y": np.arange(1000) % 10}
    strategy = tf.distribute.get_strategy()  # or Mirrored / MultiWorkerMirrored
    table = echoing.ShardedPriorityTable(1000, num_shards=strategy.num_replicas_in_sync)
    options = tf.distribute.InputOptions(
        # One input pipeline per replica (MirroredStrategy only); omit for one per worker.
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        # The default prefetch to device selects from the table before the previous step
        # has written it: one step stale (tests/echoing/test_priority_distributed_mirrored.py).
        experimental_fetch_to_device=False,
    )
    dataset = strategy.distribute_datasets_from_function(
        lambda context: echoing.priority_sample(
            table, source, batch_size=64, top_ratio=0.5, renew_ratio=0.5, seed=0,
            input_context=context,  # batch_size is then the global batch
        ),
        options,
    )
    # Per replica in the train step: PriorityMeter(table, ...).update(batch["id"], ...)

The paper's parameter-server workers each select the top-k over their own examples; here every
input pipeline ``i`` of ``P`` (``InputContext.input_pipeline_id`` / ``num_input_pipelines``) is
such a worker. It selects from ``table.shards[i]`` (the ids ``i::P``, see
``echoing.ShardedPriorityTable``): its top-k, its own round-robin renewal (so the ``P`` pipelines
together renew every id every ``ceil(N / (P·r))`` steps) and its uniform remainder. It gathers
the selected examples from the full source by GLOBAL id and yields them with those ids, so the
train step writes their priorities into the owning shard's table, and no two pipelines ever
select the same example.

A pipeline that feeds several replicas (``num_replicas_in_sync / num_input_pipelines > 1``, e.g.
the default per-worker mode of ``MirroredStrategy``) selects once per step for all of them and
yields the selection as consecutive per-replica batches: selecting once per replica would pick
the same top-k for every replica, since the table is only written after the step.

Proportional mode weights by ``(N_i·q)^-β`` within shard ``i``: each pipeline's batch mean is an
unbiased estimate of its shard's mean, and shards are of equal size (``N`` divisible by ``P``) or
differ by one example, so their average over replicas estimates the full mean.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from echoing._src.priority.sampling import priority_sample
from echoing._src.priority.shards import ShardedPriorityTable
from echoing._src.priority.table import PriorityTable

if TYPE_CHECKING:
    from tensorflow_datasets.core.data_sources.base import BaseDataSource


def distributed_priority_sample(
    table: ShardedPriorityTable | PriorityTable,
    source: Mapping[str, np.ndarray | tf.Tensor] | BaseDataSource,
    input_context: tf.distribute.InputContext,
    *,
    global_batch_size: int,
    **arguments,
) -> tf.data.Dataset:
    """Deprecated, goes in the next release: ``echoing.priority_sample(table, source,
    batch_size=global_batch_size, input_context=input_context, ...)`` does the same."""
    warnings.warn(
        "echoing.distributed_priority_sample is deprecated and goes in the next release: use "
        "echoing.priority_sample(table, source, batch_size=global_batch_size, "
        "input_context=input_context, ...), which selects per input pipeline the same way.",
        DeprecationWarning,
        stacklevel=2,
    )
    return priority_sample(
        table, source, batch_size=global_batch_size, input_context=input_context, **arguments
    )
