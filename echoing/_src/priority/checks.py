"""Argument checks of priority sampling: the batch's ratios and the source's size.

Example::

    from echoing._src.priority.checks import ids_per_batch

    ids_per_batch(0.25, 32, names=("top_ratio", "batch_size"))  # 8
"""

from __future__ import annotations

import warnings

import tensorflow as tf

from echoing._src.core.checks import in_interval, is_real
from echoing._src.core.sources import RandomAccessSource


def check_ratio(name: str, value: float) -> float:
    if not is_real(value, finite=False):
        raise TypeError(
            f"{name} must be a float in [0, 1], got {value!r} ({type(value).__name__})."
        )
    if not in_interval(float(value), 0.0, 1.0):
        raise ValueError(f"{name} must be in [0, 1] (a fraction of the batch), got {value!r}.")
    return float(value)


def ids_per_batch(ratio: float, batch_size: int, *, names: tuple[str, str]) -> int:
    """``round(ratio * batch_size)``, the ids a batch takes by one rule (priority or renewal);
    ``names`` are the ratio's and the batch size's as the caller's user wrote them.

    Raises:
      ValueError: a positive ``ratio`` that rounds to no id: the rule would be silently off.
    """
    count = round(ratio * batch_size)
    if ratio > 0 and count == 0:
        ratio_name, batch_name = names
        raise ValueError(
            f"{ratio_name}={ratio:g} of {batch_name}={batch_size} rounds to 0 ids per batch, so "
            f"the batch would take none by this rule; use {ratio_name} >= {1 / batch_size:.3g} "
            f"(one id of {batch_size}), or 0 to turn it off."
        )
    return count


def warn_if_table_is_ahead(table, start_step: int) -> None:
    """Warns when ``table`` (a ``PriorityTable``, read eagerly) holds measurements of steps
    after ``start_step`` (a table measured at the start step itself, before training, is a warm
    start): it comes from a run that went past the step this sampler starts at, so the sampler
    would renew ids from the first again and extrapolate priorities back in time. A resumed
    run must pass the step it stopped at, or restore the iterator."""
    if not tf.executing_eagerly():
        return  # a dataset_fn traced in a graph: the table's values cannot be read here
    last = table.last_measured_step()
    if last > start_step:
        warnings.warn(
            f"priority_sample(start_step={start_step}): the PriorityTable holds measurements "
            f"up to step {last}, so it comes from a run that went further, and this sampler "
            "would renew ids from the first again and extrapolate priorities back in time. To "
            f"resume, pass start_step= the step the run stopped at ({last + 1} if it stopped "
            "right after its last measured step), or restore the iterator from a checkpoint "
            "taken with it (tf.train.Checkpoint(iterator=...) carries the step); to start "
            "afresh, use a new PriorityTable.",
            UserWarning,
            stacklevel=3,
        )


def check_source_size(examples: RandomAccessSource, num_examples: int) -> None:
    """Raises unless the source holds exactly the table's ``N`` examples."""
    if examples.num_examples != num_examples:
        shapes = ", ".join(
            f"{key!r}: {[examples.num_examples, *spec.shape]}"
            for key, spec in examples.element_spec.items()
        )
        raise ValueError(
            f"the source has {examples.num_examples} examples ({shapes}) but the table has "
            f"N={num_examples}; build the table with the size of the source, so that id i is "
            "example i of the source."
        )
