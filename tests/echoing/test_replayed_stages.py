"""What ``fit`` and ``fit_inputs`` refuse or name before training. A cache or snapshot after a
stage that decides each pass (pruning, the Assistant's filter, priority sampling) would replay its
first pass (issue 33: ``loss_prune(...)`` then ``.cache()`` pruned nothing after the first epoch,
without a word)."""

import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing._src.core import dataset_graph

N, BATCH = 96, 16


def _source():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(N, 8)).astype("float32"), np.arange(N) % 3
    return echoing.with_ids(tf.data.Dataset.from_tensor_slices((x, y)))


def _model(table):
    """A LossFeedback model whose losses update ``table``, compiled."""
    keras.utils.set_random_seed(0)
    model = echoing.keras.LossFeedback(
        keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)]),
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None
        ),
        observers=[table.update],
    )
    model.compile(keras.optimizers.SGD(0.1))
    return model


def _fit(pipeline):
    table = echoing.LossTable(N)
    prune = echoing.loss_prune(table, num_epochs=4, seed=0)
    model = _model(table)
    batches = pipeline(_source(), prune).batch(BATCH).map(echoing.keras.fit_inputs)
    model.fit(batches, epochs=4, verbose=0)
    return prune.stats()


def test_fit_refuses_a_cache_after_pruning_naming_where_to_move_it():
    with pytest.raises(ValueError, match=r"LossFeedback.fit: the dataset's loss_prune comes "
                       r"before a cache\(\), which replays the first epoch's elements .* move "
                       r"the cache\(\) before loss_prune"):  # fmt: skip
        _fit(lambda source, prune: source.apply(prune).cache())


def test_a_cache_before_pruning_prunes_every_epoch():
    stats = _fit(lambda source, prune: source.cache().apply(prune))
    assert stats["prune_epoch"] >= 3 and stats["prune_keep_rate"] < 1.0


@pytest.mark.parametrize("replay", ["cache", "snapshot"])
def test_each_per_pass_stage_is_found_behind_a_replay(replay, tmp_path):
    def replayed(dataset):
        return dataset.cache() if replay == "cache" else dataset.snapshot(str(tmp_path))

    source = _source()
    assistant = echoing.Assistant(3, input_shape=(8,))
    stages = {
        "loss_prune": source.apply(echoing.loss_prune(echoing.LossTable(N), num_epochs=2)),
        "assistant_filter": source.apply(echoing.assistant_filter(assistant, base_prob=0.5)),
        "priority_sample": echoing.priority_sample(
            echoing.PriorityTable(N),
            {"inputs": np.zeros((N, 8), np.float32), "label": np.zeros(N, np.int64)},
            batch_size=BATCH,
            top_ratio=0.5,
            renew_ratio=0.5,
            seed=0,
        ),
    }
    for name, output in stages.items():
        shown = dataset_graph.per_pass_stage_replayed(replayed(output).prefetch(1))
        assert shown == (name, f"{replay}()")
        assert dataset_graph.per_pass_stage_replayed(output.prefetch(1)) is None


def test_a_model_checkpoint_of_the_wrapper_is_refused_before_training(tmp_path):
    # Before: a TypeError at the end of the first trained epoch.
    model = _model(echoing.LossTable(N))
    batches = _source().batch(BATCH).map(echoing.keras.fit_inputs)
    whole = keras.callbacks.ModelCheckpoint(str(tmp_path / "ck.keras"))
    with pytest.raises(TypeError, match=r"LossFeedback.fit: ModelCheckpoint\(.*ck.keras'\) would "
                       r"save the whole LossFeedback, .* pass save_weights_only=True"):  # fmt: skip
        model.fit(batches, epochs=1, verbose=0, callbacks=[whole])
    assert int(model.optimizer.iterations) == 0
    weights = keras.callbacks.ModelCheckpoint(
        str(tmp_path / "ck.weights.h5"), save_weights_only=True
    )
    model.fit(batches, epochs=1, verbose=0, callbacks=[weights])
    assert (tmp_path / "ck.weights.h5").exists()


def test_fit_inputs_says_which_batch_keys_it_leaves_out():
    # Before: a batch's "weight" (or a misspelt "sample_weights") was dropped in silence, and
    # training ran unweighted.
    weighted = _source().map(lambda e: {**e, "sample_weights": tf.ones([])}).batch(BATCH)
    with pytest.warns(UserWarning, match=r"fit_inputs leaves out the batch's \['sample_weights'\]"):
        mapped = weighted.map(echoing.keras.fit_inputs)
    assert len(mapped.element_spec) == 2  # (x, y): the misspelt weights are not among them


