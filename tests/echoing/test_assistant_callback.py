"""Tests for echoing.AssistantCallback and AssistantFeedbackCallback: fit feeds the learner."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing import (
    Assistant,
    AssistantCallback,
    AssistantFeedbackCallback,
    AssistantLearner,
    FeedbackInbox,
    assistant_filter,
)


def _source(num=256):
    inputs = tf.random.stateless_normal([num, 8], seed=[0, 1])
    labels = tf.cast(inputs[:, 0] > 0, tf.int64)
    return tf.data.Dataset.from_tensor_slices({"inputs": inputs, "label": labels})


def _loss(reduction="sum_over_batch_size"):
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)


@pytest.mark.parametrize("every_n_batches", [1, 3])
def test_fit_feeds_the_learner_and_logs_stats(every_n_batches):
    keras.utils.set_random_seed(0)
    assistant = Assistant(2, input_shape=(8,))
    stage = assistant_filter(assistant, base_prob=0.3, seed=0)
    train = (
        _source()
        .repeat()
        .apply(stage)
        .batch(16, drop_remainder=True)
        .map(lambda b: (b["inputs"], b["label"]))
    )
    probe = _source().repeat().batch(16)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(0.01), _loss())
    learner = AssistantLearner(assistant, asynchronous=False)
    callback = AssistantCallback(
        learner, probe, _loss(reduction=None), stage=stage, every_n_batches=every_n_batches
    )
    history = model.fit(train, epochs=2, steps_per_epoch=9, callbacks=[callback], verbose=0)
    learner.close()
    stats = learner.stats()
    assert stats["pushed_batches"] == 18 // every_n_batches
    assert len(callback.history) == 2
    assert callback.history[-1]["keep_rate"] == stage.keep_rate() > 0
    assert callback.history[-1]["trained_batches"] == stats["trained_batches"]
    assert "assistant_accuracy" in history.history
    assert not np.allclose(assistant.kernel.numpy(), 0)  # the learner did train it


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"learner": "x"}, TypeError, r"learner='x'"),
        ({"probe_data": [1, 2]}, TypeError, r"probe_data=\[1, 2\]"),
        ({"per_example_loss": 3}, TypeError, r"per_example_loss=3"),
        ({"stage": "s"}, TypeError, r"stage='s'"),
        ({"every_n_batches": 0}, ValueError, r"every_n_batches=0"),
        (
            {"probe_data": _source().map(lambda e: (e["inputs"], e["label"])).batch(4)},
            TypeError,
            r"its elements are tuples, .*lambda x, y: \{'inputs': x, 'label': y\}",
        ),
        ({"probe_data": _source()}, ValueError, r"'label' of shape \[\]: .*dataset.batch\(B\)"),
        (
            {"probe_data": _source().map(lambda e: {**e, "label": e["label"][None]}).batch(4)},
            ValueError,
            r"'label' of shape \[None, 1\]; .*squeeze to \[B\]",
        ),
        ({"inputs_key": "x"}, ValueError, r"batches hold \['inputs', 'label'\], not 'x'"),
        (  # Issue 33: ran out after 4 training steps
            {"probe_data": _source().batch(64).take(3)},
            ValueError,
            r"it holds 3 batches and ends, .*source.repeat\(\).batch\(B\)",
        ),
    ],
)
def test_bad_arguments_raise_at_construction(kwargs, error, match):
    arguments = {
        "learner": AssistantLearner(Assistant(2, input_shape=(8,))),
        "probe_data": _source().repeat().batch(4),
        "per_example_loss": _loss(reduction=None),
    }
    arguments.update(kwargs)
    learner = arguments.pop("learner")
    probe = arguments.pop("probe_data")
    loss = arguments.pop("per_example_loss")
    with pytest.raises(error, match=match):
        AssistantCallback(learner, probe, loss, **arguments)


def test_assistant_feedback_callback_hands_the_learner_each_trained_row_with_its_own_step_loss():
    keras.utils.set_random_seed(0)
    num = 128
    source = _source(num)
    rows = next(iter(source.batch(num)))
    source = tf.data.Dataset.zip(source, tf.data.Dataset.range(num)).map(
        lambda row, i: {**row, "id": i}
    )
    inbox = FeedbackInbox(num)
    model = echoing.keras.LossFeedback(
        keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)]),
        per_example_loss=_loss(reduction=None),
        observers=[inbox.update],
    )
    model.compile(keras.optimizers.SGD(0.0), _loss())  # no update: losses stay comparable
    learner = AssistantLearner(Assistant(2, input_shape=(8,)), examples=rows)
    fed = []
    learner.feedback_ids = lambda ids, losses, step: fed.append((ids, losses))
    callback = AssistantFeedbackCallback(learner, inbox, every_n_batches=2)
    train = source.batch(16).map(echoing.keras.fit_inputs)
    model.fit(train, epochs=1, callbacks=[callback], verbose=0)
    assert len(fed) == 4  # 8 batches, drained every 2
    ids = np.concatenate([i for i, _ in fed])
    assert sorted(ids) == list(range(num))  # every trained row once, no extra forward pass
    expected = _loss(reduction=None)(rows["label"], model.model(rows["inputs"])).numpy()
    np.testing.assert_allclose(np.concatenate([x for _, x in fed]), expected[ids], rtol=1e-5)
    assert inbox.drain()[0].size == 0


@pytest.mark.parametrize("same_inbox", [True, False])
def test_an_inbox_the_model_never_updates_is_said_after_the_first_epoch(same_inbox):
    # Issue 33: with the model's LossFeedback reporting into another inbox the Assistant never
    # trained, and the filter's warning named the callback that was already there.
    num = 64
    source = tf.data.Dataset.zip(_source(num), tf.data.Dataset.range(num))
    source = source.map(lambda row, i: {**row, "id": i})
    inbox, other = FeedbackInbox(num), FeedbackInbox(num)
    model = echoing.keras.LossFeedback(
        keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)]),
        per_example_loss=_loss(reduction=None),
        observers=[(inbox if same_inbox else other).update],
    )
    model.compile(keras.optimizers.SGD(0.0))
    rows = next(iter(_source(num).batch(num)))
    learner = AssistantLearner(Assistant(2, input_shape=(8,)), examples=rows)
    learner.feedback_ids = lambda ids, losses, step: None
    callback = AssistantFeedbackCallback(learner, inbox)
    train = source.batch(16).map(echoing.keras.fit_inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(train, epochs=2, callbacks=[callback], verbose=0)
    said = [str(w.message) for w in caught if "the inbox was never updated" in str(w.message)]
    if same_inbox:
        assert not said
    else:
        assert len(said) == 1, said  # once per fit
        assert said[0].startswith("AssistantFeedbackCallback: fit trained 4 batches")
        assert "observers=[inbox.update]" in said[0]


def test_a_second_fit_is_judged_on_its_own_and_a_closed_learner_is_refused_before_it():
    # Issue 33: the callback reused for a second fit whose model reports into another inbox
    # said nothing (the Assistant learned nothing more); after learner.close(), a fit failed
    # only after its first train step.
    num = 64
    source = tf.data.Dataset.zip(_source(num), tf.data.Dataset.range(num))
    train = source.map(lambda row, i: {**row, "id": i}).batch(16).map(echoing.keras.fit_inputs)
    rows = next(iter(_source(num).batch(num)))
    learner = AssistantLearner(Assistant(2, input_shape=(8,)), examples=rows)
    learner.feedback_ids = lambda ids, losses, step: None
    inbox = FeedbackInbox(num)
    callback = AssistantFeedbackCallback(learner, inbox)

    def fit(observed):
        model = echoing.keras.LossFeedback(
            keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)]),
            per_example_loss=_loss(reduction=None),
            observers=[observed.update],
        )
        model.compile(keras.optimizers.SGD(0.0))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(train, epochs=1, callbacks=[callback], verbose=0)
        return [str(w.message) for w in caught if "the inbox was never updated" in str(w.message)]

    assert not fit(inbox)
    said = fit(FeedbackInbox(num))
    assert len(said) == 1 and said[0].startswith("AssistantFeedbackCallback: fit trained 4 "), said
    learner.close()
    with pytest.raises(RuntimeError, match=r"its AssistantLearner was closed .*create a new"):
        fit(inbox)


def test_feedback_inbox_drains_what_was_updated_since_the_last_drain():
    inbox = FeedbackInbox(5)
    inbox.update([4, 0, 4], [1.0, 2.0, 1.0])
    inbox.update([1, 2], [float("nan"), 3.0])  # a NaN is counted, not drained
    ids, losses = inbox.drain()
    assert ids.tolist() == [0, 2, 4] and losses.tolist() == [2.0, 3.0, 1.0]
    assert int(inbox.nonfinite_skipped.numpy()) == 1
    inbox.update([2], [0.5])
    assert [a.tolist() for a in inbox.drain()] == [[2], [0.5]]
    with pytest.raises(ValueError, match=r"ids outside \[0, 5\)"):
        inbox.update([5], [1.0])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"learner": "x"}, TypeError, r"learner='x'.*built with examples="),
        ({"learner": "no examples"}, TypeError, r"built with examples="),
        ({"inbox": echoing.LossTable(4)}, TypeError, r"expected an echoing.FeedbackInbox"),
        ({"stage": "s"}, TypeError, r"stage='s'"),
        ({"every_n_batches": 0}, ValueError, r"every_n_batches=0"),
    ],
)
def test_assistant_feedback_callback_bad_arguments_raise_at_construction(kwargs, error, match):
    rows = {"inputs": np.zeros([4, 8], np.float32), "label": np.zeros([4], np.int64)}
    arguments = {
        "learner": AssistantLearner(Assistant(2, input_shape=(8,)), examples=rows),
        "inbox": FeedbackInbox(4),
    }
    if kwargs.get("learner") == "no examples":
        kwargs = {"learner": AssistantLearner(Assistant(2, input_shape=(8,)))}
    arguments.update(kwargs)
    learner, inbox = arguments.pop("learner"), arguments.pop("inbox")
    with pytest.raises(error, match=match):
        AssistantFeedbackCallback(learner, inbox, **arguments)
