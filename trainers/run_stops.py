"""How a run stops before its end: interrupted by a signal, or diverged (a NaN/inf loss).

Example::

    from trainers import run_stops

    run_stops.check_finite(0.7, step=100, manager=None)  # a finite loss: nothing happens
    interrupted = run_stops.RunInterrupted(40, "/tmp/run/checkpoints/ckpt-30", resume_step=30)
    print(interrupted.saved())  # steps 31-40 were not saved (...); ... resumes at step 30
"""

from __future__ import annotations

import math


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or the binary's SIGTERM) stopped training at ``step``.

    A ``KeyboardInterrupt``, so code that handles those still does; re-running the same
    command with the same workdir resumes from ``checkpoint`` (None: nothing was saved), at
    ``resume_step``: ``step`` itself, unless a second signal stopped the run at once after a
    loop's steps and before their metrics row, when the steps since the last checkpoint are not
    saved (a checkpoint of them would resume past a row the log never gets).
    """

    def __init__(self, step: int, checkpoint: str | None, *, resume_step: int | None = None):
        self.step, self.checkpoint = step, checkpoint
        self.resume_step = step if resume_step is None else resume_step
        super().__init__(f"interrupted at step {step}; {self.saved()}")

    def saved(self) -> str:
        """What was saved, in words: ``saved ckpt-N``, or why the last steps were not."""
        if self.checkpoint is None:
            return "no checkpoint was saved"
        if self.resume_step == self.step:
            return f"saved {self.checkpoint}"
        return (
            f"steps {self.resume_step + 1}-{self.step} were not saved (stopped at once, before "
            f"their metrics row); the last checkpoint, {self.checkpoint}, resumes at step "
            f"{self.resume_step}"
        )


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite; the run stopped without saving that state."""


def check_finite(loss: float | None, step: int, manager) -> None:
    """Raises ``TrainingDiverged`` when ``loss`` is NaN or infinite, naming the last checkpoint
    of ``manager`` (a ``tf.train.CheckpointManager`` or None), which the diverged state is not
    saved over."""
    if loss is None or math.isfinite(loss):
        return
    last_checkpoint = manager.latest_checkpoint if manager is not None else None
    kept = (
        f"The diverged state was not saved; the last checkpoint, {last_checkpoint}, is from "
        "before it (a run in this workdir resumes there)."
        if last_checkpoint
        else "Nothing was saved."
    )
    raise TrainingDiverged(
        f"the training loss is {loss} in the steps up to {step}: training diverged. Lower the "
        "learning rate (--config.learning_rate; or lengthen --config.warmup_steps), or check "
        f"the data for NaN or infinite values. {kept}"
    )


def checkpoint_step(path: str | None) -> int:
    """The step of a ``CheckpointManager`` path (``.../ckpt-30`` -> 30; none saved -> 0)."""
    return int(path.rsplit("-", 1)[1]) if path else 0
