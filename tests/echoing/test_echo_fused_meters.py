"""``echo(..., meters=...)`` counts the stage's inputs and outputs inside the stage."""

import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing import meters


def _drain(dataset: tf.data.Dataset) -> list:
    return [tf.nest.map_structure(np.asarray, element) for element in dataset]


@pytest.mark.parametrize("implementation", ["vectorized", "per_element"])
@pytest.mark.parametrize("factor", [1, 3, 1.5, 0.5])
def test_counts_equal_the_inputs_and_outputs(implementation, factor):
    counts = meters.EchoMeters()
    # 1,000 inputs: several groups, and a short last one on the vectorised path.
    source = tf.data.Dataset.range(1000).map(lambda i: tf.fill([4], i))
    echoed = source.apply(
        echoing.echo(factor, seed=0, implementation=implementation, meters=counts)
    )
    outputs = _drain(echoed)
    assert counts.result()["fresh_examples"] == 1000
    assert counts.result()["emitted_examples"] == len(outputs)
    # The same stream as without meters.
    plain = source.apply(echoing.echo(factor, seed=0, implementation=implementation))
    np.testing.assert_array_equal(np.stack(outputs), np.stack(_drain(plain)))


def test_a_live_factor_is_counted_as_it_moves():
    counts, factor = meters.EchoMeters(), tf.Variable(2.0)
    echoed = tf.data.Dataset.range(600).apply(echoing.echo(factor, seed=0, meters=counts))
    outputs = len(_drain(echoed))
    assert counts.fresh.value() == 600 and counts.emitted.value() == outputs == 1200


@pytest.mark.parametrize("implementation", ["vectorized", "per_element"])
@pytest.mark.parametrize("factor", [2, 1.5])
def test_batch_echoing_counts_the_rows_of_its_batches(implementation, factor):
    # It counted each batch as one example: 10 fresh examples out of 100 (issue 33).
    counts = meters.EchoMeters()
    batches = tf.data.Dataset.range(100).batch(10, drop_remainder=True)
    echoed = batches.apply(
        echoing.echo(factor, seed=0, implementation=implementation, meters=counts)
    )
    outputs = _drain(echoed)
    assert counts.result()["fresh_examples"] == 100
    assert counts.result()["emitted_examples"] == sum(len(batch) for batch in outputs)
    if factor == 2:
        assert len(outputs) == 20 and counts.result()["echo_ratio"] == 2.0


def test_ragged_elements_count_one_example_each():
    counts = meters.EchoMeters()
    ragged = tf.data.Dataset.range(1, 6).map(lambda n: tf.range(n))  # variable length
    assert len(_drain(ragged.apply(echoing.echo(3, meters=counts)))) == 15
    assert counts.result()["fresh_examples"] == 5 and counts.result()["emitted_examples"] == 15


def test_meters_of_the_wrong_type_are_refused():
    with pytest.raises(TypeError, match=r"meters must be an echoing\.meters\.EchoMeters or None"):
        echoing.echo(2, meters=meters.ElementCounter("fresh"))


def test_batches_built_where_the_check_cannot_see_count_one_each_with_a_warning():
    # Batches made inside interleave counted 10 fresh examples for 100 rows, with no word
    # (issue 33); whether such elements are batches cannot be told from their spec alone.
    counts = meters.EchoMeters()
    batches = tf.data.Dataset.range(2).interleave(
        lambda i: tf.data.Dataset.range(i * 50, i * 50 + 50).batch(10)
    )
    with pytest.warns(UserWarning, match=r"these elements look like batches") as warned:
        echoed = batches.apply(echoing.echo(2, meters=counts))
    assert warned[0].filename == __file__  # said at the user's line
    assert sum(len(batch) for batch in _drain(echoed)) == 200
    assert counts.result()["fresh_examples"] == 10
