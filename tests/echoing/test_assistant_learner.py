"""Tests for echoing.AssistantLearner: it learns z = [loss > T], keeps T as the paper's running
mean, skips non-finite losses, drops the oldest feedback when full, surfaces thread errors."""

import threading

import numpy as np
import pytest
import tensorflow as tf

from echoing import Assistant, AssistantLearner
from echoing.techniques import AssistantTechnique, ExamplesById, Feedback


def _batch(rng, size=64, width=4, num_classes=3):
    inputs = rng.normal(size=(size, width)).astype(np.float32)
    labels = rng.integers(0, num_classes, size)
    # The Boss finds examples with a positive first feature hard.
    losses = np.where(inputs[:, 0] > 0, 2.0, 0.1).astype(np.float32)
    return {"inputs": tf.constant(inputs), "label": tf.constant(labels)}, tf.constant(losses)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_learns_which_examples_the_boss_finds_hard(asynchronous):
    rng = np.random.default_rng(0)
    assistant = Assistant(3, input_shape=(4,))
    with AssistantLearner(
        assistant, asynchronous=asynchronous, queue_size=1000, max_batches_per_step=1
    ) as learner:
        for step in range(150):
            learner.feedback(*_batch(rng), step=step)
        learner.wait_until_idle()
        stats = learner.stats()
    assert stats["trained_batches"] == 150 and stats["queue_drops"] == 0
    assert stats["assistant_accuracy"] > 0.9  # last 50 batches, before each update
    batch, _ = _batch(np.random.default_rng(1), size=2000)
    scores = assistant((batch["inputs"], batch["label"])).numpy()
    hard = batch["inputs"].numpy()[:, 0] > 0
    accuracy = np.mean((scores > 0.5) == hard)
    assert accuracy > 0.9, accuracy


def test_running_mean_threshold_follows_the_papers_exponential_average():
    decay = 0.75
    learner = AssistantLearner(Assistant(2, input_shape=(1,)), asynchronous=False)
    batches = [np.array([1.0, 3.0]), np.array([0.0, 0.0, 6.0]), np.array([2.0])]
    loss_sum = count = 0.0
    for losses in batches:
        learner.push(tf.zeros([len(losses), 1]), tf.zeros([len(losses)], tf.int64), losses)
        loss_sum = decay * loss_sum + (1 - decay) * losses.sum()
        count = decay * count + (1 - decay) * len(losses)
        assert learner.stats()["threshold"] == pytest.approx(loss_sum / count)


@pytest.mark.parametrize("threshold", [0.5, 1.5])
def test_fixed_threshold_labels(threshold):
    learner = AssistantLearner(
        Assistant(2, input_shape=(1,)), threshold=threshold, asynchronous=False
    )
    losses = np.array([0.2, 0.7, 1.0, 2.0, 3.0], np.float32)
    learner.push(tf.zeros([5, 1]), tf.zeros([5], tf.int64), losses)
    stats = learner.stats()
    assert stats["threshold"] == threshold
    assert stats["hard_fraction"] == pytest.approx(np.mean(losses > threshold))


@pytest.mark.parametrize(
    "losses, nonfinite, trained",
    [
        ([1.0, np.nan, 2.0, np.inf], 2, 2),
        ([-np.inf, 0.5], 1, 1),
        ([np.nan, np.nan], 2, 0),  # nothing finite: no step at all
    ],
)
def test_nonfinite_losses_are_counted_and_never_trained_on(losses, nonfinite, trained):
    assistant = Assistant(2, input_shape=(2,))
    learner = AssistantLearner(assistant, asynchronous=False)
    losses = np.array(losses, np.float32)
    learner.push(tf.ones([len(losses), 2]), tf.zeros([len(losses)], tf.int64), losses)
    stats = learner.stats()
    assert stats["nonfinite_losses"] == nonfinite
    assert stats["trained_examples"] == trained
    assert np.isfinite(stats["threshold"])
    for variable in assistant.trainable_variables:
        assert np.all(np.isfinite(variable.numpy()))
    if not trained:
        assert all(np.all(v.numpy() == 0) for v in assistant.trainable_variables)


