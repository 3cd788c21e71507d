"""Tests for the controller's checkpoint on an interrupt: it is saved only where the metrics log
has the step's row, so a resumed run's log has every step it trained (issue 33)."""

import dataclasses
import os
import signal

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


def test_a_stop_asked_in_the_last_loop_skips_the_timing_and_writes_the_outputs(
    load_config, tmp_path, capsys
):
    from trainers import experiment

    config = load_config("mnist1d", "smoke")
    config.num_steps = config.steps_per_loop = 10  # one loop, the last
    config.timing_steps, config.progress_bar = 50, False
    with interrupts.stop_at_loop_end({signal.SIGUSR1: KeyboardInterrupt}):
        os.kill(os.getpid(), signal.SIGUSR1)  # asked before the loop ends
        summary = experiment.run(config, str(tmp_path))
    assert summary["step"] == 10 and os.path.exists(tmp_path / "model.keras")
    assert "without the timing measurement (--config.timing_steps)" in capsys.readouterr().err
