"""Tests for echoing.assistant_filter: keep probability (statistical), reweighting, live weights,
determinism, structure, starvation error and argument errors."""

import math

import numpy as np
import pytest
import tensorflow as tf

from echoing import Assistant, assistant_filter

NUM = 20_000  # inputs per statistical check; binomial std of a rate is <= 0.5/sqrt(NUM) = 0.0035


def _source(num=NUM, width=4, num_classes=2):
    return tf.data.Dataset.from_tensor_slices(
        {
            "inputs": tf.random.stateless_normal([num, width], seed=[1, 2]),
            "label": tf.range(num, dtype=tf.int64) % num_classes,
            "id": tf.range(num, dtype=tf.int64),
        }
    )


def _sigmoid(x):
    return 1 / (1 + math.exp(-x))


def _tolerance(p, n):
    # 5 binomial standard deviations: a false failure has probability < 1e-6.
    return 5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize(
    "base_prob, bias_label0, bias_label1",
    [
        (0.3, 0.0, 0.0),  # untrained: keep 0.3 + 0.7 * 0.5 = 0.65 for both labels
        (0.3, -3.0, 2.0),
        (0.1, -10.0, 10.0),  # easy label kept ~γ, hard label ~1
        (1.0, -10.0, -10.0),  # γ = 1 keeps everything
        (0.5, 1.0, -1.0),
    ],
)
def test_keep_rate_per_label_matches_algorithm_1(base_prob, bias_label0, bias_label1):
    assistant = Assistant(2, input_shape=(4,))
    assistant.label_bias.assign([bias_label0, bias_label1])
    stage = assistant_filter(assistant, base_prob=base_prob, seed=0)
    kept = np.concatenate(
        [b["label"] for b in _source().apply(stage).batch(4096).as_numpy_iterator()]
    )
    for label, bias in ((0, bias_label0), (1, bias_label1)):
        expected = base_prob + (1 - base_prob) * _sigmoid(bias)
        rate = np.sum(kept == label) / (NUM / 2)
        assert abs(rate - expected) <= _tolerance(expected, NUM / 2) + 1e-9, (label, rate, expected)
    overall = base_prob + (1 - base_prob) * (_sigmoid(bias_label0) + _sigmoid(bias_label1)) / 2
    assert stage.stats()["filter_seen"] == NUM
    assert stage.stats()["filter_kept"] == len(kept)
    assert abs(stage.keep_rate() - overall) <= _tolerance(overall, NUM) + 1e-9


@pytest.mark.parametrize("base_prob, bias", [(0.3, -2.0), (0.2, 1.5)])
def test_reweight_attaches_inverse_keep_probability_and_is_unbiased(base_prob, bias):
    assistant = Assistant(2, input_shape=(4,))
    assistant.kernel.assign([0.5, -0.5, 1.0, 0.0])
    assistant.bias.assign(bias)
    stage = assistant_filter(assistant, base_prob=base_prob, reweight=True, seed=3)
    kept = list(_source().apply(stage).batch(4096).as_numpy_iterator())
    inputs = np.concatenate([b["inputs"] for b in kept])
    labels = np.concatenate([b["label"] for b in kept])
    weights = np.concatenate([b["sample_weight"] for b in kept])
    scores = assistant((tf.constant(inputs), tf.constant(labels))).numpy()
    np.testing.assert_allclose(weights, 1 / (base_prob + (1 - base_prob) * scores), rtol=1e-5)
    # E[sum of 1/p over kept] = number of inputs; std <= sqrt(NUM * (1/γ - 1)).
    tolerance = 5 * math.sqrt(NUM * (1 / base_prob - 1))
    assert abs(weights.sum() - NUM) <= tolerance


def test_without_reweight_element_structure_is_unchanged():
    stage = assistant_filter(Assistant(2, input_shape=(4,)), seed=0)
    filtered = _source(num=64).apply(stage)
    assert filtered.element_spec == _source(num=64).element_spec
    ids = [int(e["id"]) for e in filtered]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # order kept, nothing duplicated


def test_weight_update_changes_keep_rate_of_an_already_built_dataset():
    assistant = Assistant(2, input_shape=(4,))
    assistant.bias.assign(-20.0)  # g ≈ 0: keep ≈ γ
    stage = assistant_filter(assistant, base_prob=0.2, seed=0, scoring_batch_size=16)
    iterator = iter(_source(num=100_000).apply(stage).map(lambda e: e["id"]).batch(100))
    before = np.concatenate([next(iterator) for _ in range(10)])
    assistant.bias.assign(20.0)  # g ≈ 1: keep everything, read live by the running iterator
    after = np.concatenate([next(iterator) for _ in range(30)])
    # Ids advance by 1/keep_rate per kept element; skip the groups scored before the update.
    rate_before = len(before) / (before[-1] - before[0] + 1)
    tail = after[2000:]
    rate_after = len(tail) / (tail[-1] - tail[0] + 1)
    assert abs(rate_before - 0.2) <= _tolerance(0.2, 1000)
    assert rate_after == 1.0


