"""PriorityTable: Algorithm 2 arithmetic vs hand-computed values, rejection, errors, checkpoints."""

import math

import numpy as np
import pytest
import tensorflow as tf

from echoing import PriorityTable

LN2 = math.log(2.0)
# Slope after (p=2 @ step 0, p=1 @ step 2) with λ=0.8: 0.8 * (ln 1 - ln 2) / 2.
SLOPE_2_1 = 0.8 * (-LN2) / 2
# Then p=0.5 @ step 3: 0.8 * (ln 0.5 - ln 1) / 1 + 0.2 * SLOPE_2_1.
SLOPE_2_1_HALF = 0.8 * (-LN2) + 0.2 * SLOPE_2_1


def _run_updates(table, updates, in_function):
    update = tf.function(table.update) if in_function else table.update
    rejected = []
    for ids, priorities, step in updates:
        rejected.append(
            int(
                update(
                    tf.constant(ids, tf.int64),
                    tf.constant(priorities, tf.float32),
                    tf.constant(step, tf.int64),
                )
            )
        )
    return rejected


# (name, decay, updates [(ids, priorities, step)], id, expected ln p, slope, step, estimate@step)
ARITHMETIC = [
    ("one measurement", 0.8, [([0], [2.0], 3)], 0, LN2, 0.0, 3, (5, 2.0)),
    (
        "two measurements",
        0.8,
        [([0], [2.0], 0), ([0], [1.0], 2)],
        0,
        0.0,
        SLOPE_2_1,
        2,
        (4, math.exp(2 * SLOPE_2_1)),
    ),
    (
        "three measurements",
        0.8,
        [([0], [2.0], 0), ([0], [1.0], 2), ([0], [0.5], 3)],
        0,
        -LN2,
        SLOPE_2_1_HALF,
        3,
        (5, math.exp(-LN2 + 2 * SLOPE_2_1_HALF)),
    ),
    (
        "decay 1 keeps newest slope",
        1.0,
        [([1], [1.0], 0), ([1], [4.0], 4)],
        1,
        2 * LN2,
        2 * LN2 / 4,
        4,
        (6, math.exp(2 * LN2 + 2 * (LN2 / 2))),
    ),
    (
        "decay 0.5",
        0.5,
        [([1], [1.0], 0), ([1], [4.0], 2), ([1], [4.0], 4)],
        1,
        2 * LN2,
        0.25 * LN2,
        4,
        (8, math.exp(2 * LN2 + 4 * 0.25 * LN2)),
    ),
    (
        "estimate before the measurement step",
        0.8,
        [([0], [2.0], 0), ([0], [1.0], 2)],
        0,
        0.0,
        SLOPE_2_1,
        2,
        (1, math.exp(-SLOPE_2_1)),
    ),
    (
        "p <= 0 stores -inf, slope 0, estimate 0",
        0.8,
        [([2], [2.0], 0), ([2], [1.0], 1), ([2], [-3.0], 2)],
        2,
        -np.inf,
        0.0,
        2,
        (10, 0.0),
    ),
    ("p == 0 is p <= 0", 0.8, [([2], [0.0], 5)], 2, -np.inf, 0.0, 5, (6, 0.0)),
    (
        "positive after p <= 0 restarts the slope",
        0.8,
        [([2], [-1.0], 0), ([2], [3.0], 2)],
        2,
        math.log(3.0),
        0.0,
        2,
        (9, 3.0),
    ),
    (
        "same step replaces ln p, keeps slope",
        0.8,
        [([0], [2.0], 0), ([0], [1.0], 2), ([0], [4.0], 2)],
        0,
        2 * LN2,
        SLOPE_2_1,
        2,
        (3, math.exp(2 * LN2 + SLOPE_2_1)),
    ),
    ("ids are rows, not positions", 0.8, [([3, 1], [8.0, 2.0], 0)], 3, 3 * LN2, 0.0, 0, (1, 8.0)),
]


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize(
    "decay,updates,example,log_p,slope,step,estimate",
    [case[1:] for case in ARITHMETIC],
    ids=[case[0] for case in ARITHMETIC],
)
def test_learn_and_estimate_match_hand_computed(
    in_function, decay, updates, example, log_p, slope, step, estimate
):
    table = PriorityTable(4, decay=decay)
    _run_updates(table, updates, in_function)
    np.testing.assert_allclose(table.log_priority.numpy()[example], log_p, rtol=1e-6)
    np.testing.assert_allclose(table.slope.numpy()[example], slope, rtol=1e-6, atol=1e-7)
    assert table.measured_step.numpy()[example] == step
    at_step, expected = estimate
    np.testing.assert_allclose(table.estimate(at_step).numpy()[example], expected, rtol=1e-5)


