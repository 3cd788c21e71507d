"""AutoEcho as a technique: a live echo factor steered by the input wait of every inner loop.

Example::

    import tensorflow as tf
    from echoing.techniques import AutoEchoTechnique, Feedback

    technique = AutoEchoTechnique(max_factor=4.0, insert="after_batch", seed=0)
    technique.observe(
        Feedback(ids=None, losses=None, step=10, steps=10, seconds=1.0, input_wait_seconds=0.6)
    )
    print(technique.scalars())  # {"echo_factor": ..., "input_wait_fraction": 0.6}

Config fields: ``auto_echo_max_factor`` (0 = off, else the factor's upper bound, >= 1); it needs
``echo = 1`` (it owns the factor) and puts its stage at ``echo_insert``.
"""

from __future__ import annotations

from echoing._src.core.technique import Context, Feedback, Insertion, Technique
from echoing._src.echo.auto_echo import AutoEcho
from echoing._src.echo.counts import MAX_FACTOR


class AutoEchoTechnique(Technique):
    """An ``echoing.AutoEcho`` stage at ``insert``, observing every loop but a process's first."""

    name = "auto_echo"

    def __init__(
        self, max_factor: float, *, insert: str, buffer_size: int | None = None, seed=None
    ):
        self.controller = AutoEcho(float(max_factor))
        # The trainer observes every loop but the first (tracing), however long its loops: the
        # warning for a factor nothing observes is not for it.
        self.controller.unobserved_check.silence()
        self._insert = insert
        self._transformation = self.controller.echo(buffer_size=buffer_size, seed=seed)
        self._wait_fraction: float | None = None

    def stages(self) -> list[Insertion]:
        return [Insertion(self._insert, self.name, self._transformation)]

    def observe(self, feedback: Feedback) -> None:
        if feedback.traced:
            # A process's first loop traces the step: its time says nothing about input.
            return
        self.controller.observe(
            seconds=feedback.seconds,
            input_wait_seconds=feedback.input_wait_seconds,
            steps=feedback.steps,
        )
        self._wait_fraction = self.controller.last_wait_fraction

    def echo_factor(self) -> float:
        return float(self.controller.factor.numpy())

    def checkpointed(self) -> dict[str, object]:
        return {"auto_echo": self.controller}

    def scalars(self) -> dict[str, float]:
        scalars = {}
        if self._wait_fraction is not None:
            # Once per observation: a loop that was not observed logs no wait.
            scalars["input_wait_fraction"] = self._wait_fraction
            self._wait_fraction = None
        scalars["echo_factor"] = self.echo_factor()
        return scalars


def default_config(config) -> None:
    # > 0: an AutoEcho stage at echo_insert moves the echo factor within [1, this] after every
    # inner loop (steps_per_loop steps) from the input wait measured in it (needs echo = 1).
    config.auto_echo_max_factor = 0.0


def check_config(config) -> None:
    auto = config.auto_echo_max_factor
    if not (auto == 0 or 1 <= auto <= MAX_FACTOR):
        raise ValueError(
            f"config auto_echo_max_factor must be 0 (off) or a number in [1, {MAX_FACTOR:g}], "
            f"got {auto!r}; e.g. 8 (the config argument max_echo=8)."
        )


def from_config(context: Context) -> AutoEchoTechnique | None:
    config = context.config
    if not config.auto_echo_max_factor:
        return None
    return AutoEchoTechnique(
        config.auto_echo_max_factor,
        insert=config.echo_insert,
        buffer_size=config.echo_buffer_size or None,
        seed=context.stage_seed("echo"),
    )
