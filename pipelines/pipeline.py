"""A pipeline: an ordered list of named stages, with transformations inserted at named points.

Example::

    import tensorflow as tf
    import echoing
    from pipelines.pipeline import Pipeline, Stage

    pipeline = Pipeline([
        Stage("read", lambda _: tf.data.Dataset.range(4)),
        Stage("augment", lambda ds: ds.map(lambda x: x * 10)),
        Stage("batch", lambda ds: ds.batch(2)),
    ])
    # Echo before augmentation, after it, or after batching is one argument apart.
    ds = pipeline.insert("after_batch", echoing.echo(2), name="echo").build()
    # [0, 10], [0, 10], [20, 30], [20, 30]

The first stage is the source: it receives ``None`` and returns the dataset. Every later stage
and every inserted transformation is a ``Dataset -> Dataset`` function. Each runs under
``tf.name_scope`` of its name, so its ops are grouped in graphs and the tf.data profiler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import tensorflow as tf

# A stage: the source stage receives None, every other stage the dataset so far.
StageFunction = Callable[[tf.data.Dataset | None], tf.data.Dataset]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One named step of a pipeline.

    Attributes:
      name: a short identifier such as "read", "decode", "augment", "batch", "prefetch".
      function: ``Dataset -> Dataset`` (the first stage gets ``None`` and makes the dataset).
    """

    name: str
    function: StageFunction


@dataclasses.dataclass(frozen=True)
class _Insertion:
    point: str
    name: str
    transformation: Callable[[tf.data.Dataset], tf.data.Dataset]


class Pipeline:
    """An ordered list of named stages plus transformations inserted between them.

    Insertion points are ``after_<first stage>`` and ``before_<stage>`` / ``after_<stage>`` for
    every later stage. ``before_x`` and ``after_<stage before x>`` are the same place; several
    transformations at one place run in the order they were inserted.
    """

    def __init__(self, stages: Sequence[Stage], insertions: Sequence[_Insertion] = ()):
        stages = tuple(stages)
        if not stages:
            raise ValueError("a Pipeline needs at least one stage (the source), got none.")
        for stage in stages:
            if not isinstance(stage, Stage):
                raise TypeError(
                    f"Pipeline stages must be pipelines.Stage(name, function), got {stage!r}."
                )
        names = [stage.name for stage in stages]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"Pipeline stage names must be unique, got {duplicates} twice.")
        self._stages = stages
        self._insertions = tuple(insertions)

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in self._stages)

    @property
    def insertion_points(self) -> tuple[str, ...]:
        """Every valid point, in pipeline order."""
        first, *rest = self.stage_names
        points = [f"after_{first}"]
        for name in rest:
            points += [f"before_{name}", f"after_{name}"]
        return tuple(points)

    @property
    def inserted(self) -> tuple[tuple[str, str], ...]:
        """``(point, name)`` of every inserted transformation, in the order they apply at a
        point, e.g. ``(("after_augment", "service"), ("after_augment", "echo"))``."""
        return tuple((insertion.point, insertion.name) for insertion in self._insertions)

    def insert(
        self,
        point: str,
        transformation: Callable[[tf.data.Dataset], tf.data.Dataset],
        *,
        name: str,
    ) -> Pipeline:
        """Returns a new pipeline with ``transformation`` applied at ``point``.

        Args:
          point: ``before_<stage>`` or ``after_<stage>``, one of ``insertion_points``.
          transformation: a ``Dataset -> Dataset`` function, e.g. ``echoing.echo(2)``.
          name: name scope for the transformation's ops, e.g. "echo".

        Raises:
          ValueError: ``point`` is not one of ``insertion_points``.
          TypeError: ``transformation`` is not callable.
        """
        if point not in self.insertion_points:
            raise ValueError(
                f"unknown insertion point {point!r}; valid points for stages "
                f"{list(self.stage_names)} are {list(self.insertion_points)}."
            )
        if not callable(transformation):
            raise TypeError(
                f"the transformation inserted at {point!r} must be a Dataset -> Dataset function "
                f"such as echoing.echo(2), got {transformation!r}."
            )
        return Pipeline(self._stages, (*self._insertions, _Insertion(point, name, transformation)))

    def build(self) -> tf.data.Dataset:
        """Runs the stages in order, each under ``tf.name_scope(stage.name)``."""
        dataset = None
        for index, stage in enumerate(self._stages):
            if index > 0:
                dataset = self._apply_insertions(dataset, f"before_{stage.name}")
            with tf.name_scope(stage.name):
                dataset = stage.function(dataset)
            if not isinstance(dataset, tf.data.Dataset):
                raise TypeError(
                    f"pipeline stage {stage.name!r} must return a tf.data.Dataset, got "
                    f"{type(dataset).__name__}."
                )
            dataset = self._apply_insertions(dataset, f"after_{stage.name}")
        return dataset

    def _apply_insertions(self, dataset: tf.data.Dataset, point: str) -> tf.data.Dataset:
        for insertion in self._insertions:
            if insertion.point == point:
                with tf.name_scope(insertion.name):
                    dataset = insertion.transformation(dataset)
        return dataset
