"""Tests for trainers.interrupts: a signal stops at the loop's end; a second one at once."""

import os
import signal

import pytest

from trainers import interrupts


class _Stop(KeyboardInterrupt):
    pass


def test_a_signal_is_raised_where_the_loop_asks_and_a_second_one_at_once(capsys):
    before = signal.getsignal(signal.SIGUSR1)
    with interrupts.stop_at_loop_end({signal.SIGUSR1: _Stop}):
        interrupts.raise_if_requested()  # nothing recorded: nothing raised
        os.kill(os.getpid(), signal.SIGUSR1)  # recorded, not raised here
        assert "SIGUSR1: finishing the current loop" in capsys.readouterr().err
        with pytest.raises(_Stop):
            interrupts.raise_if_requested()
        interrupts.raise_if_requested()  # raised once only
        os.kill(os.getpid(), signal.SIGUSR1)
        with pytest.raises(_Stop):
            os.kill(os.getpid(), signal.SIGUSR1)  # the user will not wait: at once
    assert signal.getsignal(signal.SIGUSR1) is before
    interrupts.raise_if_requested()  # what was pending is forgotten on exit
