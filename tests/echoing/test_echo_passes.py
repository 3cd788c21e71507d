"""Tests for echoing.echo over several passes: fractional draws are new on every pass.

A fractional factor decides each element's extra echo by a random draw. If the draws repeated on
every pass (two ``fit`` epochs, or ``.repeat()`` after echo), the same half of the examples would
be doubled all run; shuffle's ``reshuffle_each_iteration`` is the behaviour to match.
"""

import numpy as np
import pytest
import tensorflow as tf

from echoing import echo

IMPLEMENTATIONS = ["vectorized", "per_element"]
NUM_INPUTS = 400


def _counts(values) -> list[int]:
    """Echo count of each input 0..NUM_INPUTS-1 in one pass's output."""
    return np.bincount(np.asarray(values, np.int64), minlength=NUM_INPUTS).tolist()


def _passes(values) -> list[list[int]]:
    """Splits a multi-pass output of an echoed (unshuffled) range into one list per pass."""
    values = np.asarray(values, np.int64)
    starts = np.flatnonzero(np.diff(values) < 0) + 1  # a range restarts: the value drops
    return [part.tolist() for part in np.split(values, starts)]


def _echoed(factor, seed, implementation, buffer_size=None):
    return tf.data.Dataset.range(NUM_INPUTS).apply(
        echo(factor, buffer_size=buffer_size, seed=seed, implementation=implementation)
    )


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("seed", [None, 0])
@pytest.mark.parametrize("factor", [1.5, 0.5])
def test_iterating_twice_draws_anew(implementation, seed, factor):
    dataset = _echoed(factor, seed, implementation)
    first = _counts(list(dataset.as_numpy_iterator()))
    second = _counts(list(dataset.as_numpy_iterator()))
    # Equal draws for 400 Bernoulli(1/2) elements by chance: 2**-400.
    assert first != second


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("seed", [None, 0])
def test_repeat_after_echo_draws_anew_on_every_pass(implementation, seed):
    passes = _passes(list(_echoed(1.5, seed, implementation).repeat(3).as_numpy_iterator()))
    assert len(passes) == 3
    counts = [_counts(values) for values in passes]
    assert counts[0] != counts[1] and counts[1] != counts[2] and counts[0] != counts[2]
    for pass_counts in counts:  # each pass is still a correct echo of the whole input
        assert set(pass_counts) <= {1, 2}
        # Mean 1.5, standard error sqrt(0.25 / 400) = 0.025; 5 of them: p < 1e-6.
        assert abs(np.mean(pass_counts) - 1.5) < 5 * 0.025


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("buffer_size", [None, 16])
def test_same_seed_same_multi_pass_stream(implementation, buffer_size):
    def run(seed):
        dataset = _echoed(1.5, seed, implementation, buffer_size)
        # Two iterations of one dataset (two fit epochs), then a repeat of it.
        return [
            list(dataset.as_numpy_iterator()),
            list(dataset.as_numpy_iterator()),
            list(dataset.repeat(2).as_numpy_iterator()),
        ]

    assert run(3) == run(3)
    assert run(3) != run(4)


@pytest.mark.parametrize("buffer_size", [None, 16])
def test_paths_agree_on_every_pass(buffer_size):
    def run(implementation):
        dataset = _echoed(1.5, 3, implementation, buffer_size)
        return [list(dataset.as_numpy_iterator()) for _ in range(3)]

    assert run("vectorized") == run("per_element")


def test_a_seeded_pass_inside_tf_function_matches_eager():
    @tf.function
    def passes():
        dataset = _echoed(1.5, 3, "per_element").repeat(2)
        return dataset.batch(10 * NUM_INPUTS).get_single_element()

    eager = list(_echoed(1.5, 3, "per_element").repeat(2).as_numpy_iterator())
    assert passes().numpy().tolist() == eager
    first, second = _passes(eager)
    assert _counts(first) != _counts(second)
