"""The technique protocol: everything that changes what reaches the model, behind one interface.

Example::

    import tensorflow as tf
    from echoing import techniques

    class EveryOther(techniques.Technique):
        '''Drops every other example after augmentation (a toy technique).'''

        name = "every_other"

        def stages(self):
            keep = lambda example: example["id"] % 2 == 0
            return [techniques.Insertion("after_augment", self.name, lambda ds: ds.filter(keep))]

    technique = EveryOther()
    dataset = tf.data.Dataset.from_tensor_slices({"id": tf.range(6, dtype=tf.int64)})
    for point, name, transformation in technique.stages():
        dataset = dataset.apply(transformation)
    print([int(x["id"]) for x in dataset])  # [0, 2, 4]

A trainer (``trainers.loop.Trainer`` and the run around it) never names a technique. It asks
every technique, through these methods and nothing else:

- ``stages()``: pipeline transformations at named insertion points (``before_augment``, ...).
- ``train_dataset(input_context)``: batches the technique selects itself (priority sampling
  draws them from a table), instead of the input pipeline's; ``None`` for all others.
- ``input_options()``: ``tf.distribute.InputOptions`` the train set needs, or ``None``.
- ``build(model)``: once, under ``strategy.scope()``, after the model exists.
- ``select(batch, score, step)``: the rows of a replica's batch the step trains on (in-batch
  selection), given ``score(batch)``, per-example losses from an inference-mode forward pass,
  and the global step (to seed a random draw).
- ``gradients(loss_fn, sample_weight)`` and ``after_step(ids, aux, gradients, step)``: an
  optional replacement of the train step's backward pass (priority sampling's JVP) and what
  follows each step; at most one technique of a run may replace the backward pass.

What a technique changes in the train step it declares as class attributes, which the trainer
reads: ``selects_rows = True`` with ``select``, ``replaces_gradients = True`` with
``gradients``, ``wants_losses = True`` for ids and losses in every ``Feedback``. A class that
defines ``select`` or ``gradients`` without declaring it (or declares without defining) is
refused when it is defined, so a declaration cannot be forgotten.
- ``observe(feedback)``: the ONE feedback channel: after every inner loop, every technique
  gets the same ``Feedback`` record (ids and per-example losses of the steps trained, the step
  reached, the loop's wall time and input wait).
- ``echo_factor()``: emitted examples per fresh one (to count fresh data consumed).
- ``progress()``: for a technique that changes the steps an epoch takes (pruning), the fraction
  of the run done by its own count, as a tensor: the learning rate follows it and the run ends
  when it reaches 1; ``None`` (the default) keeps the run measured in steps.
- ``checkpointed()``: the state a checkpoint saves, by name; ``restored()``: called after the
  restore, before training; ``scalars()``: what it logs;
  ``close()``: stop threads at the end of the run.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from echoing._src.core.types import ClosesOnExit, DatasetTransformation


class Insertion(NamedTuple):
    """A pipeline transformation at a named point (see ``pipelines.Pipeline.insert``)."""

    point: str
    name: str
    transformation: DatasetTransformation


@dataclasses.dataclass(frozen=True)
class Feedback:
    """What the training loop reports to every technique after each inner loop.

    Attributes:
      ids: int64 ``[steps, global_batch]`` example ids of the rows trained on, or None when no
        technique asked for them (``Technique.wants_losses``).
      losses: float32 ``[steps, global_batch]`` per-example losses of those rows, or None.
      step: the global step reached after the loop.
      steps: train steps in the loop.
      seconds: the loop's wall time.
      input_wait_seconds: the part of it the steps spent blocked on the input iterator.
      traced: True for a process's first loop, whose time includes tracing and compilation
        (it says nothing about input-boundness).
      echo_factor: the factor the loop's rows were echoed by (the techniques' product at its
        start): the fresh examples behind the rows are their number over it.
    """

    ids: tf.Tensor | None
    losses: tf.Tensor | None
    step: int
    steps: int
    seconds: float
    input_wait_seconds: float
    traced: bool = False
    echo_factor: float = 1.0


@dataclasses.dataclass(frozen=True)
class ExamplesById:
    """The decoded (not augmented) train split in memory: row i is example id i."""

    arrays: Mapping[str, np.ndarray]  # "inputs" [N, ...], "label" [N]
    num_classes: int
    input_shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Context:
    """What a technique built from a config may need from the run.

    Attributes:
      config: the resolved run config (``trainers.config``).
      stage_seed: ``stage_seed(name)`` is the run's seed for stage ``name`` (``"echo"``, ...):
        one independent stream per stage of one seed (``pipelines.stage_seed``).
      num_input_pipelines: input pipelines (workers/hosts) the train set is built for.
      examples: loads the train split by id (``ExamplesById``); called only when needed.
      num_examples: the number of train examples (ids are 0 .. num_examples - 1).
      trains: False when the run only evaluates a checkpoint (the binary's ``--eval_only``):
        warnings about the training schedule (too few steps to prune) are not said.
    """

    config: Any
    stage_seed: Callable[[str], int]
    num_input_pipelines: int = 1
    examples: Callable[[], ExamplesById] | None = None
    num_examples: Callable[[], int] | None = None
    trains: bool = True


# Hook -> the capability a technique declares when it defines that hook.
_DECLARED_HOOKS = {"select": "selects_rows", "gradients": "replaces_gradients"}


class Technique(ClosesOnExit):
    """Base class: every hook does nothing, so a technique overrides only what it changes."""

    name: str = "technique"
    # True: the loop gathers ids and per-example losses into every ``Feedback``.
    wants_losses: bool = False
    # True: ``select`` chooses the rows of each batch the step trains on.
    selects_rows: bool = False
    # True: ``gradients`` replaces the step's backward pass (at most one technique per run).
    replaces_gradients: bool = False
    # With ``progress``: why a run it ends before ``num_steps`` ended there, for the user; and
    # what a run that reached ``num_steps`` before its progress reached 1 missed, with the fix.
    run_end_reason: str = ""
    run_cut_reason: str = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for hook, capability in _DECLARED_HOOKS.items():
            defines = getattr(cls, hook) is not getattr(Technique, hook)
            if defines != bool(getattr(cls, capability)):
                raise TypeError(
                    f"technique {cls.__name__} "
                    + (f"defines {hook}() but does not declare" if defines else "declares")
                    + f" {capability} = True; "
                    + (
                        f"add `{capability} = True` to the class, so the trainer calls it."
                        if defines
                        else f"define {hook}() or drop the declaration."
                    )
                )

    def stages(self) -> Sequence[Insertion]:
        return ()

    def train_dataset(self, input_context: tf.distribute.InputContext) -> tf.data.Dataset | None:
        del input_context
        return None

    def input_options(self) -> tf.distribute.InputOptions | None:
        return None

    def build(self, model) -> None:
        del model

    def select(self, batch: dict, score: Callable[[dict], tf.Tensor], step: tf.Tensor) -> dict:
        del score, step
        return batch

    def gradients(self, loss_fn: Callable[[], tf.Tensor], sample_weight: tf.Tensor | None):
        """``(per_example_losses, gradients, aux)`` in place of the plain backward pass."""
        raise NotImplementedError

    def after_step(self, ids: tf.Tensor, aux, gradients, step: tf.Tensor) -> None:
        del ids, aux, gradients, step

    def observe(self, feedback: Feedback) -> None:
        del feedback

    def echo_factor(self) -> float:
        return 1.0

    def progress(self) -> tf.Tensor | None:
        return None

    def fresh_examples_to_end(self) -> float | None:
        """With ``progress``: at least the fresh examples training must still take to reach 1
        (exact once known): the controller ends the loop there and asks again. None: not known;
        the controller estimates the end from the progress rate, and may overshoot it."""
        return None

    def checkpointed(self) -> dict[str, Any]:
        return {}

    def restored(self) -> None:
        """Called once the run's state is restored (or fresh), before it trains: recompute what
        derives from that state and this run's config (pruning's progress, after a resume with
        more epochs)."""

    def scalars(self) -> dict[str, float]:
        return {}

    def end_note(self) -> str | None:
        """Said once when the run ends: what the technique did not do that the user asked of
        it, with the cause and the fix (pruning that pruned nothing); None when all went as
        asked."""
        return None

    def close(self) -> None:
        pass


def selects_rows(technique: Technique) -> bool:
    """Whether ``technique`` declares ``selects_rows`` (and so defines ``select``)."""
    return bool(technique.selects_rows)


def replaces_gradients(technique: Technique) -> bool:
    """Whether ``technique`` declares ``replaces_gradients`` (and so defines ``gradients``)."""
    return bool(technique.replaces_gradients)


class FeedbackCallback(Technique):
    """Calls ``callback(ids, per_example_losses, step)`` with every ``Feedback`` record, after
    every inner loop.

    Example::

        seen = []
        technique = FeedbackCallback(lambda ids, losses, step: seen.append(step))
    """

    name = "feedback_callback"
    wants_losses = True

    def __init__(self, callback: Callable[[tf.Tensor, tf.Tensor, int], None]):
        if not callable(callback):
            raise TypeError(f"callback must be callable (ids, losses, step), got {callback!r}.")
        self._callback = callback

    def observe(self, feedback: Feedback) -> None:
        self._callback(feedback.ids, feedback.losses, feedback.step)


class LossCallback(FeedbackCallback):
    """Deprecated, goes in the next release: ``echoing.techniques.FeedbackCallback`` (renamed)."""

    def __init__(self, callback: Callable[[tf.Tensor, tf.Tensor, int], None]):
        warnings.warn(
            "echoing.techniques.LossCallback is deprecated and goes in the next release: use "
            "echoing.techniques.FeedbackCallback, the same technique under per-example loss "
            "feedback's one name.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(callback)


class Stages(Technique):
    """A technique that only adds the given pipeline stages (e.g. a user's own preprocessing).

    Example::

        technique = Stages([("before_augment", "costly", lambda ds: ds.map(lambda x: x))])
    """

    name = "stages"

    def __init__(self, insertions: Sequence[tuple[str, str, DatasetTransformation]]):
        self._insertions = check_insertions(insertions)

    def stages(self) -> list[Insertion]:
        return list(self._insertions)


def check_insertions(insertions) -> tuple[Insertion, ...]:
    """``insertions`` as ``Insertion``s, or a TypeError naming the one that is not a
    ``(point, name, transformation)`` tuple."""
    insertions = tuple(insertions)
    for insertion in insertions:
        if (
            not isinstance(insertion, tuple)
            or len(insertion) != 3
            or not isinstance(insertion[0], str)
            or not isinstance(insertion[1], str)
        ):
            raise TypeError(
                "insertions must be (point, name, transformation) tuples, e.g. "
                f"('after_augment', 'assistant', filter_stage); got {insertion!r}."
            )
    return tuple(Insertion(*insertion) for insertion in insertions)
