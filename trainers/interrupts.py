"""Signals that stop a run where its checkpoint and its metrics agree: at an inner loop's end.

Example::

    import signal
    from trainers import interrupts

    with interrupts.stop_at_loop_end({signal.SIGINT: KeyboardInterrupt}):
        ...  # Controller.run(): Ctrl-C now ends the current inner loop, logs its row, saves
             # and raises RunInterrupted; a second Ctrl-C interrupts at once.

Python raises ``KeyboardInterrupt`` wherever the signal lands: often just after an inner loop's
steps ran and before their metrics row was written, so the checkpoint then saved is of a step
the log never shows, and a resumed run leaves that row out for good. Within
``stop_at_loop_end`` a signal only records the request; ``Controller`` calls
``raise_if_requested`` after each inner loop (its row written, any due checkpoint saved), which
raises the recorded interrupt there. The wait is one inner loop (``steps_per_loop`` steps at
most); a second signal raises at once, for a user who will not wait. If that lands after a
loop's steps and before their row, the controller saves nothing and keeps the last checkpoint
(``RunInterrupted.resume_step``): the steps since it are lost, no row is.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator, Mapping

_requested: KeyboardInterrupt | None = None


@contextlib.contextmanager
def stop_at_loop_end(signals: Mapping[int, type[KeyboardInterrupt]]) -> Iterator[None]:
    """While active, each of ``signals`` (number -> the interrupt it means) asks the running
    ``Controller`` to stop after its current inner loop; the handlers are restored on exit."""
    global _requested

    def request(signum, frame):
        global _requested
        del frame
        interrupt = signals[signum]()
        if _requested is not None:
            raise interrupt  # the second signal: stop now
        _requested = interrupt
        print(
            f"{signal.Signals(signum).name}: finishing the current loop of steps so that the "
            "checkpoint matches the metrics; send it again to stop at once.",
            file=sys.stderr,
        )

    previous = {signum: signal.signal(signum, request) for signum in signals}
    _requested = None
    try:
        yield
    finally:
        _requested = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def raise_if_requested() -> None:
    """Raises the interrupt a signal recorded inside ``stop_at_loop_end``, if any."""
    global _requested
    interrupt, _requested = _requested, None
    if interrupt is not None:
        raise interrupt