class _BlockedLearner(AssistantLearner):
    """A learner whose thread blocks in its first training step until released."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started, self.release = threading.Event(), threading.Event()

    def _train(self, items):
        self.started.set()
        self.release.wait(timeout=60)
        super()._train(items)


@pytest.mark.parametrize("queue_size, pushes", [(1, 5), (4, 10), (8, 8)])
def test_full_queue_drops_the_oldest_feedback_without_blocking(queue_size, pushes):
    learner = _BlockedLearner(Assistant(2, input_shape=(1,)), queue_size=queue_size)
    learner.push(tf.zeros([1, 1]), tf.zeros([1], tf.int64), tf.constant([0.0]))
    assert learner.started.wait(timeout=60)  # the thread holds item 0 and is blocked
    for index in range(1, pushes + 1):  # each push returns at once although nothing trains
        learner.push(tf.zeros([1, 1]), tf.zeros([1], tf.int64), tf.constant([float(index)]))
    assert learner.stats()["queue_drops"] == max(0, pushes - queue_size)
    queued = [float(item[2][0]) for item in learner._queue]
    assert queued == [float(i) for i in range(pushes - min(pushes, queue_size) + 1, pushes + 1)]
    learner.release.set()
    learner.wait_until_idle(timeout=60)
    assert learner.stats()["trained_batches"] == 1 + min(pushes, queue_size)
    learner.close()


@pytest.mark.parametrize("surface", ["push", "close", "wait_until_idle"])
def test_errors_in_the_thread_are_raised_in_the_callers_thread(surface):
    learner = AssistantLearner(Assistant(2, input_shape=(3,)))
    # Labels outside the Assistant's classes are found by the thread (it reads the values).
    learner.push(tf.zeros([2, 3]), tf.constant([0, 7], tf.int64), tf.constant([1.0, 2.0]))
    learner._thread.join(timeout=60)
    assert not learner._thread.is_alive()
    message = r"training thread failed: AssistantLearner got labels in \[0, 7\], outside \[0, 2\)"
    with pytest.raises(RuntimeError, match=message) as raised:
        if surface == "push":
            learner.push(tf.zeros([2, 3]), tf.zeros([2], tf.int64), tf.constant([1.0, 2.0]))
        elif surface == "close":
            learner.close()
        else:
            learner.wait_until_idle(timeout=60)
    assert raised.value.__cause__ is not None


def test_close_stops_the_thread_and_rejects_later_feedback():
    learner = AssistantLearner(Assistant(2, input_shape=(1,)))
    learner.push(tf.zeros([1, 1]), tf.zeros([1], tf.int64), tf.constant([1.0]))
    thread = learner._thread
    learner.close()
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="after close"):
        learner.push(tf.zeros([1, 1]), tf.zeros([1], tf.int64), tf.constant([1.0]))


@pytest.mark.parametrize("max_batches_per_step, steps", [(1, 7), (3, 3), (8, 2)])
def test_a_backlog_is_merged_into_fewer_optimizer_steps(max_batches_per_step, steps):
    learner = _BlockedLearner(
        Assistant(2, input_shape=(1,)), queue_size=10, max_batches_per_step=max_batches_per_step
    )
    for index in range(7):  # item 0 blocks the thread; items 1-6 queue up behind it
        learner.push(tf.zeros([2, 1]), tf.zeros([2], tf.int64), tf.constant([0.0, float(index)]))
        assert learner.started.wait(timeout=60)
    learner.release.set()
    learner.wait_until_idle(timeout=60)
    learner.close()
    assert int(learner.optimizer.iterations.numpy()) == steps
    assert learner.stats()["trained_batches"] == 7
    assert learner.stats()["trained_examples"] == 14


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"threshold": "median"}, ValueError, r"threshold='median'"),
        ({"threshold": float("nan")}, ValueError, r"threshold=nan"),
        ({"threshold_decay": 1.0}, ValueError, r"threshold_decay=1\.0"),
        ({"queue_size": 0}, ValueError, r"queue_size=0"),
        ({"optimizer": "adam"}, TypeError, r"optimizer='adam'"),
        ({"features": 5}, TypeError, r"features=5"),
        ({"asynchronous": 1}, TypeError, r"asynchronous=1"),
        ({"max_batches_per_step": 0}, ValueError, r"max_batches_per_step=0"),
        ({"train_every": 0}, ValueError, r"train_every=0\): expected an int >= 1"),
    ],
)
def test_bad_arguments_raise_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        AssistantLearner(Assistant(2, input_shape=(1,)), **kwargs)


def test_non_model_assistant_is_rejected():
    with pytest.raises(TypeError, match=r"expected a keras\.Model"):
        AssistantLearner(object())


@pytest.mark.parametrize("asynchronous", [False, True])
def test_feedback_by_ids_looks_up_features_like_the_papers_assistant_queue(asynchronous):
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(500, 4)).astype(np.float32)
    labels = rng.integers(0, 3, 500)
    losses_by_id = np.where(inputs[:, 0] > 0, 2.0, 0.1).astype(np.float32)
    assistant = Assistant(3)
    learner = AssistantLearner(
        assistant,
        examples={"inputs": inputs, "label": labels},
        asynchronous=asynchronous,
        queue_size=1000,
        max_batches_per_step=1,
    )
    for step in range(100):
        ids = rng.integers(0, 500, (2, 32))  # [steps, batch], as trainers.loop reports them
        learner.feedback_ids(tf.constant(ids), tf.constant(losses_by_id[ids]), step)
    learner.wait_until_idle()
    learner.close()
    assert learner.stats()["trained_examples"] == 100 * 64
    scores = assistant((tf.constant(inputs), tf.constant(labels))).numpy()
    assert np.mean((scores > 0.5) == (inputs[:, 0] > 0)) > 0.9


def test_a_features_function_is_applied_when_the_assistant_trains_not_at_construction():
    # A function reading live state (as echoing.BossFeatures does) must see its current value.
    inputs = np.arange(32, dtype=np.float32).reshape(8, 4)
    scale = tf.Variable(0.0)
    assistant = Assistant(2, input_shape=(4,))
    learner = AssistantLearner(
        assistant,
        features=lambda element: element["inputs"] * scale,
        examples={"inputs": inputs, "label": np.zeros(8, np.int64)},
        asynchronous=False,
    )
    hard = tf.constant([5.0, 0.0, 0.0, 0.0])  # unbalanced: the kernel has a gradient
    learner.feedback_ids(tf.constant([0, 1, 2, 3]), hard)
    assert not np.any(assistant.kernel.numpy())  # features were all zero: no kernel gradient
    scale.assign(1.0)
    learner.feedback_ids(tf.constant([4, 5, 6, 7]), hard)
    assert np.any(assistant.kernel.numpy())  # now the features are the inputs


def test_feedback_by_ids_without_examples_explains_the_fix():
    learner = AssistantLearner(Assistant(2, input_shape=(1,)))
    with pytest.raises(ValueError, match="examples="):
        learner.feedback_ids(tf.constant([0]), tf.constant([1.0]))


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("by_ids", [False, True])
def test_integer_labels_of_any_width_train_together(asynchronous, by_ids):
    learner = AssistantLearner(
        Assistant(3, input_shape=(2,)),
        asynchronous=asynchronous,
        examples={
            "inputs": np.zeros((4, 2), np.float32),
            "label": np.arange(4, dtype=np.int32) % 3,
        },
    )
    losses = tf.constant([1.0, 2.0])
    for dtype in [tf.int32, tf.int64, tf.uint8, tf.int32]:
        learner.push(tf.zeros([2, 2]), tf.constant([0, 2], dtype), losses)
        if by_ids:  # int32 labels from examples, and ids of either width
            learner.feedback_ids(tf.constant([1, 3], tf.int32), losses)
    learner.wait_until_idle()
    learner.close()
    assert learner.stats()["trained_examples"] == (16 if by_ids else 8)


def test_labels_that_are_not_integers_are_refused():
    learner = AssistantLearner(Assistant(2, input_shape=(2,)), asynchronous=False)
    with pytest.raises(TypeError, match=r"labels of dtype float32.*integer class labels"):
        learner.push(tf.zeros([2, 2]), tf.constant([0.0, 1.7]), tf.constant([1.0, 2.0]))


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        ([0, 7], ValueError, r"ids in \[0, 7\], outside \[0, 4\).*4 examples"),
        ([-1, 2], ValueError, r"ids in \[-1, 2\], outside \[0, 4\)"),
        ([1.0, 2.0], TypeError, r"integer example ids, got dtype float32"),
    ],
)
def test_ids_outside_the_examples_are_refused_at_once(asynchronous, ids, error, match):
    learner = AssistantLearner(
        Assistant(2, input_shape=(2,)),
        asynchronous=asynchronous,
        examples={"inputs": np.zeros((4, 2), np.float32), "label": np.zeros(4, np.int64)},
    )
    with pytest.raises(error, match=match):
        learner.feedback_ids(tf.constant(ids), tf.constant([1.0, 2.0]))
    assert learner._thread is None  # refused in the caller's thread: nothing queued
    learner.close()


def test_labels_of_shape_b_by_1_are_refused_with_the_squeeze_in_feedback():
    learner = AssistantLearner(Assistant(3, input_shape=(4,)), asynchronous=False)
    batch = {"inputs": tf.zeros([8, 4]), "label": tf.zeros([8, 1], tf.int64)}
    with pytest.raises(ValueError, match=r"shape \[8, 1\]; expected one integer class label"):
        learner.feedback(batch, tf.ones([8]))
    learner.close()


@pytest.mark.parametrize(
    ("examples", "match"),
    [
        (
            {"inputs": np.zeros([10, 4], np.float32), "label": np.zeros([7], np.int64)},
            r"their rows differ: 'inputs': 10, 'label': 7",
        ),
        (
            {"inputs": np.zeros([10, 4], np.float32), "label": np.zeros([10, 1], np.int64)},
            r"examples\['label'\] of shape \[10, 1\]; .*squeeze to \[N\]",
        ),
        (  # Issue 33: accepted; fit ran 3 epochs with the Assistant never trained (27 queue
            # drops), and close() raised the thread's graph error.
            {"inputs": np.zeros([10, 40], np.float32), "label": np.zeros([10], np.int64)},
            r"features have shape \(40,\) per example, but the Assistant scores features of "
            r"shape \(4,\)",
        ),
    ],
)
def test_examples_whose_arrays_do_not_line_up_by_id_are_refused_at_construction(examples, match):
    with pytest.raises(ValueError, match=match):
        AssistantLearner(Assistant(3, input_shape=(4,)), examples=examples)


def test_examples_without_labels_are_rejected():
    with pytest.raises(TypeError, match="examples=dict"):
        AssistantLearner(Assistant(2, input_shape=(1,)), examples={"inputs": np.zeros([3, 1])})


@pytest.mark.parametrize(
    ("features", "labels", "losses", "message"),
    [
        (
            [2, 5],
            [0, 1],
            [1.0, 2.0],
            r"features of shape \(2, 5\), but the Assistant scores .*\(3,\)",
        ),
        ([3, 3], [0, 1], [1.0, 2.0], r"features of shape \(3, 3\).*\(2 examples here\)"),
        ([2, 3], [0, 1], [1.0], r"got 2 labels \(or ids\) but \(1,\) losses"),
        (
            [2, 3],
            [[0], [1]],
            [1.0, 2.0],
            r"labels \(or ids\) of shape \[2, 1\]; .*squeeze to \[B\]: .*tf.squeeze",
        ),
    ],
)
def test_inputs_that_do_not_fit_the_assistant_are_refused_at_once(
    features, labels, losses, message
):
    learner = AssistantLearner(Assistant(2, input_shape=(3,)))
    with pytest.raises(ValueError, match=message):
        learner.push(tf.zeros(features), tf.constant(labels, tf.int64), tf.constant(losses))
    assert learner._thread is None  # refused in the caller's thread: nothing queued
    learner.close()


@pytest.mark.parametrize("asynchronous", [False, True])
def test_train_every_k_trains_on_every_kth_fed_back_batch(asynchronous):
    learner = AssistantLearner(
        Assistant(2, input_shape=(4,)),
        examples={"inputs": np.ones([8, 4], np.float32), "label": np.arange(8) % 2},
        asynchronous=asynchronous,
        queue_size=100,
        max_batches_per_step=1,
        train_every=3,
    )
    for step in range(10):  # batches 0, 3, 6 and 9 are trained on
        learner.feedback_ids(tf.constant([step % 8]), tf.constant([float(step)]), step)
    learner.wait_until_idle()
    learner.close()
    stats = learner.stats()
    assert (stats["pushed_batches"], stats["skipped_batches"]) == (4, 6)
    assert stats["trained_examples"] == 4


def _feed(learner, rng, steps, first_step=0):
    for step in range(first_step, first_step + steps):
        batch, losses = _batch(rng, size=16)
        # Losses that move T: a resumed learner starting T again at 0 would label differently.
        learner.feedback(batch, losses * (1 + step), step=step)
    learner.wait_until_idle()


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_restored_learner_continues_its_threshold_and_counters(asynchronous, tmp_path):
    # Issue 33: a resumed run restarted T at 0, assist_pushed_batches from 0 and the accuracy
    # from no batches. The checkpointed state continues each exactly as one unbroken learner.
    def learner():
        return AssistantLearner(
            Assistant(3, input_shape=(4,)),
            asynchronous=asynchronous,
            queue_size=100,
            max_batches_per_step=1,
            train_every=2,
        )

    unbroken, first = learner(), learner()
    _feed(unbroken, np.random.default_rng(0), 7)
    _feed(first, np.random.default_rng(0), 7)
    path = tf.train.Checkpoint(learner=first.checkpoint_state).write(str(tmp_path / "ckpt"))
    first.close()
    saved = first.stats()
    assert saved["threshold"] > 0 and saved["pushed_batches"] == 4

    resumed = learner()
    tf.train.Checkpoint(learner=resumed.checkpoint_state).read(path).assert_consumed()
    assert resumed.stats() == saved
    rng_unbroken, rng_resumed = np.random.default_rng(1), np.random.default_rng(1)
    _feed(unbroken, rng_unbroken, 5, first_step=7)
    _feed(resumed, rng_resumed, 5, first_step=7)
    after, expected = resumed.stats(), unbroken.stats()
    # train_every's phase continues too: of batches 7..11, 8 and 10 are trained on, as without
    # the restore (a count restarted at 0 would take 7, 9 and 11).
    for key in (
        "pushed_batches",
        "skipped_batches",
        "trained_batches",
        "trained_examples",
        "queue_drops",
        "nonfinite_losses",
    ):
        assert after[key] == expected[key], key
    assert after["pushed_batches"] == 6 and after["skipped_batches"] == 6
    assert after["threshold"] == pytest.approx(expected["threshold"])
    # Accuracy still counts the batches trained before the checkpoint (window of 50).
    assert after["trained_examples"] == 6 * 16
    unbroken.close()
    resumed.close()


def test_a_restored_learner_adds_its_queue_drops_to_the_checkpointed_ones(tmp_path):
    first = AssistantLearner(Assistant(2, input_shape=(1,)), queue_size=1)
    first._worker._drops = 3  # as if three feedback batches had found the queue full
    path = tf.train.Checkpoint(learner=first.checkpoint_state).write(str(tmp_path / "ckpt"))
    resumed = AssistantLearner(Assistant(2, input_shape=(1,)), queue_size=1)
    tf.train.Checkpoint(learner=resumed.checkpoint_state).read(path).assert_consumed()
    assert resumed.stats()["queue_drops"] == 3
    resumed._worker._drops = 2
    assert resumed.stats()["queue_drops"] == 5
    first.close()
    resumed.close()


def test_an_unreadable_learner_state_names_the_learner():
    learner = AssistantLearner(Assistant(2, input_shape=(1,)))
    with pytest.raises(ValueError, match="AssistantLearner's checkpointed state cannot be read"):
        learner.checkpoint_state.deserialize(b'{"version": 99}')
    learner.close()


def test_the_assistant_technique_checkpoints_the_learner_beside_the_assistant(tmp_path):
    def technique():
        examples = ExamplesById(
            {
                "inputs": np.random.default_rng(0).random((32, 4), np.float32),
                "label": np.arange(32) % 2,
            },
            num_classes=2,
            input_shape=(4,),
        )
        return AssistantTechnique(examples, base_prob=0.3, seed=0, asynchronous=False)

    def observe(tech, step):
        ids = tf.reshape(tf.range(8, dtype=tf.int64) + 8 * (step % 4), [1, 8])
        losses = tf.reshape(tf.range(8, dtype=tf.float32) * (step + 1), [1, 8])
        tech.observe(
            Feedback(
                ids=ids, losses=losses, step=step, steps=1, seconds=0.0, input_wait_seconds=0.0
            )
        )

    first = technique()
    for step in range(3):
        observe(first, step)
    checkpointed = first.checkpointed()
    # The existing keys stay, so earlier checkpoints still restore the Assistant and its slots.
    assert set(checkpointed) == {"assistant", "assistant_optimizer", "assistant_learner"}
    path = tf.train.Checkpoint(**checkpointed).write(str(tmp_path / "ckpt"))
    resumed = technique()
    tf.train.Checkpoint(**resumed.checkpointed()).read(path).assert_consumed()
    assert resumed.learner.stats() == first.learner.stats()
    observe(first, 3)
    observe(resumed, 3)
    assert resumed.scalars()["assist_pushed_batches"] == 4
    assert resumed.learner.stats()["threshold"] == pytest.approx(first.learner.stats()["threshold"])
    first.close()
    resumed.close()


def test_feedback_on_a_batch_it_cannot_read_names_the_keys_or_the_form():
    learner = AssistantLearner(Assistant(2, input_shape=(3,)), asynchronous=False)
    losses = tf.ones([2])
    with pytest.raises(ValueError, match=r"element\['label'\].*holds \['inputs'\].*label_key="):
        learner.feedback({"inputs": tf.zeros([2, 3])}, losses)  # before: KeyError: 'label'
    with pytest.raises(ValueError, match=r"element\['x'\].*holds \['inputs', 'label'\]"):
        AssistantLearner(Assistant(2, input_shape=(3,)), features="x", asynchronous=False).feedback(
            {"inputs": tf.zeros([2, 3]), "label": tf.zeros([2], tf.int64)}, losses
        )
    with pytest.raises(TypeError, match=r"dict batches.*got a tuple.*lambda x, y"):
        learner.feedback((tf.zeros([2, 3]), tf.zeros([2], tf.int64)), losses)