def test_fit_shorter_than_pruning_num_epochs_is_warned_about():
    # Before: num_epochs=12 with fit(epochs=4) pruned every epoch, the anneal never ran, and
    # nothing said so (the other way round the stage says so itself).
    table = echoing.LossTable(N)
    prune = echoing.loss_prune(table, num_epochs=12, seed=0)
    batches = _source().apply(prune).batch(BATCH).map(echoing.keras.fit_inputs)
    with pytest.warns(UserWarning, match=r"LossFeedback.fit: fit runs 4 epochs \(epochs=4\), to "
                      r"loss_prune's epoch 4 of its num_epochs=12: unless later fits"):  # fmt: skip
        _model(table).fit(batches, epochs=4, verbose=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _model(table).fit(batches.repeat(), epochs=2, steps_per_epoch=3, verbose=0)  # not passes
    assert not [w for w in caught if "unless later fits" in str(w.message)]


def test_steps_per_epoch_with_pruning_is_refused_on_passes_and_said_over_a_repeat():
    # Issue 33: fit(epochs=8, steps_per_epoch=8) on a pruned pass trained [8, 0, 6, 6, ...]
    # steps and ran 7 of pruning's 8 epochs, the anneal never; Keras's "ran out of data" was the
    # only word, which docs/pruning.md says to expect.
    table, _, batches = _read_pruning(num_epochs=8)
    with pytest.raises(ValueError, match=r"LossFeedback.fit: steps_per_epoch=3 on a pruned "
                       r"dataset that ends with each pass: .* leave steps_per_epoch"):  # fmt: skip
        _model(table).fit(batches, epochs=8, steps_per_epoch=3, verbose=0)
    with pytest.warns(UserWarning, match=r"steps_per_epoch=3 over a repeated pruned dataset: "
                      r"loss_prune counts its num_epochs=8 in passes"):  # fmt: skip
        _model(table).fit(batches.repeat(), epochs=2, steps_per_epoch=3, verbose=0)


def _read_pruning(num_epochs):
    """A loss_prune stage read by id (``prune.read``, docs/pruning.md's path), and its batches."""
    rng = np.random.default_rng(0)
    arrays = {"inputs": rng.normal(size=(N, 8)).astype("float32"), "label": np.arange(N) % 3}
    table = echoing.LossTable(N)
    prune = echoing.loss_prune(table, num_epochs=num_epochs, prune_ratio=0.5, seed=0)
    return table, prune, prune.read(arrays, batch_size=BATCH).map(echoing.keras.fit_inputs)


def test_fits_checks_see_a_pruning_stage_read_by_id():
    # Issue 33: prune.read(...) was not marked as a pruning stage, so fit trained on a cache of
    # it (pruning nothing, prune_keep_rate 1.0) and never said its epochs ended early.
    table, _, batches = _read_pruning(num_epochs=4)
    with pytest.raises(ValueError, match=r"loss_prune comes before a cache\(\)"):
        _model(table).fit(batches.cache(), epochs=4, verbose=0)
    with pytest.warns(
        UserWarning, match=r"fit runs 3 epochs \(epochs=3\), to loss_prune's epoch 3"
    ):
        _model(table).fit(batches, epochs=3, verbose=0)


class _BatchesPerEpoch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.counts = []

    def on_epoch_begin(self, epoch, logs=None):
        self.counts.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.counts[-1] += 1


def test_a_fit_that_resumes_on_a_pruned_epoch_is_said_to_cut_longer_epochs_short():
    # Issue 33: a second fit(initial_epoch=4, epochs=8) took its epochs' length from its first,
    # pruned epoch and cut the anneal's whole epochs short (21 of 32 batches), in silence.
    table, prune, batches = _read_pruning(num_epochs=8)
    model = _model(table)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(batches, epochs=4, verbose=0)  # starts on the first, whole epoch: safe
    assert not [w for w in caught if "cut short" in str(w.message)]
    with pytest.warns(UserWarning, match=r"fit starts on loss_prune's epoch 5, a pruned one, and "
                      r"runs 4 epochs; .* cut short. .* one fit per epoch"):  # fmt: skip
        model.fit(batches, initial_epoch=4, epochs=8, verbose=0)
    # The fix it names, one epoch per fit, trains every kept batch of every epoch.
    table, prune, batches = _read_pruning(num_epochs=8)
    model, counted = _model(table), _BatchesPerEpoch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(8):
            model.fit(batches, initial_epoch=epoch, epochs=epoch + 1, callbacks=[counted],
                      verbose=0)  # fmt: skip
    assert not [w for w in caught if "LossFeedback.fit" in str(w.message)]
    assert counted.counts[-1] == N // BATCH  # the anneal's last epoch: every example
    assert prune.stats()["prune_epoch"] == 8.0


def test_a_resumed_fit_is_judged_by_the_epochs_pruning_has_left():
    # Before: fit(initial_epoch=4, epochs=8) after 4 epochs said "epochs=8 ends before
    # loss_prune's num_epochs=8", comparing the 4 epochs it runs with all 8.
    table, _, batches = _read_pruning(num_epochs=8)
    model = _model(table)
    for epoch in range(4):  # one fit per epoch: a loop's, not judged
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(batches, initial_epoch=epoch, epochs=epoch + 1, verbose=0)
        assert not [w for w in caught if "unless later fits" in str(w.message)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(batches, initial_epoch=4, epochs=8, verbose=0)
    assert not [w for w in caught if "unless later fits" in str(w.message)]
    table, _, batches = _read_pruning(num_epochs=8)  # a fresh stage: 4 epochs of 8
    with pytest.warns(UserWarning, match=r"fit runs 4 epochs \(epochs=8 - initial_epoch=4\), "
                      r"to loss_prune's epoch 4 of its num_epochs=8"):  # fmt: skip
        _model(table).fit(batches, initial_epoch=4, epochs=8, verbose=0)


def test_a_fit_stopped_before_pruning_s_anneal_is_said_and_a_whole_fit_is_not():
    # Issue 33: EarlyStopping ended an 8-epoch pruned fit after 2 epochs (prune_epoch 2.0 of
    # 8, its anneal never run) without a word: the checks only read fit's epochs argument.
    table, prune, batches = _read_pruning(num_epochs=4)
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10)
    with pytest.warns(UserWarning, match=r"fit was stopped \(EarlyStopping, .*\) at loss_prune's "
                      r"epoch 2 of its num_epochs=4, .*start_from_epoch"):  # fmt: skip
        _model(table).fit(batches, epochs=4, callbacks=[stop], verbose=0)
    table, prune, batches = _read_pruning(num_epochs=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _model(table).fit(batches, epochs=4, verbose=0)
    assert not [w for w in caught if "LossFeedback.fit" in str(w.message)]
    assert prune.stats()["prune_epoch"] == 4.0


def test_a_backup_and_restore_resuming_past_the_pruning_stage_is_said(tmp_path):
    # Issue 33: after a crash at epoch 3, a rebuilt model, table and stage with the same
    # BackupAndRestore resumed fit at epoch 3 while the new stage counted from 0: the 8-epoch run
    # ended at pruning's epoch 5 of 8, its anneal never run, without a word.
    class Crash(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 2:
                raise RuntimeError("crash")

    def attempt(*callbacks):
        table, _, batches = _read_pruning(num_epochs=8)
        model = _model(table)
        model(np.zeros([2, 8], np.float32))  # BackupAndRestore needs a built model
        backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
        model.fit(batches, epochs=8, callbacks=[backup, *callbacks], verbose=0)

    with pytest.raises(RuntimeError, match="crash"):
        attempt(Crash())
    with pytest.warns(UserWarning, match=r"fit resumes at epoch 3 \(a BackupAndRestore restored "
                      r"the model and optimizer\), but loss_prune is at its epoch 0: .*ends at "
                      r"pruning's epoch 5 of 8"):  # fmt: skip
        attempt()


def test_validation_batch_dicts_are_refused_before_training():
    # Issue 33: validation_data of batch dicts failed at the first validation, after 2 epochs.
    table, _, batches = _read_pruning(num_epochs=4)
    rng = np.random.default_rng(1)
    plain = {"inputs": rng.normal(size=(32, 8)).astype("float32"), "label": np.arange(32) % 3}
    validation = tf.data.Dataset.from_tensor_slices(plain).batch(16)
    model = _model(table)
    with pytest.raises(ValueError, match=r"validation_data holds batch dicts \(keys \['inputs', "
                       r"'label'\]\), .*batches.map\(echoing.keras.fit_inputs\)"):  # fmt: skip
        model.fit(batches, epochs=4, validation_data=validation, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 0  # before any step


def test_validation_through_a_per_pass_stage_is_refused():
    # Issue 33: validation_data=the pruned dataset ran the stage once more per epoch, so pruning
    # counted two epochs per fit epoch and its anneal began halfway through.
    table, _, batches = _read_pruning(num_epochs=4)
    message = r"validation_data reads the output of loss_prune, .* validate on data that does not"
    with pytest.raises(ValueError, match=message):
        _model(table).fit(batches, epochs=4, validation_data=batches, verbose=0)
    plain = _source().batch(BATCH).map(echoing.keras.fit_inputs)
    _model(table).fit(batches, epochs=1, validation_data=plain, verbose=0)


def test_an_endless_sampler_without_steps_per_epoch_is_refused():
    # Issue 33: PriorityModel.fit(priority_sample(...)) with no steps_per_epoch ran its first
    # epoch for ever, printing nothing under verbose=0.
    table = echoing.PriorityTable(N)
    arrays = {"inputs": np.zeros((N, 8), np.float32), "label": np.zeros(N, np.int64)}
    batches = echoing.priority_sample(
        table, arrays, batch_size=BATCH, top_ratio=0.5, renew_ratio=0.5, seed=0
    ).map(echoing.keras.fit_inputs)
    model = echoing.keras.PriorityModel(
        keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)]),
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None
        ),
        table=table,
    )
    model.compile(keras.optimizers.SGD(0.1))
    with pytest.raises(ValueError, match=r"PriorityModel.fit: the dataset is infinite .* pass "
                       r"steps_per_epoch"):  # fmt: skip
        model.fit(batches, epochs=1, verbose=0)
    message = r"class_weight cannot be used with batches that carry a sample_weight .* w \* tf.ga"
    with pytest.raises(ValueError, match=message):
        model.fit(batches, steps_per_epoch=2, class_weight={0: 1.0, 1: 2.0, 2: 1.0}, verbose=0)
    model.fit(batches, steps_per_epoch=2, epochs=1, verbose=0)
    # evaluate over the sampler hung for ever too (twenty-sixth probe).
    with pytest.raises(ValueError, match=r"PriorityModel.evaluate: the dataset is infinite .*"
                       r"evaluate on a split that does not pass through the sampler"):  # fmt: skip
        model.evaluate(batches, verbose=0)
    assert len(model.evaluate(batches, steps=2, verbose=0, return_dict=True)) >= 1