@pytest.mark.parametrize("seed", [0, 7])
def test_same_seed_same_kept_ids_and_each_epoch_redraws(seed):
    def kept_ids(dataset):
        return [int(i) for b in dataset.map(lambda e: e["id"]).batch(500) for i in b]

    def build():
        stage = assistant_filter(Assistant(2, input_shape=(4,)), seed=seed)
        return _source(num=500).apply(stage)

    first, second = build(), build()
    epoch_one = kept_ids(first)
    assert epoch_one == kept_ids(second)
    assert epoch_one != kept_ids(first)  # second pass over the same dataset draws again


def test_variable_length_elements_with_a_feature_function():
    source = tf.data.Dataset.range(1000).map(
        lambda i: {"inputs": tf.ones([i % 5 + 1]), "label": i % 2, "id": i}
    )
    assistant = Assistant(2, input_shape=(1,))
    assistant.label_bias.assign([-30.0, 30.0])
    stage = assistant_filter(
        assistant,
        base_prob=0.25,
        features=lambda element: tf.reduce_sum(element["inputs"], keepdims=True),
        seed=1,
    )
    labels = np.concatenate(list(source.apply(stage).map(lambda e: e["label"]).batch(1000)))
    assert np.sum(labels == 1) == 500  # hard label: always kept
    assert abs(np.sum(labels == 0) / 500 - 0.25) <= _tolerance(0.25, 500)


def test_starving_filter_raises_naming_the_limit_instead_of_hanging():
    assistant = Assistant(2, input_shape=(4,))
    assistant.bias.assign(-100.0)
    stage = assistant_filter(assistant, base_prob=1e-6, seed=0, max_consecutive_drops=500)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"max_consecutive_drops=500.*base_prob"
    ):
        for _ in _source().apply(stage):
            pass


def test_starvation_check_does_not_fire_on_a_healthy_stream():
    assistant = Assistant(2, input_shape=(4,))
    assistant.bias.assign(-100.0)
    # γ = 0.5: 40 drops in a row has probability 1e-12 per input.
    stage = assistant_filter(assistant, base_prob=0.5, seed=0, max_consecutive_drops=40)
    assert sum(1 for _ in _source(num=5000).apply(stage).batch(1000)) == 3


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"base_prob": 0.0}, ValueError, r"base_prob=0\.0.*\(0, 1\]"),
        ({"base_prob": -0.1}, ValueError, r"base_prob=-0\.1"),
        ({"base_prob": 1.5}, ValueError, r"base_prob=1\.5"),
        ({"base_prob": float("nan")}, ValueError, r"base_prob=nan"),
        ({"base_prob": True}, ValueError, r"base_prob=True"),
        ({"base_prob": "0.3"}, ValueError, r"base_prob='0\.3'"),
        ({"features": 3}, TypeError, r"features=3"),
        ({"reweight": "yes"}, TypeError, r"reweight='yes'"),
        ({"seed": "0"}, TypeError, r"seed='0'"),
        ({"max_consecutive_drops": 0}, ValueError, r"max_consecutive_drops=0"),
        ({"scoring_batch_size": 0}, ValueError, r"scoring_batch_size=0"),
        ({"label_key": 1}, TypeError, r"label_key=1"),
    ],
)
def test_bad_arguments_raise_at_the_factory(kwargs, error, match):
    with pytest.raises(error, match=match):
        assistant_filter(Assistant(2, input_shape=(4,)), **kwargs)


def test_non_model_assistant_is_rejected():
    with pytest.raises(TypeError, match=r"expected a keras\.Model"):
        assistant_filter(lambda x: x)


@pytest.mark.parametrize(
    "dataset",
    [
        tf.data.Dataset.range(4),
        tf.data.Dataset.from_tensor_slices({"inputs": tf.zeros([4, 4])}),  # no "label"
    ],
)
def test_elements_without_a_label_dict_are_rejected_at_apply(dataset):
    with pytest.raises(TypeError, match="dict elements with a 'label' key"):
        dataset.apply(assistant_filter(Assistant(2, input_shape=(4,))))


def test_a_filter_after_batch_or_on_one_hot_labels_is_refused_with_both_fixes():
    batches = _source().batch(8)
    with pytest.raises(ValueError, match=r"If the dataset is batched, apply the filter before"):
        batches.apply(assistant_filter(Assistant(2, input_shape=(4,))))
    # One-hot labels were told the dataset "looks batched" (issue 33).
    one_hot = _source().map(lambda e: {**e, "label": tf.one_hot(e["label"], 2)})
    with pytest.raises(ValueError, match=r"if the labels are one-hot, map them to ids first: "):
        one_hot.apply(assistant_filter(Assistant(2, input_shape=(4,))))


def test_string_labels_are_refused_naming_a_lookup():
    named = _source(16).map(lambda e: {**e, "label": tf.gather(["cat", "dog"], e["label"])})
    with pytest.raises(TypeError, match=r"got strings; map them to ids first, e\.g\. with "):
        named.apply(assistant_filter(Assistant(2, input_shape=(4,))))


