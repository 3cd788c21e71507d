"""The Assistant methods of ``benchmarks/selection.py`` (AutoAssist on MNIST-1D 40k, 1-D CNN).

Three Assistants, each behind ``echoing.assistant_filter`` (keep with probability
``γ + (1 − γ)·g``, γ = ``--assist-base-prob``, the kept examples unweighted as in the paper):

* ``assist``: the raw-feature logistic Assistant (``echoing.Assistant`` on the 40 inputs);
* ``assist_boss``: the same logistic layer on the Boss's first convolution, average-pooled
  (``echoing.BossFeatures``, the paper's section 5.2), its host copy refreshed every
  ``REFRESH_STEPS`` steps;
* ``assist_oracle``: the upper bound, no learning: g = 1 when an example's last-seen Boss loss
  is at or above the mean of the table (or it was never seen), else 0, read from an
  ``echoing.LossTable`` that the train step updates (as pruning's is).

The two learned Assistants train in an ``echoing.AssistantLearner`` thread from the losses of
every batch the Boss trains on (the paper's asynchronous AutoAssist); the Boss hands over only
ids and losses, and the thread gathers the examples and computes their features.

Example (as ``selection.py`` uses it)::

    assist = AssistMethod("assist_boss", run.model, data, seed=0, base_prob=0.3)
    source = source.apply(assist.stage)
    ...  # after each step: assist.after_step(batch, per_example_losses, step)
    assist.close()
"""

from __future__ import annotations

import keras
import tensorflow as tf

import echoing

ASSIST_METHODS = ("assist", "assist_boss", "assist_oracle")
# Steps between copies of the Boss's first-layer weights into the filter's host copy.
REFRESH_STEPS = 100
# Positions averaged per window of the first convolution's [40, 32] output: 10 x 32 features.
POOL_SIZE = 4


class LossOracle(keras.Model):
    """g(id) = 1 if the example's last-seen loss is >= the table's mean or unseen, else 0."""

    def __init__(self, table: echoing.LossTable):
        super().__init__(name="loss_oracle")
        self.table = table

    def call(self, inputs):
        ids, _ = inputs
        losses, seen = self.table.lookup(tf.reshape(ids, [-1]))
        hard = tf.logical_or(tf.logical_not(seen), losses >= self.table.mean())
        return tf.cast(hard, tf.float32)


class AssistMethod:
    """One Assistant method's filter stage, learner and per-step feedback."""

    def __init__(
        self,
        method: str,
        boss: keras.Model,
        data: dict,
        seed: int,
        base_prob: float,
        train_every: int = 1,
    ):
        num_examples, num_classes = len(data["y"]), int(data["y"].max()) + 1
        self.table, self.learner, self.boss_features = None, None, None
        if method == "assist_oracle":
            self.table = echoing.LossTable(num_examples)
            assistant, features = LossOracle(self.table), "id"
        elif method == "assist_boss":
            first_conv = next(
                layer.name for layer in boss.layers if isinstance(layer, keras.layers.Conv1D)
            )
            features = self.boss_features = echoing.BossFeatures(
                boss, first_conv, pool_size=POOL_SIZE
            )
            assistant = echoing.Assistant(num_classes, input_shape=features.shape)
        elif method == "assist":
            features = None
            assistant = echoing.Assistant(num_classes, input_shape=data["x"].shape[1:])
        else:
            raise ValueError(
                f"unknown Assistant method {method!r}; expected one of {ASSIST_METHODS}"
            )
        if self.table is None:
            # The Boss hands over only (ids, losses); the learner thread gathers the examples
            # and computes their features, off the Boss's thread.
            examples = {"inputs": data["x"], "label": data["y"]}
            self.learner = echoing.AssistantLearner(
                assistant, features=features, examples=examples, train_every=train_every
            )
        self.stage = echoing.assistant_filter(
            assistant, base_prob=base_prob, features=features, seed=seed
        )

    def after_step(self, batch: dict, losses: tf.Tensor, step: int) -> None:
        """Feeds the Boss's per-example losses of the batch it just trained on."""
        if self.learner is not None:
            self.learner.feedback_ids(batch["id"], losses, step=step)
        if self.boss_features is not None and step % REFRESH_STEPS == 0:
            self.boss_features.refresh()

    def stats(self) -> dict:
        """The filter's keep rate and, for a learned Assistant, its learner's statistics."""
        stats = {"keep_rate": self.stage.keep_rate()}
        if self.learner is not None:
            stats.update(self.learner.stats())
        return stats

    def close(self) -> None:
        if self.learner is not None:
            self.learner.close()
