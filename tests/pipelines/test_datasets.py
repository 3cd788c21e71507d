"""make_datasets: the contract the trainers rely on, echo insertion points and meters."""

import numpy as np
import pytest
import tensorflow as tf

import pipelines
from echoing import meters


def _take(dataset, count):
    return [tf.nest.map_structure(lambda t: t.numpy(), b) for b in dataset.take(count)]


@pytest.mark.parametrize("batch_size", [8])
def test_mnist1d_contract(tiny_config, tiny_sizes, batch_size):
    num_train, num_eval = tiny_sizes
    config = tiny_config(batch_size=batch_size)
    datasets = pipelines.make_datasets(config, seed=0)
    assert datasets.num_train_examples == num_train
    assert datasets.num_classes == 10
    assert datasets.input_shape == (40, 1)
    assert datasets.train.cardinality() == tf.data.INFINITE_CARDINALITY
    spec = datasets.train.element_spec
    assert spec["inputs"] == tf.TensorSpec([batch_size, 40, 1], tf.float32)
    assert spec["label"] == tf.TensorSpec([batch_size], tf.int64)
    assert spec["id"] == tf.TensorSpec([batch_size], tf.int64)
    # Enough batches for more than one epoch: ids cover the split and labels are 10 classes.
    batches = _take(datasets.train, 2 * num_train // batch_size)
    ids = np.concatenate([b["id"] for b in batches])
    assert set(ids) == set(range(num_train))
    labels = np.concatenate([b["label"] for b in batches])
    assert set(labels) == set(range(10))

    eval_batches = _take(datasets.eval, -1)
    eval_ids = np.concatenate([b["id"] for b in eval_batches])
    assert sorted(eval_ids) == list(range(num_eval))  # one pass, each example once
    assert [len(b["id"]) for b in eval_batches] == [16, 16, 16, 2]  # drop_remainder=False


def test_mnist1d_second_call_reuses_stored_copy(tiny_config, monkeypatch):
    from pipelines.sources import mnist1d

    def fail(*args, **kwargs):
        raise AssertionError("MNIST-1D was generated again instead of read from data_dir")

    monkeypatch.setattr(mnist1d, "generate", fail)
    first = pipelines.make_datasets(tiny_config(), seed=0)
    second = pipelines.make_datasets(tiny_config(), seed=0)
    np.testing.assert_array_equal(
        _take(first.eval, 1)[0]["inputs"], _take(second.eval, 1)[0]["inputs"]
    )
    # A size that is not stored yet must generate (and so hits the patched generator).
    with pytest.raises(AssertionError, match="generated again"):
        pipelines.make_datasets(tiny_config(num_train=210), seed=0)


def test_same_seed_same_stream(tiny_config, echo_at):
    # Seeds shuffle, augmentation and (through stage_seed) the shuffle after echo.
    config = tiny_config()

    def stream(seed):
        echo = echo_at("before_augment", 2.0, buffer_size=16, seed=seed)
        return _take(pipelines.make_datasets(config, seed=seed, insertions=echo).train, 3)

    first, second, other = stream(0), stream(0), stream(1)
    tf.nest.map_structure(np.testing.assert_array_equal, first, second)
    assert not np.array_equal(first[0]["id"], other[0]["id"])


@pytest.mark.parametrize(
    ("echo_insert", "echoes_identical"),
    [
        ("after_read", False),
        ("before_augment", False),  # same raw example, augmented twice: different inputs
        ("after_augment", True),  # the augmented example itself repeats
    ],
)
def test_example_echo_insertion_point(tiny_config, echo_at, echo_insert, echoes_identical):
    config = tiny_config(augment="mnist1d")
    insertions = echo_at(echo_insert, 2.0)
    (batch,) = _take(pipelines.make_datasets(config, seed=0, insertions=insertions).train, 1)
    # No buffer_size: the two echoes of an example are adjacent.
    first, second = batch["id"][0::2], batch["id"][1::2]
    np.testing.assert_array_equal(first, second)
    assert len(set(first)) == len(first)  # different examples otherwise
    same_inputs = [
        np.array_equal(a, b)
        for a, b in zip(batch["inputs"][0::2], batch["inputs"][1::2], strict=True)
    ]
    assert all(same_inputs) if echoes_identical else not any(same_inputs)


@pytest.mark.parametrize("echo_insert", ["after_batch", "after_prefetch"])
def test_batch_echo_repeats_whole_batches(tiny_config, echo_at, echo_insert):
    datasets = pipelines.make_datasets(tiny_config(), seed=0, insertions=echo_at(echo_insert, 2.0))
    batches = _take(datasets.train, 4)
    tf.nest.map_structure(np.testing.assert_array_equal, batches[0], batches[1])
    tf.nest.map_structure(np.testing.assert_array_equal, batches[2], batches[3])
    assert not np.array_equal(batches[1]["id"], batches[2]["id"])


def test_echo_buffer_size_shuffles_echoes_apart(tiny_config, echo_at):
    insertions = echo_at("after_augment", 2.0, buffer_size=64)
    batches = _take(pipelines.make_datasets(tiny_config(), seed=0, insertions=insertions).train, 20)
    ids = np.concatenate([b["id"] for b in batches])
    adjacent = np.mean(ids[:-1] == ids[1:])
    # Without the shuffle half of all neighbours are echo pairs; with a 64-element buffer
    # P(neighbours are echoes) is about 2/64. Tolerance: < 0.15 over 160 pairs.
    assert adjacent < 0.15
    # Every example still comes out twice in expectation: ids repeat.
    assert len(ids) - len(set(ids)) > 0


EMITTED_BATCHES, METER_BATCH = 150, 32
# Upper bound on examples read ahead of what is emitted: echo's vectorised path groups up to
# 256 elements (or ~1500 examples' worth of batches), plus shuffle/map/prefetch buffers.
READ_AHEAD = 2_000


@pytest.mark.parametrize(
    ("echo", "echo_insert"),
    [
        (2.0, "before_augment"),
        (3.0, "after_batch"),
        (2.0, "after_prefetch"),
    ],
)
def test_meters_count_fresh_and_emitted(tiny_config, echo_at, echo, echo_insert):
    counts = meters.EchoMeters()
    config = tiny_config(batch_size=METER_BATCH)
    insertions = echo_at(echo_insert, echo)
    datasets = pipelines.make_datasets(config, seed=0, meters=counts, insertions=insertions)
    for _ in datasets.train.take(EMITTED_BATCHES):
        pass
    emitted = EMITTED_BATCHES * METER_BATCH
    assert counts.emitted.value() == emitted  # counted at the very end: exact
    fresh = counts.fresh.value()
    # Every emitted example was read; read-ahead is bounded (counting fresh after echo would
    # give fresh * echo >= echo * emitted, far above the bound for echo >= 2).
    assert emitted <= fresh * echo <= emitted + echo * READ_AHEAD
    assert counts.result()["echo_ratio"] == pytest.approx(emitted / fresh)
    # Eval does not touch the meters.
    for _ in datasets.eval:
        pass
    assert counts.emitted.value() == emitted


def test_fractional_echo_ratio(tiny_config, echo_at):
    counts = meters.EchoMeters()
    config = tiny_config(batch_size=METER_BATCH)
    insertions = echo_at("after_augment", 1.5)
    datasets = pipelines.make_datasets(config, seed=0, meters=counts, insertions=insertions)
    for _ in datasets.train.take(EMITTED_BATCHES):
        pass
    emitted, fresh = counts.emitted.value(), counts.fresh.value()
    assert emitted <= fresh * 1.5 + 4 * np.sqrt(fresh)  # Binomial(fresh, 0.5) extra echoes, 4σ
    assert fresh <= emitted / 1.5 + READ_AHEAD + 4 * np.sqrt(fresh)


@pytest.mark.parametrize("with_meters", [True])
def test_train_iterator_checkpoint_resumes_the_stream(tiny_config, echo_at, tmp_path, with_meters):
    counts = meters.EchoMeters() if with_meters else None
    insertions = echo_at("before_augment", 1.5, buffer_size=16)
    datasets = pipelines.make_datasets(tiny_config(), seed=0, meters=counts, insertions=insertions)
    iterator = iter(datasets.train)
    next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.save(str(tmp_path / "input"))
    expected = [next(iterator)["id"].numpy() for _ in range(3)]
    checkpoint.restore(path)
    np.testing.assert_array_equal([next(iterator)["id"].numpy() for _ in range(3)], expected)


def test_autotune_off_reaches_both_pipelines_and_keeps_the_stream(tiny_config):
    tuned = pipelines.make_datasets(tiny_config(), seed=0)
    untuned = pipelines.make_datasets(tiny_config(autotune=False), seed=0)
    assert tuned.train.options().autotune.enabled is None  # unset: tf.data's default, on
    assert untuned.train.options().autotune.enabled is False
    assert untuned.eval.options().autotune.enabled is False
    for ids, expected in zip(untuned.train.take(3), tuned.train.take(3), strict=True):
        np.testing.assert_array_equal(ids["id"], expected["id"])


def _keep_even_ids(dataset):
    return dataset.filter(lambda element: element["id"] % 2 == 0)


@pytest.mark.parametrize("point", ["after_read", "after_augment"])
def test_extra_insertion_filters_train_only(tiny_config, point):
    counts = meters.EchoMeters()
    datasets = pipelines.make_datasets(
        tiny_config(), seed=0, meters=counts, insertions=[(point, "keep_even", _keep_even_ids)]
    )
    ids = np.concatenate([batch["id"] for batch in _take(datasets.train, 10)])
    assert np.all(ids % 2 == 0) and len(set(ids)) > 20
    assert counts.emitted.value() == 80  # counted after the filter
    eval_ids = np.concatenate([batch["id"] for batch in _take(datasets.eval, -1)])
    assert np.any(eval_ids % 2 == 1)


@pytest.mark.parametrize(
    ("insertions", "error", "message"),
    [
        ([("after_filter", "x", _keep_even_ids)], ValueError, "unknown insertion point"),
        ([("after_read", _keep_even_ids)], TypeError, r"\(point, name, transformation\)"),
        ([("after_read", "x", 3)], TypeError, "Dataset -> Dataset function"),
    ],
)
def test_bad_extra_insertions(tiny_config, insertions, error, message):
    with pytest.raises(error, match=message):
        pipelines.make_datasets(tiny_config(), seed=0, insertions=insertions)
