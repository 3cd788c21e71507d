"""Assistant features from the Boss's own first layers (AutoAssist, section 5.2).

Example::

    import keras
    import tensorflow as tf
    import echoing

    inputs = keras.Input((40,))
    x = keras.layers.Reshape((40, 1))(inputs)
    x = keras.layers.Conv1D(8, 5, padding="same", activation="relu", name="conv")(x)
    boss = keras.Model(inputs, keras.layers.Dense(10)(keras.layers.Flatten()(x)))

    features = echoing.BossFeatures(boss, up_to="conv", pool_size=4)  # [40, 8] -> 10 x 8 = 80
    assistant = echoing.Assistant(num_classes=10, input_shape=features.shape)
    stage = echoing.assistant_filter(assistant, features=features, seed=0)
    learner = echoing.AssistantLearner(assistant, features=features)
    # ... train the Boss; every few hundred steps: features.refresh()

A raw-feature Assistant is a linear model on the input, which on data built to defeat linear
models (MNIST-1D) barely beats the majority rate. The paper's remedy is an Assistant on the
Boss's first convolution, pooled, with one linear layer on top, the convolution's weights shared
with the Boss. ``BossFeatures`` is that feature function for ``assistant_filter`` and
``AssistantLearner`` (their ``features=`` argument).

It keeps a **host copy** of the Boss's layers up to ``up_to``: tf.data runs on the host CPU and
cannot read variables that live on a GPU or TPU, and the filter should not contend with the
train step for them. ``refresh()`` copies the Boss's current weights into it; call it every few
hundred steps (the Assistant itself learns online from Boss losses, so features a little stale
cost nothing measurable, while a copy per step would). The copy is read live, so a dataset
built once sees every refresh.

The learner needs the features of the batches the Boss trains on, which the Boss's own forward
pass has already computed. ``tap`` is the Boss answering with its feature map too (the same
layers and weights, so training through it trains the Boss), and ``pool`` turns that map into
the Assistant's features: a train step that calls ``tap`` hands the learner its features for
the cost of one average pool, instead of the learner running the host copy again::

    x, labels = tf.random.normal([32, 40]), tf.zeros([32], tf.int64)
    logits, feature_map = features.tap(x, training=True)  # in the Boss's train step
    losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    learner.push(features.pool(feature_map), labels, losses)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from echoing._src.core.checks import is_positive_int


class BossFeatures:
    """A feature function: the Boss's layers up to ``up_to`` (a host copy), average-pooled.

    Args:
      boss: the main model, a functional (or Sequential) ``keras.Model``.
      up_to: name of the last Boss layer whose output is the feature map (e.g. the first
        convolution's name; ``boss.summary()`` lists them).
      pool_size: average each window of this many positions along every spatial axis of the
        feature map (1 keeps every position). MNIST-1D's classes depend on where features sit
        in the signal, so pooling windows keep some of the position, unlike a global pool.
      key: the element key holding the Boss's inputs.
    """

    def __init__(self, boss: keras.Model, up_to: str, *, pool_size: int = 4, key: str = "inputs"):
        if not isinstance(boss, keras.Model) or not getattr(boss, "inputs", None):
            raise TypeError(
                f"BossFeatures(boss={type(boss).__name__}): expected a built functional or "
                "Sequential keras.Model (one with .inputs); for a subclassed model, pass a "
                "function of the element as features= instead."
            )
        if len(boss.inputs) != 1:
            raise ValueError(
                f"BossFeatures: the Boss has {len(boss.inputs)} inputs; it reads one, "
                "element[key]. For several inputs pass a function of the element as features=."
            )
        names = [layer.name for layer in boss.layers]
        if up_to not in names:
            raise ValueError(
                f"BossFeatures(up_to={up_to!r}): the Boss has no layer of that name; its layers "
                f"are {names}. Pass the name of its first convolution (or another early layer)."
            )
        if not is_positive_int(pool_size):
            raise ValueError(
                f"BossFeatures(pool_size={pool_size!r}): expected an int >= 1, the window of "
                "positions averaged along each spatial axis (1 keeps every position)."
            )
        self._boss_encoder = keras.Model(boss.input, boss.get_layer(up_to).output)
        # The Boss's own layers, answering (outputs, feature map): see the module docstring.
        self.tap = keras.Model(boss.input, (boss.output, self._boss_encoder.output))
        with tf.device("/cpu:0"):
            self.encoder = keras.models.clone_model(self._boss_encoder)
        self.key = key
        self.pool_size = pool_size
        self._example_rank = len(self._boss_encoder.inputs[0].shape) - 1
        self.refresh()
        probe = self._pooled(tf.zeros([1, *self._boss_encoder.inputs[0].shape[1:]]))
        self.shape = tuple(int(d) for d in probe.shape[1:])  # one example's features

    def refresh(self) -> None:
        """Copies the Boss's current weights into the host copy the features are computed with."""
        for host, source in zip(self.encoder.weights, self._boss_encoder.weights, strict=True):
            host.assign(source)

    def __call__(self, element: Mapping[str, Any]) -> tf.Tensor:
        """``[B, F]`` features of a batch (or ``[F]`` of one example) of ``element[key]``."""
        inputs = tf.convert_to_tensor(element[self.key])
        single = inputs.shape.rank == self._example_rank
        batch = inputs[tf.newaxis] if single else inputs
        features = self._pooled(tf.cast(batch, self.encoder.inputs[0].dtype))
        return features[0] if single else features

    def pool(self, feature_map: tf.Tensor) -> tf.Tensor:
        """``[B, F]`` features from a ``[B, positions..., channels]`` map of the ``up_to`` layer.

        The map from ``tap`` gives the same features as calling this object on the batch with
        a fresh host copy, as long as the layers up to ``up_to`` compute the same in training
        as in inference (no dropout or batch normalisation among them; otherwise the learner
        sees training-mode features and the filter inference-mode ones). No gradient flows
        back into the Boss through them.
        """
        feature_map = tf.stop_gradient(tf.convert_to_tensor(feature_map))
        spatial = feature_map.shape.rank - 2  # [B, positions..., channels]
        if spatial > 0 and self.pool_size > 1:
            window = [self.pool_size] * spatial
            feature_map = tf.nn.pool(feature_map, window, "AVG", strides=window, padding="SAME")
        return tf.reshape(feature_map, [tf.shape(feature_map)[0], -1])

    def _pooled(self, batch: tf.Tensor) -> tf.Tensor:
        return self.pool(self.encoder(batch, training=False))
