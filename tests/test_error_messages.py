"""One table of the inputs a user can get wrong, each with the error it must raise, early.

Each row: what was wrong, how to trigger it, the exception and a pattern its message must match
(naming the value and the fix). The per-module tests check the same errors in context; this
table is the one place to read them all, and to add a row when a new input is accepted. Errors
that need a server or a run (gs:// without network or credentials, a corrupt checkpoint, a
starving filter) are in ``tests/pipelines/sources/test_faults.py``,
``tests/trainers/test_checkpointing.py`` and ``tests/echoing/test_assistant_filter.py``; every
config field's refusal is the table in ``tests/trainers/test_experiment.py``.
"""

import warnings

import keras
import ml_collections
import numpy as np
import pytest
import tensorflow as tf

import echoing
import pipelines
from pipelines.sources import record_layouts
from trainers import experiment


def _examples(n=8, batched=False):
    dataset = tf.data.Dataset.from_tensor_slices(
        {
            "inputs": np.zeros((n, 4), np.float32),
            "label": np.zeros(n, np.int64),
            "id": np.arange(n, dtype=np.int64),
        }
    )
    return dataset.batch(4) if batched else dataset


def _live_factor(value):
    factor = tf.Variable(2.0)
    echoed = tf.data.Dataset.range(4).apply(echoing.echo(factor))
    factor.assign(value)
    return list(echoed)


def _learner_push(features, labels, losses):
    learner = echoing.AssistantLearner(echoing.Assistant(2, input_shape=(4,)))
    learner.push(tf.zeros(features), tf.constant(labels), tf.constant(losses))


def _learner_feedback_ids(ids):
    examples = {"inputs": np.zeros((4, 4), np.float32), "label": np.zeros(4, np.int64)}
    learner = echoing.AssistantLearner(echoing.Assistant(2, input_shape=(4,)), examples=examples)
    learner.feedback_ids(tf.constant(ids), tf.ones([len(ids)]))


def _loss_feedback(**arguments):
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    return echoing.keras.LossFeedback(net, **{"per_example_loss": loss, **arguments})


def _fit_with_reduced_loss():
    """LossFeedback given a Keras loss without reduction=None: refused when fit traces."""
    model = _loss_feedback(
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        observers=[echoing.LossTable(8).update],
    )
    model.compile("sgd")
    model.fit(_examples(batched=True).map(echoing.keras.fit_inputs), verbose=0)


def _fit_batch_dicts_unmapped():
    """LossFeedback fit on batch dicts as they are (no ``.map(echoing.keras.fit_inputs)``)."""
    model = _loss_feedback(observers=[echoing.LossTable(8).update])
    model.compile("sgd")
    model.fit(_examples(batched=True), verbose=0)


def _compiled_net():
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    net.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return net


def _traced_select_rows(batch_spec, scores_spec):
    """select_rows traced in a train step's tf.function with these static shapes."""
    select = tf.function(lambda batch, scores: echoing.select_rows(batch, scores, 2))
    select.get_concrete_function(batch_spec, scores_spec)


def _boss_features(up_to):
    inputs = keras.Input((4,))
    boss = keras.Model(inputs, keras.layers.Dense(2, name="dense")(inputs))
    return echoing.BossFeatures(boss, up_to)


def _fit_auto_echo_without_stamp():
    """A fit with AutoEchoCallback but no ``.apply(callback.stamp)``: it trains, and warns;
    the warning is made an error here so that the table can check it like the others."""
    callback = echoing.keras.AutoEchoCallback(echoing.AutoEcho())
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    data = tf.data.Dataset.from_tensors((tf.zeros([2]), tf.zeros([1]))).repeat(4).batch(2)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="AutoEchoCallback")
        model.fit(data, callbacks=[callback], verbose=0)


def _tfds(name, tmp_path):
    config = pipelines.default_data_config()
    config.source, config.name, config.data_dir = "tfds", name, str(tmp_path)
    pipelines.make_datasets(config, seed=0)


def _data_config(**fields):
    config = pipelines.default_data_config()
    config.update(fields)
    pipelines.resolve_data_config(config)


def _run_config(**fields):
    config = experiment.default_config().to_dict()
    config.update(fields)
    experiment.resolve_config(ml_collections.ConfigDict(config))


