"""In-batch selection as a technique: each step trains on the high-loss rows of its batch.

Example::

    import tensorflow as tf
    from echoing.techniques import InBatchSelection

    technique = InBatchSelection(ratio=0.5)
    batch = {"inputs": tf.zeros([4, 3]), "label": tf.zeros([4], tf.int64),
             "id": tf.range(4, dtype=tf.int64)}
    scores = lambda b: tf.constant([0.1, 0.9, 0.5, 0.2])
    selected = technique.select(batch, scores, step=tf.constant(0, tf.int64))
    print(selected["id"].numpy())  # [1 2]

The trainer calls ``select(batch, score, step)`` at the start of every replica's step:
``score`` is a forward pass of the model in inference mode giving per-example losses, and the
step's forward and backward pass then run on ``ratio`` of the rows (``[k, ...]``, a static
shape, so the step still compiles). The input pipeline's batch is the candidate pool: raise
``data.batch_size`` to 1 / ratio times the batch you want trained. Config fields:
``select_ratio`` (1 = off) and ``select_mode``:

- ``"top"``: the rows with the highest loss (Selective-Backprop's limit, ``select_rows``).
- ``"sample"``: rows drawn with replacement, with probability rising with their loss, and
  weighted by 1/p (``sample_rows``): an unbiased estimate of the whole batch's gradient.

Both train on a larger gradient than a uniform batch of the same size and may need a lower
learning rate than the full data's: in ``benchmarks/selection.py`` (MNIST-1D, pool 2) both
ended seed 0 at 10-30% at the full data's best rate and were tuned to half of it, where top-k
ended at 98.53 ± 0.25% and drawing at 98.15 ± 0.77% over 8 seeds (the full data: 99.08%).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from echoing._src.core.checks import in_interval
from echoing._src.core.technique import Context, Technique
from echoing._src.priority.selection import sample_rows, select_rows

MODES = ("top", "sample")
_UPSTREAM_WEIGHT = "_upstream_sample_weight"


class InBatchSelection(Technique):
    """Trains each step on ``ratio`` of its batch, chosen by the model's current loss."""

    name = "select"
    selects_rows = True

    def __init__(self, ratio: float, *, mode: str = "top", seed: int = 0):
        if isinstance(ratio, bool) or not in_interval(ratio, 0, 1, low_open=True):
            raise ValueError(f"InBatchSelection(ratio={ratio!r}): expected a number in (0, 1].")
        if mode not in MODES:
            raise ValueError(f"InBatchSelection(mode={mode!r}): expected one of {MODES}.")
        self.ratio = float(ratio)
        self.mode = mode
        self.seed = int(seed)

    def rows(self, batch_size: int) -> int:
        """Rows trained from a (per-replica) batch of ``batch_size``."""
        return max(1, round(self.ratio * batch_size))

    def select(self, batch: dict, score: Callable[[dict], tf.Tensor], step: tf.Tensor) -> dict:
        size = tf.compat.dimension_value(batch["label"].shape[0])
        if size is None:
            raise ValueError(
                "in-batch selection needs a static batch size to keep static shapes; batch with "
                "drop_remainder=True."
            )
        scores = tf.stop_gradient(score(batch))
        if self.mode == "top":
            return select_rows(batch, scores, self.rows(size))
        # A filter upstream may have weighted the rows already: the draw's 1/p multiplies that.
        upstream = batch.get("sample_weight")
        rows = {key: value for key, value in batch.items() if key != "sample_weight"}
        if upstream is not None:
            rows[_UPSTREAM_WEIGHT] = upstream
        seed = tf.stack([tf.constant(self.seed, tf.int64), tf.cast(step, tf.int64)])
        drawn = sample_rows(rows, scores, self.rows(size), seed)
        if upstream is not None:
            weight = tf.cast(drawn.pop(_UPSTREAM_WEIGHT), drawn["sample_weight"].dtype)
            drawn["sample_weight"] *= weight
        return drawn

    def scalars(self) -> dict[str, float]:
        return {"select_ratio": self.ratio}


def default_config(config) -> None:
    # In-batch selection (Selective-Backprop style): each step scores its batch with a forward
    # pass and trains on the select_ratio of the rows with the highest loss. 1 = off.
    config.select_ratio = 1.0
    # "top": the highest-loss rows; "sample": rows drawn by loss, weighted 1/p (unbiased).
    config.select_mode = "top"


def check_config(config) -> None:
    if not in_interval(config.select_ratio, 0, 1, low_open=True):
        raise ValueError(
            f"config select_ratio must be in (0, 1] (1 = off), got {config.select_ratio!r}: the "
            "fraction of each batch trained on."
        )
    if config.select_mode not in MODES:
        raise ValueError(
            f"config select_mode={config.select_mode!r}: expected one of {MODES} (the highest-"
            "loss rows, or rows drawn by loss and weighted 1/p)."
        )
    if config.select_ratio == 1:
        if config.select_mode != "top":
            raise ValueError(
                f"config select_mode={config.select_mode!r} with select_ratio=1: in-batch "
                "selection is off, so the run would train on whole batches. Set select_ratio "
                "below 1 (e.g. 0.5) or leave select_mode at 'top'."
            )
        return
    if config.data.source == "text":
        raise ValueError(
            f"config select_ratio={config.select_ratio} with data.source='text': in-batch "
            "selection ranks one loss per example in batches of a static size, and the text "
            "source batches windows by length, with per-token losses; on text, use echo, "
            "prune or assist (configs/text_lm.py's arguments)."
        )
    rows = round(config.select_ratio * config.data.batch_size)
    if rows < 1:
        raise ValueError(
            f"config select_ratio={config.select_ratio} of batch_size={config.data.batch_size} "
            "selects no rows; raise either."
        )


def from_config(context: Context) -> InBatchSelection | None:
    config = context.config
    if config.select_ratio == 1:
        return None
    return InBatchSelection(config.select_ratio, mode=config.select_mode, seed=config.seed)
