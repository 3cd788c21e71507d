"""make_datasets(input_context=...): per-pipeline shards at the source, per-replica batches."""

import numpy as np
import pytest
import tensorflow as tf

import pipelines
from pipelines.sources import tfrecord

# Three TFRecord files of 6 examples each: ids 0-5, 6-11, 12-17.
FILE_SIZE, NUM_FILES, NUM_CLASSES = 6, 3, 3


def _context(num_pipelines, index, replicas):
    return tf.distribute.InputContext(
        num_input_pipelines=num_pipelines, input_pipeline_id=index, num_replicas_in_sync=replicas
    )


def _ids(dataset, count):
    """The first ``count`` ids of a batched dataset's stream, flattened."""
    ids = []
    for batch in dataset.as_numpy_iterator():
        ids.extend(batch["id"])
        if len(ids) >= count:
            break
    return np.array(ids[:count])


@pytest.fixture
def tfrecord_config(tmp_path):
    rng = np.random.default_rng(0)
    total = FILE_SIZE * NUM_FILES
    inputs = rng.normal(size=(total, 4)).astype(np.float32)
    train_glob = tfrecord.write_shards(
        str(tmp_path / "train"), inputs, np.arange(total) % NUM_CLASSES, num_shards=NUM_FILES
    )
    eval_glob = tfrecord.write_shards(
        str(tmp_path / "eval"), inputs, np.arange(total) % NUM_CLASSES, num_shards=NUM_FILES
    )

    def make(**overrides):
        config = pipelines.default_data_config()
        config.source, config.num_classes, config.augment = "tfrecord", NUM_CLASSES, "none"
        config.train_files, config.eval_files = train_glob, eval_glob
        config.shuffle_buffer = 8
        for key, value in overrides.items():
            config[key] = value
        return config

    return make


@pytest.mark.parametrize(
    ("source", "num_pipelines", "replicas", "batch_size", "per_replica"),
    [
        ("mnist1d", 2, 2, 8, 4),  # one replica per pipeline
        ("mnist1d", 2, 4, 8, 2),  # two replicas per pipeline
        ("tfrecord", 2, 2, 4, 2),  # 3 files over 2 pipelines: by file
        ("tfrecord", 4, 4, 4, 1),  # 3 files over 4 pipelines: by record
    ],
)
def test_pipelines_cover_each_train_id_once_per_epoch(
    tiny_config,
    tfrecord_config,
    tiny_sizes,
    source,
    num_pipelines,
    replicas,
    batch_size,
    per_replica,
):
    if source == "mnist1d":
        config = tiny_config(batch_size=batch_size, eval_batch_size=batch_size)
        num_train, num_eval = tiny_sizes
    else:
        config = tfrecord_config(batch_size=batch_size, eval_batch_size=batch_size)
        num_train = num_eval = FILE_SIZE * NUM_FILES
    train_shards, eval_shards = [], []
    for index in range(num_pipelines):
        datasets = pipelines.make_datasets(
            config, seed=0, input_context=_context(num_pipelines, index, replicas)
        )
        assert datasets.batch_size == per_replica
        assert datasets.train.element_spec["id"].shape == [per_replica]  # drop_remainder=True
        assert datasets.num_train_examples == num_train
        # Shuffle comes before repeat: the first num_shard examples are exactly one epoch.
        epoch = _ids(datasets.train, datasets.num_shard_train_examples)
        assert len(set(epoch)) == len(epoch) == datasets.num_shard_train_examples
        train_shards.append(set(epoch))
        eval_batches = list(datasets.eval.as_numpy_iterator())
        assert all(len(batch["id"]) <= per_replica for batch in eval_batches)
        eval_ids = np.concatenate([batch["id"] for batch in eval_batches])
        assert len(eval_ids) == datasets.num_shard_eval_examples
        eval_shards.append(set(eval_ids))
    for shards, total in [(train_shards, num_train), (eval_shards, num_eval)]:
        assert sum(len(shard) for shard in shards) == total  # no overlap ...
        assert set().union(*shards) == set(range(total))  # ... and nothing missing
    if source == "tfrecord" and num_pipelines <= NUM_FILES:
        # By file: pipeline 0 reads files 0 and 2, pipeline 1 reads file 1 only.
        assert train_shards[1] == set(range(FILE_SIZE, 2 * FILE_SIZE))


def test_echo_runs_per_pipeline(tiny_config, tiny_sizes, echo_at):
    num_train, _ = tiny_sizes
    datasets = pipelines.make_datasets(
        tiny_config(batch_size=8),
        seed=0,
        input_context=_context(2, 1, 2),
        insertions=echo_at("after_augment", 2.0),
    )
    ids = _ids(datasets.train, num_train)  # two echoes of each of this shard's examples
    values, repeats = np.unique(ids, return_counts=True)
    assert len(values) == num_train // 2 and np.all(repeats == 2)
    unechoed = pipelines.make_datasets(
        tiny_config(batch_size=8), seed=0, input_context=_context(2, 1, 2)
    )
    np.testing.assert_array_equal(values, np.sort(_ids(unechoed.train, num_train // 2)))


def test_without_input_context_nothing_changes(tiny_config, tiny_sizes):
    config = tiny_config()
    plain = pipelines.make_datasets(config, seed=0)
    single = pipelines.make_datasets(config, seed=0, input_context=_context(1, 0, 1))
    num_train, num_eval = tiny_sizes
    assert (plain.batch_size, plain.num_shard_train_examples) == (8, num_train)
    assert plain.num_shard_eval_examples == num_eval
    first, second = next(iter(plain.train)), next(iter(single.train))
    tf.nest.map_structure(np.testing.assert_array_equal, first, second)


@pytest.mark.parametrize(
    ("overrides", "context", "error", "message"),
    [
        ({"batch_size": 6}, (2, 0, 4), ValueError, r"batch_size=6 .* across the 4 replicas"),
        ({"eval_batch_size": 10}, (1, 0, 4), ValueError, r"eval_batch_size=10 .* 4 replicas"),
        (
            {"train_arrays": {"inputs": np.zeros([3, 2]), "label": np.arange(3)}},
            (4, 0, 4),
            ValueError,
            "train split has 3 examples, fewer than the 4 input pipelines",
        ),
        (
            {"eval_arrays": {"inputs": np.zeros([3, 2]), "label": np.arange(3)}},
            (4, 3, 4),
            ValueError,
            "eval split has 3 examples, fewer than the 4 input pipelines",
        ),
        (
            {"batch_size": 16},
            (4, 0, 4),
            ValueError,
            r"shard of this input pipeline has 2 examples, fewer than batch_size=4",
        ),
        ({}, "context", TypeError, "must be a tf.distribute.InputContext .* got str"),
    ],
)
def test_sharding_errors(overrides, context, error, message):
    config = pipelines.default_data_config()
    config.source, config.augment, config.batch_size, config.eval_batch_size = (
        "arrays",
        "none",
        4,
        4,
    )
    config.train_arrays = {"inputs": np.zeros([8, 2]), "label": np.arange(8) % 2}
    config.eval_arrays = {"inputs": np.zeros([8, 2]), "label": np.arange(8) % 2}
    for key, value in overrides.items():
        config[key] = value
    input_context = _context(*context) if isinstance(context, tuple) else context
    with pytest.raises(error, match=message):
        pipelines.make_datasets(config, seed=0, input_context=input_context)
