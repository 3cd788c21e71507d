"""What a checkpoint keeps of an AssistantLearner besides the Assistant: T and the counters.

Example::

    import tensorflow as tf
    import echoing

    learner = echoing.AssistantLearner(echoing.Assistant(2, input_shape=(3,)), asynchronous=False)
    learner.push(tf.zeros([2, 3]), tf.constant([0, 1]), tf.constant([1.0, 3.0]), step=0)
    path = tf.train.Checkpoint(learner=learner.checkpoint_state).write("/tmp/learner")

    resumed = echoing.AssistantLearner(echoing.Assistant(2, input_shape=(3,)), asynchronous=False)
    tf.train.Checkpoint(learner=resumed.checkpoint_state).read(path).assert_consumed()
    assert resumed.stats() == learner.stats()  # threshold 2.0, one pushed batch, ...

The Assistant and its optimizer are variables and checkpoint as such; the learner's running-mean
threshold and its counts (batches fed back, pushed, trained, skipped by ``train_every``, queue
drops, non-finite losses, and the recent batches its accuracy is measured over) are Python
numbers, saved here as one JSON string. Without them a resumed run restarted T at 0 (labelling
nearly every example hard) and its logged counters at 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import tensorflow as tf

from echoing._src.assist.learner_stats import LearnerStats
from echoing._src.assist.threshold import LossThreshold

_VERSION = 1


class LearnerState(tf.train.experimental.PythonState):
    """A checkpointable view of a learner's ``stats`` and ``threshold``.

    Args:
      stats: the learner's counters.
      threshold: its labelling threshold T.
      queue_drops: returns the background worker's drops so far.
    """

    def __init__(
        self, stats: LearnerStats, threshold: LossThreshold, queue_drops: Callable[[], int]
    ):
        self._stats = stats
        self._threshold = threshold
        self._queue_drops = queue_drops

    def serialize(self) -> str:
        return json.dumps(
            {
                "version": _VERSION,
                "stats": self._stats.state(self._queue_drops()),
                "threshold": self._threshold.state(),
            }
        )

    def deserialize(self, string_value) -> None:
        try:
            state = json.loads(string_value)
            if state["version"] != _VERSION:
                raise ValueError(f"version {state['version']!r}, expected {_VERSION}")
            self._threshold.restore(state["threshold"])
            self._stats.restore(state["stats"], self._queue_drops())
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"the AssistantLearner's checkpointed state cannot be read ({error!r}); it was "
                "written by another version of echoing. Use a fresh workdir, or the version that "
                "wrote it."
            ) from error
