"""Argument checks of ``loss_prune`` and ``LossPruning``'s by-id methods."""

from __future__ import annotations

import math
import sys
import warnings

import numpy as np
import tensorflow as tf

from echoing._src.core.checks import in_interval, is_positive_int, is_real, require


def check_batch_size(method: str, batch_size) -> None:
    if not is_positive_int(batch_size):
        raise ValueError(f"LossPruning.{method}(batch_size={batch_size!r}): expected an int >= 1.")


def check_read_source(num_examples: int, table_size: int) -> None:
    """``LossPruning.read``'s source holds one example per id of the table."""
    if num_examples == 0:
        raise ValueError(
            "LossPruning.read: the source is empty (0 examples); give it the training "
            f"examples, one per id of the loss table (LossTable({table_size}) holds "
            f"{table_size})."
        )
    if num_examples != table_size:
        raise ValueError(
            f"LossPruning.read: the source holds {num_examples} examples and the loss table "
            f"{table_size}; build the table with LossTable({num_examples}) so that id i is "
            "example i."
        )


def check_epoch_ids(ids, table_size: int) -> np.ndarray:
    """``LossPruning.epoch_ids``'s ``ids`` as an array: distinct int ids of the table."""
    values = np.asarray(ids)
    if values.ndim != 1 or not values.size or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(
            f"LossPruning.epoch_ids(ids=...): expected a non-empty 1-D array of int ids, got "
            f"dtype {values.dtype} shape {values.shape}."
        )
    if values.min() < 0 or values.max() >= table_size:
        raise ValueError(
            f"LossPruning.epoch_ids(ids=...): ids must be in [0, {table_size}) "
            f"(the loss table's size), got ids in [{values.min()}, {values.max()}]."
        )
    unique, counts = np.unique(values, return_counts=True)
    if unique.size < values.size:
        raise ValueError(
            f"LossPruning.epoch_ids(ids=...): each id may appear once, got "
            f"{values.size - unique.size} repeats (e.g. id {unique[counts > 1][0]} "
            f"{counts.max()} times), which would read those examples more than once an "
            "epoch; pass the distinct ids (np.unique(ids))."
        )
    return values


def check_batch_fits(method: str, batch_size: int, drop_remainder: bool, size: int) -> None:
    """With ``drop_remainder``, a batch larger than the epoch would drop every example."""
    if drop_remainder and batch_size > size:
        raise ValueError(
            f"LossPruning.{method}(batch_size={batch_size}, drop_remainder=True): an epoch holds "
            f"at most {size} examples (fewer once pruned), so every batch would be dropped and "
            f"training would see none; use a batch_size well below {size} (a pruned epoch keeps "
            "about 1 - prune_ratio/2 of them), or drop_remainder=False."
        )


def pruned_epochs(num_epochs: int, anneal_fraction: float) -> int:
    """The epochs pruning may prune, ``0 .. pruned - 1``: InfoBatch prunes epoch e while
    e < (1 - δ)·E; the 1e-9 keeps e.g. (1 - 0.125)·8 = 7 from rounding up to 8."""
    return math.ceil((1.0 - anneal_fraction) * num_epochs - 1e-9)


def warn_if_no_pruned_epoch(num_epochs: int, anneal_fraction: float) -> None:
    """A UserWarning when every epoch anneals (trains on every example): pruning would do
    nothing; and when no epoch does, though ``anneal_fraction`` asks for some: InfoBatch's
    rounding (prune epoch e while e < (1 - δ)·E) gives runs of up to 7 epochs at δ = 0.125
    no full-data epoch at the end."""
    pruned = pruned_epochs(num_epochs, anneal_fraction)
    if pruned == 0:
        warnings.warn(
            f"loss_prune(num_epochs={num_epochs}, anneal_fraction={anneal_fraction:g}) prunes no "
            "epoch: the last anneal_fraction of the epochs train on every example, and here "
            "that is all of them. Lower anneal_fraction (InfoBatch: 0.125).",
            UserWarning,
            stacklevel=3,
        )
    elif anneal_fraction > 0 and num_epochs >= 2 and pruned == num_epochs:
        warnings.warn(
            f"loss_prune(num_epochs={num_epochs}, anneal_fraction={anneal_fraction:g}) trains no "
            f"epoch on every example at the end: epoch e is pruned while e < (1 - "
            f"anneal_fraction) x num_epochs = {(1 - anneal_fraction) * num_epochs:g}, which "
            f"is every epoch here. For one full-data epoch, set anneal_fraction (the binary's "
            f"prune_anneal) >= 1/num_epochs = {1 / num_epochs:.3g}.",
            UserWarning,
            stacklevel=3,
        )


def check_number(arg, value, low, high, interval, *, upper_open) -> None:
    require(
        is_real(value) and in_interval(value, low, high, high_open=upper_open),
        f"loss_prune({arg}={value!r}): expected a number in {interval}. prune_ratio is the "
        "probability of dropping a below-mean example (1 would drop them all); "
        "anneal_fraction the share of epochs, at the end, on the full data.",
    )


# Pruning with a table nothing feeds keeps every example: the mistake is silent without this.
UNFED_EPOCH = 2  # epoch 1 may open before epoch 0's losses arrive (read-ahead); 2 is later
_UNFED = (
    "echoing.loss_prune: epoch {} opened and the LossTable has recorded no loss, so pruning "
    "keeps every example. Record training's per-example losses in this same table: "
    "echoing.keras.LossFeedback(..., observers=[table.update]) around the model fit trains, "
    "or table.update(ids, losses) in your own loop. (A pipeline that reads more than an epoch "
    "ahead of training can open an epoch before the first losses arrive.)"
)


def warn_if_unfed(table, epoch: tf.Tensor, warned: tf.Variable) -> tf.Tensor:
    """Prints ``_UNFED`` on stderr once, when ``epoch`` >= ``UNFED_EPOCH`` opens with ``table``
    holding no loss; ``warned`` (a bool variable) records that it did. In graph, per epoch."""

    def warn():
        # Epochs are numbered from 1 in what the user reads (0-based ``epoch`` 2 is the third).
        printed = tf.print(tf.strings.format(_UNFED, epoch + 1), output_stream=sys.stderr)
        with tf.control_dependencies([printed]):
            return warned.assign(True)

    unfed = (epoch >= UNFED_EPOCH) & ~warned & ~tf.reduce_any(table.seen)
    return tf.cond(unfed, warn, lambda: tf.identity(warned))


_PAST_END = (
    "echoing.loss_prune: epoch {} opened, past num_epochs={}: pruning keeps every example from "
    "here on, as in its annealing epochs. If training runs more epochs than that (model.fit's "
    "epochs), build the stage with num_epochs set to them: its threshold refreshes and the "
    "anneal are placed by num_epochs."
)


def say_past_end(epoch: tf.Tensor, num_epochs: int) -> tf.Tensor:
    """Prints ``_PAST_END`` on stderr when ``epoch`` (0-based) is the first past the run's
    ``num_epochs``, which opens once; in graph, per epoch."""

    def say():
        return tf.print(
            tf.strings.format(_PAST_END, (epoch + 1, num_epochs)), output_stream=sys.stderr
        )

    return tf.cond(tf.equal(epoch, num_epochs), say, tf.no_op)
