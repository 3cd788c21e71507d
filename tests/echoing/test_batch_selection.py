"""In-batch selection: the top-k rows by score, static shapes, NaN scores, bad arguments."""

import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing._src.priority.selection import count_nonfinite
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


@pytest.mark.parametrize("key", ["inputs", "label", "id"])
def test_every_entry_must_have_a_row_per_score(key):
    batch = {**_batch(), key: _batch(5)[key]}  # one entry of 5 rows among entries of 6
    with pytest.raises(ValueError, match=rf"batch\['{key}'\] has 5 rows.*6 scores"):
        echoing.select_rows(batch, tf.zeros([6]), k=2)


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


def _traced(select, batch_spec, scores_spec, **arguments):
    """``select`` traced in a tf.function of these input specs (as a train step traces it)."""
    function = tf.function(
        lambda batch, scores: select(batch, scores, **arguments),
        input_signature=[batch_spec, scores_spec],
    )
    return function.get_concrete_function()


@pytest.mark.parametrize("select", ["select_rows", "sample_rows"])
@pytest.mark.parametrize(
    ("batch_spec", "scores_spec", "match"),
    [
        (
            {"x": tf.TensorSpec([8, 2])},
            tf.TensorSpec([6]),
            r"scores must be one per row, shape \[8\]",
        ),
        ({"x": tf.TensorSpec([8, 2])}, tf.TensorSpec([8, 1]), r"scores must be one per row"),
        (
            {"x": tf.TensorSpec([8, 2]), "id": tf.TensorSpec([7], tf.int64)},
            tf.TensorSpec([8]),
            r"batch\['id'\] has 7 rows, but there are 8 scores",
        ),
        (
            {"x": tf.TensorSpec([8, 2]), "id": tf.TensorSpec([7], tf.int64)},
            tf.TensorSpec([None]),
            r"batch\['id'\] has 7 rows, but batch\['x'\] has 8 rows",
        ),
        ({"x": tf.TensorSpec([], tf.float32)}, tf.TensorSpec([8]), r"batch\['x'\] is a scalar"),
    ],
)
def test_static_shapes_are_checked_when_traced_naming_the_argument(
    select, batch_spec, scores_spec, match
):
    arguments = {"k": 2} if select == "select_rows" else {"k": 2, "seed": [0, 0]}
    with pytest.raises(ValueError, match=rf"{select}: {match}"):
        _traced(getattr(echoing, select), batch_spec, scores_spec, **arguments)


@pytest.mark.parametrize("seed", [[0, 1, 2], 3, tf.zeros([2], tf.float32)])
def test_sample_rows_refuses_a_seed_that_is_not_two_ints(seed):
    with pytest.raises((ValueError, TypeError), match=r"sample_rows\(seed=.*\): expected .*\[2\]"):
        echoing.sample_rows(_batch(), tf.ones([6]), k=2, seed=seed)


@pytest.mark.parametrize("select", ["select_rows", "sample_rows"])
@pytest.mark.parametrize(
    ("batch", "scores", "match"),
    [
        ({"x": tf.zeros([4, 2]), "id": tf.zeros([3])}, tf.zeros([4]), r"entry id .*\[3\] \[4\]"),
        ({"x": tf.zeros([4, 2])}, tf.zeros([3]), r"entry x .*\[4\] \[3\]"),
    ],
)
def test_shapes_known_only_when_run_are_checked_naming_the_argument(select, batch, scores, match):
    arguments = {"k": 2} if select == "select_rows" else {"k": 2, "seed": [0, 0]}
    function = tf.function(
        lambda batch, scores: getattr(echoing, select)(batch, scores, **arguments),
        input_signature=[
            {key: tf.TensorSpec([None, *value.shape[1:]]) for key, value in batch.items()},
            tf.TensorSpec([None]),
        ],
    )
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=rf"{select}: the batch {match}"
    ) as raised:
        function(batch, scores)
    assert "must have one row per score" in str(raised.value)


