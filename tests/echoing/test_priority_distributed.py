"""priority_sample(..., input_context=...): each input pipeline selects top-k over its own shard,
with global ids.

Input pipelines are simulated with tf.distribute.InputContext, as distribute_datasets_from_function
would create them; test_priority_distributed_mirrored.py runs the same under MirroredStrategy.
"""

import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing import PriorityTable, ShardedPriorityTable, priority_sample

NUM_EXAMPLES = 40
SOURCE = {
    "x": np.arange(NUM_EXAMPLES * 2, dtype=np.float32).reshape(NUM_EXAMPLES, 2),
    "y": np.arange(NUM_EXAMPLES, dtype=np.int64) * 10,
}


def _per_pipeline(table, source, context, *, global_batch_size, **arguments):
    """The pipeline's dataset, as a dataset_fn of distribute_datasets_from_function builds it."""
    return priority_sample(
        table, source, batch_size=global_batch_size, input_context=context, **arguments
    )


def _context(pipelines, pipeline, replicas):
    return tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=pipeline, num_replicas_in_sync=replicas
    )


def _expected_top(shard, step, num_top, renew_local):
    """Top ``num_top`` local ids of ``shard`` at ``step``, outside this step's renewal."""
    estimate = shard.log_estimate(step).numpy()
    order = [int(i) for i in np.argsort(-estimate, kind="stable") if i not in renew_local]
    threshold = estimate[order[num_top - 1]]
    # Ties at the threshold may be broken either way.
    return {i for i in order if estimate[i] > threshold}, {
        i for i in order if estimate[i] == threshold
    }