def test_unmeasured_examples_estimate_inf_and_others_untouched():
    table = PriorityTable(5)
    table.update([1, 3], [2.0, 0.5], step=0)
    log_estimate = table.log_estimate(7).numpy()
    np.testing.assert_array_equal(np.isposinf(log_estimate), [True, False, True, False, True])
    np.testing.assert_allclose(log_estimate[[1, 3]], [LN2, -LN2], rtol=1e-6)
    np.testing.assert_array_equal(table.measured_step.numpy(), [-1, 0, -1, 0, -1])


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize(
    "priorities,expected_rejected",
    [
        ([np.nan, 1.0, 2.0], 1),
        ([np.inf, -np.inf, 2.0], 2),
        ([np.nan, np.nan, np.inf], 3),
        ([1.0, -1.0, 0.0], 0),
    ],
)
def test_nan_and_inf_are_rejected_and_counted(in_function, priorities, expected_rejected):
    table = PriorityTable(3)
    table.update([0, 1, 2], [4.0, 4.0, 4.0], step=0)
    rejected = _run_updates(
        table, [([0, 1, 2], priorities, 1), ([0, 1, 2], priorities, 2)], in_function
    )
    assert rejected == [expected_rejected, expected_rejected]
    assert int(table.num_rejected.numpy()) == 2 * expected_rejected
    for example, value in enumerate(priorities):
        if np.isfinite(value):
            assert table.measured_step.numpy()[example] == 2
        else:  # never entered: the step-0 measurement is intact
            assert table.measured_step.numpy()[example] == 0
            assert table.log_priority.numpy()[example] == pytest.approx(math.log(4.0))
    assert np.all(~np.isnan(table.log_estimate(3).numpy()))


@pytest.mark.parametrize("bad_id", [5, 17, -1])
def test_out_of_range_id_eager_names_id_and_n(bad_id):
    table = PriorityTable(5)
    with pytest.raises(ValueError, match=rf"id {bad_id} is out of range .*N=5"):
        table.update([0, bad_id], [1.0, 1.0], step=0)
    assert np.all(table.measured_step.numpy() == -1)


@pytest.mark.parametrize("bad_id", [5, 17, -1])
def test_out_of_range_id_in_function_names_id_and_n(bad_id):
    table = PriorityTable(5)
    update = tf.function(table.update)
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"\[{bad_id}\].*N=5"):
        update(tf.constant([0, bad_id], tf.int64), tf.constant([1.0, 1.0]), tf.constant(0))


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match=r"same length.*2 ids and 3 priorities"):
        PriorityTable(5).update([0, 1], [1.0, 2.0, 3.0], step=0)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"num_examples": 0}, ValueError, "num_examples must be >= 1, got 0"),
        ({"num_examples": -3}, ValueError, "num_examples must be >= 1, got -3"),
        ({"num_examples": 2.5}, TypeError, "num_examples must be an int.*2.5"),
        ({"num_examples": "10"}, TypeError, "num_examples must be an int.*'10'"),
        ({"num_examples": True}, TypeError, "num_examples must be an int"),
        ({"num_examples": 4, "decay": 0.0}, ValueError, r"decay must be in \(0, 1\].*0.0"),
        ({"num_examples": 4, "decay": 1.5}, ValueError, r"decay must be in \(0, 1\].*1.5"),
        ({"num_examples": 4, "decay": "0.8"}, TypeError, "decay must be a float"),
    ],
)
def test_constructor_errors(kwargs, error, message):
    num_examples = kwargs.pop("num_examples")
    with pytest.raises(error, match=message):
        PriorityTable(num_examples, **kwargs)


def test_checkpoint_round_trip(tmp_path):
    table = PriorityTable(6)
    table.update([0, 1, 2, 5], [2.0, -1.0, 0.5, 3.0], step=0)
    table.update([0, 5, 4], [1.0, np.nan, 7.0], step=3)
    path = tf.train.Checkpoint(priorities=table).write(str(tmp_path / "ckpt"))

    restored = PriorityTable(6)
    tf.train.Checkpoint(priorities=restored).read(path).assert_consumed()
    for name in ("log_priority", "slope", "measured_step"):
        np.testing.assert_array_equal(
            getattr(restored, name).numpy(), getattr(table, name).numpy(), err_msg=name
        )
    assert int(restored.num_rejected.numpy()) == 1
    np.testing.assert_array_equal(restored.estimate(5).numpy(), table.estimate(5).numpy())


@pytest.mark.parametrize(
    "updates,step,expected",
    [
        (
            [],
            0,
            {
                "measured_fraction": 0.0,
                "positive_fraction": 0.0,
                "mean_staleness": 0.0,
                "log_priority_spread": 0.0,
            },
        ),
        (
            [([0, 1], [1.0, math.e**2], 1), ([2], [-1.0], 3)],
            5,
            {
                "measured_fraction": 0.75,
                "positive_fraction": 0.5,
                "mean_staleness": (4 + 4 + 2) / 3,
                "log_priority_spread": 1.0,
            },
        ),
    ],
)
def test_statistics(updates, step, expected):
    table = PriorityTable(4)
    _run_updates(table, updates, in_function=False)
    statistics = {key: float(value) for key, value in table.statistics(step).items()}
    assert statistics == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("in_function", [False, True])
def test_float_ids_are_refused_not_truncated(in_function):
    table = PriorityTable(4)

    def update():
        return table.update(tf.constant([1.7, 2.2]), tf.constant([1.0, 2.0]), step=0)

    with pytest.raises(TypeError, match=r"PriorityTable.update: ids must be integers, got dtype"):
        tf.function(update)() if in_function else update()