def test_the_technique_trains_on_the_ratio_of_rows_with_the_highest_loss():
    technique = InBatchSelection(ratio=0.5)
    losses = tf.constant([0.5, 0.1, 0.9, 0.3, 0.8, 0.2])
    selected = technique.select(_batch(6), lambda batch: losses, tf.constant(0, tf.int64))
    assert selected["id"].numpy().tolist() == [0, 2, 4]
    assert technique.rows(128) == 64 and technique.rows(3) == 2
    with pytest.raises(ValueError, match=r"ratio=0.*\(0, 1\]"):
        InBatchSelection(ratio=0)


def test_the_sampling_technique_draws_by_loss_weights_by_1_over_p_and_keeps_upstream_weights():
    technique = InBatchSelection(ratio=0.5, mode="sample", seed=3)
    losses = tf.constant([0.0, 0.0, 6.0, 0.0, 0.0, 0.0])
    batch = {**_batch(6), "sample_weight": tf.fill([6], 2.0)}  # e.g. a filter's 1/keep
    step = tf.constant(7, tf.int64)
    drawn = technique.select(batch, lambda b: losses, step)
    assert set(drawn) == {"inputs", "label", "id", "sample_weight"}
    assert drawn["id"].shape == (3,)
    # q = 0.9 * share + 0.1 / 6: row 2 has q = 0.9167, weight 1 / (6 q); the others 1 / 0.1.
    weights = {2: 2.0 / (6 * (0.9 + 0.1 / 6)), 0: 2.0 / 0.1}
    for row, weight in zip(drawn["id"].numpy(), drawn["sample_weight"].numpy(), strict=True):
        assert weight == pytest.approx(weights[2] if row == 2 else weights[0], rel=1e-5)
    again = technique.select(batch, lambda b: losses, step)  # the same step draws the same rows
    assert again["id"].numpy().tolist() == drawn["id"].numpy().tolist()
    counts = np.bincount(
        np.concatenate(
            [
                technique.select(_batch(6), lambda b: losses, tf.constant(s))["id"]
                for s in range(200)
            ]
        ),
        minlength=6,
    )
    assert counts[2] > 0.85 * counts.sum()  # q = 0.92 for the one high-loss row
    with pytest.raises(ValueError, match=r"mode='best'.*\('top', 'sample'\)"):
        InBatchSelection(ratio=0.5, mode="best")


def test_sample_rows_weights_make_the_mean_loss_unbiased():
    values = tf.constant([0.5, 4.0, 1.0, 0.1, 2.0, 0.0, 3.0, 0.2])
    batch = {"loss": values, "id": tf.range(8, dtype=tf.int64)}
    estimates = []
    for step in range(400):
        drawn = echoing.sample_rows(batch, values, k=4, seed=[1, step])
        assert drawn["id"].shape == (4,) and drawn["sample_weight"].shape == (4,)
        estimates.append(float(tf.reduce_mean(drawn["loss"] * drawn["sample_weight"])))
    # E[weighted mean] = the batch's mean; 400 draws put the sample mean within a few % of it.
    assert np.mean(estimates) == pytest.approx(float(tf.reduce_mean(values)), rel=0.05)


def test_sample_rows_draws_high_scores_more_often_with_bounded_weights():
    scores = tf.constant([0.0, 10.0, 0.0, 0.0])
    drawn = echoing.sample_rows({"id": tf.range(4)}, scores, k=200, seed=[0, 0], uniform_mix=0.2)
    ids = drawn["id"].numpy()
    assert np.mean(ids == 1) > 0.7
    # q = 0.8 + 0.05 for row 1, 0.05 for the others: weights 1/(4q).
    expected = np.where(ids == 1, 1 / (4 * 0.85), 1 / (4 * 0.05))
    np.testing.assert_allclose(drawn["sample_weight"].numpy(), expected, rtol=1e-5)


