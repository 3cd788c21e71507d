"""In-batch selection as a technique: each step trains on the highest-loss rows of its batch.

Example::

    import tensorflow as tf
    from echoing.techniques import InBatchSelection

    technique = InBatchSelection(ratio=0.5)
    batch = {"inputs": tf.zeros([4, 3]), "label": tf.zeros([4], tf.int64),
             "id": tf.range(4, dtype=tf.int64)}
    selected = technique.select(batch, lambda b: tf.constant([0.1, 0.9, 0.5, 0.2]))
    print(selected["id"].numpy())  # [1 2]

The trainer calls ``select(batch, score)`` at the start of every replica's step: ``score`` is a
forward pass of the model in inference mode giving per-example losses, and the step's forward
and backward pass then run on the ``ratio`` of the rows that score highest (``[k, ...]``, a
static shape, so the step still compiles). The input pipeline's batch is the candidate pool:
raise ``data.batch_size`` to 1 / ratio times the batch you want trained. Config field:
``select_ratio`` (1 = off).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from echoing.batch_selection import select_rows
from echoing.techniques.base import Context, Technique


class InBatchSelection(Technique):
    """Trains each step on the top ``ratio`` of its batch by the model's current loss."""

    name = "select"

    def __init__(self, ratio: float):
        if isinstance(ratio, bool) or not 0 < ratio <= 1:
            raise ValueError(f"InBatchSelection(ratio={ratio!r}): expected a number in (0, 1].")
        self.ratio = float(ratio)

    def rows(self, batch_size: int) -> int:
        """Rows trained from a (per-replica) batch of ``batch_size``."""
        return max(1, round(self.ratio * batch_size))

    def select(self, batch: dict, score: Callable[[dict], tf.Tensor]) -> dict:
        size = tf.compat.dimension_value(batch["label"].shape[0])
        if size is None:
            raise ValueError(
                "in-batch selection needs a static batch size to keep static shapes; batch with "
                "drop_remainder=True."
            )
        return select_rows(batch, tf.stop_gradient(score(batch)), self.rows(size))

    def scalars(self) -> dict[str, float]:
        return {"select_ratio": self.ratio}


def default_config(config) -> None:
    # In-batch selection (Selective-Backprop style): each step scores its batch with a forward
    # pass and trains on the select_ratio of the rows with the highest loss. 1 = off.
    config.select_ratio = 1.0


def check_config(config) -> None:
    if not 0 < config.select_ratio <= 1:
        raise ValueError(
            f"config select_ratio must be in (0, 1] (1 = off), got {config.select_ratio!r}: the "
            "fraction of each batch trained on."
        )
    if config.select_ratio == 1:
        return
    rows = round(config.select_ratio * config.data.batch_size)
    if rows < 1:
        raise ValueError(
            f"config select_ratio={config.select_ratio} of batch_size={config.data.batch_size} "
            "selects no rows; raise either."
        )
    if config.pgd:
        raise ValueError("config select_ratio < 1 and pgd=True: PGD chooses its own batches.")


def from_config(context: Context) -> InBatchSelection | None:
    ratio = context.config.select_ratio
    return InBatchSelection(ratio) if ratio < 1 else None
