"""Tests for echoing._src.core.fit_timing: the stamps a pipeline records, one fit call's wait."""

import time

import numpy as np
import pytest
import tensorflow as tf

from echoing._src.core.fit_timing import BatchStamps, execution_wait


@pytest.mark.parametrize(
    ("first_wait", "gaps", "seconds", "wait"),
    [
        (0.004, [], 0.014, 0.004),  # one step: its own wait
        (0.0, [0.010, 0.010, 0.010], 0.040, 0.0),  # every batch ready in time: compute 10 ms
        (0.0, [-0.5, 0.010, -0.2], 0.040, 0.0),  # ready long before: no wait
        (0.0, [0.010, 0.025, 0.010], 0.055, 0.015),  # one step waited 15 ms of 55
        (0.010, [0.020, 0.020, 0.020], 0.080, 0.040),  # every step waited 10 ms: compute 10
        (0.0, [0.3, 0.3, 0.3], 0.040, 0.040),  # clocks disagree: never more than the call
    ],
)
def test_execution_wait_splits_a_call_into_compute_and_waits(first_wait, gaps, seconds, wait):
    assert execution_wait(first_wait, gaps, seconds) == pytest.approx(wait, abs=1e-9)


def test_execution_wait_is_consistent_with_the_call_it_explains():
    rng = np.random.default_rng(0)
    for _ in range(200):
        compute, waits = rng.uniform(0.001, 0.05), rng.exponential(0.01, 8) * (rng.random(8) < 0.5)
        seconds = 8 * compute + waits.sum()
        # A step that did not wait had its batch ready up to 2 compute before it was asked.
        gaps = compute + np.where(waits[1:] > 0, waits[1:], -rng.uniform(0, 2 * compute, 7))
        assert execution_wait(waits[0], gaps, seconds) == pytest.approx(waits.sum(), abs=1e-9)


def test_stamps_record_every_batch_in_order_and_refuse_a_lost_record():
    stamps = BatchStamps(capacity=4)
    before = time.time()
    iterator = iter(tf.data.Dataset.range(10).apply(stamps.stamp))
    assert [int(next(iterator)) for _ in range(3)] == [0, 1, 2]
    ready, handed = stamps.since(0)
    assert stamps.count == 3 and len(ready) == len(handed) == 3
    assert before <= ready[0] and (ready <= handed).all() and (np.diff(handed) >= 0).all()
    assert handed[-1] <= time.time()
    for _ in range(5):
        next(iterator)
    assert len(stamps.since(4)[0]) == 4  # the ring keeps the last 4
    with pytest.raises(ValueError, match=r"8 batches since the last read, but only the last 4"):
        stamps.since(0)


@pytest.mark.parametrize("capacity", [0, -1, 2.5, True])
def test_bad_capacity_is_refused(capacity):
    with pytest.raises(ValueError, match=r"capacity must be an int >= 1"):
        BatchStamps(capacity)
