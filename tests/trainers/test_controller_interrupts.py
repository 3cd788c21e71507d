"""Tests for the controller's checkpoint on an interrupt: it is saved only where the metrics log
has the step's row, so a resumed run's log has every step it trained (issue 33)."""

import dataclasses
import os
import signal
import time

import pytest
import tensorflow as tf

from trainers import checkpointing, controller, interrupts

SCHEDULE = controller.Schedule(
    num_steps=50, steps_per_loop=10, eval_every_steps=10, checkpoint_every_steps=10
)


class _Steps:
    """An inner loop that only counts its steps."""

    def __init__(self):
        self.step = tf.Variable(0, dtype=tf.int64)

    def train(self, num_steps: int) -> dict[str, float]:
        self.step.assign_add(num_steps)
        return {"loop_seconds": 0.0}

    def evaluate(self) -> dict[str, float]:
        return {}


class _Rows:
    """A metrics writer keeping its rows. At ``interrupt_at`` a KeyboardInterrupt lands before
    the row is written, as a second Ctrl-C does between a loop's steps and its row; at
    ``signal_at`` a first SIGUSR1 is sent once the row is written (the run stops after it)."""

    def __init__(self, *, interrupt_at: int = -1, signal_at: int = -1):
        self.steps: list[int] = []
        self.interrupt_at, self.signal_at = interrupt_at, signal_at

    def write(self, step: int, scalars: dict[str, float]) -> None:
        del scalars
        if step == self.interrupt_at:
            raise KeyboardInterrupt
        self.steps.append(step)
        if step == self.signal_at:
            os.kill(os.getpid(), signal.SIGUSR1)


def _run(tmp_path, writer, schedule=SCHEDULE):
    inner = _Steps()
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=10, step=inner.step)
    outer = controller.Controller(schedule, trainer=inner, manager=manager, writer=writer)
    with (
        interrupts.stop_at_loop_end({signal.SIGUSR1: KeyboardInterrupt}),
        pytest.raises(controller.RunInterrupted) as raised,
    ):
        outer.run()
    return raised.value, manager


def test_a_stop_before_the_loops_row_keeps_the_checkpoint_the_log_reaches(tmp_path):
    rows = _Rows(interrupt_at=30)
    interrupted, manager = _run(tmp_path, rows)
    assert rows.steps == [10, 20]
    assert [checkpointing_step(p) for p in manager.checkpoints] == [10, 20]
    assert interrupted.step == 30 and interrupted.resume_step == 20
    assert interrupted.checkpoint == manager.latest_checkpoint
    assert interrupted.saved() == (
        f"steps 21-30 were not saved (stopped at once, before their metrics row); the last "
        f"checkpoint, {tmp_path}/ckpt-20, resumes at step 20"
    )


def test_a_stop_after_the_loops_row_saves_its_step(tmp_path):
    # Checkpoints every 20 steps: the loop ending at 30 is logged, not yet saved.
    every_20 = dataclasses.replace(SCHEDULE, checkpoint_every_steps=20)
    rows = _Rows(signal_at=30)
    interrupted, manager = _run(tmp_path, rows, every_20)
    assert rows.steps == [10, 20, 30]
    assert interrupted.step == interrupted.resume_step == 30
    assert [checkpointing_step(p) for p in manager.checkpoints] == [20, 30]
    assert interrupted.saved() == f"saved {tmp_path}/ckpt-30"


def test_a_stop_before_any_checkpoint_says_none_was_saved(tmp_path):
    interrupted, manager = _run(tmp_path, _Rows(interrupt_at=10))
    assert manager.checkpoints == []
    assert interrupted.step == 10 and interrupted.resume_step == 0
    assert interrupted.checkpoint is None
    assert interrupted.saved() == "no checkpoint was saved"


def checkpointing_step(path: str) -> int:
    return int(path.rsplit("-", 1)[1])


def test_a_stop_asked_in_the_last_loop_lets_the_run_end_and_stays_asked(tmp_path):
    inner, rows = _Steps(), _Rows(signal_at=50)
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=10, step=inner.step)
    outer = controller.Controller(SCHEDULE, trainer=inner, manager=manager, writer=rows)
    with interrupts.stop_at_loop_end({signal.SIGUSR1: KeyboardInterrupt}):
        step, _ = outer.run()  # training is over: nothing to stop
        assert interrupts.requested()  # the caller may skip what follows (the timing)
    assert step == 50 and rows.steps == [10, 20, 30, 40, 50]
    assert manager.latest_checkpoint == f"{tmp_path}/ckpt-50"


@pytest.mark.parametrize(
    "interrupted, line",
    [
        (controller.RunInterrupted(30, "/w/checkpoints/ckpt-30"),
         "Interrupted at step 30; saved /w/checkpoints/ckpt-30. Run the same command to resume."),
        (controller.RunInterrupted(10, None, resume_step=0),
         "Interrupted at step 10; no checkpoint was saved. Run the same command to start the run "
         "again (nothing to resume)."),
    ],
)  # fmt: skip
def test_the_binary_says_in_one_line_what_an_interrupt_saved(interrupted, line, capsys):
    from trainers import train

    with pytest.raises(SystemExit) as exited:
        try:
            raise interrupted from KeyboardInterrupt()
        except controller.RunInterrupted as caught:
            train._exit_interrupted(caught)
    assert exited.value.code == 128 + signal.SIGINT
    assert capsys.readouterr().err == line + "\n"


def test_a_stop_asked_before_training_stops_before_the_first_step(tmp_path):
    inner, rows = _Steps(), _Rows()
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=10, step=inner.step)
    outer = controller.Controller(SCHEDULE, trainer=inner, manager=manager, writer=rows)
    with interrupts.stop_at_loop_end({signal.SIGUSR1: _Stop}):
        os.kill(os.getpid(), signal.SIGUSR1)  # e.g. while the data set was generated
        with pytest.raises(controller.RunInterrupted) as raised:
            outer.run()
    assert int(inner.step.numpy()) == 0 and rows.steps == [] and manager.checkpoints == []
    assert raised.value.saved() == "no checkpoint was saved"


@pytest.mark.parametrize("when", ["before", "during"])
def test_a_stop_asked_after_training_skips_the_timing(when, load_config, capsys, monkeypatch):
    from trainers import diagnosis, experiment

    def measure(*args):  # the measurement, long enough to be interrupted
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(5)
        raise AssertionError("not interrupted")

    monkeypatch.setattr(diagnosis, "measure_ratio", measure)
    config = load_config("mnist1d", "smoke")
    with interrupts.stop_at_loop_end({signal.SIGUSR1: _Stop}):
        if when == "before":  # asked in the last loop of steps
            os.kill(os.getpid(), signal.SIGUSR1)
        assert experiment._timings(config, None, experiment.technique_modules.Stages([])) == {}
    assert "the run ends with its outputs, without the timing measurement" in (
        capsys.readouterr().err
    )


class _Stop(KeyboardInterrupt):
    """The signal's interrupt, of its own class: pytest takes a KeyboardInterrupt for its own."""


def test_ctrl_c_outside_training_is_one_line(monkeypatch, capsys):
    from trainers import train

    def evaluating(argv):
        raise KeyboardInterrupt  # e.g. Ctrl-C during --eval_only's evaluation

    monkeypatch.setattr(train, "_main", evaluating)
    with pytest.raises(SystemExit) as exited:
        train.main(["train"])
    assert exited.value.code == 128 + signal.SIGINT
    assert capsys.readouterr().err == (
        "Interrupted before the run saved anything new; run the same command again.\n"
    )
