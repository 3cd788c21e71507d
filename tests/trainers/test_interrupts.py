"""Tests for trainers.interrupts: a signal stops at the loop's end and is acknowledged at once;
a second one ends the process at once, also inside a long TensorFlow call."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from trainers import interrupts


class _Stop(KeyboardInterrupt):
    pass


def _wait_for(read, text: str, seconds: float = 10.0) -> str:
    deadline, seen = time.monotonic() + seconds, ""
    while text not in seen and time.monotonic() < deadline:
        time.sleep(0.02)
        seen += read()
    return seen


def test_a_signal_is_recorded_acknowledged_and_raised_where_the_loop_asks(capsys):
    before = signal.getsignal(signal.SIGUSR1)
    with interrupts.stop_at_loop_end({signal.SIGUSR1: _Stop}):
        interrupts.raise_if_requested()  # nothing recorded: nothing raised
        os.kill(os.getpid(), signal.SIGUSR1)  # recorded, not raised here
        seen = _wait_for(lambda: capsys.readouterr().err, "SIGUSR1: stopping where")
        assert "SIGUSR1: stopping where the checkpoint matches the metrics" in seen
        assert interrupts.requested()
        with pytest.raises(_Stop):
            interrupts.raise_if_requested()
        interrupts.raise_if_requested()  # raised once only
        assert not interrupts.requested()
    assert signal.getsignal(signal.SIGUSR1) is before
    assert signal.set_wakeup_fd(-1) == -1  # the watcher's pipe is gone
    interrupts.raise_if_requested()  # what was pending is forgotten on exit


_CHILD = textwrap.dedent(
    """
    import signal
    import tensorflow as tf
    from trainers import interrupts

    @tf.function
    def busy(seconds):  # one TensorFlow call that runs for `seconds`, as a loop of steps does
        start = tf.timestamp()
        return tf.while_loop(lambda i: tf.timestamp() - start < seconds, lambda i: i + 1, [0])

    with interrupts.stop_at_loop_end({signal.SIGINT: KeyboardInterrupt}):
        busy(tf.constant(0.01, tf.float64))
        print("ready", flush=True)
        busy(tf.constant(120.0, tf.float64))
        print("returned", flush=True)
    """
)


def test_inside_a_long_tensorflow_call_the_first_signal_is_heard_and_the_second_stops(tmp_path):
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
    try:
        assert child.stdout.readline().strip() == "ready", stderr_path.read_text()[-2000:]
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        seen = _wait_for(lambda: stderr_path.read_text(), "SIGINT: stopping where", 30)
        assert "SIGINT: stopping where" in seen
        assert child.poll() is None  # said while the call runs on
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=30) == 128 + signal.SIGINT
    finally:
        child.kill()
    assert "SIGINT again: stopped at once. Run the same command" in stderr_path.read_text()
    assert "returned" not in child.stdout.read()
