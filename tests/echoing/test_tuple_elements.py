"""Every stage keeps a dataset's element structure: a 1-tuple element ``(x,)``, which tf.data
hands a map function as one positional argument just as it does a bare ``x``, stays a 1-tuple.
Integral echo turned ``(x,)`` into ``x``, so ``element[0]`` then read a row of ``x`` (issue 33)."""

import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing import keras as echoing_keras
from echoing import meters
from echoing._src.core import fit_timing

ONE_TUPLE = tf.data.Dataset.from_tensor_slices((np.arange(6.0).reshape(2, 3),))
PAIR = tf.data.Dataset.from_tensor_slices(
    (np.arange(6.0).reshape(2, 3), np.arange(4).reshape(2, 2))
)
BARE = tf.data.Dataset.from_tensor_slices(np.arange(6.0).reshape(2, 3))


def _stages():
    """``(name, transformation)`` of every stage that maps the elements it passes on."""
    auto = echoing.AutoEcho(max_factor=4)
    stages = [
        (f"echo({factor}, {path})", echoing.echo(factor, implementation=path, seed=0))
        for factor in (2, 1.5)
        for path in ("vectorized", "per_element")
    ]
    stages.append(("echo(2, meters)", echoing.echo(2, meters=meters.EchoMeters())))
    stages.append(("count()", meters.ElementCounter("seen").count()))
    stages.append(("AutoEchoCallback.stamp", echoing_keras.AutoEchoCallback(auto).stamp))
    stages.append(("BatchStamps.stamp", fit_timing.BatchStamps().stamp))
    return stages


@pytest.mark.parametrize(("name", "stage"), _stages(), ids=[name for name, _ in _stages()])
@pytest.mark.parametrize("dataset", [ONE_TUPLE, PAIR, BARE], ids=["one-tuple", "pair", "bare"])
def test_a_stage_keeps_the_element_structure(name, stage, dataset):
    staged = dataset.apply(stage)
    assert staged.element_spec == dataset.element_spec, name
    first = next(iter(staged))
    expected = next(iter(dataset))
    tf.nest.map_structure(np.testing.assert_array_equal, first, expected)
