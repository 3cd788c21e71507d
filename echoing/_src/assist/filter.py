"""Assistant filtering (AutoAssist, Algorithm 1): keep each example with probability γ + (1−γ)·g.

Example::

    import tensorflow as tf
    import echoing

    assistant = echoing.Assistant(num_classes=10, input_shape=(40,))
    stage = echoing.assistant_filter(assistant, base_prob=0.3, reweight=True, seed=0)
    ds = tf.data.Dataset.from_tensor_slices(
        {"inputs": tf.zeros([100, 40]), "label": tf.zeros([100], tf.int64),
         "id": tf.range(100, dtype=tf.int64)}
    ).apply(stage)
    for element in ds.take(3):
        print(element["id"].numpy(), element["sample_weight"].numpy())
    print(stage.keep_rate())  # ≈ 0.3 + 0.7 * 0.5 for an untrained Assistant

The stage runs entirely in the tf.data graph: it groups ``scoring_batch_size`` elements, scores
them with one vectorised Assistant call, draws one seeded uniform per element from
``Dataset.random(seed)`` (re-randomised every epoch, so an example's fate in one epoch does not
fix it in the next), and masks the group. The Assistant's variables are read live, so a learner
thread training it changes what an already-built dataset keeps. Insert it anywhere before
``batch()``; for fixed-shape training (TPU) batch afterwards with ``drop_remainder=True``.

``reweight=True`` attaches ``sample_weight = 1 / keep_prob`` so the expected weighted gradient
equals the unfiltered one (InfoBatch-style; the paper trains on kept examples unweighted).
"""

from __future__ import annotations

import sys

import keras
import tensorflow as tf

from echoing._src.assist.assistant import (
    Assistant,
    FeatureSelector,
    check_feature_selector,
    ensure_built,
    labels_of,
    score,
    select_features,
)
from echoing._src.core import dataset_graph, grouping, meters
from echoing._src.core.checks import in_interval, is_positive_int, is_real, is_seed


