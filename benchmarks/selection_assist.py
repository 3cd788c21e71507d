"""The Assistant methods of ``benchmarks/selection.py`` (AutoAssist on MNIST-1D 40k, 1-D CNN).

Three Assistants, each behind ``echoing.assistant_filter`` (keep with probability
``γ + (1 − γ)·g``, γ = ``--assist-base-prob``, the kept examples unweighted as in the paper):

* ``assist``: the raw-feature logistic Assistant (``echoing.Assistant`` on the 40 inputs);
* ``assist_boss``: the same logistic layer on the Boss's first convolution, average-pooled
  (``echoing.BossFeatures``, the paper's section 5.2), its host copy refreshed every
  ``REFRESH_STEPS`` steps;
* ``assist_boss_forward``: ``assist_boss`` with the learner's features taken from the Boss's
  own forward pass (``BossFeatures.tap``: the train step returns the pooled first-convolution
  output of the batch it trained on) instead of computed again by the learner thread; the
  filter still scores with the host copy;
* ``assist_oracle``: the upper bound, no learning: g = 1 when an example's last-seen Boss loss
  is at or above the mean of the table (or it was never seen), else 0, read from an
  ``echoing.LossTable`` that the train step updates (as pruning's is).

The learned Assistants train in an ``echoing.AssistantLearner`` thread from the losses of the
batches the Boss trains on (the paper's asynchronous AutoAssist); the Boss hands over only ids
and losses, and the thread gathers the examples and computes their features, except for
``assist_boss_forward``, whose Boss hands over the features its forward pass computed.

Example (as ``selection.py`` uses it)::

    assist = AssistMethod("assist_boss", run.model, data, seed=0, base_prob=0.3)
    source = source.apply(assist.stage)
    run.boss_features = assist.tap  # None unless the Boss's forward pass feeds the learner
    ...  # after each step: assist.after_step(batch, run.step(batch), step)
    assist.close()
"""

from __future__ import annotations

import keras
import tensorflow as tf

import echoing

ASSIST_METHODS = ("assist", "assist_boss", "assist_boss_forward", "assist_oracle")
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
        # For assist_boss_forward: the BossFeatures whose tap the train step calls.
        self.tap = None
        if method == "assist_oracle":
            self.table = echoing.LossTable(num_examples)
            assistant, features = LossOracle(self.table), "id"
        elif method in ("assist_boss", "assist_boss_forward"):
            first_conv = next(
                layer.name for layer in boss.layers if isinstance(layer, keras.layers.Conv1D)
            )
            features = self.boss_features = echoing.BossFeatures(
                boss, first_conv, pool_size=POOL_SIZE
            )
            assistant = echoing.Assistant(num_classes, input_shape=features.shape)
            if method == "assist_boss_forward":
                self.tap = features
        elif method == "assist":
            features = None
            assistant = echoing.Assistant(num_classes, input_shape=data["x"].shape[1:])
        else:
            raise ValueError(
                f"unknown Assistant method {method!r}; expected one of {ASSIST_METHODS}"
            )
        if self.tap is not None:
            # The Boss hands over (features, labels, losses): nothing left to compute.
            self.learner = echoing.AssistantLearner(assistant, train_every=train_every)
        elif self.table is None:
            # The Boss hands over only (ids, losses); the learner thread gathers the examples
            # and computes their features, off the Boss's thread.
            examples = {"inputs": data["x"], "label": data["y"]}
            self.learner = echoing.AssistantLearner(
                assistant, features=features, examples=examples, train_every=train_every
            )
        self.stage = echoing.assistant_filter(
            assistant, base_prob=base_prob, features=features, seed=seed
        )

    def after_step(self, batch: dict, out: dict, step: int) -> None:
        """Feeds the learner the train step's ``out`` (``"losses"``, maybe ``"features"``)."""
        if self.tap is not None:
            self.learner.push(out["features"], batch["label"], out["losses"], step=step)
        elif self.learner is not None:
            self.learner.feedback_ids(batch["id"], out["losses"], step=step)
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
