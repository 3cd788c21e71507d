"""priority_sample from a TFDS data source (ArrayRecord, random access) equals the in-memory path.

The source is MNIST-1D prepared by pipelines.sources.mnist1d with file_format="array_record" into
a temporary directory (generated locally, no download).
"""

import numpy as np
import pytest
import tensorflow as tf

from echoing import (
    PriorityTable,
    ShardedPriorityTable,
    priority_sample,
)
from echoing._src.core.sources import DataSourceSource
from pipelines.sources import mnist1d

NUM_TRAIN, NUM_EVAL = 60, 20
KEYS = ("inputs", "label")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("mnist1d_array_record"))
    mnist1d.data_source(NUM_TRAIN, NUM_EVAL, directory)  # prepares once
    return directory


@pytest.fixture(scope="module")
def train_source(data_dir):
    return mnist1d.data_source(NUM_TRAIN, NUM_EVAL, data_dir)


def _in_memory(data_source):
    """Row i = record i of the data source: the same examples under the same ids."""
    records = data_source.__getitems__(list(range(len(data_source))))
    return {key: np.stack([record[key] for record in records]) for key in KEYS}


def _measured_table(num_examples, seed):
    table = PriorityTable(num_examples)
    rng = np.random.default_rng(seed)
    table.update(tf.range(num_examples), rng.exponential(size=num_examples).astype("float32"), 0)
    # A second measurement of some ids gives them slopes, so estimates change with the step.
    some = rng.choice(num_examples, num_examples // 3, replace=False)
    table.update(some, rng.exponential(size=some.size).astype("float32"), 2)
    return table


@pytest.mark.parametrize(
    "mode,top_ratio,renew_ratio,seed",
    [
        ("top_k", 0.5, 0.5, 0),
        ("top_k", 0.25, 0.25, 1),  # half the batch uniform (seeded)
        ("proportional", 0.5, 0.25, 2),
    ],
)
def test_data_source_batches_equal_in_memory_batches(
    train_source, mode, top_ratio, renew_ratio, seed
):
    table = _measured_table(NUM_TRAIN, seed)
    arguments = dict(
        batch_size=16, top_ratio=top_ratio, renew_ratio=renew_ratio, seed=seed, mode=mode
    )
    from_disk = priority_sample(table, train_source, keys=KEYS, **arguments)
    in_memory = priority_sample(table, _in_memory(train_source), **arguments)
    assert from_disk.element_spec == in_memory.element_spec
    assert from_disk.element_spec["inputs"] == tf.TensorSpec([16, 40], tf.float32)
    assert from_disk.element_spec["label"] == tf.TensorSpec([16], tf.int64)
    for step, (disk, memory) in enumerate(zip(from_disk.take(5), in_memory.take(5), strict=True)):
        assert sorted(disk) == ["id", "inputs", "label", "sample_weight"]
        for key in disk:
            np.testing.assert_array_equal(disk[key].numpy(), memory[key].numpy(), err_msg=key)
        if step == 2:
            # Both read the same live table: a write between steps reaches both.
            table.update(tf.range(NUM_TRAIN), tf.range(NUM_TRAIN, dtype=tf.float32) + 1.0, 3)


def test_ids_are_record_indices_and_map_to_the_stored_example_ids(train_source):
    table = PriorityTable(NUM_TRAIN)
    batch = next(iter(priority_sample(table, train_source, keys=KEYS, batch_size=8,
                                      top_ratio=0.5, renew_ratio=0.5, seed=0)))  # fmt: skip
    for index, record_index in enumerate(batch["id"].numpy()):
        record = train_source[int(record_index)]
        np.testing.assert_array_equal(batch["inputs"][index].numpy(), record["inputs"])
        assert batch["label"][index].numpy() == record["label"]
    # Record i holds the example generated as number record["id"]: TFDS shuffled them on write,
    # so the map is a permutation, and it is fixed by the stored files.
    stored = np.array([train_source[i]["id"] for i in range(NUM_TRAIN)])
    assert sorted(stored.tolist()) == list(range(NUM_TRAIN))
    assert not np.array_equal(stored, np.arange(NUM_TRAIN)), "TFDS shuffles records on write"
    inputs, labels = mnist1d.generate(NUM_TRAIN + NUM_EVAL, mnist1d.GENERATION_SEED)
    for record_index in (0, 7, NUM_TRAIN - 1):
        record = train_source[record_index]
        np.testing.assert_allclose(record["inputs"], inputs[record["id"]], rtol=1e-6)
        assert record["label"] == labels[record["id"]]


def test_data_source_iterator_checkpoint_resumes(train_source, tmp_path):
    table = _measured_table(NUM_TRAIN, 0)

    def make():
        return priority_sample(table, train_source, keys=KEYS, batch_size=8, top_ratio=0.5,
                               renew_ratio=0.5, seed=0)  # fmt: skip

    iterator = iter(make())
    next(iterator)
    next(iterator)
    path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "iterator"))
    expected = next(iterator)
    restored = iter(make())
    tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
    resumed = next(restored)
    for key in expected:
        np.testing.assert_array_equal(resumed[key].numpy(), expected[key].numpy())