ROWS = {
    # Echo factors, static and live.
    "echo factor 0": (lambda _: echoing.echo(0), ValueError, r"finite and > 0, got 0\.0"),
    "echo factor 1e9": (lambda _: echoing.echo(1e9), ValueError, r"at most MAX_FACTOR=1000"),
    "echo factor '2'": (lambda _: echoing.echo("2"), TypeError, r"a real number.*got '2'"),
    "live factor -1": (
        lambda _: _live_factor(-1.0),
        tf.errors.InvalidArgumentError,
        r"live echo factor \(a tf.Variable\) must be in \(0, 1000\], got.*-1",
    ),
    "live factor NaN": (
        lambda _: _live_factor(float("nan")),
        tf.errors.InvalidArgumentError,
        r"live echo factor .*must be in \(0, 1000\], got.*nan",
    ),
    "AutoEcho max_factor 0": (
        lambda _: echoing.AutoEcho(max_factor=0),
        ValueError,
        r"max_factor must be in \[1\.0, 1000\.0\], got 0",
    ),
    "AutoEchoCallback without stamp (a warning)": (
        lambda _: _fit_auto_echo_without_stamp(),
        UserWarning,
        r"no batch was stamped.*train = train\.apply\(callback\.stamp\)",
    ),
    "AutoEchoCallback of a string": (
        lambda _: echoing.keras.AutoEchoCallback("x"),
        TypeError,
        r"AutoEchoCallback\(auto_echo='x'\): expected an echoing\.AutoEcho",
    ),
    "AutoEchoCallback observe_seconds -1": (
        lambda _: echoing.keras.AutoEchoCallback(echoing.AutoEcho(), observe_seconds=-1),
        ValueError,
        r"observe_seconds=-1\): expected a finite number of seconds > 0",
    ),
    "AutoEchoCallback max_steps_per_execution 0": (
        lambda _: echoing.keras.AutoEchoCallback(echoing.AutoEcho(), max_steps_per_execution=0),
        ValueError,
        r"max_steps_per_execution=0\): expected an int >= 1",
    ),
    # diagnose.
    "diagnose num_steps 0": (
        lambda _: echoing.diagnose(tf.data.Dataset.range(8), lambda b: b, num_steps=0),
        ValueError,
        r"diagnose\(num_steps=0\): expected an int >= 1",
    ),
    "diagnose max_seconds -1": (
        lambda _: echoing.diagnose(tf.data.Dataset.range(8), lambda b: b, max_seconds=-1),
        ValueError,
        r"diagnose\(max_seconds=-1\): expected a number of seconds > 0",
    ),
    "diagnose on single examples": (
        lambda _: echoing.diagnose(
            _examples().map(lambda e: (e["inputs"], e["label"])).repeat(), _compiled_net()
        ),
        ValueError,
        r"look like single examples .*pass the batched pipeline.*dataset\.batch\(32\)",
    ),
    # Counters.
    "count(rows=True) before batch()": (
        lambda _: _examples().apply(echoing.meters.ElementCounter("rows").count(rows=True)),
        ValueError,
        r"count\(rows=True\) counts the rows of batches.*not batched.*Apply it after batch\(\)",
    ),
    # The Keras wrappers.
    "LossFeedback observers not in a list": (
        lambda _: _loss_feedback(observers=echoing.LossTable(4).update),
        TypeError,
        r"got a single callable; pass a list, e\.g\. observers=\[table\.update\]",
    ),
    "per_example_loss that reduces to a scalar": (
        lambda _: _fit_with_reduced_loss(),
        ValueError,
        r"LossFeedback: per_example_loss returned shape \(\) for predictions of shape "
        r"\(None, 2\).*build it with reduction=None",
    ),
    "LossFeedback fit on batch dicts without fit_inputs": (
        lambda _: _fit_batch_dicts_unmapped(),
        TypeError,
        r"got no labels y to train on, and x = a dict with keys \['id', 'inputs', 'label'\]: "
        r"fit was given the batch dicts themselves\. Map the batches with .*fit_inputs",
    ),
    "fit_inputs of an (x, y) tuple": (
        lambda _: echoing.keras.fit_inputs((np.zeros((2, 4)), np.zeros(2))),
        TypeError,
        r"fit_inputs takes one batch dict .*got a tuple: \(x, y\) batches hold no example ids",
    ),
    # The Assistant, its filter and its learner.
    "Assistant num_classes 0": (
        lambda _: echoing.Assistant(num_classes=0, input_shape=(4,)),
        ValueError,
        r"num_classes=0\): expected a positive int",
    ),
    "filter base_prob 2": (
        lambda _: echoing.assistant_filter(echoing.Assistant(2, input_shape=(4,)), base_prob=2.0),
        ValueError,
        r"base_prob=2\.0\): expected a number in \(0, 1\]",
    ),
    "filter after batch()": (
        lambda _: _examples(batched=True).apply(
            echoing.assistant_filter(echoing.Assistant(2, input_shape=(4,)))
        ),
        ValueError,
        r"If the dataset is batched, apply the filter before batch\(\)",
    ),
    "filter features of another width than the Assistant": (
        lambda _: _examples().apply(
            echoing.assistant_filter(echoing.Assistant(2, input_shape=(5,)))
        ),
        ValueError,
        r"element\['inputs'\] has shape \(4,\) per example, but the Assistant scores features "
        r"of shape \(5,\)",
    ),
    "filter labels outside num_classes (in the graph)": (
        lambda _: list(
            _examples()
            .map(lambda e: {**e, "label": e["label"] + 2})
            .apply(echoing.assistant_filter(echoing.Assistant(2, input_shape=(4,))))
        ),
        tf.errors.InvalidArgumentError,
        r"labels under .+label.+ must be class ids in \[0, 2\) for an Assistant of num_classes=2",
    ),
    "learner features of another width": (
        lambda _: _learner_push([2, 5], [0, 1], [1.0, 2.0]),
        ValueError,
        r"features of shape \(2, 5\), but the Assistant scores features of shape \(4,\)",
    ),
    "learner losses of another length": (
        lambda _: _learner_push([2, 4], [0, 1], [1.0]),
        ValueError,
        r"got 2 labels \(or ids\) but \(1,\) losses",
    ),
    "learner labels that are not integers": (
        lambda _: _learner_push([2, 4], [0.0, 1.7], [1.0, 2.0]),
        TypeError,
        r"labels of dtype float32; expected integer class labels",
    ),
    "learner ids outside the examples": (
        lambda _: _learner_feedback_ids([1, 4]),
        ValueError,
        r"feedback_ids got ids in \[1, 4\], outside \[0, 4\) \(the 4 examples",
    ),
    "learner float ids": (
        lambda _: _learner_feedback_ids([1.0, 2.0]),
        TypeError,
        r"feedback_ids needs integer example ids, got dtype float32",
    ),
    "BossFeatures layer that does not exist": (
        lambda _: _boss_features("conv"),
        ValueError,
        r"up_to='conv'\): the Boss has no layer of that name; its layers are \[.*'dense'\]",
    ),
    # Pruning and the loss table.
    "prune after batch()": (
        lambda _: _examples(batched=True).apply(
            echoing.loss_prune(echoing.LossTable(8), num_epochs=2)
        ),
        TypeError,
        r"must be a scalar integer id.*insert the stage before batch\(\)",
    ),
    "prune a stream of float ids": (
        lambda _: (
            _examples()
            .map(lambda e: {**e, "id": tf.cast(e["id"], tf.float32)})
            .apply(echoing.loss_prune(echoing.LossTable(8), num_epochs=2))
        ),
        TypeError,
        r"element\['id'\] must be a scalar integer id, got dtype float32.*echoing\.with_ids",
    ),
    "prune read of an empty source": (
        lambda _: echoing.loss_prune(echoing.LossTable(8), num_epochs=2).read(
            {"x": np.zeros((0, 2))}, batch_size=4
        ),
        ValueError,
        r"LossPruning\.read: the source is empty \(0 examples\)",
    ),
    "prune_ratio 1": (
        lambda _: echoing.loss_prune(echoing.LossTable(8), num_epochs=2, prune_ratio=1.0),
        ValueError,
        r"prune_ratio=1\.0\): expected a number in \[0, 1\)",
    ),
    "prune by id, ids outside the table": (
        lambda _: echoing.loss_prune(echoing.LossTable(8), num_epochs=2).epoch_ids(ids=[3, 8]),
        ValueError,
        r"ids must be in \[0, 8\) \(the loss table's size\), got ids in \[3, 8\]",
    ),
    "prune read, source and table sizes differ": (
        lambda _: echoing.loss_prune(echoing.LossTable(8), num_epochs=2).read(
            {"x": np.zeros((9, 2))}, batch_size=4
        ),
        ValueError,
        r"source holds 9 examples and the loss table 8; build the table with LossTable\(9\)",
    ),
    "with_ids on dict elements": (
        lambda _: echoing.with_ids(_examples()),
        ValueError,
        r"already hold ids",
    ),
    "loss table id out of range": (
        lambda _: echoing.LossTable(4).update([4], [1.0]),
        ValueError,
        r"ids outside \[0, 4\): \[4\].*num_examples = the data set size",
    ),
    "loss table lengths differ": (
        lambda _: echoing.LossTable(4).update([0, 1], [1.0]),
        ValueError,
        r"got 2 ids and 1 losses; pass one loss per id",
    ),
    "priority table id out of range": (
        lambda _: echoing.PriorityTable(4).update([9], [1.0], step=0),
        ValueError,
        r"id 9 is out of range for a PriorityTable of N=4",
    ),
    "select_rows k > batch": (
        lambda _: echoing.select_rows({"x": tf.zeros([4, 2])}, tf.zeros([4]), 5),
        ValueError,
        r"k=5\) asks for more rows than the batch has \(4\)",
    ),
    "select_rows an entry of another length": (
        lambda _: echoing.select_rows(
            {"x": tf.zeros([4, 2]), "y": tf.zeros([3])}, tf.zeros([4]), 2
        ),
        ValueError,
        r"batch\['y'\] has 3 rows, but there are 4 scores \(one per row\)",
    ),
    "select_rows in a tf.function, scores of another length": (
        lambda _: _traced_select_rows({"x": tf.TensorSpec([8, 2])}, tf.TensorSpec([6])),
        ValueError,
        r"select_rows: scores must be one per row, shape \[8\], got \(6,\)",
    ),
    "sample_rows scores of another length": (
        lambda _: echoing.sample_rows({"x": tf.zeros([4])}, tf.ones([5]), 2, [0, 0]),
        ValueError,
        r"sample_rows: scores must be one per row, shape \[4\], got \(5,\)",
    ),
    "sample_rows seed of 3 ints": (
        lambda _: echoing.sample_rows({"x": tf.zeros([4])}, tf.ones([4]), 2, [0, 0, 1]),
        ValueError,
        r"sample_rows\(seed=\[0, 0, 1\]\): expected int32/int64 of shape \[2\]",
    ),
    "sample_rows seed None": (
        lambda _: echoing.sample_rows({"x": tf.zeros([4])}, tf.ones([4]), 2, None),
        TypeError,
        r"sample_rows\(seed=None\): expected int32/int64 of shape \[2\], e\.g\. \[run_seed, step\]",
    ),
    "sample_rows batch with a sample_weight": (
        lambda _: echoing.sample_rows(
            {"x": tf.zeros([4]), "sample_weight": tf.ones([4])}, tf.ones([4]), 2, [0, 0]
        ),
        TypeError,
        r"got a dict of shapes \{'x': \(4,\), 'sample_weight': \(4,\)\}, but the drawn rows",
    ),
    "select_rows batch that is not a dict": (
        lambda _: echoing.select_rows(tf.zeros([4, 2]), tf.ones([4]), 2),
        TypeError,
        r"select_rows\(batch=\.\.\.\): expected a non-empty dict .*got an EagerTensor of shape",
    ),
    "sample_rows uniform_mix 0": (
        lambda _: echoing.sample_rows({"x": tf.zeros([4])}, tf.ones([4]), 2, [0, 0], uniform_mix=0),
        ValueError,
        r"uniform_mix=0\): expected a number in \(0, 1\]",
    ),
    # Data: TFDS names and data config fields.
    "TFDS name that does not exist": (
        lambda tmp_path: _tfds("no_such_dataset", tmp_path),
        ValueError,
        r"there is no TFDS dataset named 'no_such_dataset'.*tfds\.list_builders",
    ),
    "TFDS name not prepared offline": (
        lambda tmp_path: _tfds("mnist", tmp_path),
        ValueError,
        r"dataset 'mnist' needs a download; use --config.data.data_dir with a prepared copy",
    ),
    "data batch_size 0": (
        lambda _: _data_config(batch_size=0),
        ValueError,
        r"batch_size must be >= 1, got 0",
    ),
    "image shards num_shards 0": (
        lambda tmp: record_layouts.write_image_shards(str(tmp / "x"), [("a.jpg", 0)], num_shards=0),
        ValueError,
        r"num_shards must be in \[1, 1\].*got 0",
    ),
    "text from a TFDS name and files at once": (
        lambda _: _data_config(
            source="text", augment="none", name="lm1b", train_files="a", eval_files="b"
        ),
        ValueError,
        r"reads either the TFDS dataset name='lm1b' or the files train_files='a', not both",
    ),
    "BagOfWords vocab_size 0": (
        lambda _: echoing.BagOfWords(0),
        ValueError,
        r"BagOfWords\(vocab_size=0\): expected an int >= 1",
    ),
    "run config unknown key": (
        lambda _: _run_config(num_epochs=3),
        ValueError,
        r"unknown config key 'num_epochs'\. Valid keys: \[",
    ),
}


@pytest.mark.parametrize("wrong", ROWS)
def test_every_wrong_input_is_a_clear_early_error(wrong, tmp_path):
    trigger, error, message = ROWS[wrong]
    with pytest.raises(error, match=message):
        trigger(tmp_path)
