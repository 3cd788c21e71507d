"""The AssistantLearner's counters, written by whichever thread trains and read by any.

Example::

    from echoing._src.assist.learner_stats import LearnerStats
    from echoing._src.assist.training import TrainedBatches

    stats = LearnerStats()
    stats.offered()  # a batch fed back (maybe skipped by train_every)
    stats.pushed(step=0)  # ... and taken for training
    stats.trained(TrainedBatches(batches=1, examples=4, correct=3, hard=1))
    report = stats.report(threshold=0.5, queue_drops=0)
    assert report["assistant_accuracy"] == 0.75 and report["hard_fraction"] == 0.25

Every count is updated under one lock, so a report taken while the learner's thread trains is
consistent with itself.
"""

from __future__ import annotations

import collections
import threading

from echoing._src.assist.training import TrainedBatches

# Assistant accuracy is reported over this many most recently trained batches.
_ACCURACY_WINDOW = 50


class LearnerStats:
    """Counts of fed-back, skipped, trained and dropped feedback, and the Assistant's accuracy."""

    def __init__(self):
        self._lock = threading.Lock()
        self._offered_batches = 0
        self._pushed_batches = 0
        self._nonfinite = 0
        self._trained_batches = 0
        self._trained_examples = 0
        self._hard_examples = 0
        # (correct, examples) per training call: accuracy over recent calls, not all of them,
        # since the Assistant's early guesses say nothing about how well it scores now.
        self._recent_accuracy: collections.deque = collections.deque(maxlen=_ACCURACY_WINDOW)
        self.last_step: int | None = None

    def offered(self) -> int:
        """Counts one fed-back batch; returns how many came before it (for ``train_every``)."""
        with self._lock:
            self._offered_batches += 1
            return self._offered_batches - 1

    def pushed(self, step: int | None) -> None:
        """Counts one batch taken for training (queued, or trained at once) at Boss ``step``."""
        with self._lock:
            self._pushed_batches += 1
            self.last_step = step

    def trained(self, result: TrainedBatches) -> None:
        """Adds one training call's counts."""
        with self._lock:
            self._nonfinite += result.nonfinite
            self._trained_batches += result.batches
            self._trained_examples += result.examples
            self._hard_examples += result.hard
            if result.examples:
                self._recent_accuracy.append((result.correct, result.examples))

    def report(self, threshold: float, queue_drops: int) -> dict[str, float]:
        """The dict ``AssistantLearner.stats()`` returns (see there)."""
        with self._lock:
            correct = sum(c for c, _ in self._recent_accuracy)
            total = sum(n for _, n in self._recent_accuracy)
            trained = self._trained_examples
            return {
                "assistant_accuracy": correct / total if total else 0.0,
                "hard_fraction": self._hard_examples / trained if trained else 0.0,
                "threshold": threshold,
                "queue_drops": queue_drops,
                "nonfinite_losses": self._nonfinite,
                "pushed_batches": self._pushed_batches,
                "skipped_batches": self._offered_batches - self._pushed_batches,
                "trained_batches": self._trained_batches,
                "trained_examples": trained,
            }