@pytest.mark.parametrize(
    "pipelines,replicas,global_batch_size,top_ratio,renew_ratio",
    [
        (2, 2, 8, 0.5, 0.5),  # one replica per pipeline (PER_REPLICA / one worker per replica)
        (1, 2, 8, 0.5, 0.5),  # one pipeline feeding two replicas (MirroredStrategy per worker)
        (2, 4, 16, 0.25, 0.5),  # two workers with two replicas each; a uniform remainder
        (3, 3, 6, 0.5, 0.5),  # 40 ids over 3 shards: sizes 14, 13, 13
    ],
)
def test_pipelines_select_top_k_of_their_shard_with_global_ids(
    pipelines, replicas, global_batch_size, top_ratio, renew_ratio
):
    table = ShardedPriorityTable(NUM_EXAMPLES, pipelines)
    rng = np.random.default_rng(pipelines * 10 + replicas)
    # Distinct priorities, so each shard's top-k is unique.
    table.update(tf.range(NUM_EXAMPLES), rng.permutation(NUM_EXAMPLES) + 1.0, 0)
    per_replica = global_batch_size // replicas
    splits = replicas // pipelines
    iterators = [
        iter(
            _per_pipeline(
                table,
                SOURCE,
                _context(pipelines, pipeline, replicas),
                global_batch_size=global_batch_size,
                top_ratio=top_ratio,
                renew_ratio=renew_ratio,
                seed=0,
            )
        )
        for pipeline in range(pipelines)
    ]
    for step in range(4):
        step_ids = []
        for pipeline, iterator in enumerate(iterators):
            shard = table.shards[pipeline]
            batches = [next(iterator) for _ in range(splits)]  # this pipeline's replicas
            for batch in batches:
                assert batch["x"].shape == (per_replica, 2), "static per-replica batch"
                ids = batch["id"].numpy()
                np.testing.assert_array_equal(batch["x"].numpy(), SOURCE["x"][ids])
                np.testing.assert_array_equal(batch["y"].numpy(), SOURCE["y"][ids])
                assert np.all(ids % pipelines == pipeline), "only ids of this pipeline's shard"
            ids = np.concatenate([batch["id"].numpy() for batch in batches])
            step_ids.append(ids)
            local = (ids // pipelines).tolist()
            num_top = round(top_ratio * global_batch_size / pipelines)
            num_renew = round(renew_ratio * global_batch_size / pipelines)
            renew = [(step * num_renew + j) % shard.num_examples for j in range(num_renew)]
            assert local[num_top : num_top + num_renew] == renew, "round-robin over the shard"
            above, tied = _expected_top(shard, step, num_top, renew)
            top = set(local[:num_top])
            assert above <= top <= above | tied, (step, pipeline, local)
        union = np.concatenate(step_ids)
        # Top-k and renewal parts never repeat an id, within or across pipelines.
        num_selected = (round(top_ratio * global_batch_size / pipelines)
                        + round(renew_ratio * global_batch_size / pipelines))  # fmt: skip
        chosen = np.concatenate([ids[:num_selected] for ids in step_ids])
        assert len(set(chosen.tolist())) == chosen.size
        if top_ratio + renew_ratio == 1.0:
            assert len(set(union.tolist())) == global_batch_size
        # Feedback with the union of GLOBAL ids lands in each owner's table, at local ids.
        priorities = rng.exponential(size=union.size).astype(np.float32) + 0.1
        before = [shard.measured_step.numpy().copy() for shard in table.shards]
        table.update(union, priorities, step + 1)
        for pipeline, shard in enumerate(table.shards):
            local = sorted({int(i) // pipelines for i in union if i % pipelines == pipeline})
            changed = np.flatnonzero(shard.measured_step.numpy() != before[pipeline])
            assert changed.tolist() == local
            assert np.all(shard.measured_step.numpy()[local] == step + 1)


def test_one_pipeline_accepts_a_plain_table_and_splits_one_selection():
    table = PriorityTable(NUM_EXAMPLES)
    dataset = _per_pipeline(
        table, SOURCE, _context(1, 0, 2), global_batch_size=8, top_ratio=0.5, renew_ratio=0.5
    )
    first, second = list(dataset.take(2))
    # One selection of 8 for both replicas: top 4 (ids 4..7, unmeasured, outside the renewal),
    # then renewal 0..3, split into two consecutive per-replica batches of 4.
    ids = np.concatenate([first["id"].numpy(), second["id"].numpy()])
    assert sorted(ids[:4].tolist()) == [4, 5, 6, 7]
    np.testing.assert_array_equal(ids[4:], [0, 1, 2, 3])


@pytest.mark.parametrize("pipelines", [2, 3])
def test_pipelines_draw_different_uniform_examples(pipelines):
    table = ShardedPriorityTable(NUM_EXAMPLES * 3, pipelines)
    source = {"y": np.arange(NUM_EXAMPLES * 3)}
    local_ids = []
    for pipeline in range(pipelines):
        dataset = _per_pipeline(
            table,
            source,
            _context(pipelines, pipeline, pipelines),
            global_batch_size=pipelines * 8,
            top_ratio=0.0,
            renew_ratio=0.25,
            seed=0,
        )
        local_ids.append(next(iter(dataset))["id"].numpy()[2:] // pipelines)
    assert not np.array_equal(local_ids[0], local_ids[1]), "seed is combined with the pipeline"


@pytest.mark.parametrize(
    "table,context,arguments,error,message",
    [
        (
            ShardedPriorityTable(NUM_EXAMPLES, 2),
            "context",
            {},
            TypeError,
            "input_context must be the tf.distribute.InputContext.*got str",
        ),
        (
            ShardedPriorityTable(NUM_EXAMPLES, 3),
            _context(2, 0, 2),
            {},
            ValueError,
            r"table has 3 shards but there are 2 input pipelines.*num_shards=2",
        ),
        (
            PriorityTable(NUM_EXAMPLES),
            _context(2, 0, 2),
            {},
            TypeError,
            r"ShardedPriorityTable with one shard per input pipeline \(num_shards=2\).*"
            "got PriorityTable",
        ),
        (
            ShardedPriorityTable(NUM_EXAMPLES, 2),
            _context(2, 0, 3),
            {},
            ValueError,
            "num_replicas_in_sync=3 is not a multiple of num_input_pipelines=2",
        ),
        (
            ShardedPriorityTable(NUM_EXAMPLES, 2),
            _context(2, 0, 4),
            {"global_batch_size": 6},
            ValueError,
            "batch_size is the global batch: a positive multiple of num_replicas_in_sync=4, got 6",
        ),
        (
            ShardedPriorityTable(NUM_EXAMPLES, 2),
            _context(2, 0, 2),
            {"global_batch_size": 8.0},
            TypeError,
            "batch_size must be an int, got 8.0",
        ),
        (
            ShardedPriorityTable(NUM_EXAMPLES, 2),
            _context(2, 0, 2),
            {"global_batch_size": 42},
            ValueError,
            r"batch_size must be in \[1, N=20\].*got 21",  # per pipeline, over its shard
        ),
        (
            ShardedPriorityTable(NUM_EXAMPLES + 1, 2),
            _context(2, 0, 2),
            {},
            ValueError,
            "source has 40 examples .* table has N=41",
        ),
    ],
)
def test_errors(table, context, arguments, error, message):
    arguments = {"global_batch_size": 8, "top_ratio": 0.5, "renew_ratio": 0.5, **arguments}
    with pytest.raises(error, match=message):
        _per_pipeline(table, SOURCE, context, **arguments)


def test_a_sharded_table_without_an_input_context_is_refused():
    with pytest.raises(TypeError, match="pass the input_context your dataset_fn receives"):
        priority_sample(
            ShardedPriorityTable(NUM_EXAMPLES, 2), SOURCE, batch_size=8, top_ratio=0.5,
            renew_ratio=0.5,
        )  # fmt: skip


def test_the_deprecated_name_warns_and_selects_the_same_batches():
    table = ShardedPriorityTable(NUM_EXAMPLES, 2)
    arguments = {"top_ratio": 0.5, "renew_ratio": 0.5, "seed": 3}
    with pytest.warns(DeprecationWarning, match=r"use echoing.priority_sample\(table, source"):
        old = echoing.distributed_priority_sample(
            table, SOURCE, _context(2, 1, 2), global_batch_size=8, **arguments
        )
    new = _per_pipeline(table, SOURCE, _context(2, 1, 2), global_batch_size=8, **arguments)
    for before, after in zip(old.take(3), new.take(3), strict=True):
        np.testing.assert_array_equal(before["id"], after["id"])