def test_pruned_batches_that_lost_their_weights_are_said_and_the_regroup_hint_keeps_them():
    # Issue 33: the regrouping map that a dict source's error suggested left out sample_weight,
    # and a pruned fit trained the kept easy examples at weight 1 (not 2), without a word.
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(N, 5)).astype("float32"), rng.normal(size=(N, 3)).astype("float32")
    with pytest.raises(TypeError) as raised:  # the source error's hint, run as written
        echoing.loss_prune(echoing.LossTable(N), num_epochs=2).read(
            {"inputs": {"a": a, "b": b}, "label": np.arange(N) % 3}, batch_size=BATCH
        )
    hint = re.search(r"\.map\((lambda e: .*)\)\.$", str(raised.value)).group(1)
    table = echoing.LossTable(N)
    prune = echoing.loss_prune(table, num_epochs=2, prune_ratio=0.5, seed=0)
    read = prune.read({"a": a, "b": b, "label": np.arange(N) % 3}, batch_size=BATCH)
    keras.utils.set_random_seed(0)
    inputs = {"a": keras.Input((5,), name="a"), "b": keras.Input((3,), name="b")}
    net = keras.Model(
        inputs, keras.layers.Dense(3)(keras.layers.Concatenate()(list(inputs.values())))
    )
    model = echoing.keras.LossFeedback(
        net,
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None
        ),
        observers=[table.update],
    )
    model.compile(keras.optimizers.SGD(0.1))
    weighted = read.map(eval(hint)).map(echoing.keras.fit_inputs)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*without its sample_weight")
        model.fit(weighted, epochs=1, verbose=0)

    def old_hint(e):  # what the source error suggested before
        return {"inputs": {"a": e["a"], "b": e["b"]}, "label": e["label"], "id": e["id"]}

    unweighted = read.map(old_hint).map(echoing.keras.fit_inputs)
    with pytest.warns(UserWarning, match=r"LossFeedback.fit: the batches come from loss_prune"
                      r"\(prune_ratio=0.5\) but reach fit without its sample_weight, so the "
                      r"below-mean examples it keeps train at weight 1, not 2"):  # fmt: skip
        model.fit(unweighted, epochs=1, verbose=0)
