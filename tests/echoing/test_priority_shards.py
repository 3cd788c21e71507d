"""ShardedPriorityTable: strided shards, routing by global id, same arithmetic as one table."""

import numpy as np
import pytest
import tensorflow as tf

from echoing import PriorityTable, ShardedPriorityTable


@pytest.mark.parametrize(
    "num_examples,num_shards,sizes",
    [(10, 2, [5, 5]), (11, 3, [4, 4, 3]), (7, 7, [1] * 7), (5, 1, [5])],
)
def test_strided_shards(num_examples, num_shards, sizes):
    table = ShardedPriorityTable(num_examples, num_shards)
    assert [shard.num_examples for shard in table.shards] == sizes
    every = np.concatenate(
        [table.global_ids(index, tf.range(size)).numpy() for index, size in enumerate(sizes)]
    )
    assert sorted(every.tolist()) == list(range(num_examples))
    for index, size in enumerate(sizes):
        np.testing.assert_array_equal(
            table.global_ids(index, tf.range(size)).numpy(),
            np.arange(num_examples)[index::num_shards],
        )


def _updates(num_examples, seed):
    rng = np.random.default_rng(seed)
    for step in (0, 1, 3):
        ids = rng.choice(num_examples, num_examples // 2, replace=False)
        priorities = rng.exponential(size=ids.size).astype(np.float32)
        priorities[0] = -1.0  # p <= 0
        if step == 3:
            priorities[1] = np.nan  # rejected
        yield ids, priorities, step


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("num_examples,num_shards", [(12, 2), (13, 3), (9, 1)])
def test_same_estimates_and_statistics_as_one_table(in_function, num_examples, num_shards):
    sharded = ShardedPriorityTable(num_examples, num_shards)
    single = PriorityTable(num_examples)
    update = tf.function(sharded.update) if in_function else sharded.update
    rejected = 0
    for ids, priorities, step in _updates(num_examples, seed=num_shards):
        rejected += int(update(ids, priorities, step))
        single.update(ids, priorities, step)
    assert rejected == int(single.num_rejected.numpy()) == 1
    assert int(sharded.num_rejected.numpy()) == 1
    for step in (3, 6):
        np.testing.assert_allclose(
            sharded.log_estimate(step).numpy(), single.log_estimate(step).numpy(), rtol=1e-6
        )
        for key, value in single.statistics(step).items():
            np.testing.assert_allclose(
                float(sharded.statistics(step)[key]), float(value), rtol=1e-5, err_msg=key
            )
    # Each shard holds exactly its global ids' rows of the single table.
    for index, shard in enumerate(sharded.shards):
        global_ids = np.arange(num_examples)[index::num_shards]
        np.testing.assert_array_equal(
            shard.measured_step.numpy(), single.measured_step.numpy()[global_ids]
        )
        np.testing.assert_allclose(
            shard.log_priority.numpy(), single.log_priority.numpy()[global_ids], rtol=1e-6
        )


def test_update_lands_only_in_the_owning_shard():
    table = ShardedPriorityTable(10, 2)
    table.update([3, 7], [2.0, 4.0], step=5)  # both odd: shard 1, local ids 1 and 3
    np.testing.assert_array_equal(table.shards[0].measured_step.numpy(), [-1] * 5)
    np.testing.assert_array_equal(table.shards[1].measured_step.numpy(), [-1, 5, -1, 5, -1])
    np.testing.assert_allclose(table.shards[1].estimate(5).numpy()[[1, 3]], [2.0, 4.0])


def test_checkpoint_round_trip(tmp_path):
    table = ShardedPriorityTable(9, 3)
    table.update(tf.range(9), tf.range(1, 10, dtype=tf.float32), 0)
    path = tf.train.Checkpoint(priorities=table).write(str(tmp_path / "table"))
    restored = ShardedPriorityTable(9, 3)
    tf.train.Checkpoint(priorities=restored).read(path).assert_consumed()
    np.testing.assert_allclose(restored.estimate(0).numpy(), np.arange(1, 10), rtol=1e-6)


@pytest.mark.parametrize(
    "arguments,error,message",
    [
        ((10, 0), ValueError, r"num_shards must be in \[1, num_examples=10\].*got 0"),
        ((3, 4), ValueError, r"num_shards must be in \[1, num_examples=3\].*got 4"),
        ((10, 2.0), TypeError, "num_shards must be an int, got 2.0"),
        (("10", 2), TypeError, "num_examples must be an int, got '10'"),
    ],
)
def test_constructor_errors(arguments, error, message):
    with pytest.raises(error, match=message):
        ShardedPriorityTable(*arguments)


def test_out_of_range_ids_name_the_global_size():
    table = ShardedPriorityTable(10, 2)
    with pytest.raises(ValueError, match=r"id 10 is out of range .*N=10"):
        table.update([1, 10], [1.0, 1.0], 0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[-1\].*N=10"):
        tf.function(table.update)(tf.constant([-1, 2], tf.int64), tf.ones([2]), 0)
    np.testing.assert_array_equal(table.log_estimate(0).numpy(), np.full(10, np.inf))
