"""Per-input-pipeline priority sampling for ``strategy.distribute_datasets_from_function``.

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
        lambda context: echoing.distributed_priority_sample(
            table, source, context, global_batch_size=64, top_ratio=0.5, renew_ratio=0.5, seed=0
        ),
        options,
    )
    # Per replica in the train step: PriorityFeedback(table, ...).update(batch["id"], ...)

The paper's parameter-server workers each select the top-k over their own examples; here every
input pipeline ``i`` of ``P`` (``InputContext.input_pipeline_id`` / ``num_input_pipelines``) is
such a worker. It selects from ``table.shards[i]`` (the ids ``i::P``, see
``echoing.ShardedPriorityTable``): its top-k, its own round-robin renewal (so the ``P`` pipelines
together renew every id every ``ceil(N / (P·r))`` steps) and its uniform remainder. It gathers
the selected examples from the full source by GLOBAL id and yields them with those ids, so the
train step's feedback writes into the owning shard's table, and no two pipelines ever select the
same example.

A pipeline that feeds several replicas (``num_replicas_in_sync / num_input_pipelines > 1``, e.g.
the default per-worker mode of ``MirroredStrategy``) selects once per step for all of them and
yields the selection as consecutive per-replica batches: selecting once per replica would pick
the same top-k for every replica, since the table is only written after the step.

Proportional mode weights by ``(N_i·q)^-β`` within shard ``i``: each pipeline's batch mean is an
unbiased estimate of its shard's mean, and shards are of equal size (``N`` divisible by ``P``) or
differ by one example, so their average over replicas estimates the full mean.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from echoing._src.core.sources import random_access_source
from echoing._src.priority.sampling import (
    PrioritySampler,
    check_source_size,
    sampled_batches,
)
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
    top_ratio: float,
    renew_ratio: float,
    seed: int | None = None,
    mode: str = "top_k",
    alpha: float = 1.0,
    importance_exponent: float = 1.0,
    start_step: int = 0,
    keys: Sequence[str] | None = None,
) -> tf.data.Dataset:
    """This input pipeline's prioritized per-replica batches, selected from its own shard.

    Call it inside the ``dataset_fn`` of ``strategy.distribute_datasets_from_function``.

    Args:
      table: a ``ShardedPriorityTable`` with ``num_shards == input_context.num_input_pipelines``
        (a plain ``PriorityTable`` is accepted when there is one input pipeline). Create it
        once, outside the strategy scope, before the datasets.
      source: ALL ``N`` examples, in memory or a TFDS data source (see ``priority_sample``);
        each pipeline reads only the rows it selects.
      input_context: the ``tf.distribute.InputContext`` handed to the ``dataset_fn``.
      global_batch_size: examples per step over all replicas; divisible by
        ``num_replicas_in_sync``. Each pipeline selects ``global_batch_size / P`` examples a
        step and yields them as ``num_replicas_in_sync / P`` batches of the per-replica size.
      top_ratio, renew_ratio, seed, mode, alpha, importance_exponent: see ``PrioritySampler``,
        applied per pipeline (``seed`` is combined with the pipeline id so pipelines draw
        different uniform/proportional examples).
      start_step: the step of the first batch (to resume).
      keys: the entries/features of ``source`` to read (see ``priority_sample``).

    Returns:
      A ``tf.data.Dataset`` of per-replica batches: the source's entries, ``"id"`` (int64 GLOBAL
      ids) and ``"sample_weight"``, all with static shape ``[global_batch_size / R, ...]``.

    Raises:
      TypeError: ``input_context`` is not an ``InputContext``, ``table`` is not a
        (sharded) priority table, or see ``priority_sample``.
      ValueError: the table's shards do not match the input pipelines, replicas cannot be split
        evenly over pipelines, the global batch does not divide over replicas, or see
        ``priority_sample``.
    """
    if not isinstance(input_context, tf.distribute.InputContext):
        raise TypeError(
            f"input_context must be the tf.distribute.InputContext given to the dataset_fn of "
            f"strategy.distribute_datasets_from_function, got {type(input_context).__name__}."
        )
    pipelines = input_context.num_input_pipelines
    pipeline = input_context.input_pipeline_id
    replicas = input_context.num_replicas_in_sync
    if isinstance(table, PriorityTable) and pipelines == 1:
        shard = table
    elif isinstance(table, ShardedPriorityTable):
        if table.num_shards != pipelines:
            raise ValueError(
                f"table has {table.num_shards} shards but there are {pipelines} input pipelines; "
                f"build it as echoing.ShardedPriorityTable(N, num_shards={pipelines}) (one shard "
                "per input pipeline)."
            )
        shard = table.shards[pipeline]
    else:
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
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int):
        raise TypeError(f"global_batch_size must be an int, got {global_batch_size!r}.")
    if global_batch_size < 1 or global_batch_size % replicas:
        raise ValueError(
            f"global_batch_size must be a positive multiple of num_replicas_in_sync={replicas}, "
            f"got {global_batch_size}."
        )
    if seed is not None and not isinstance(seed, bool) and isinstance(seed, int):
        # Distinct per pipeline, same for every run with this seed.
        seed = int(np.random.SeedSequence([seed, pipeline]).generate_state(1)[0] % (2**31 - 1))
    sampler = PrioritySampler(
        shard,
        batch_size=global_batch_size // pipelines,
        top_ratio=top_ratio,
        renew_ratio=renew_ratio,
        seed=seed,
        mode=mode,
        alpha=alpha,
        importance_exponent=importance_exponent,
    )
    examples = random_access_source(source, keys=keys)
    num_examples = table.num_examples
    check_source_size(examples, num_examples)
    return sampled_batches(
        sampler,
        examples,
        start_step=start_step,
        shard_index=pipeline if isinstance(table, ShardedPriorityTable) else 0,
        num_shards=pipelines if isinstance(table, ShardedPriorityTable) else 1,
        num_splits=replicas // pipelines,
    )
