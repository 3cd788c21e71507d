"""Pruning at the earliest point the source allows: on ids before reading, else on raw records."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import pipelines
from echoing import meters
from echoing.techniques import PruningTechnique
from pipelines import datasets as datasets_module
from pipelines import sources

N = 2048


def _arrays_config(batch_size=32):
    config = pipelines.default_data_config()
    rng = np.random.default_rng(0)
    config.source = "arrays"
    config.train_arrays = {
        "inputs": rng.normal(size=(N, 4)).astype(np.float32),
        "label": np.arange(N) % 3,
    }
    config.eval_arrays = {"inputs": np.zeros((8, 4), np.float32), "label": np.arange(8) % 3}
    config.augment = "none"
    config.batch_size = batch_size
    return config


def _technique(seed=0):
    """A pruning technique whose table holds every id: half well below the mean."""
    technique = PruningTechnique(N, num_epochs=10, prune_ratio=0.9, seed=seed)
    technique.table.update(np.arange(N), np.where(np.arange(N) % 2, 3.0, 0.1).astype(np.float32))
    return technique


@pytest.fixture
def counting_decodes(monkeypatch):
    """Loads sources whose train decode marks each id it decodes (and can drop ``rows``)."""
    decoded = tf.Variable(tf.zeros([N], tf.int64))
    stream = {"value": False}
    load = sources.load

    def counting_load(config):
        source = load(config)
        decode = source.train.decode

        def counted(element):
            marked = decoded.scatter_nd_add(element["id"][None, None], tf.ones([1], tf.int64))
            with tf.control_dependencies([marked]):
                return tf.nest.map_structure(tf.identity, decode(element))

        rows = None if stream["value"] else source.train.rows
        train = dataclasses.replace(source.train, decode=counted, rows=rows)
        return dataclasses.replace(source, train=train)

    monkeypatch.setattr(datasets_module.sources, "load", counting_load)
    return decoded, stream


@pytest.mark.parametrize("streaming", [False, True])
def test_a_pruned_example_is_never_decoded(counting_decodes, streaming):
    decoded, stream = counting_decodes
    stream["value"] = streaming  # True: a source without rows, pruned on its raw records
    technique, twin = _technique(), _technique()
    counts = meters.EchoMeters()
    datasets = pipelines.make_datasets(
        _arrays_config(), seed=0, meters=counts, insertions=technique.stages()
    )
    batches = list(datasets.train.take(8))  # 256 of epoch 0's ~1,126 kept examples
    kept = {int(element["id"]) for element in twin.stage.epoch_ids()}
    touched = set(np.flatnonzero(decoded.numpy()).tolist())
    assert touched <= kept and decoded.numpy().max() == 1
    assert len(touched) >= 256
    for batch in batches:  # kept easy examples carry the 1 / (1 - r) weight
        easy = batch["id"].numpy() % 2 == 0
        np.testing.assert_allclose(batch["sample_weight"].numpy(), np.where(easy, 10.0, 1.0))
    # By id only the kept rows are read at all; a stream reads every record, pruned or not.
    read, decided = counts.fresh.value(), technique.stage.stats()["prune_seen"]
    if streaming:
        assert read >= decided > len(touched)
    else:
        assert read == len(touched) and decided == N


def test_by_id_shards_read_disjoint_ids_and_cover_the_kept():
    technique = _technique()
    technique.table.update(np.arange(N), np.ones(N, np.float32))  # all at the mean: all kept
    ids = []
    for index in range(2):
        context = tf.distribute.InputContext(2, index, 2)
        train = pipelines.make_datasets(
            _arrays_config(), seed=0, insertions=technique.stages(), input_context=context
        ).train
        ids.append({int(i) for b in train.take(N // 2 // 16) for i in b["id"].numpy()})
    assert ids[0].isdisjoint(ids[1])
    assert ids[0] | ids[1] == set(range(N))


def test_one_sampler_per_pipeline():
    insertions = _technique().stages() + _technique(seed=1).stages()
    with pytest.raises(ValueError, match=r"all choose the ids to read .* use one of them"):
        pipelines.make_datasets(_arrays_config(), seed=0, insertions=insertions)


def test_an_insertion_before_reading_must_choose_ids():
    with pytest.raises(TypeError, match=r"must choose ids: an object with epoch_ids"):
        pipelines.make_datasets(
            _arrays_config(), seed=0, insertions=[("before_read", "x", lambda ds: ds)]
        )


def test_a_small_data_set_is_read_an_epoch_at_a_time_not_a_chunk_of_several():
    # 42 ids in chunks of 256 decided six epochs at once, before training reported a loss, so
    # a small image folder was never pruned (issue 33). The first batch now opens the epoch it
    # reads and, through the pipeline's read-ahead (thread timing), at most two more.
    config = _arrays_config(batch_size=8)
    small = 42
    config.train_arrays = {key: value[:small] for key, value in config.train_arrays.items()}
    config.prefetch, config.num_parallel_calls, config.autotune = 1, 1, False
    technique = PruningTechnique(small, num_epochs=10, seed=0)
    datasets = pipelines.make_datasets(
        config, seed=0, insertions=[("before_read", "prune", technique.stage)]
    )
    next(iter(datasets.train))
    assert technique.stage.stats()["prune_epoch"] <= 3, technique.stage.stats()