def test_sample_rows_treats_zero_and_nonfinite_scores_as_uniform_and_compiles_under_xla():
    batch = {"id": tf.range(4)}
    flat = echoing.sample_rows(batch, tf.zeros([4]), k=3, seed=[0, 1])
    np.testing.assert_allclose(flat["sample_weight"].numpy(), 1.0)
    broken = echoing.sample_rows(batch, tf.constant([np.nan, np.inf, -1.0, 0.0]), k=3, seed=[0, 1])
    np.testing.assert_allclose(broken["sample_weight"].numpy(), 1.0)
    compiled = tf.function(
        lambda s: echoing.sample_rows(batch, s, k=2, seed=[0, 2]), jit_compile=True
    )
    assert compiled(tf.constant([1.0, 2.0, 3.0, 4.0]))["id"].shape == (2,)


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"k": 0}, ValueError, r"sample_rows\(k=0\): expected an int >= 1"),
        ({"uniform_mix": 0.0}, ValueError, r"uniform_mix=0\.0\): expected a number in \(0, 1\]"),
        (
            {"batch": {"id": tf.range(4), "sample_weight": tf.ones([4])}},
            TypeError,
            r"got a dict of shapes \{'id': \(4,\), 'sample_weight': \(4,\)\}, but the drawn "
            r"rows get a 'sample_weight' of their own.*drop the batch's 'sample_weight' first",
        ),
        ({"seed": None}, TypeError, r"sample_rows\(seed=None\): expected int32/int64 of shape"),
    ],
)
def test_sample_rows_refuses_bad_arguments(arguments, error, match):
    kwargs = {"batch": {"id": tf.range(4)}, "k": 2, "uniform_mix": 0.1, "seed": [0, 0]}
    kwargs.update(arguments)
    with pytest.raises(error, match=match):
        echoing.sample_rows(kwargs.pop("batch"), tf.ones([4]), **kwargs)


@pytest.mark.parametrize("select", ["select_rows", "sample_rows"])
@pytest.mark.parametrize(
    ("batch", "described"),
    [
        (tf.range(1000), r"an EagerTensor of shape \(1000,\) and dtype int32"),
        ((tf.range(1000), tf.range(1000)), r"a tuple of 2 values"),
        ({}, r"an empty dict"),
    ],
)
def test_a_batch_that_is_not_a_dict_is_described_not_printed(select, batch, described):
    arguments = {"seed": [0, 0]} if select == "sample_rows" else {}
    with pytest.raises(TypeError, match=rf"{select}\(batch=\.\.\.\): .*got {described}\.$") as e:
        getattr(echoing, select)(batch, tf.ones([1000]), 2, **arguments)
    assert "999" not in str(e.value)  # the values (the repr printed all of them)


def test_integer_scores_rank_as_numbers():
    batch = {"x": tf.range(4)}
    picked = echoing.select_rows(batch, tf.constant([3, 1, 2, 0], tf.int64), k=2)
    assert picked["x"].numpy().tolist() == [0, 2]


def test_sample_rows_weights_stay_unbiased_when_the_scores_sum_past_float32():
    # Σ s overflows float32 to inf: unscaled, every share was 0 and every weight 1/uniform_mix.
    scores = tf.constant([3e38, 3e38, 1.0, 1.0])
    drawn = echoing.sample_rows(_batch(4), scores, 4000, seed=[0, 1])
    weights, ids = drawn["sample_weight"].numpy(), drawn["id"].numpy()
    # q = 0.9 · s/Σs + 0.1/4: rows 0 and 1 get 0.475 each, weight 1/(4 · 0.475); rows 2 and 3
    # only the uniform part, 0.025, weight 10 (before the fix: every row 10).
    np.testing.assert_allclose(weights[ids <= 1], 1 / (4 * 0.475), rtol=1e-5)
    np.testing.assert_allclose(weights[ids >= 2], 10, rtol=1e-5)
    assert 0.93 < np.mean(ids <= 1) < 0.97
    assert np.mean(weights) == pytest.approx(1.0, abs=0.15)  # E[w] = Σ q · 1/(B q) = 1


@pytest.mark.parametrize("select", ["select_rows", "sample_rows"])
def test_scores_that_are_not_numbers_are_refused_naming_the_dtype(select):
    call = {
        "select_rows": lambda s: echoing.select_rows(_batch(2), s, 1),
        "sample_rows": lambda s: echoing.sample_rows(_batch(2), s, 1, seed=[0, 1]),
    }[select]
    with pytest.raises(TypeError, match=rf"{select}: scores must be real numbers.*dtype string"):
        call(tf.constant(["0.5", "1.0"]))
