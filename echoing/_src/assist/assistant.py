"""The AutoAssist Assistant: a small Keras scorer g(x, y) ∈ [0, 1] of how useful an example is.

Example::

    import tensorflow as tf
    import echoing

    assistant = echoing.Assistant(num_classes=10, input_shape=(40,))
    scores = assistant((tf.zeros([4, 40]), tf.constant([0, 1, 2, 3])))  # [4] values in [0, 1]

    assistant.save("/tmp/assistant.keras")
    restored = tf.keras.models.load_model("/tmp/assistant.keras")

The default model is the paper's (Zhang et al., 2019, section 6.1 and its code): logistic
regression ``sigmoid(w·x + u[y] + c)`` on the flattened example ``x``, optionally down-sampled by
averaging runs of ``downsample`` consecutive values, plus a per-label bias ``u[y]``. It predicts
``z = [Boss loss > threshold]``: the probability that the Boss still finds the example hard.

Any ``keras.Model`` works in its place if it maps ``(features [B, ...], labels [B]) -> [B]`` (or
``[B, 1]``) probabilities in ``[0, 1]``. The filter (``echoing.assistant_filter``) reads its
variables live, and the learner (``echoing.AssistantLearner``) trains them from Boss feedback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from echoing._src.core.checks import is_positive_int

# What the Assistant scores: a key of the element dict, or a function of the element.
FeatureSelector = str | Callable[[Mapping[str, Any]], tf.Tensor] | None


@keras.saving.register_keras_serializable(package="echoing")
class Assistant(keras.Model):
    """Logistic regression on flattened features plus a per-label bias: g(x, y) ∈ [0, 1].

    Example::

        assistant = Assistant(num_classes=10, input_shape=(40,), downsample=2)
        g = assistant((tf.random.normal([8, 40]), tf.zeros([8], tf.int64)))  # [8]

    The weights start at zero, so every example scores 0.5 until the learner has trained it.

    Args:
      num_classes: number of labels; labels must be integers in ``[0, num_classes)``.
      input_shape: shape of one example's features without the batch axis. If given, the
        Assistant is built at once (its variables exist before any dataset is traced); otherwise
        it is built on first call.
      downsample: average each run of this many consecutive flattened values before the linear
        layer (the paper's "down-sampled features"), which divides the weight count by it.
      name: Keras model name.
    """

    def __init__(
        self,
        num_classes: int,
        *,
        input_shape: Sequence[int] | None = None,
        downsample: int = 1,
        name: str = "assistant",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        if not is_positive_int(num_classes):
            raise ValueError(
                f"Assistant(num_classes={num_classes!r}): expected a positive int, the number of "
                "labels of the task (e.g. 10 for MNIST)."
            )
        if not is_positive_int(downsample):
            raise ValueError(
                f"Assistant(downsample={downsample!r}): expected an int >= 1 (1 keeps every "
                "feature; k averages each run of k consecutive flattened values)."
            )
        self.num_classes = num_classes
        self.downsample = downsample
        self._feature_shape = None if input_shape is None else tuple(int(d) for d in input_shape)
        if self._feature_shape is not None:
            self.build(((None, *self._feature_shape), (None,)))

    def build(self, input_shape):
        feature_shape, _ = input_shape
        feature_shape = tuple(feature_shape)[1:]
        if any(d is None for d in feature_shape):
            raise ValueError(
                f"Assistant needs a static feature shape, got {feature_shape}; pad or resize the "
                "features, or pass your own keras.Model scorer."
            )
        self._feature_shape = feature_shape
        flat = 1
        for d in feature_shape:
            flat *= d
        width = -(-flat // self.downsample)  # ceil: the last run may be shorter (zero-padded)
        # Host CPU: the filter reads these from tf.data, the learner thread writes them.
        with tf.device("/cpu:0"):
            self.kernel = self.add_weight(
                shape=(width,), initializer="zeros", name="kernel", trainable=True
            )
            self.label_bias = self.add_weight(
                shape=(self.num_classes,), initializer="zeros", name="label_bias", trainable=True
            )
            self.bias = self.add_weight(shape=(), initializer="zeros", name="bias", trainable=True)
        self._flat_size = flat
        self.built = True

    def call(self, inputs):
        features, labels = inputs
        batch = tf.shape(features)[0]
        x = tf.reshape(tf.cast(features, self.kernel.dtype), [batch, self._flat_size])
        if self.downsample > 1:
            width = self.kernel.shape[0]
            x = tf.pad(x, [[0, 0], [0, width * self.downsample - self._flat_size]])
            x = tf.reduce_mean(tf.reshape(x, [batch, width, self.downsample]), axis=-1)
        labels = tf.reshape(tf.cast(labels, tf.int32), [batch])
        logits = tf.linalg.matvec(x, self.kernel) + tf.gather(self.label_bias, labels) + self.bias
        return tf.sigmoid(logits)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_classes=self.num_classes,
            input_shape=self._feature_shape,
            downsample=self.downsample,
        )
        return config

    def build_from_config(self, config):
        # Built in __init__ from input_shape; nothing left to do when loading.
        if not self.built and self._feature_shape is not None:
            self.build(((None, *self._feature_shape), (None,)))


def select_features(element: Mapping[str, Any], features: FeatureSelector) -> tf.Tensor:
    """What the Assistant scores for one element (or batch): ``element["inputs"]`` by default.

    Args:
      element: a dict element, e.g. ``{"inputs", "label", "id"}``.
      features: ``None`` (use ``"inputs"``), a key of the element, or a function of the element.
    """
    if features is None:
        return _entry(element, "inputs", "features")
    if isinstance(features, str):
        return _entry(element, features, "features")
    return features(element)


def labels_of(element: Mapping[str, Any], label_key: str | None, features: tf.Tensor) -> tf.Tensor:
    """``element[label_key]``, or int32 zeros (one per row of ``features``) when the examples
    have no class (``label_key=None``, e.g. text for a language model)."""
    if label_key is not None:
        return _entry(element, label_key, "label_key")
    return tf.zeros(tf.shape(features)[:1], tf.int32)


def _entry(element, key: str, argument: str):
    """``element[key]``, or an error naming the keys there are and the argument that picks it
    (a bare KeyError, or "tuple indices must be integers", says neither)."""
    if not isinstance(element, Mapping):
        raise TypeError(
            f"the Assistant reads dict batches such as {{'inputs': ..., 'label': ...}}, got a "
            f"{type(element).__name__}; map them first, e.g. "
            "dataset.map(lambda x, y: {'inputs': x, 'label': y})."
        )
    if key not in element:
        raise ValueError(
            f"the Assistant reads element[{key!r}], but the batch holds {sorted(element)}; set "
            f"{argument}= to one of those, or add {key!r} to the batch."
        )
    return element[key]


def check_feature_selector(features: FeatureSelector, caller: str) -> None:
    """Raises TypeError unless ``features`` is None, a string key, or a callable."""
    if features is not None and not isinstance(features, str) and not callable(features):
        raise TypeError(
            f"{caller}(features={features!r}): expected None (score element['inputs']), a key "
            "of the element dict such as 'inputs', or a function element -> tensor."
        )


def score(assistant: keras.Model, features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Runs any Assistant on a batch and returns ``[B]`` float32 scores clipped to ``[0, 1]``.

    A NaN or infinite score (inputs holding NaN, an Assistant diverged) counts as hard (1): the
    example is kept, so corrupt data reaches the model, whose loss shows it, instead of being
    dropped unseen (NaN compares false, which would drop it at every keep probability)."""
    scores = assistant((features, labels))
    scores = tf.reshape(tf.cast(scores, tf.float32), [tf.shape(labels)[0]])
    scores = tf.where(tf.math.is_finite(scores), scores, tf.ones_like(scores))
    return tf.clip_by_value(scores, 0.0, 1.0)


def ensure_built(assistant: keras.Model, feature_spec: tf.TensorSpec, label_dtype) -> None:
    """Builds an unbuilt Assistant eagerly, so its variables exist before tf.data traces it.

    Args:
      assistant: the scorer.
      feature_spec: the spec of ONE example's features (no batch axis).
      label_dtype: dtype of the labels.
    """
    if assistant.built:
        return
    shape = [1] + [1 if d is None else d for d in feature_spec.shape]
    with tf.device("/cpu:0"):
        assistant((tf.zeros(shape, feature_spec.dtype), tf.zeros([1], label_dtype)))
