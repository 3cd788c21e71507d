"""In-batch selection: the top-k rows by score, static shapes, NaN scores, bad arguments."""

import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing.batch_selection import count_nonfinite
from echoing.techniques import InBatchSelection


def _batch(size=6):
    return {
        "inputs": tf.reshape(tf.range(2.0 * size), [size, 2]),
        "label": tf.range(size, dtype=tf.int64) % 3,
        "id": tf.range(size, dtype=tf.int64),
    }


def test_the_highest_scores_are_kept_in_batch_order_with_every_key():
    scores = tf.constant([0.1, 2.0, 0.3, 5.0, 1.5, 0.2])
    selected = echoing.select_rows(_batch(), scores, k=3)
    assert selected["id"].numpy().tolist() == [1, 3, 4]
    np.testing.assert_array_equal(selected["inputs"].numpy(), [[2, 3], [6, 7], [8, 9]])
    assert selected["label"].numpy().tolist() == [1, 0, 1]
    assert echoing.select_rows(_batch(), scores, k=6)["id"].numpy().tolist() == list(range(6))


def test_non_finite_scores_rank_last_and_are_counted():
    scores = tf.constant([np.nan, 0.1, np.inf, 0.3, -np.inf, 0.2])
    assert echoing.select_rows(_batch(), scores, k=2)["id"].numpy().tolist() == [3, 5]
    assert int(count_nonfinite(scores)) == 3


def test_the_selection_has_a_static_shape_and_compiles_with_xla():
    @tf.function(jit_compile=True)
    def select(batch, scores):
        return echoing.select_rows(batch, scores, k=4)

    selected = select(_batch(8), tf.random.stateless_uniform([8], seed=[1, 2]))
    assert select.get_concrete_function(_batch(8), tf.zeros([8])).structured_outputs[
        "inputs"
    ].shape.as_list() == [4, 2]
    assert selected["id"].shape == (4,)


@pytest.mark.parametrize(
    ("k", "scores", "match"),
    [
        (0, tf.zeros([6]), r"k=0.*int >= 1"),
        (2.5, tf.zeros([6]), r"k=2.5"),
        (7, tf.zeros([6]), r"k=7.*more rows than the batch has \(6\)"),
        (2, tf.zeros([5]), r"one per row, shape \[6\]"),
        (2, tf.zeros([6, 1]), r"one per row"),
    ],
)
def test_bad_arguments_are_refused_naming_the_value(k, scores, match):
    with pytest.raises(ValueError, match=match):
        echoing.select_rows(_batch(), scores, k=k)


def test_a_batch_of_unknown_size_is_checked_when_it_runs():
    select = tf.function(
        lambda batch, scores: echoing.select_rows(batch, scores, k=5),
        input_signature=[
            {
                "inputs": tf.TensorSpec([None, 2]),
                "label": tf.TensorSpec([None], tf.int64),
                "id": tf.TensorSpec([None], tf.int64),
            },
            tf.TensorSpec([None]),
        ],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="k=5 > rows in batch"):
        select(_batch(3), tf.zeros([3]))


def test_the_technique_trains_on_the_ratio_of_rows_with_the_highest_loss():
    technique = InBatchSelection(ratio=0.5)
    losses = tf.constant([0.5, 0.1, 0.9, 0.3, 0.8, 0.2])
    selected = technique.select(_batch(6), lambda batch: losses)
    assert selected["id"].numpy().tolist() == [0, 2, 4]
    assert technique.rows(128) == 64 and technique.rows(3) == 2
    with pytest.raises(ValueError, match=r"ratio=0.*\(0, 1\]"):
        InBatchSelection(ratio=0)
