"""The labelling threshold T: examples whose Boss loss exceeds it are hard (z = 1).

Example::

    from echoing._src.assist.threshold import LossThreshold

    threshold = LossThreshold("mean", decay=0.75)
    threshold.observe(loss_sum=4.0, count=2)  # one batch of losses [1.0, 3.0]
    assert threshold.value() == 2.0
    assert LossThreshold(0.5, decay=0.75).value() == 0.5  # fixed: never moves

By default T is a running mean of recent Boss losses, exactly what the paper's code does
(``autoassist-exp/image_classification``: ``loss > loss_mean``, the mean an exponential average
over batches with decay 0.75). The paper text leaves T open. A running mean adapts as the Boss
improves, so roughly the harder part of the current loss distribution is labelled hard all
through training; a fixed T (``threshold=0.1``) labels almost everything easy once the Boss is
good. Callers feed it finite losses only, so a NaN never reaches T.

``state()`` and ``restore(state)`` carry the running mean across a checkpoint (see
``AssistantLearner.checkpoint_state``): a resumed run labels with the T it had, not 0.
"""

from __future__ import annotations

import threading


class LossThreshold:
    """``"mean"``: T = EMA(sum of batch losses) / EMA(batch size); a number: T fixed.

    Thread-safe: the learner's thread observes batches while ``stats()`` reads T elsewhere.
    """

    def __init__(self, threshold: str | float, decay: float):
        self._fixed = None if threshold == "mean" else float(threshold)
        self._decay = float(decay)
        self._lock = threading.Lock()
        self._loss_sum_average = 0.0
        self._count_average = 0.0

    def observe(self, loss_sum: float, count: int) -> None:
        """Moves a running-mean T by a batch of ``count`` finite losses summing to ``loss_sum``."""
        if self._fixed is not None:
            return
        decay = self._decay
        with self._lock:
            # Averaging the sum and the count separately (the paper's code), not the batch
            # means, weighs each example alike whatever the size of its batch.
            self._loss_sum_average = decay * self._loss_sum_average + (1 - decay) * loss_sum
            self._count_average = decay * self._count_average + (1 - decay) * count

    def value(self) -> float:
        """The current T (0.0 for a running mean that has seen no loss yet)."""
        if self._fixed is not None:
            return self._fixed
        with self._lock:
            if not self._count_average:
                return 0.0
            return self._loss_sum_average / self._count_average

    def state(self) -> dict[str, float]:
        """The running mean's two averages (what a resumed run needs to continue T)."""
        with self._lock:
            return {
                "loss_sum_average": self._loss_sum_average,
                "count_average": self._count_average,
            }

    def restore(self, state: dict[str, float]) -> None:
        """Continues from ``state()`` of an earlier threshold (a fixed T ignores it)."""
        with self._lock:
            self._loss_sum_average = float(state["loss_sum_average"])
            self._count_average = float(state["count_average"])
