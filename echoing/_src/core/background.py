"""A bounded queue drained by one daemon thread: the producer hands work off and never waits.

Example::

    from echoing._src.core.background import BackgroundWorker

    seen = []
    worker = BackgroundWorker(seen.extend, capacity=4, max_items_per_call=2, name="example")
    for item in range(3):
        worker.submit(item)  # returns at once; a full queue drops its oldest item instead
    worker.wait_until_idle()
    worker.close()
    assert seen == [0, 1, 2] and worker.drops == 0

``process`` is called in the thread with a list of up to ``max_items_per_call`` queued items, in
the order they were submitted: a consumer that falls behind takes its backlog in larger, fewer
calls. When the queue holds ``capacity`` items, ``submit`` drops the OLDEST and counts it in
:attr:`BackgroundWorker.drops`, so memory stays bounded and the producer never blocks.

An exception raised by ``process`` stops the thread; it is raised again, in the caller's
thread, by every later ``submit``, ``wait_until_idle`` and ``close`` (as a ``RuntimeError``
whose ``__cause__`` is the original error), so a failure cannot pass unnoticed.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any


class WorkerClosedError(RuntimeError):
    """``submit`` after ``close``: the thread is gone and nothing would process the item."""


class BackgroundWorker:
    """Runs ``process`` on batches of submitted items in a daemon thread started lazily.

    Args:
      process: called in the thread with a list of 1..``max_items_per_call`` items.
      capacity: most items queued; when full the oldest is dropped and counted.
      max_items_per_call: most queued items handed to one ``process`` call.
      name: the thread's name, and the subject of the default failure message.
      describe_failure: the message of the ``RuntimeError`` that re-raises a failure of
        ``process``, given its exception (default: ``"<name> failed: <error>"``).
    """

    def __init__(
        self,
        process: Callable[[list[Any]], None],
        *,
        capacity: int,
        max_items_per_call: int = 1,
        name: str = "background_worker",
        describe_failure: Callable[[BaseException], str] | None = None,
    ):
        if capacity < 1 or max_items_per_call < 1:
            raise ValueError(
                f"BackgroundWorker(capacity={capacity!r}, max_items_per_call="
                f"{max_items_per_call!r}): both must be >= 1."
            )
        self._process = process
        self._capacity = capacity
        self._max_items_per_call = max_items_per_call
        self._name = name
        self._describe_failure = describe_failure or (lambda error: f"{name} failed: {error}")
        self._queue: collections.deque = collections.deque()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._busy = False
        self._error: BaseException | None = None
        self._drops = 0

    @property
    def drops(self) -> int:
        """Items dropped, unprocessed, because the queue was full when a new one came."""
        with self._condition:
            return self._drops

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a closed worker takes no more items)."""
        with self._condition:
            return self._closing

    @property
    def thread(self) -> threading.Thread | None:
        """The worker thread; ``None`` until the first ``submit``."""
        return self._thread

    def pending(self) -> list[Any]:
        """The queued items not yet handed to ``process``, oldest first (a copy)."""
        with self._condition:
            return list(self._queue)

    def submit(self, item: Any) -> None:
        """Queues ``item``, dropping the oldest queued item if full; never waits for ``process``.

        Raises:
          RuntimeError: ``process`` failed earlier (see the module doc).
          WorkerClosedError: after :meth:`close`.
        """
        self.raise_if_failed()
        with self._condition:
            if self._closing:
                raise WorkerClosedError(f"{self._name}: submit after close().")
            if self._thread is None:
                # Started on first use, so a worker that is never fed costs no thread.
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            if len(self._queue) >= self._capacity:
                self._queue.popleft()
                self._drops += 1
            self._queue.append(item)
            self._condition.notify()

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """Blocks until every queued item is processed (for tests and benchmarks, not producers).

        Returns:
          True if idle, False if ``timeout`` seconds passed first.
        """
        with self._condition:
            idle = self._condition.wait_for(
                lambda: self._error is not None or (not self._queue and not self._busy), timeout
            )
        self.raise_if_failed()
        return idle

    def close(self) -> None:
        """Stops the thread (queued items are discarded), joins it, and re-raises its failure.

        Safe to call more than once.
        """
        with self._condition:
            self._closing = True
            self._queue.clear()
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join()
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        """Re-raises, in the caller's thread, an exception that stopped the worker thread."""
        if self._error is not None:
            raise RuntimeError(self._describe_failure(self._error)) from self._error

    def _run(self) -> None:
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._queue or self._closing)
                if self._closing:
                    return
                count = min(len(self._queue), self._max_items_per_call)
                items = [self._queue.popleft() for _ in range(count)]
                self._busy = True
            try:
                self._process(items)
            except BaseException as error:  # re-raised in the producer's thread
                with self._condition:
                    self._error = error
                    self._busy = False
                    self._condition.notify_all()
                return
            with self._condition:
                self._busy = False
                self._condition.notify_all()
