"""Tests for the generic background worker: order, a bounded queue that drops the oldest item
without blocking the producer, failures surfaced in the caller's thread, an idempotent close."""

import threading

import pytest

from echoing._src.core.background import BackgroundWorker, WorkerClosedError


class _Blocked:
    """A ``process`` that holds its first call until released, recording every item."""

    def __init__(self):
        self.started, self.release = threading.Event(), threading.Event()
        self.seen = []

    def __call__(self, items):
        self.started.set()
        assert self.release.wait(timeout=60)
        self.seen.extend(items)


def _fail(items):
    raise ValueError(f"bad items {items}")


@pytest.mark.parametrize("max_items_per_call", [1, 3])
def test_items_are_processed_in_order(max_items_per_call):
    seen, calls = [], []

    def process(items):
        calls.append(len(items))
        seen.extend(items)

    worker = BackgroundWorker(process, capacity=100, max_items_per_call=max_items_per_call)
    for item in range(20):
        worker.submit(item)
    assert worker.wait_until_idle(timeout=60)
    worker.close()
    assert seen == list(range(20))
    assert max(calls) <= max_items_per_call and worker.drops == 0


def test_a_full_queue_drops_the_oldest_and_counts_without_blocking():
    process = _Blocked()
    worker = BackgroundWorker(process, capacity=2)
    worker.submit(0)
    assert process.started.wait(timeout=60)  # the thread holds item 0 and is blocked
    for item in range(1, 6):  # each submit returns at once although nothing is processed
        worker.submit(item)
    assert worker.drops == 3
    assert worker.pending() == [4, 5]
    process.release.set()
    assert worker.wait_until_idle(timeout=60)
    worker.close()
    assert process.seen == [0, 4, 5]


def test_wait_until_idle_times_out_while_busy():
    process = _Blocked()
    worker = BackgroundWorker(process, capacity=4)
    worker.submit(0)
    assert process.started.wait(timeout=60)
    assert worker.wait_until_idle(timeout=0.01) is False
    process.release.set()
    assert worker.wait_until_idle(timeout=60) is True
    worker.close()


@pytest.mark.parametrize("surface", ["submit", "wait_until_idle", "close"])
def test_an_exception_in_the_worker_surfaces_in_the_callers_thread(surface):
    worker = BackgroundWorker(_fail, capacity=4, name="example_worker")
    worker.submit(1)
    worker.thread.join(timeout=60)
    assert not worker.thread.is_alive()
    with pytest.raises(RuntimeError, match=r"example_worker failed: bad items \[1\]") as raised:
        getattr(worker, surface)(*([2] if surface == "submit" else []))
    assert isinstance(raised.value.__cause__, ValueError)
    with pytest.raises(RuntimeError, match="failed"):  # every later call, close included
        worker.close()


def test_the_failure_message_can_be_described_by_the_owner():
    worker = BackgroundWorker(_fail, capacity=4, describe_failure=lambda e: f"owner: {e}")
    worker.submit(1)
    worker.thread.join(timeout=60)
    with pytest.raises(RuntimeError, match=r"^owner: bad items \[1\]$"):
        worker.close()


def test_close_is_idempotent_joins_the_thread_and_refuses_later_items():
    worker = BackgroundWorker(lambda items: None, capacity=4)
    worker.close()  # never started: no thread to join
    assert worker.thread is None
    worker = BackgroundWorker(lambda items: None, capacity=4)
    worker.submit(1)
    thread = worker.thread
    worker.close()
    worker.close()
    assert not thread.is_alive()
    with pytest.raises(WorkerClosedError, match="after close"):
        worker.submit(2)


def test_no_thread_until_the_first_item():
    worker = BackgroundWorker(lambda items: None, capacity=4)
    assert worker.thread is None and worker.wait_until_idle(timeout=1)
    worker.submit(1)
    assert worker.thread is not None and worker.thread.daemon
    worker.close()


@pytest.mark.parametrize("kwargs", [{"capacity": 0}, {"capacity": 1, "max_items_per_call": 0}])
def test_bad_sizes_are_refused(kwargs):
    with pytest.raises(ValueError, match=">= 1"):
        BackgroundWorker(lambda items: None, **kwargs)
