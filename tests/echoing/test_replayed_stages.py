"""What ``fit`` and ``fit_inputs`` refuse or name before training. A cache or snapshot after a
stage that decides each pass (pruning, the Assistant's filter, priority sampling) would replay its
first pass (issue 33: ``loss_prune(...)`` then ``.cache()`` pruned nothing after the first epoch,
without a word)."""

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
    with pytest.warns(UserWarning, match=r"LossFeedback.fit: epochs=4 ends before loss_prune's "
                      r"num_epochs=12, so its last epochs"):  # fmt: skip
        _model(table).fit(batches, epochs=4, verbose=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _model(table).fit(batches, epochs=2, steps_per_epoch=3, verbose=0)  # not passes: quiet
    assert not [w for w in caught if "ends before loss_prune" in str(w.message)]
