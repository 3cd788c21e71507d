"""An echo stage that feeds batch() with no shuffle between puts an element's copies in the same
batch: the library reads the pipeline where it receives the final dataset (AutoEchoCallback.stamp,
the trainer's input pipeline) and warns once, naming the fix."""

import warnings

import pytest
import tensorflow as tf

import echoing
import pipelines
from echoing import meters, techniques
from echoing._src.core import dataset_graph
from trainers import experiment, inputs


def _range(n=64):
    return tf.data.Dataset.range(n)


def _again(x):
    return tf.data.Dataset.from_tensors(x)


# (pipeline, whether an echo stage without buffer_size feeds a batch with no shuffle between).
PIPELINES = {
    "echo, batch": (lambda: _range().apply(echoing.echo(2)).batch(4), True),
    "echo, map, batch, prefetch": (
        lambda: _range().apply(echoing.echo(2)).map(lambda x: x + 1).batch(4).prefetch(2),
        True,
    ),
    "fractional echo, batch": (lambda: _range().apply(echoing.echo(1.5)).batch(4), True),
    "live echo, padded_batch": (
        lambda: _range().apply(echoing.echo(tf.Variable(1.0))).padded_batch(4),
        True,
    ),
    "echo, batch, shuffle of batches": (
        lambda: _range().apply(echoing.echo(2)).batch(4).shuffle(8),
        True,
    ),
    "zip of an echo, batch": (
        lambda: tf.data.Dataset.zip((_range().apply(echoing.echo(2)), _range(128))).batch(4),
        True,
    ),
    "example echo, batch, batch echo": (
        lambda: _range().apply(echoing.echo(2)).batch(4).apply(echoing.echo(2)),
        True,
    ),
    "echo with buffer_size, batch": (
        lambda: _range().apply(echoing.echo(2, buffer_size=16)).batch(4),
        False,
    ),
    "echo, shuffle, batch": (lambda: _range().apply(echoing.echo(2)).shuffle(16).batch(4), False),
    "batch, echo (batch echoing)": (lambda: _range().batch(4).apply(echoing.echo(2)), False),
    "echo, batch, unbatch, shuffle, batch": (
        lambda: _range().apply(echoing.echo(2)).batch(4).unbatch().shuffle(16).batch(4),
        False,
    ),
    "echo, batch, unbatch, batch": (
        lambda: _range().apply(echoing.echo(2)).batch(4).unbatch().batch(4),
        True,
    ),
    "echo, batch, shuffle of batches, unbatch, batch": (
        lambda: _range().apply(echoing.echo(2)).batch(4).shuffle(8).unbatch().batch(4),
        True,
    ),
    "echo(1), batch": (lambda: _range().apply(echoing.echo(1)).batch(4), False),
    "echo(0.5), batch": (lambda: _range().apply(echoing.echo(0.5)).batch(4), False),
    "echo, flat_map, batch (unknown stage)": (
        lambda: _range().apply(echoing.echo(2)).flat_map(_again).batch(4),
        False,
    ),
    "no echo": (lambda: _range().shuffle(8).batch(4), False),
}


@pytest.mark.parametrize("pipeline", list(PIPELINES))
def test_echo_feeding_batch_is_found_in_the_pipeline(pipeline):
    build, expected = PIPELINES[pipeline]
    assert dataset_graph.echo_feeds_batch(build()) is expected


def test_a_failed_inspection_answers_unknown_and_never_raises(monkeypatch):
    def broken():
        raise RuntimeError("tf.data changed")

    monkeypatch.setattr(dataset_graph, "_kinds", broken)
    dataset = _range().apply(echoing.echo(2)).batch(4)
    assert dataset_graph.echo_feeds_batch(dataset) is False
    assert dataset_graph.comes_out_of_batch(dataset) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dataset_graph.warn_if_echo_feeds_batch(dataset, fix="")
        stamped = echoing.keras.AutoEchoCallback(echoing.AutoEcho()).stamp(dataset)
    assert len(list(stamped)) == 32


