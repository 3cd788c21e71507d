"""Data echoing at a fixed factor, as a technique: the ``echo`` stage at the config's point.

Example::

    import tensorflow as tf
    from echoing.techniques import EchoTechnique

    technique = EchoTechnique(2.0, insert="after_augment", seed=0)
    (insertion,) = technique.stages()
    dataset = tf.data.Dataset.range(3).apply(insertion.transformation)
    print(list(dataset.as_numpy_iterator()))  # [0, 0, 1, 1, 2, 2]

From a run config it reads the data section's ``echo``, ``echo_insert`` and
``echo_buffer_size`` (``pipelines.default_data_config``); a factor of 1 without a shuffle
buffer is no technique at all.
"""

from __future__ import annotations

from echoing._src.core.technique import Context, Insertion, Technique
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
    """Echo's fields live in the data section (``pipelines.default_data_config``)."""
    del config


def check_config(config) -> None:
    """Checked with the data section (``pipelines.resolve_data_config``)."""
    del config


def from_config(context: Context) -> EchoTechnique | None:
    data = context.config.data
    if data.echo == 1 and not data.echo_buffer_size:
        return None
    return EchoTechnique(
        float(data.echo),
        insert=data.echo_insert,
        buffer_size=data.echo_buffer_size or None,
        seed=context.stage_seed("echo"),
    )