def test_float_labels_are_refused_not_read_as_the_class_below():
    source = _source(16).map(lambda e: {**e, "label": tf.cast(e["label"], tf.float32) + 0.7})
    with pytest.raises(TypeError, match=r"labels under 'label' must be integer class ids, got"):
        source.apply(assistant_filter(Assistant(2, input_shape=(4,))))


def test_an_example_whose_score_is_nan_is_kept_not_dropped_unseen():
    # NaN inputs make the Assistant's score NaN; NaN < keep_prob is false, which would drop the
    # example at every keep probability: it counts as hard instead, and reaches the model.
    nan = _source(100).map(lambda e: {**e, "inputs": e["inputs"] * float("nan")})
    kept = list(nan.apply(assistant_filter(Assistant(2, input_shape=(4,)), base_prob=0.1, seed=0)))
    assert len(kept) == 100


def test_labels_outside_num_classes_name_the_label_key_and_num_classes():
    source = _source(16).map(lambda e: {**e, "label": e["label"] + 10})
    filtered = source.apply(assistant_filter(Assistant(10, input_shape=(4,)), seed=0))
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"labels under .+label.+ must be class ids in \[0, 10\) for an Assistant of "
        r"num_classes=10",
    ):
        list(filtered)


@pytest.mark.parametrize("bad", [-1, 7])
def test_a_label_outside_num_classes_is_named_with_the_fix(bad):
    source = _source(16).map(
        lambda e: {**e, "label": tf.where(e["id"] == 5, tf.constant(bad, tf.int64), e["label"])}
    )
    filtered = source.apply(assistant_filter(Assistant(2, input_shape=(4,)), seed=0))
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=rf"assistant_filter got label {bad} in element\[label\]: the labels under "
        r"element\[label\] must be class ids in \[0, 2\) for an Assistant of num_classes=2; "
        r"build the Assistant with the number of classes of the task",
    ):
        list(filtered)


def test_negative_labels_are_refused_in_the_graph():
    source = _source(16).map(lambda e: {**e, "label": e["label"] - 1})
    filtered = source.apply(assistant_filter(Assistant(2, input_shape=(4,)), seed=0))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"class ids in \[0, 2\)"):
        list(filtered)


def test_features_of_another_shape_than_the_assistant_are_refused_at_apply():
    with pytest.raises(
        ValueError,
        match=r"element\['inputs'\] has shape \(20,\) per example, but the Assistant scores "
        r"features of shape \(40,\).*input_shape=\(20,\)",
    ):
        _source(16, width=20).apply(assistant_filter(Assistant(2, input_shape=(40,))))


def test_reweighting_multiplies_an_upstream_sample_weight():
    # After pruning (weights 2 on kept easy examples) the filter's 1/keep_prob multiplies them.
    weighted = _source(64).map(lambda e: {**e, "sample_weight": tf.constant(3.0)})
    filtered = weighted.apply(
        assistant_filter(Assistant(2, input_shape=(4,)), base_prob=0.5, reweight=True, seed=0)
    )
    weights = [float(e["sample_weight"]) for e in filtered]
    # An untrained Assistant scores 0.5: keep_prob 0.75, weight 3 / 0.75 = 4.
    np.testing.assert_allclose(weights, 4.0, rtol=1e-5)


def test_a_features_key_the_elements_lack_is_named_with_the_keys_they_have():
    # Before: KeyError: 'feat' at the bottom of a 105-line AutoGraph trace.
    with pytest.raises(TypeError, match=r"a 'feat' key.*'id'.*'inputs'.*'label'.*set features"):
        _source(8).apply(assistant_filter(Assistant(2, input_shape=(4,)), features="feat"))


def test_an_assistant_nothing_trains_is_said_to_drop_examples_at_random(capfd):
    # Before: fit without the feedback callback filtered a third of the data by an untrained
    # Assistant's 0.5 for 15 epochs, without a word (issue 33).
    stage = assistant_filter(Assistant(2, input_shape=(4,)), base_prob=0.3, seed=0)
    kept = sum(1 for _ in _source(num=12_000).apply(stage))
    assert 0.6 < kept / 12_000 < 0.7
    printed = capfd.readouterr().err
    assert printed.count("echoing.assistant_filter: ") == 1, printed
    assert (
        "inputs seen and the Assistant is untrained (its weights are still zero), so it scores "
        "every example 0.5 and drops about 35% of them at random. Train it"
    ) in printed
    # A learner fed but behind (issue 33: 0 of 120 fed batches trained, 87 dropped) is named.
    assert "If it is fed already, its learner has not finished a step yet" in printed


def test_a_trained_assistant_or_a_short_stream_is_not_warned_about(capfd):
    trained = Assistant(2, input_shape=(4,))
    trained.label_bias.assign([1.0, -1.0])
    for assistant, num in ((trained, 12_000), (Assistant(2, input_shape=(4,)), 5_000)):
        stage = assistant_filter(assistant, base_prob=0.3, seed=0)
        for _ in _source(num=num).apply(stage):
            pass
    assert "untrained" not in capfd.readouterr().err
