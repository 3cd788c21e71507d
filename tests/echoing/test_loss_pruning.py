"""Loss-table pruning: the keep rule, weights, epochs and annealing, checkpoints, bad input."""

import numpy as np
import pytest
import tensorflow as tf

import echoing

N = 64


def _ids(n=N):
    return tf.data.Dataset.from_tensor_slices({"id": tf.range(n, dtype=tf.int64)})


def _table(losses):
    table = echoing.LossTable(len(losses))
    table.update(np.arange(len(losses)), np.asarray(losses, np.float32))
    return table


def _epoch(dataset):
    """ids -> weights of one pass."""
    return {int(e["id"]): float(e["sample_weight"]) for e in dataset}


def test_above_the_mean_always_kept_below_kept_at_one_minus_r_with_weight():
    losses = np.where(np.arange(N) < N // 2, 0.1, 3.0)  # mean 1.55: half below
    stage = echoing.loss_prune(_table(losses), prune_ratio=0.75, num_epochs=100, seed=3)
    dataset = _ids().apply(stage)
    kept_low = []
    for _ in range(40):
        weights = _epoch(dataset)
        assert all(weights.get(i) == 1.0 for i in range(N // 2, N))
        low = [i for i in weights if i < N // 2]
        assert all(weights[i] == pytest.approx(4.0) for i in low)
        kept_low.append(len(low))
    # 40 epochs x 32 draws at p = 0.25: mean 8 per epoch, standard error ~0.12.
    assert np.mean(kept_low) == pytest.approx(8.0, abs=0.8)
    assert len(set(kept_low)) > 1  # re-drawn every epoch
    assert stage.stats()["prune_threshold"] == pytest.approx(1.55)


def test_weighted_sum_is_unbiased():
    rng = np.random.default_rng(0)
    losses = rng.exponential(size=N).astype(np.float32)
    values = rng.normal(size=N)
    stage = echoing.loss_prune(_table(losses), prune_ratio=0.5, num_epochs=1000, seed=0)
    dataset = _ids().apply(stage)
    sums = [sum(w * values[i] for i, w in _epoch(dataset).items()) for _ in range(120)]
    spread = np.std(sums) / np.sqrt(len(sums))
    assert abs(np.mean(sums) - values.sum()) < 4 * spread


def test_unseen_examples_are_always_kept_and_nonfinite_losses_never_enter():
    table = echoing.LossTable(N)
    losses = np.full(N, 0.01, np.float32)
    losses[: N // 2] = np.nan  # ids 0..31 get NaN: skipped, counted, still unseen
    losses[N // 2 : N // 2 + 4] = 5.0
    table.update(np.arange(N), losses)
    assert int(table.nonfinite_skipped.numpy()) == N // 2
    assert not table.seen.numpy()[: N // 2].any()
    stage = echoing.loss_prune(table, prune_ratio=0.9, num_epochs=50, seed=1)
    dataset = _ids().apply(stage)
    for _ in range(5):
        weights = _epoch(dataset)
        assert all(weights[i] == 1.0 for i in range(N // 2 + 4))
    assert stage.stats()["prune_nonfinite_losses"] == N // 2


def test_the_last_anneal_fraction_of_epochs_trains_on_everything():
    losses = np.where(np.arange(N) < N // 2, 0.1, 3.0)
    stage = echoing.loss_prune(
        _table(losses), prune_ratio=0.9, num_epochs=8, anneal_fraction=0.25, seed=0
    )
    dataset = _ids().apply(stage)
    sizes = [len(_epoch(dataset)) for _ in range(10)]
    assert all(size < N for size in sizes[:6])  # epochs 0-5 pruned (p(no drop) ~ 1e-32)
    assert sizes[6:] == [N] * 4  # 6, 7, and after the run's end
    assert stage.epoch() == 10


def test_the_threshold_is_taken_once_per_epoch_and_losses_are_read_live():
    table = _table(np.where(np.arange(N) < N // 2, 0.1, 3.0))  # mean 1.55
    stage = echoing.loss_prune(table, prune_ratio=0.9, num_epochs=100, group_size=8, seed=0)
    dataset = _ids().apply(stage)
    iterator = iter(dataset)
    next(iterator)  # decides the first group (ids 0-7) only: the map is synchronous
    # Mid-epoch every loss becomes 1.0, below this epoch's threshold of 1.55: the losses are
    # read live, so ids 32-63 are now pruned too; the threshold stays until the epoch ends.
    table.update(np.arange(N), np.ones(N, np.float32))
    rest = [int(element["id"]) for element in iterator]
    assert stage.stats()["prune_threshold"] == pytest.approx(1.55)
    assert len([i for i in rest if i >= N // 2]) < 12  # 32 draws at p = 0.1
    # Epoch 1 takes the new mean, 1.0: no loss is below it, so every example is kept.
    assert len(_epoch(dataset)) == N
    assert stage.stats()["prune_threshold"] == pytest.approx(1.0)


def test_same_seed_same_choices():
    losses = np.where(np.arange(N) % 2, 0.1, 3.0)

    def choices(seed):
        dataset = _ids().apply(echoing.loss_prune(_table(losses), num_epochs=9, seed=seed))
        return [sorted(_epoch(dataset)) for _ in range(3)]

    assert choices(7) == choices(7)
    assert choices(7) != choices(8)


def test_an_upstream_sample_weight_multiplies():
    losses = np.where(np.arange(N) < N // 2, 0.1, 3.0)
    stage = echoing.loss_prune(_table(losses), prune_ratio=0.5, num_epochs=9, seed=0)
    dataset = _ids().map(lambda e: {**e, "sample_weight": tf.constant(3.0)}).apply(stage)
    weights = _epoch(dataset)
    assert {weights[i] for i in weights} == {3.0, 6.0}


def test_state_survives_a_checkpoint(tmp_path):
    losses = np.where(np.arange(N) < N // 2, 0.1, 3.0)
    table = _table(losses)
    stage = echoing.loss_prune(table, num_epochs=9, seed=0)
    for _ in _ids().apply(stage):
        pass
    path = tf.train.Checkpoint(pruning=stage).save(str(tmp_path / "ckpt"))
    restored = echoing.loss_prune(echoing.LossTable(N), num_epochs=9, seed=0)
    tf.train.Checkpoint(pruning=restored).restore(path).assert_consumed()
    assert restored.stats() == stage.stats()
    np.testing.assert_array_equal(restored.table.losses.numpy(), table.losses.numpy())
    np.testing.assert_array_equal(restored.table.seen.numpy(), table.seen.numpy())


def test_the_table_updates_inside_a_tf_function():
    table = echoing.LossTable(4)
    tf.function(table.update)(tf.constant([1, 3], tf.int64), tf.constant([1.0, np.inf]))
    np.testing.assert_array_equal(table.seen.numpy(), [False, True, False, False])
    assert float(table.mean()) == 1.0 and int(table.nonfinite_skipped.numpy()) == 1
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside \[0, 4\)"):
        tf.function(table.update)(tf.constant([9], tf.int64), tf.constant([1.0]))


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"prune_ratio": 1.0}, ValueError, r"prune_ratio=1.0.*\[0, 1\)"),
        ({"prune_ratio": -0.1}, ValueError, r"prune_ratio=-0.1"),
        ({"prune_ratio": float("nan")}, ValueError, r"prune_ratio=nan"),
        ({"anneal_fraction": 1.5}, ValueError, r"anneal_fraction=1.5.*\[0, 1\]"),
        ({"num_epochs": 0}, ValueError, r"num_epochs=0.*>= 1"),
        ({"examples_per_epoch": 0}, ValueError, r"examples_per_epoch=0"),
        ({"group_size": 2.5}, ValueError, r"group_size=2.5"),
        ({"seed": "0"}, TypeError, r"seed='0'"),
        ({"id_key": 3}, TypeError, r"id_key=3"),
    ],
)
def test_bad_arguments_name_the_value(arguments, error, match):
    with pytest.raises(error, match=match):
        echoing.loss_prune(echoing.LossTable(4), **{"num_epochs": 2, **arguments})


def test_bad_tables_and_elements_are_refused_early():
    with pytest.raises(TypeError, match=r"expected an echoing\.LossTable"):
        echoing.loss_prune(np.zeros(4), num_epochs=2)
    with pytest.raises(ValueError, match=r"num_examples=0.*>= 1"):
        echoing.LossTable(0)
    stage = echoing.loss_prune(echoing.LossTable(4), num_epochs=2)
    with pytest.raises(TypeError, match="'id' key"):
        tf.data.Dataset.range(4).apply(stage)
    with pytest.raises(TypeError, match="before batch"):
        _ids(4).batch(2).apply(stage)


def test_ids_outside_the_table_fail_naming_the_range():
    table = echoing.LossTable(4)
    with pytest.raises(ValueError, match=r"outside \[0, 4\): \[4, -1\]"):
        table.update([1, 4, -1], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="3 ids and 2 losses"):
        table.update([0, 1, 2], [0.0, 0.0])
    stage = echoing.loss_prune(table, num_epochs=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside \[0, 4\).*num_examples"):
        list(_ids(6).apply(stage))