class AssistantFilter:
    """The transformation returned by :func:`assistant_filter`, with keep-rate counters.

    Use it like any factory result (``ds.apply(stage)``); ``stage.stats()`` reports how many
    inputs it has seen and kept so far across every dataset it was applied to.
    """

    def __init__(
        self,
        assistant: keras.Model,
        *,
        base_prob: float,
        features: FeatureSelector,
        label_key: str | None,
        reweight: bool,
        seed: int | None,
        max_consecutive_drops: int,
        scoring_batch_size: int,
        name: str,
    ):
        self.assistant = assistant
        self.base_prob = base_prob
        self.features = features
        self.label_key = label_key
        self.reweight = reweight
        self.seed = seed
        self.max_consecutive_drops = max_consecutive_drops
        self.scoring_batch_size = scoring_batch_size
        self.name = name
        self.seen = meters.ElementCounter(f"{name}_seen")
        self.kept = meters.ElementCounter(f"{name}_kept")
        with tf.device("/cpu:0"):  # read and set in the tf.data graph, on the host
            # Whether _warn_if_untrained has spoken (a trainer that feeds its learner sets it).
            self.warned_untrained = tf.Variable(False, trainable=False, name=f"{name}_warned")

    def keep_rate(self) -> float:
        """Kept / seen so far (0 before any input)."""
        seen = self.seen.value()
        return self.kept.value() / seen if seen else 0.0

    def stats(self) -> dict[str, float]:
        """``{"filter_seen", "filter_kept", "keep_rate"}`` so far."""
        return {
            "filter_seen": self.seen.value(),
            "filter_kept": self.kept.value(),
            "keep_rate": self.keep_rate(),
        }

    def _build_assistant_for(self, dataset: tf.data.Dataset) -> None:
        """Checks ``dataset`` holds single labelled examples, and builds the Assistant for them."""
        spec = dataset.element_spec
        if self.label_key is not None:
            grouping.require_key(spec, self.label_key, "assistant_filter", "label_key")
            _require_examples(spec, self.label_key)
        if self.features is None or isinstance(self.features, str):
            # Checked here: in the map below a missing key is a KeyError deep in AutoGraph.
            grouping.require_key(spec, self.features or "inputs", "assistant_filter", "features")
        feature_spec = dataset.map(lambda e: select_features(e, self.features)).element_spec
        if not isinstance(feature_spec, tf.TensorSpec):
            raise TypeError(
                f"assistant_filter(features={self.features!r}) selected {feature_spec}, expected "
                "one dense tensor per element; pass features= a key or function returning one."
            )
        label_dtype = tf.int32 if self.label_key is None else spec[self.label_key].dtype
        if label_dtype == tf.string:
            raise TypeError(
                f"assistant_filter: the labels under {self.label_key!r} must be integer class "
                "ids, got strings; map them to ids first, e.g. with "
                "keras.layers.StringLookup(vocabulary=class_names, num_oov_indices=0)."
            )
        if not label_dtype.is_integer:
            raise TypeError(
                f"assistant_filter: the labels under {self.label_key!r} must be integer class "
                f"ids, got dtype {label_dtype.name} (a cast would read 1.7 as class 1); cast "
                f"them first, e.g. dataset.map(lambda e: {{**e, {self.label_key!r}: "
                f"tf.cast(e[{self.label_key!r}], tf.int64)}})."
            )
        _require_feature_shape(self.assistant, feature_spec, self.features)
        ensure_built(self.assistant, feature_spec, label_dtype)

    def __call__(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        self._build_assistant_for(dataset)
        group = grouping.group_size(dataset.element_spec, self.scoring_batch_size)

        assistant, features, label_key = self.assistant, self.features, self.label_key
        base_prob, limit, reweight = self.base_prob, self.max_consecutive_drops, self.reweight
        seen, kept = self.seen.variable, self.kept.variable
        warned = self.warned_untrained

        def keep_probability(batch, random):
            selected = select_features(batch, features)
            labels = labels_of(batch, label_key, selected)
            with tf.control_dependencies(_label_range_checks(assistant, labels, label_key)):
                g = score(assistant, selected, labels)
            keep_prob = base_prob + (1.0 - base_prob) * g
            return batch, grouping.uniform(random) < keep_prob, keep_prob

        def count_drops(drops_so_far, batch_keep_prob):
            batch, keep, keep_prob = batch_keep_prob
            size = tf.size(keep, out_type=tf.int64)
            kept_at = tf.where(keep)[:, 0]
            any_kept = tf.size(kept_at) > 0
            leading = drops_so_far + tf.cond(any_kept, lambda: kept_at[0], lambda: size)
            gaps = kept_at[1:] - kept_at[:-1] - 1
            longest = tf.reduce_max(tf.concat([[leading], gaps], axis=0))
            trailing = tf.cond(any_kept, lambda: size - 1 - kept_at[-1], lambda: leading)
            check = tf.debugging.assert_less(
                longest,
                tf.constant(limit, tf.int64),
                message=(
                    f"assistant_filter kept none of {limit} consecutive inputs "
                    f"(max_consecutive_drops={limit}); the filter would starve training. Raise "
                    f"base_prob (now {base_prob}) so at least that fraction of inputs is always "
                    "kept, or check that the Assistant's scores are not all ~0."
                ),
            )
            with tf.control_dependencies([check]):
                updates = [
                    seen.assign_add(size),
                    kept.assign_add(tf.size(kept_at, out_type=tf.int64)),
                ]
            updates.append(_warn_if_untrained(assistant, seen, warned, base_prob))
            with tf.control_dependencies(updates):
                # Masking the group here leaves no per-element filter or map downstream.
                kept_batch = {key: tf.boolean_mask(value, keep) for key, value in batch.items()}
                if reweight:
                    weight = tf.math.reciprocal(tf.boolean_mask(keep_prob, keep))
                    if "sample_weight" in kept_batch:  # an upstream weight (pruning's) multiplies
                        weight *= tf.cast(kept_batch["sample_weight"], tf.float32)
                    kept_batch["sample_weight"] = weight
                return tf.identity(trailing), kept_batch

        random = tf.data.Dataset.random(seed=self.seed, rerandomize_each_iteration=True)
        kept = (
            tf.data.Dataset.zip(dataset, random)
            .batch(group)
            .map(keep_probability, num_parallel_calls=tf.data.AUTOTUNE, name=f"{self.name}_score")
            .scan(tf.constant(0, tf.int64), count_drops, name=f"{self.name}_keep")
            .unbatch(name=f"{self.name}_unbatch")
        )
        return dataset_graph.mark_per_pass(kept, "assistant_filter")


# An Assistant nothing trains scores every example 0.5 and drops a share of them at random:
# silent without this. Its weights start at zero; still zero after this many inputs, nothing
# trains it (a trainer's learner has trained it long before).
UNTRAINED_AFTER = 10_000
_UNTRAINED = (
    "echoing.assistant_filter: {} inputs seen and the Assistant is untrained (its weights are "
    "still zero), so it scores every example 0.5 and drops about {:.0%} of them at random. "
    "Train it on training's losses: echoing.AssistantFeedbackCallback(learner, inbox, "
    "stage=stage) in fit's callbacks, or learner.feedback(batch, losses) in your own loop. If "
    "it is fed already, its learner has not finished a step yet: it is behind (learner.stats()"
    ": trained_batches, and queue_drops for the feedback it dropped meanwhile); it catches up "
    "as training goes on, sooner with train_every=k (one fed batch in k)."
)


def _warn_if_untrained(assistant, seen, warned, base_prob: float):
    """Prints ``_UNTRAINED`` on stderr once, when ``seen`` passes ``UNTRAINED_AFTER`` with the
    built-in Assistant's weights all zero; a scorer of the user's own is not judged. In graph,
    per scored group; the weights are read only once the count is due."""
    if not isinstance(assistant, Assistant):
        return tf.identity(warned)
    weights = (assistant.kernel, assistant.label_bias, assistant.bias)

    def check():
        untrained = tf.reduce_all([tf.reduce_all(tf.equal(w, 0.0)) for w in weights])
        message = _UNTRAINED.format("{}", (1.0 - base_prob) / 2)

        def warn():
            printed = tf.print(tf.strings.format(message, seen), output_stream=sys.stderr)
            with tf.control_dependencies([printed]):
                return warned.assign(True)

        return tf.cond(untrained, warn, lambda: warned.assign(True))  # judged once

    return tf.cond((seen >= UNTRAINED_AFTER) & ~warned, check, lambda: tf.identity(warned))


def _require_feature_shape(assistant, feature_spec: tf.TensorSpec, features) -> None:
    """Refuses features of another shape than a built Assistant scores (static, at apply)."""
    expected = getattr(assistant, "_feature_shape", None)
    if expected is None or not assistant.built:
        return
    if not tf.TensorShape(expected).is_compatible_with(feature_spec.shape):
        selected = "element['inputs']" if features is None else f"features={features!r}"
        raise ValueError(
            f"assistant_filter: {selected} has shape {tuple(feature_spec.shape)} per example, "
            f"but the Assistant scores features of shape {tuple(expected)} (its input_shape); "
            f"build the Assistant with input_shape={tuple(feature_spec.shape)}, or select "
            "features of its shape with features=... (a key or a function of the element)."
        )


def _label_range_checks(assistant, labels: tf.Tensor, label_key: str | None) -> list:
    """A graph check that labels are in ``[0, num_classes)`` of the Assistant (when it has
    classes): out of range they would index its per-label bias ("indices[0] = 10 is not in
    [0, 10)"), naming neither the labels nor num_classes. Its message names the first label
    outside, the key and num_classes (the values are only known as the dataset runs)."""
    num_classes = getattr(assistant, "num_classes", None)
    if label_key is None or not isinstance(num_classes, int):
        return []
    outside = tf.boolean_mask(labels, (labels < 0) | (labels >= num_classes))
    message = tf.strings.join(
        [
            "assistant_filter got label ",
            tf.strings.as_string(tf.concat([outside, tf.zeros([1], labels.dtype)], axis=0)[0]),
            # No quotes: TensorFlow's assert message would show them escaped.
            f" in element[{label_key}]: the labels under element[{label_key}] must be class ids in "
            f"[0, {num_classes}) for an Assistant of num_classes={num_classes}; build the "
            "Assistant with the number of classes of the task (echoing.Assistant(num_classes=the "
            "largest label + 1, ...)), or pass label_key= the key of the class labels",
        ]
    )
    return [tf.debugging.Assert(tf.size(outside) == 0, [message])]


def _require_examples(spec, label_key: str) -> None:
    """Refuses a batched dataset: the filter decides per example, before ``batch()``."""
    if spec[label_key].shape.rank != 0:
        raise ValueError(
            f"assistant_filter needs one example per element with a scalar class id under "
            f"{label_key!r}, got {spec[label_key]}. If the dataset is batched, apply the filter "
            "before batch(), so that it drops examples, not whole batches; if the labels are "
            f"one-hot, map them to ids first: {{**e, {label_key!r}: tf.argmax(e[{label_key!r}], "
            "-1)}."
        )


def assistant_filter(
    assistant: keras.Model,
    *,
    base_prob: float = 0.3,
    features: FeatureSelector = None,
    label_key: str | None = "label",
    reweight: bool = False,
    seed: int | None = None,
    max_consecutive_drops: int = 10_000,
    scoring_batch_size: int = 128,
    name: str = "assistant_filter",
) -> AssistantFilter:
    """Returns a stage keeping each example with probability ``base_prob + (1−base_prob)·g(x, y)``.

    Args:
      assistant: an :class:`echoing.Assistant` or any ``keras.Model`` mapping
        ``(features [B, ...], labels [B])`` to ``[B]`` scores in ``[0, 1]``.
      base_prob: γ in (0, 1], the probability of keeping an example the Assistant calls easy;
        it bounds the keep rate below and lets the Boss keep seeing easy examples (paper: 0.3).
      features: what the Assistant scores: ``None`` (``element["inputs"]``), a key, or a
        function of the element dict (e.g. a down-sampled image).
      label_key: the element key holding the integer label; ``None`` when examples have no
        class (e.g. text for a language model): every example is then label 0, so the
        Assistant is built with ``num_classes=1``.
      reweight: attach ``sample_weight = 1 / keep_prob`` (unbiased expected gradient).
      seed: seeds the uniform draws; same seed and inputs, same kept examples in each epoch.
      max_consecutive_drops: if this many inputs in a row are all dropped, iteration fails with
        an ``InvalidArgumentError`` naming it, instead of silently starving the trainer. With
        keep probability at least γ a false alarm has probability ``(1−γ)**N`` per input.
      scoring_batch_size: elements scored per vectorised Assistant call (static shapes only).
      name: prefix for the tf.data op names and the counters.

    Returns:
      An :class:`AssistantFilter`, a ``Dataset -> Dataset`` function for ``Dataset.apply``.

    Raises:
      ValueError/TypeError: at once, for a bad argument.
    """
    _check_arguments(
        assistant,
        base_prob,
        features,
        label_key,
        reweight,
        seed,
        max_consecutive_drops,
        scoring_batch_size,
    )
    return AssistantFilter(
        assistant,
        base_prob=float(base_prob),
        features=features,
        label_key=label_key,
        reweight=reweight,
        seed=seed,
        max_consecutive_drops=max_consecutive_drops,
        scoring_batch_size=scoring_batch_size,
        name=name,
    )


def _check_arguments(
    assistant,
    base_prob,
    features,
    label_key,
    reweight,
    seed,
    max_consecutive_drops,
    scoring_batch_size,
) -> None:
    """``assistant_filter``'s argument checks: each bad value a clear error, at construction."""
    if not isinstance(assistant, keras.Model):
        raise TypeError(
            f"assistant_filter(assistant={assistant!r}): expected a keras.Model scorer such as "
            "echoing.Assistant(num_classes=...)."
        )
    if not (is_real(base_prob) and in_interval(base_prob, 0.0, 1.0, low_open=True)):
        raise ValueError(
            f"assistant_filter(base_prob={base_prob!r}): expected a number in (0, 1], the "
            "probability of keeping an easy example (the paper uses 0.3); 0 could starve "
            "training and values above 1 are not probabilities."
        )
    check_feature_selector(features, "assistant_filter")
    if label_key is not None and not isinstance(label_key, str):
        raise TypeError(
            f"assistant_filter(label_key={label_key!r}): expected a string key, or None when "
            "examples have no class label."
        )
    if not isinstance(reweight, bool):
        raise TypeError(f"assistant_filter(reweight={reweight!r}): expected True or False.")
    if not is_seed(seed):
        raise TypeError(f"assistant_filter(seed={seed!r}): expected an int or None.")
    for arg, value in (
        ("max_consecutive_drops", max_consecutive_drops),
        ("scoring_batch_size", scoring_batch_size),
    ):
        if not is_positive_int(value):
            raise ValueError(f"assistant_filter({arg}={value!r}): expected an int >= 1.")
