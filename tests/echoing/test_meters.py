"""Tests for echoing.meters: host-side counts of fresh and emitted examples."""

import warnings

import pytest
import tensorflow as tf

from echoing import echo, meters


@pytest.mark.parametrize("factor", [1, 2, 3, 1.5])
def test_fresh_and_emitted_counts_match_what_flowed(factor):
    counts = meters.EchoMeters()
    dataset = (
        tf.data.Dataset.range(40)
        .apply(counts.fresh.count())
        .apply(echo(factor, seed=0))
        .apply(counts.emitted.count())
    )
    delivered = len(list(dataset))
    result = counts.result()
    assert result["fresh_examples"] == 40
    assert result["emitted_examples"] == delivered
    assert result["echo_ratio"] == pytest.approx(delivered / 40)


@pytest.mark.parametrize(
    "make_batches,expected_rows",
    [
        (lambda: tf.data.Dataset.range(10).batch(4), 10),
        (lambda: tf.data.Dataset.range(10).batch(4).apply(echo(2)), 20),
        (lambda: tf.data.Dataset.range(1, 6).map(tf.range).ragged_batch(2), 5),
        (lambda: tf.data.Dataset.from_tensor_slices({"x": tf.zeros([6, 3])}).batch(4), 6),
    ],
    ids=["dense", "batch_echo", "ragged", "dict"],
)
def test_rows_counts_the_batch_axis(make_batches, expected_rows):
    counter = meters.ElementCounter("rows")
    dataset = make_batches().apply(counter.count(rows=True))
    _ = list(dataset)
    assert counter.value() == expected_rows
    assert dataset.element_spec == make_batches().element_spec


@pytest.mark.parametrize(
    ("make_elements", "component"),
    [
        (lambda: tf.data.Dataset.range(10), r"\(\)"),
        (lambda: tf.data.Dataset.from_tensor_slices((tf.zeros([6, 3]), tf.zeros([6]))), r"\(\)"),
        (
            lambda: tf.data.Dataset.from_tensor_slices({"x": tf.zeros([6, 3]), "id": tf.range(6)}),
            "",
        ),
    ],
    ids=["scalars", "features_and_label", "dict_with_id"],
)
def test_rows_on_unbatched_elements_is_refused_with_the_fix(make_elements, component):
    counter = meters.ElementCounter("rows")
    with pytest.raises(
        ValueError,
        match=r"count\(rows=True\) counts the rows of batches.*"
        r"not batched.*after batch\(\).*count\(\)",
    ):
        make_elements().apply(counter.count(rows=True))
    assert counter.value() == 0


def test_counts_accumulate_across_epochs_and_reset():
    counter = meters.ElementCounter("epochs")
    dataset = tf.data.Dataset.range(5).apply(counter.count())
    for _ in range(3):
        _ = list(dataset)
    assert counter.value() == 15
    counter.reset()
    assert counter.value() == 0


def test_result_before_any_input_has_zero_ratio():
    assert meters.EchoMeters().result() == {
        "fresh_examples": 0,
        "emitted_examples": 0,
        "echo_ratio": 0.0,
    }


def test_counters_are_saved_and_restored_with_a_checkpoint(tmp_path):
    counts = meters.EchoMeters()
    _ = list(tf.data.Dataset.range(7).apply(counts.fresh.count()))
    path = tf.train.Checkpoint(meters=counts).save(str(tmp_path / "ckpt"))
    restored = meters.EchoMeters()
    tf.train.Checkpoint(meters=restored).restore(path).assert_consumed()
    assert restored.fresh.value() == 7


def test_a_counted_dataset_checkpoints_its_iterator_with_default_options(tmp_path):
    counts = meters.EchoMeters()
    iterator = iter(tf.data.Dataset.range(7).apply(counts.fresh.count()))
    next(iterator)  # the counter is saved with the meters, not by tf.data's iterator state
    path = tf.train.Checkpoint(meters=counts, iterator=iterator).save(str(tmp_path / "ckpt"))
    assert [int(next(iterator)) for _ in range(3)] == [1, 2, 3]
    tf.train.Checkpoint(meters=counts, iterator=iterator).restore(path)
    assert int(next(iterator)) == 1  # back where it was saved


def test_count_after_batch_without_rows_warns_that_a_batch_counts_as_one():
    counter = meters.ElementCounter("emitted")
    batches = tf.data.Dataset.range(64).batch(16)
    with pytest.warns(UserWarning, match=r"each batch counts as 1 example.*count\(rows=True\)"):
        counted = batches.apply(counter.count())
    assert sum(1 for _ in counted) == 4 and counter.value() == 4  # what it said it counts
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rows=True, or unbatched elements: nothing to say
        tf.data.Dataset.range(4).apply(counter.count())
        batches.apply(counter.count(rows=True))