@pytest.mark.parametrize("parse_in_graph", [True, False], ids=["graph_parse", "python_decode"])
@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf.function"])
def test_both_decode_paths_gather_the_records(train_source, parse_in_graph, in_function):
    source = DataSourceSource(train_source, KEYS, parse_in_graph=parse_in_graph)
    assert source.parses_in_graph == parse_in_graph  # ArrayRecord, fixed shapes: parseable
    gather = tf.function(source.gather) if in_function else source.gather
    ids = [5, 0, 59, 5, 17]
    batch = gather(tf.constant(ids, tf.int64))
    assert source.element_spec == {
        "inputs": tf.TensorSpec([40], tf.float32),
        "label": tf.TensorSpec([], tf.int64),
    }
    assert batch["inputs"].shape == (5, 40) and batch["inputs"].dtype == tf.float32
    assert batch["label"].shape == (5,) and batch["label"].dtype == tf.int64
    expected = _in_memory(train_source)
    for key in KEYS:
        np.testing.assert_array_equal(batch[key].numpy(), expected[key][ids], err_msg=key)


@pytest.mark.parametrize(
    "make_source,keys,error,message",
    [
        (lambda ds: [np.zeros(60)], None, TypeError, "source must be a mapping .* got list"),
        (lambda ds: "mnist1d", None, TypeError, "TFDS data source .* got str"),
        (
            lambda ds: tf.data.Dataset.range(60),
            None,
            TypeError,
            "got _RangeDataset.*file_format='array_record'",
        ),
        (lambda ds: ds, None, ValueError, "source key 'id' is reserved.*keys="),
        (lambda ds: ds, ("inputs", "pixels"), ValueError, r"keys \['pixels'\] are not in"),
        (lambda ds: ds, "inputs", TypeError, "keys must be a sequence of names.*'inputs'"),
        (lambda ds: ds, (), ValueError, "keys is empty"),
    ],
)
def test_source_errors(train_source, make_source, keys, error, message):
    with pytest.raises(error, match=message):
        priority_sample(PriorityTable(NUM_TRAIN), make_source(train_source), keys=keys,
                        batch_size=8, top_ratio=0.5, renew_ratio=0.5)  # fmt: skip


def test_table_size_must_match_the_data_source(data_dir):
    evaluation = mnist1d.data_source(NUM_TRAIN, NUM_EVAL, data_dir, split="test")
    with pytest.raises(ValueError, match=r"source has 20 examples .* table has N=60"):
        priority_sample(PriorityTable(NUM_TRAIN), evaluation, keys=KEYS, batch_size=8,
                        top_ratio=0.5, renew_ratio=0.5)  # fmt: skip


@pytest.mark.parametrize("pipeline", [0, 1])
def test_per_pipeline_batches_from_the_data_source_equal_in_memory(train_source, pipeline):
    table = ShardedPriorityTable(NUM_TRAIN, num_shards=2)
    table.update(tf.range(NUM_TRAIN), np.random.default_rng(1).permutation(NUM_TRAIN) + 1.0, 0)
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2
    )
    arguments = dict(batch_size=16, top_ratio=0.5, renew_ratio=0.5, seed=0, input_context=context)
    from_disk = priority_sample(table, train_source, keys=KEYS, **arguments)
    in_memory = priority_sample(table, _in_memory(train_source), **arguments)
    assert from_disk.element_spec == in_memory.element_spec
    for disk, memory in zip(from_disk.take(3), in_memory.take(3), strict=True):
        assert np.all(disk["id"].numpy() % 2 == pipeline)
        for key in disk:
            np.testing.assert_array_equal(disk[key].numpy(), memory[key].numpy(), err_msg=key)
