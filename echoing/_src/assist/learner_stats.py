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
consistent with itself. ``state()`` and ``restore()`` carry every count (and the batches the
accuracy is measured over) across a checkpoint, so a resumed run continues them.
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
        # Queue drops of the run before a restore: the worker counts only its own.
        self._earlier_drops = 0

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
                "queue_drops": self._earlier_drops + queue_drops,
                "nonfinite_losses": self._nonfinite,
                "pushed_batches": self._pushed_batches,
                "skipped_batches": self._offered_batches - self._pushed_batches,
                "trained_batches": self._trained_batches,
                "trained_examples": trained,
            }

    def state(self, queue_drops: int) -> dict:
        """Every count, as JSON-ready values; ``queue_drops``: the worker's count so far."""
        with self._lock:
            return {
                "offered_batches": self._offered_batches,
                "pushed_batches": self._pushed_batches,
                "nonfinite_losses": self._nonfinite,
                "trained_batches": self._trained_batches,
                "trained_examples": self._trained_examples,
                "hard_examples": self._hard_examples,
                "recent_accuracy": [list(pair) for pair in self._recent_accuracy],
                "last_step": self.last_step,
                "queue_drops": self._earlier_drops + queue_drops,
            }

    def restore(self, state: dict, queue_drops: int) -> None:
        """Continues from ``state(...)`` of earlier statistics; ``queue_drops``: the worker's
        count now (reported on top of the restored one from here on)."""
        with self._lock:
            self._offered_batches = int(state["offered_batches"])
            self._pushed_batches = int(state["pushed_batches"])
            self._nonfinite = int(state["nonfinite_losses"])
            self._trained_batches = int(state["trained_batches"])
            self._trained_examples = int(state["trained_examples"])
            self._hard_examples = int(state["hard_examples"])
            self._recent_accuracy.clear()
            self._recent_accuracy.extend(
                (int(correct), int(examples)) for correct, examples in state["recent_accuracy"]
            )
            step = state["last_step"]
            self.last_step = None if step is None else int(step)
            self._earlier_drops = int(state["queue_drops"]) - queue_drops