# (elements, whether echo treats them as batches: read its live factor per element).
ELEMENT_KINDS = {
    "scalars": (lambda: _range(), False),
    "examples with a label": (
        lambda: tf.data.Dataset.from_tensor_slices(([[1.0, 2.0]] * 4, [0, 1, 0, 1])),
        False,
    ),
    "batches": (lambda: _range().batch(4), True),
    "batches, drop_remainder, then map and prefetch": (
        lambda: _range().batch(4, drop_remainder=True).map(lambda x: x * 2).prefetch(1),
        True,
    ),
    "batched, then unbatched": (lambda: _range().batch(4).unbatch(), False),
    "ragged batches": (
        lambda: _range().map(lambda x: tf.fill([x % 3 + 1], x)).ragged_batch(4),
        True,
    ),
    "bucketed batches": (
        lambda: (
            _range()
            .map(lambda x: tf.fill([x % 3 + 1], x))
            .bucket_by_sequence_length(lambda x: tf.shape(x)[0], [2], [4, 4])
        ),
        True,
    ),
    # No batching stage in sight: the element spec decides.
    "pre-batched slices with a label": (
        lambda: tf.data.Dataset.from_tensor_slices(([[[1.0]] * 4] * 3, [[0] * 4] * 3)),
        True,
    ),
    "variable-length examples from flat_map": (
        lambda: _range().flat_map(lambda x: tf.data.Dataset.from_tensors(tf.fill([x % 3], x))),
        True,  # [None] leading dimension: read per element, which only costs a little speed
    ),
}


@pytest.mark.parametrize("elements", list(ELEMENT_KINDS))
def test_element_kind(elements):
    build, expected = ELEMENT_KINDS[elements]
    assert dataset_graph.elements_are_batches(build()) is expected


STAMP_FIX = r"echo\(e, buffer_size=\.\.\.\).*\.shuffle\(1024\) between echo and batch\(\)"


def test_stamp_warns_when_echo_feeds_batch_naming_the_fix():
    auto = echoing.AutoEcho()
    callback = echoing.keras.AutoEchoCallback(auto)
    examples = _range().apply(auto.echo()).batch(4).prefetch(2)
    with pytest.warns(UserWarning, match=r"copies land in the same batch.*" + STAMP_FIX):
        examples.apply(callback.stamp)


@pytest.mark.parametrize(
    "build",
    [
        lambda auto: _range().apply(auto.echo()).shuffle(64).batch(4),
        lambda auto: _range().apply(auto.echo(buffer_size=64)).batch(4),
        lambda auto: _range().batch(4).apply(auto.echo()),
    ],
    ids=["shuffle after echo", "echo with buffer_size", "batch echoing"],
)
def test_stamp_does_not_warn_when_the_copies_are_shuffled_apart(build):
    auto = echoing.AutoEcho()
    callback = echoing.keras.AutoEchoCallback(auto)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(auto).prefetch(2).apply(callback.stamp)


TRAINER_FIX = "shuffle them apart with buffer=1000 in the config argument"


@pytest.mark.parametrize(
    "argument,warns",
    [
        ("echo=2,insert=after_augment,smoke", True),
        ("echo=auto,insert=after_augment,smoke", True),
        ("echo=2,insert=after_augment,buffer=64,smoke", False),
        ("echo=2,insert=after_batch,smoke", False),
        ("smoke", False),
    ],
)
def test_the_trainer_warns_when_its_echo_feeds_batch(
    argument, warns, load_config, data_dir, capsys
):
    config = experiment.resolve_config(load_config("mnist1d", argument))
    config.data.data_dir = data_dir
    context = techniques.Context(
        config=config,
        stage_seed=lambda stage: pipelines.stage_seed(config.seed, stage),
        num_input_pipelines=1,
        examples=lambda: pipelines.examples_by_id(config.data),
    )
    train_fn, _ = inputs.dataset_fns(config, techniques.from_config(context), meters.EchoMeters())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a line of its own, not a Python warning
        for _ in range(2):  # e.g. two input pipelines: said once
            train_fn(tf.distribute.InputContext())
    lines = [line for line in capsys.readouterr().err.splitlines() if "same batch" in line]
    if warns:
        assert len(lines) == 1 and lines[0].startswith("Warning: the echo stage feeds batch()")
        assert TRAINER_FIX in lines[0]
    else:
        assert lines == []
