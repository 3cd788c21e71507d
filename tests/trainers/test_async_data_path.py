"""The asynchronous trainer's data goes through ``pipelines.make_datasets`` like every run's."""

from __future__ import annotations

import keras
import ml_collections
import numpy as np
import pytest

from pipelines.sources import generated
from trainers.passm import experiment as async_experiment


def _config(**overrides) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict(
        dict(dataset="mnist1d", num_train=40, num_eval=20, data_seed=0, batch_size=8)
    )
    config.update(overrides)
    return config


def _examples(dataset_fn, worker: int, num_batches: int, train: np.ndarray) -> list[int]:
    """The train indices of ``worker``'s first ``num_batches`` batches, in order."""
    rows = np.concatenate([inputs.numpy() for inputs, _ in dataset_fn(worker).take(num_batches)])
    return [int(np.flatnonzero((train == row).all(axis=1))[0]) for row in rows]


def test_the_workers_split_one_stream_and_see_each_example_once_per_epoch():
    data = async_experiment.data_config(_config())
    dataset_fn = async_experiment.train_dataset_fn(data, seed=3, num_workers=2)
    train = np.asarray(data.train_arrays.inputs)
    # 12 epochs of the 40 examples, 20 per worker per epoch (batches of 8).
    zero, one = (_examples(dataset_fn, w, 30, train) for w in (0, 1))
    # Each epoch, the two workers' examples together are every example exactly once, as one
    # synchronous worker's are (reading the stream from two offsets, each example came twice in
    # the second epoch and none of some others).
    for epoch in range(12):
        window = slice(20 * epoch, 20 * (epoch + 1))
        assert sorted(zero[window] + one[window]) == list(range(40)), epoch
    # The stream is the synchronous run's, dealt alternately: no example is a worker's alone.
    sync = _examples(async_experiment.train_dataset_fn(data, seed=3, num_workers=1), 0, 10, train)
    assert [e for pair in zip(zero[:40], one[:40], strict=True) for e in pair] == sync[:80]
    assert set(zero) == set(one) == set(range(40))
    inputs, labels = next(iter(dataset_fn(0)))
    assert inputs.shape == (8, 40) and labels.shape == (8,)


def test_evaluate_counts_every_eval_example_once():
    data = async_experiment.data_config(_config(dataset="generated_images", num_eval=30))
    labels = np.asarray(data.eval_arrays.label)

    class Oracle(keras.Model):
        """Predicts class 0 everywhere: its accuracy is the share of label 0."""

        def call(self, inputs, training=False):
            return keras.ops.one_hot(keras.ops.zeros(keras.ops.shape(inputs)[:1], "int32"), 10)

    accuracy = async_experiment.make_evaluate(data, seed=0)(Oracle())
    assert accuracy == pytest.approx(np.mean(labels == 0))


def test_generated_data_is_seeded_and_disjoint():
    train, eval_ = generated.arrays("generated_images", num_train=50, num_eval=20, seed=1)
    again, _ = generated.arrays("generated_images", num_train=50, num_eval=20, seed=1)
    np.testing.assert_array_equal(train["inputs"], again["inputs"])
    assert train["inputs"].shape == (50, 32, 32, 3) and eval_["label"].shape == (20,)
    other, _ = generated.arrays("generated_images", num_train=50, num_eval=20, seed=2)
    assert not np.array_equal(train["inputs"], other["inputs"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(name="cifar10"),
            "dataset must be one of ('mnist1d', 'generated_images'), got 'cifar10'",
        ),
        (dict(num_train=5), "num_train must be an int >= 10, got 5"),
        (dict(num_eval=True), "num_eval must be an int >= 10, got True"),
    ],
)
def test_generated_refuses_bad_arguments(kwargs, message):
    arguments = dict(name="mnist1d", num_train=20, num_eval=20, seed=0) | kwargs
    name = arguments.pop("name")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        generated.arrays(name, **arguments)
