"""Data echoing at a fixed factor, as a technique: the ``echo`` stage at the config's point.

Example::

    import tensorflow as tf
    from echoing.techniques import EchoTechnique

    technique = EchoTechnique(2.0, insert="after_augment", seed=0)
    (insertion,) = technique.stages()
    dataset = tf.data.Dataset.range(3).apply(insertion.transformation)
    print(list(dataset.as_numpy_iterator()))  # [0, 0, 1, 1, 2, 2]

From a run config it reads ``echo``, ``echo_insert`` and ``echo_buffer_size``
(``--config.echo=2 --config.echo_insert=after_augment``); a factor of 1 is no technique at
all (a shuffle buffer then belongs to AutoEcho's stage). Echo has this one owner: the input
pipeline never echoes by itself.
"""

from __future__ import annotations

from echoing._src.core.technique import Context, Insertion, Technique
from echoing._src.echo.counts import MAX_FACTOR
from echoing._src.echo.echo import echo


class EchoTechnique(Technique):
    """Repeats every element ``factor`` times in expectation at ``insert`` (``echoing.echo``)."""

    name = "echo"

    def __init__(
        self,
        factor: float,
        *,
        insert: str,
        buffer_size: int | None = None,
        seed: int | None = None,
    ):
        self._transformation = echo(factor, buffer_size=buffer_size, seed=seed)
        self._factor = float(factor)
        self._insert = insert

    def stages(self) -> list[Insertion]:
        return [Insertion(self._insert, self.name, self._transformation)]

    def echo_factor(self) -> float:
        return self._factor


def default_config(config) -> None:
    # Each example (or batch) repeated this many times in expectation; 1.0 = no echo.
    config.echo = 1.0
    # Where the echo stage goes in the train pipeline (also AutoEcho's): before_augment (raw
    # examples, augmented differently each repeat), after_augment, after_batch, ...
    config.echo_insert = "before_augment"
    # > 0: a shuffle buffer of this many elements right after echo, so that an example's copies
    # spread over batches; 0 = none.
    config.echo_buffer_size = 0


def check_config(config) -> None:
    if not 0 < config.echo <= MAX_FACTOR:  # also NaN and inf
        raise ValueError(
            f"config echo must be a number in (0, {MAX_FACTOR:g}] (1.0 = no echo), got "
            f"{config.echo!r}; e.g. echo=2."
        )
    if config.echo_buffer_size < 0:
        raise ValueError(
            f"config echo_buffer_size must be >= 0 (0 = no shuffle after echo), got "
            f"{config.echo_buffer_size!r}."
        )
    if config.echo_buffer_size and config.echo == 1 and not config.auto_echo_max_factor:
        raise ValueError(
            f"config echo_buffer_size={config.echo_buffer_size} shuffles echo's copies apart, "
            "and echo is off (echo=1, auto_echo_max_factor=0); set the echo factor (e.g. "
            "--config.echo=2, or auto_echo_max_factor for AutoEcho), or drop echo_buffer_size."
        )
    if (
        config.data.source == "image_folder"
        and config.echo != 1
        and config.echo_insert in ("after_read", "before_decode")
    ):
        raise ValueError(
            f"config echo_insert={config.echo_insert!r} cannot echo an image folder: its read "
            "stage yields file paths and the decode stage reads and decodes each file, so an "
            "echo there would re-read and re-decode every repeat and save no work. Echo "
            "after_decode (decoded crops, flipped differently), after_augment or after_batch."
        )


def from_config(context: Context) -> EchoTechnique | None:
    config = context.config
    if config.echo == 1:  # off; a shuffle buffer then belongs to AutoEcho's stage
        return None
    return EchoTechnique(
        float(config.echo),
        insert=config.echo_insert,
        buffer_size=config.echo_buffer_size or None,
        seed=context.stage_seed("echo"),
    )
