"""Signals that stop a run where its checkpoint and its metrics agree: at an inner loop's end.

Example::

    import signal
    from trainers import interrupts

    with interrupts.stop_at_loop_end({signal.SIGINT: KeyboardInterrupt}):
        ...  # Controller.run(): Ctrl-C now ends the current inner loop, logs its row, saves
             # and raises RunInterrupted; a second Ctrl-C ends the process at once.

Python raises ``KeyboardInterrupt`` wherever the signal lands: often just after an inner loop's
steps ran and before their metrics row was written, so the checkpoint then saved is of a step
the log never shows, and a resumed run leaves that row out for good. Within
``stop_at_loop_end`` a signal only records the request; ``Controller`` calls
``raise_if_requested`` after each inner loop (its row written, any due checkpoint saved), which
raises the recorded interrupt there.

Python runs a signal's handler only between its own instructions, so not while a loop's steps
run as one TensorFlow call: that handler alone would say nothing until the loop ends, and a
second signal would merge with the first. A watcher thread therefore hears each signal as it
arrives (``signal.set_wakeup_fd``): the first is acknowledged at once, on stderr; a second ends
the process at once (exit status 128 + the signal's number). Every metrics row and checkpoint
is written whole before it counts, so the workdir then resumes from its last checkpoint, as
after a kill.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping

_requested: KeyboardInterrupt | None = None
_at_once = False  # inside ``raise_at_once``: no loop end to wait for


@contextlib.contextmanager
def stop_at_loop_end(signals: Mapping[int, type[KeyboardInterrupt]]) -> Iterator[None]:
    """While active, each of ``signals`` (number -> the interrupt it means) asks the running
    ``Controller`` to stop after its current inner loop, and a second one ends the process at
    once; the handlers are restored on exit. Call from the main thread."""
    global _requested

    def request(signum, frame):
        global _requested
        del frame
        if _requested is None:
            _requested = signals[signum]()
        if _at_once:
            raise_if_requested()

    previous = {signum: signal.signal(signum, request) for signum in signals}
    _requested = None
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    watcher = threading.Thread(
        target=_watch, args=(read_end, frozenset(signals)), name="signal_watcher", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        _requested = None
        signal.set_wakeup_fd(previous_fd)
        os.close(write_end)  # the watcher reads the end of the pipe and returns
        watcher.join()
        os.close(read_end)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _watch(read_end: int, signals: frozenset[int]) -> None:
    """Acknowledges the first of ``signals`` as it arrives; ends the process at the second."""
    heard = 0
    while received := os.read(read_end, 64):
        for signum in received:
            if signum not in signals:
                continue
            heard += 1
            name = signal.Signals(signum).name
            if heard == 1:
                print(
                    f"{name}: stopping where the checkpoint matches the metrics, at the end of "
                    f"the current loop of steps (or of the run, after its last loop); send {name} "
                    "again to stop at once (the run then resumes from its last checkpoint).",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            print(
                f"{name} again: stopped at once. Run the same command to resume from the "
                "workdir's last checkpoint (or to start over, if none was saved yet).",
                file=sys.stderr,
                flush=True,
            )
            os._exit(128 + signum)


@contextlib.contextmanager
def raise_at_once() -> Iterator[None]:
    """Inside ``stop_at_loop_end``, for work with no loop end to wait for (the timing after
    training): a signal, or one already recorded, raises its interrupt at once here."""
    global _at_once
    previous, _at_once = _at_once, True
    try:
        raise_if_requested()
        yield
    finally:
        _at_once = previous


def requested() -> bool:
    """Whether a signal inside ``stop_at_loop_end`` asked to stop (and was not raised yet)."""
    return _requested is not None


def raise_if_requested() -> None:
    """Raises the interrupt a signal recorded inside ``stop_at_loop_end``, if any."""
    global _requested
    interrupt, _requested = _requested, None
    if interrupt is not None:
        raise interrupt
