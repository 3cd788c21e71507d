"""Loss-table pruning: the keep rule, weights, epochs and annealing, checkpoints, bad input."""

import itertools
import warnings

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
    n = 4 * N  # tf.data decides a few groups ahead of the consumer; the rest see the update
    table = _table(np.where(np.arange(n) < n // 2, 0.1, 3.0))  # mean 1.55
    stage = echoing.loss_prune(table, prune_ratio=0.9, num_epochs=100, group_size=8, seed=0)
    dataset = _ids(n).apply(stage)
    iterator = iter(dataset)
    next(iterator)
    # Mid-epoch every loss becomes 1.0, below this epoch's threshold of 1.55: the losses are
    # read live, so the upper half is now pruned too; the threshold stays until the epoch ends.
    table.update(np.arange(n), np.ones(n, np.float32))
    rest = [int(element["id"]) for element in iterator]
    assert stage.stats()["prune_threshold"] == pytest.approx(1.55)
    assert len([i for i in rest if i >= n // 2]) < 30  # 128 draws at p = 0.1 (mean 12.8)
    # Epoch 1 takes the new mean, 1.0: no loss is below it, so every example is kept.
    assert len(_epoch(dataset)) == n
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
    # A stream of unknown size is checked as it runs.
    unknown = _ids(6).filter(lambda element: True)
    with pytest.warns(UserWarning, match="its size is unknown") as said:
        pruned = unknown.apply(stage)
    assert said[0].filename == __file__  # the user's line, not TensorFlow's apply
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside \[0, 4\).*num_examples"):
        list(pruned)
    # One of known size, when the stage is applied (it was found only while iterating).
    with pytest.raises(
        ValueError, match=r"a pass of the input holds 6 examples and the LossTable 4 rows"
    ):
        _ids(6).apply(stage)
    with pytest.raises(ValueError, match=r"a pass of the input holds 6 examples"):
        _ids(6).repeat().apply(stage)


@pytest.mark.parametrize(
    ("start", "rows", "message"),
    [
        (100, 50, r"with_ids\(start=100\) gives the examples ids 100..119, .*LossTable\(120\)"),
        (40, 50, r"ids 40..59, but the LossTable has 50 rows"),
        (30, 50, None),  # ids 30..49: the last rows of the table
    ],
)
def test_ids_with_ids_numbers_past_the_table_are_refused_when_the_stage_is_applied(
    start, rows, message
):
    # Issue 33: with_ids(start=100) into a 50-row table failed at the first group, as a graph
    # trace (an InvalidArgumentError from the stage's assert).
    pairs = tf.data.Dataset.from_tensor_slices((np.zeros([20, 1], np.float32), np.zeros(20)))
    numbered = echoing.with_ids(pairs, start=start).shuffle(20, seed=0)
    stage = echoing.loss_prune(echoing.LossTable(rows), num_epochs=2, examples_per_epoch=20)
    if message is None:
        assert len(list(numbered.apply(stage))) == 20
        return
    with pytest.raises(ValueError, match=message):
        numbered.apply(stage)


# ------------------------------------------------------------------------------------- by id


def _decisions(dataset):
    """ids -> weights of one iteration of an ``epoch_ids``/``read`` dataset (checks no repeat)."""
    ids, weights = [], []
    for element in dataset:
        ids.extend(np.atleast_1d(element["id"].numpy()).tolist())
        weights.extend(np.atleast_1d(element["sample_weight"].numpy()).tolist())
    assert len(ids) == len(set(ids))
    return dict(zip(ids, weights, strict=True))


@pytest.mark.parametrize("seed", [0, 5])
def test_by_id_and_on_a_stream_keep_the_same_examples_for_the_same_seed(seed):
    losses = np.random.default_rng(seed).exponential(size=N).astype(np.float32)
    table = _table(losses)
    by_id = echoing.loss_prune(table, num_epochs=10, anneal_fraction=0.2, seed=seed)
    stream = echoing.loss_prune(table, num_epochs=10, anneal_fraction=0.2, seed=seed)
    ids, dataset = by_id.epoch_ids(), _ids().apply(stream)
    for epoch in range(10):
        decided = _decisions(ids)
        assert decided == _epoch(dataset)
        assert len(decided) == N if epoch >= 8 else len(decided) < N
    assert by_id.stats() == stream.stats()


def test_each_iteration_by_id_is_the_next_epoch_in_a_new_order():
    table = _table(np.where(np.arange(N) < N // 2, 0.1, 3.0))
    stage = echoing.loss_prune(table, prune_ratio=0.5, num_epochs=4, anneal_fraction=0.25, seed=1)
    dataset = stage.epoch_ids()
    orders = []
    for epoch in range(4):
        order = [int(element["id"]) for element in dataset]
        assert float(stage.epochs_read()) == epoch + 1.0 and stage.epoch() == epoch + 1
        assert set(range(N // 2, N)) <= set(order)  # at or above the mean: always
        orders.append(order)
    assert orders[0] != orders[1] and sorted(orders[3]) == list(range(N))  # annealed: all
    assert stage.stats()["prune_seen"] == 4 * N


def test_epochs_read_counts_what_went_downstream():
    n = 4096  # 16 chunks of 256 ids (the unit counted), of which a few run ahead
    stage = echoing.loss_prune(_table(np.ones(n)), num_epochs=2, seed=0)
    iterator = iter(stage.epoch_ids().batch(64))  # nothing pruned: all equal the mean
    next(iterator)
    assert 0.0 < float(stage.epochs_read()) < 0.5
    for _ in iterator:
        pass
    assert float(stage.epochs_read()) == 1.0


def test_read_gathers_the_kept_rows_by_id():
    rng = np.random.default_rng(0)
    arrays = {"inputs": rng.normal(size=(N, 3)).astype(np.float32), "label": np.arange(N) % 5}
    table = _table(rng.exponential(size=N))
    stage = echoing.loss_prune(table, num_epochs=3, seed=0)
    rows = 0
    for batch in stage.read(arrays, batch_size=16, drop_remainder=True):
        assert batch["inputs"].shape == (16, 3)
        np.testing.assert_array_equal(batch["inputs"], arrays["inputs"][batch["id"]])
        np.testing.assert_array_equal(batch["label"], arrays["label"][batch["id"]])
        rows += 16
    assert N // 4 < rows < N


@pytest.mark.parametrize("path", ["read", "stream"])
def test_an_iterator_of_either_path_checkpoints_with_default_options(tmp_path, path):
    stage = echoing.loss_prune(_table(np.linspace(0.0, 1.0, N)), num_epochs=3, seed=0)
    if path == "read":
        dataset = stage.read({"x": np.zeros([N, 2], "float32")}, batch_size=8)
    else:
        dataset = _ids().apply(stage).batch(8)
    iterator = iter(dataset)
    next(iterator)  # the stage's variables are saved with it, not by tf.data
    tf.train.Checkpoint(stage=stage, iterator=iterator).save(str(tmp_path / "ckpt"))


def test_by_id_state_survives_a_checkpoint(tmp_path):
    table = _table(np.where(np.arange(N) < N // 2, 0.1, 3.0))
    stage = echoing.loss_prune(table, num_epochs=9, seed=0)
    for _ in range(2):
        _decisions(stage.epoch_ids())
    path = tf.train.Checkpoint(pruning=stage).save(str(tmp_path / "ckpt"))
    following = _decisions(stage.epoch_ids())
    restored = echoing.loss_prune(echoing.LossTable(N), num_epochs=9, seed=0)
    tf.train.Checkpoint(pruning=restored).restore(path).assert_consumed()
    assert restored.epoch() == 2
    assert _decisions(restored.epoch_ids()) == following  # epoch 2 again, decided alike


def _pruned_run(table_losses):
    """A stage over a table whose losses change each epoch, and its ids in batches of 8."""
    table = _table(table_losses)
    stage = echoing.loss_prune(table, num_epochs=20, seed=0)
    options = tf.data.Options()  # the stage's variables are state the iterator cannot save
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    options.experimental_optimization.inject_prefetch = False  # no read-ahead: epochs start
    options.autotune.enabled = False  # at the same batch in every run of this test
    dataset = stage.epoch_ids().repeat().batch(8).with_options(options)
    return table, stage, dataset


def _take(iterator, table, count, start=0):
    ids = []
    for step in range(start, start + count):  # losses go back: each epoch decides differently
        batch = next(iterator)["id"]
        table.update(batch, tf.random.stateless_uniform([8], [step, 0], 0.0, 3.0))
        ids.append(batch.numpy().tolist())
    return ids


@pytest.mark.parametrize("stage_first", [True, False])
def test_an_iterator_restored_mid_epoch_goes_on_with_the_same_ids(tmp_path, stage_first):
    losses = np.linspace(0.0, 1.0, N)
    table, stage, dataset = _pruned_run(losses)
    whole = _take(iter(dataset), table, 24)  # several pruned epochs of 64 ids
    epochs = stage.epoch()
    table, stage, dataset = _pruned_run(losses)
    iterator = iter(dataset)
    first = _take(iterator, table, 9)  # inside the second epoch
    path = tf.train.Checkpoint(stage=stage, iterator=iterator).save(str(tmp_path / "ckpt"))
    table, stage, dataset = _pruned_run(np.zeros(N))
    iterator = iter(dataset)
    # Restoring the iterator calls the epoch's function again, before or after the stage's
    # state comes back: the epoch in progress goes on as it was decided either way.
    parts = [{"stage": stage}, {"iterator": iterator}]
    for objects in parts if stage_first else reversed(parts):
        tf.train.Checkpoint(**objects).restore(path).expect_partial()
    assert first + _take(iterator, table, 15, start=9) == whole
    assert stage.epoch() == epochs > 2


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.epoch_ids(ids=[[0, 1]]), r"non-empty 1-D array of int ids"),
        (lambda s: s.epoch_ids(ids=[]), r"non-empty 1-D array of int ids"),
        (lambda s: s.epoch_ids(ids=[0.5]), r"non-empty 1-D array of int ids"),
        (lambda s: s.epoch_ids(ids=[0, N]), rf"ids must be in \[0, {N}\).*\[0, {N}\]"),
        (lambda s: s.epoch_ids(ids=[3, 1, 3, 3]), r"once, got 2 repeats \(e.g. id 3 3 times\)"),
        (lambda s: s.read({"x": np.zeros([N + 1, 2])}, batch_size=4), r"LossTable\(65\)"),
        (lambda s: s.read({"x": np.zeros([N, 2])}, batch_size=0), r"batch_size=0"),
        (lambda s: s.read({"id": np.zeros([N])}, batch_size=4), r"reserved"),
        (  # not "build the table with LossTable(0)", which is refused
            lambda s: s.read({"x": np.zeros([0, 2])}, batch_size=4),
            rf"the source is empty \(0 examples\); give it the training examples, one per id "
            rf"of the loss table \(LossTable\({N}\)",
        ),
    ],
)
def test_bad_by_id_arguments_name_the_value(call, match):
    stage = echoing.loss_prune(echoing.LossTable(N), num_epochs=2, seed=0)
    with pytest.raises(ValueError, match=match):
        call(stage)


def test_an_epoch_longer_than_the_input_is_refused_and_an_unknown_size_warned():
    stage = echoing.loss_prune(echoing.LossTable(N), num_epochs=2, seed=0)
    with pytest.raises(ValueError, match=rf"holds {N // 2} examples, but an epoch counts .*{N}"):
        _ids(N // 2).apply(stage)
    with pytest.warns(UserWarning, match=rf"loss table's {N} inputs and cannot check it"):
        _ids().filter(lambda element: True).apply(stage)
    explicit = echoing.loss_prune(
        echoing.LossTable(N), num_epochs=2, examples_per_epoch=N // 2, seed=0
    )
    assert len(list(_ids(N // 2).repeat(2).apply(explicit))) <= N  # no warning, no error


@pytest.mark.parametrize("repeat", [4, None], ids=["repeat(4)", "repeat()"])
def test_a_repeated_input_is_checked_by_the_size_of_one_pass(repeat):
    # repeat(4) of N/2 examples has cardinality 2N >= N: it passed, and each pruning epoch took
    # two passes, the anneal never came (issue 33). repeat() could only be warned about.
    stage = echoing.loss_prune(echoing.LossTable(N), num_epochs=2, seed=0)
    short = _ids(N // 2).shuffle(N // 2, seed=0).repeat(repeat)
    with pytest.raises(
        ValueError, match=rf"each pass of the input \(before its repeat\) holds {N // 2} "
    ):
        short.apply(stage)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a pass of the table's size is no longer warned about
        _ids(N).shuffle(N, seed=0).repeat(repeat).apply(stage)


@pytest.mark.parametrize("ids", [[1.7], np.array([0.0, 1.0], np.float32)])
def test_float_ids_are_refused_not_truncated(ids):
    table = echoing.LossTable(4)
    with pytest.raises(TypeError, match=r"ids must be integers, got dtype float"):
        table.update(ids, [1.0] * len(ids))
    with pytest.raises(TypeError, match=r"ids must be integers, got dtype float"):
        tf.function(table.update)(tf.constant(ids, tf.float32), tf.ones([len(ids)]))
    assert not table.seen.numpy().any()


def test_float_ids_in_a_stream_are_refused_as_ids_not_as_a_batch():
    stage = echoing.loss_prune(echoing.LossTable(4), num_epochs=2)
    floats = _ids(4).map(lambda e: {**e, "id": tf.cast(e["id"], tf.float32)})
    with pytest.raises(TypeError, match=r"got dtype float32.*with_ids") as error:
        floats.apply(stage)
    assert "batch()" not in str(error.value)


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_batches_of_ids_are_the_epoch_order_cut_in_whole_batches(drop_remainder):
    losses = np.random.default_rng(2).exponential(size=N).astype(np.float32)
    table = _table(losses)
    one = echoing.loss_prune(table, num_epochs=4, seed=3)
    batched = echoing.loss_prune(table, num_epochs=4, seed=3)
    for _ in range(2):
        order = [int(element["id"]) for element in one.epoch_ids()]
        batches = [
            batch["id"].numpy().tolist()
            for batch in batched.epoch_ids(batch_size=8, drop_remainder=drop_remainder)
        ]
        cut = len(order) // 8 * 8 if drop_remainder else len(order)
        assert [i for batch in batches for i in batch] == order[:cut]
        assert all(len(batch) == 8 for batch in batches[:-1])
        assert float(batched.epochs_read()) == float(one.epochs_read())  # whole epochs read


def test_a_group_that_straddles_an_epoch_end_is_decided_by_each_epoch():
    # 100 ids repeated: groups of up to 128 elements cross the epoch boundary at 100. The
    # second epoch is the annealing one and keeps every example; a group decided by its first
    # element's epoch pruned 17-20 of them.
    losses = np.where(np.arange(100) < 50, 0.1, 3.0)
    stage = echoing.loss_prune(
        _table(losses), prune_ratio=0.5, num_epochs=2, anneal_fraction=0.5, seed=0
    )
    ids = [int(e["id"]) for e in _ids(100).repeat(2).apply(stage)]
    first, second = ids[: ids.index(99) + 1], ids[ids.index(99) + 1 :]
    assert sorted(second) == list(range(100))  # the annealing epoch: everything
    assert 50 <= len(first) < 100  # the first epoch pruned easy ones (p(none) = 2**-50)


@pytest.mark.parametrize(
    "echo",
    [
        lambda: echoing.echo(2),
        lambda: echoing.echo(2, buffer_size=50, seed=0),
        lambda: echoing.AutoEcho(max_factor=4, initial_factor=2).echo(),
    ],
    ids=["echo", "echo_shuffled", "auto_echo"],
)
def test_pruning_after_echo_with_the_default_epoch_is_refused_naming_both_fixes(echo):
    # Each pass brings every id twice: the default epoch (the table's 100) would make a pass
    # count as two pruning epochs, refreshing thresholds mid-pass and annealing early.
    echoed = _ids(100).apply(echo()).map(lambda element: element)
    with pytest.raises(ValueError, match=r"loss_prune reads the output of an echo stage") as info:
        echoed.apply(echoing.loss_prune(echoing.LossTable(100), num_epochs=4, seed=0))
    assert "Prune before echo" in str(info.value) and "examples_per_epoch" in str(info.value)


def test_pruning_before_echo_or_with_the_epoch_given_is_accepted():
    table = echoing.LossTable(100)
    before = _ids(100).apply(echoing.loss_prune(table, num_epochs=4, seed=0)).apply(echoing.echo(2))
    assert len(list(before)) == 200
    stage = echoing.loss_prune(table, num_epochs=4, examples_per_epoch=200, seed=0)
    list(_ids(100).apply(echoing.echo(2)).apply(stage))
    assert float(stage.epochs_read()) == pytest.approx(1.0)  # one pass of 200 inputs: one epoch


@pytest.mark.parametrize("method", ["read", "epoch_ids"])
def test_a_batch_larger_than_the_epoch_with_drop_remainder_is_refused(method):
    stage = echoing.loss_prune(echoing.LossTable(10), num_epochs=2, seed=0)
    call = {
        "read": lambda: stage.read({"x": np.zeros((10, 2))}, batch_size=16, drop_remainder=True),
        "epoch_ids": lambda: stage.epoch_ids(batch_size=16, drop_remainder=True),
    }[method]
    # Every batch would be dropped: fit trained nothing, with only Keras's "ran out of data".
    with pytest.raises(ValueError, match=rf"LossPruning.{method}\(batch_size=16, drop_remainder"):
        call()
    assert len(list(stage.read({"x": np.zeros((10, 2))}, batch_size=16))) == 1  # kept whole


def test_a_reserved_source_key_names_the_reader_that_adds_it():
    stage = echoing.loss_prune(echoing.LossTable(4), num_epochs=2, seed=0)
    match = r"source key 'id' is reserved.*loss_prune\(\.\.\.\)\.read"
    with pytest.raises(ValueError, match=match):
        stage.read({"x": np.zeros(4), "id": np.arange(4)}, batch_size=2)


@pytest.mark.parametrize("make", [echoing.LossTable, echoing.FeedbackInbox])
def test_update_errors_name_the_class_they_were_called_on(make):
    table = make(4)
    name = type(table).__name__
    with pytest.raises(ValueError, match=rf"^{name}.update got ids outside \[0, 4\): \[9\]"):
        table.update([9], [1.0])
    with pytest.raises(ValueError, match=rf"^{name}.update got 2 ids and 1 losses"):
        table.update([0, 1], [1.0])
    with pytest.raises(TypeError, match=rf"^{name}.update: losses must be real numbers.*string"):
        table.update([0], ["0.5"])
    assert not table.seen.numpy().any()


def test_a_stage_restores_into_a_run_of_another_length(tmp_path):
    # The binary resumes a pruned run with another num_steps (so num_epochs): the stage's
    # epoch sizes had shape [num_epochs + 4] and the restore failed on their shape.
    table = echoing.LossTable(8)
    stage = echoing.loss_prune(table, num_epochs=9, seed=0)
    iterator = iter(stage.epoch_ids(batch_size=4).repeat())
    for _ in range(3):
        stage.trained.record(next(iterator)["id"])
    path = tf.train.Checkpoint(stage=stage).save(str(tmp_path / "ckpt"))
    longer = echoing.loss_prune(echoing.LossTable(8), num_epochs=19, seed=0)
    tf.train.Checkpoint(stage=longer).restore(path).assert_existing_objects_matched()
    assert float(longer.epochs_trained()) == pytest.approx(float(stage.epochs_trained()))


def test_epochs_trained_on_a_stream_counts_the_epoch_being_read_by_its_share_read():
    # Issue 33: a stream decides an epoch as it reads it, and the epoch's size so far was taken
    # for its size: training caught up with a stream that reads little ahead (the tf.data
    # service) counted 250 of 1,000 examples as 0.977 epochs, and the binary's run ended at
    # step 16 of an epoch of 32.
    n = 1000
    x, y = np.random.default_rng(0).random((n, 4), np.float32), np.arange(n) % 2
    table = echoing.LossTable(n)
    stage = echoing.loss_prune(table, num_epochs=2, prune_ratio=0.5, seed=0)
    options = tf.data.Options()
    options.autotune.enabled = False  # no read-ahead: the stream is read as training takes it
    options.experimental_optimization.inject_prefetch = False
    stream = echoing.with_ids(tf.data.Dataset.from_tensor_slices((x, y))).apply(stage)
    iterator = iter(stream.batch(50).repeat().with_options(options))
    trained = []
    while stage.examples_to_train() != 0.0 and len(trained) < 60:  # as the binary ends a run
        batch = next(iterator)
        table.update(batch["id"], tf.ones(tf.shape(batch["id"])))
        stage.trained.record(batch["id"])
        trained.append(stage.epochs_trained())
        if stage.epochs_read() < 2.0:  # the last epoch is not decided in full: no end yet
            assert stage.examples_to_train() is None
    assert trained[4] == pytest.approx(0.25, abs=0.01)  # 250 of the first epoch's 1,000
    assert trained[19] == pytest.approx(1.0)
    assert all(later >= earlier for earlier, later in itertools.pairwise(trained))
    assert trained[-1] == pytest.approx(2.0, abs=0.01)  # ended with the second epoch trained


def test_the_examples_left_are_at_least_counted_before_the_last_epoch_is_read():
    # A stream decides an epoch as it reads it: before the last one is read, examples_to_train
    # is None and examples_to_train_at_least a bound under it (exact once all are decided).
    n = 400
    table = echoing.LossTable(n)
    table.update(tf.range(n), tf.range(n, dtype=tf.float32))  # half below the mean
    stage = echoing.loss_prune(table, num_epochs=4, prune_ratio=0.5, anneal_fraction=0.25, seed=0)
    assert stage.examples_to_train_at_least() is None  # nothing read: nothing known
    ids = tf.data.Dataset.range(n).map(lambda i: {"id": i})
    stream = ids.repeat().apply(stage)
    iterator, bounds = iter(stream.batch(20)), []
    while stage.examples_to_train() is None:
        batch = next(iterator)
        stage.trained.record(batch["id"])
        bounds.append(stage.examples_to_train_at_least())
    exact = stage.examples_to_train()
    trained_since = [20.0 * k for k in range(len(bounds) - 1, -1, -1)]
    for bound, since in zip(bounds, trained_since, strict=True):
        assert bound <= exact + since  # never past the end
    assert bounds[-1] == exact
    # Early on it counts each undecided pruned epoch at half its inputs less the draws' spread
    # (160 of 400; they keep about 300) and the anneal whole: near the examples left, so the
    # binary's loops are not cut short long before the end.
    assert bounds[0] >= 0.6 * (exact + trained_since[0])


def test_an_empty_update_records_nothing_and_is_not_called_floats():
    table = echoing.LossTable(4)
    table.update([], [])  # before: "ids must be integers, got dtype float32"
    assert not table.seen.numpy().any() and int(table.nonfinite_skipped.numpy()) == 0


@pytest.mark.parametrize("fed", [False, True])
def test_a_table_nothing_feeds_is_said_once_when_the_third_epoch_opens(fed, capfd):
    table = echoing.LossTable(16)
    prune = echoing.loss_prune(table, num_epochs=4, prune_ratio=0.5, seed=0)
    train = prune.read({"x": np.arange(16, dtype=np.float32)}, batch_size=8)
    for _ in range(4):  # four epochs, each read whole
        for batch in train:
            if fed:  # as LossFeedback(..., observers=[table.update]) does after each batch
                table.update(batch["id"], tf.ones_like(batch["x"]))
    err = capfd.readouterr().err
    warned = "echoing.loss_prune: epoch 3 opened and the LossTable has recorded no loss"
    assert err.count(warned) == (0 if fed else 1)


@pytest.mark.parametrize("path", ["by id", "stream"])
def test_an_epoch_past_num_epochs_is_said_once(path, capfd):
    # Past num_epochs every example is kept: fit(epochs=8) over loss_prune(num_epochs=3) pruned
    # only 3 of its epochs without a word (issue 33).
    table = _table(np.linspace(0.0, 1.0, 16))
    prune = echoing.loss_prune(table, num_epochs=3, prune_ratio=0.5, seed=0)
    if path == "by id":
        train = prune.read({"x": np.arange(16, dtype=np.float32)}, batch_size=8)
        sizes = [sum(len(batch["id"]) for batch in train) for _ in range(5)]
        assert sizes[0] < 16 and sizes[-2:] == [16, 16]
    else:
        assert len(list(_ids(16).repeat(5).apply(prune))) < 5 * 16
    said = "echoing.loss_prune: epoch 4 opened, past num_epochs=3: pruning keeps every example"
    assert capfd.readouterr().err.count(said) == 1


def test_the_trainer_whose_run_ends_at_num_epochs_is_not_told(capfd):
    from echoing.techniques import PruningTechnique

    technique = PruningTechnique(num_examples=16, num_epochs=2, seed=0)
    ids = tf.data.Dataset.range(16).map(lambda i: {"id": i}).repeat(4)
    assert len(list(ids.apply(technique.stage))) <= 64
    assert "past num_epochs" not in capfd.readouterr().err


def test_a_stream_shorter_than_a_group_is_decided_epoch_by_epoch():
    # A group (128 elements) spanning several epochs of 16 was decided in two parts: every epoch
    # after the first as the second, so the annealing epoch was pruned too (issue 33).
    table = _table(np.linspace(0.0, 1.0, 16))
    prune = echoing.loss_prune(table, num_epochs=4, prune_ratio=0.5, anneal_fraction=0.25, seed=0)
    kept = [int(element["id"]) for element in _ids(16).repeat(4).apply(prune)]
    assert sorted(kept[-16:]) == list(range(16))  # epoch 3, the annealing one, keeps all
    assert len(kept) < 4 * 16 and prune.stats()["prune_epoch"] == 4


def test_a_stage_whose_epochs_all_anneal_warns_that_it_prunes_nothing():
    with pytest.warns(UserWarning, match=r"anneal_fraction=1\) prunes no epoch"):
        echoing.loss_prune(echoing.LossTable(4), num_epochs=3, anneal_fraction=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        echoing.loss_prune(echoing.LossTable(4), num_epochs=1)  # a fed table prunes epoch 0


@pytest.mark.parametrize("num_epochs", [2, 6, 7])
def test_a_schedule_whose_anneal_rounds_to_no_epoch_says_so(num_epochs):
    # Issue 33: at anneal_fraction=0.125 every epoch of a run of up to 7 was pruned (InfoBatch's
    # e < (1 - δ)·E), and the last epoch, meant to train on every example, never did, unsaid.
    with pytest.warns(UserWarning, match=rf"loss_prune\(num_epochs={num_epochs}, anneal_fraction="
                      r"0.125\) trains no epoch on every example at the end: .* set "
                      rf"anneal_fraction \(the binary's prune_anneal\) >= 1/num_epochs = "
                      rf"{1 / num_epochs:.3g}"):  # fmt: skip
        echoing.loss_prune(echoing.LossTable(4), num_epochs=num_epochs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        echoing.loss_prune(echoing.LossTable(4), num_epochs=8)  # its epoch 7 anneals
        echoing.loss_prune(echoing.LossTable(4), num_epochs=num_epochs, anneal_fraction=0.0)
        echoing.loss_prune(echoing.LossTable(4), num_epochs=num_epochs, anneal_fraction=0.5)


def test_a_stream_of_nested_inputs_is_pruned_leaf_by_leaf():
    # A multi-input model's dict of inputs failed in the graph: "unhashable type: 'slice'"
    # (issue 33); with_ids, echo and LossFeedback all take such elements.
    n = 300  # groups of 128 straddle the epochs' ends
    inputs = {"a": np.arange(n, dtype=np.float32)[:, None], "b": np.ones((n, 2), np.float32)}
    source = echoing.with_ids(tf.data.Dataset.from_tensor_slices((inputs, np.arange(n) % 2)))
    table = _table(np.linspace(0.0, 1.0, n))
    kept = list(source.repeat(2).apply(echoing.loss_prune(table, num_epochs=4, seed=0)))
    assert n < len(kept) < 2 * n
    for element in kept:
        assert float(element["inputs"]["a"][0]) == float(element["id"])  # rows stay together


def test_lookup_takes_int32_ids_as_update_does():
    # Before: TensorFlow's "cannot compute Less as input #1 was expected to be a int32 tensor".
    table = echoing.LossTable(4)
    table.update(tf.range(4), tf.constant([1.0, 2.0, 3.0, 4.0]))
    losses, seen = table.lookup(tf.range(2))
    np.testing.assert_allclose(losses.numpy(), [1.0, 2.0])
    assert seen.numpy().all()
