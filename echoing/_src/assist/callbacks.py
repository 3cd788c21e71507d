"""Keras callbacks that feed an AssistantLearner during ``model.fit`` and log its statistics.

Example::

    import keras
    import tensorflow as tf
    import echoing

    assistant = echoing.Assistant(num_classes=10, input_shape=(40,))
    stage = echoing.assistant_filter(assistant, base_prob=0.3, seed=0)
    learner = echoing.AssistantLearner(assistant)
    source = tf.data.Dataset.from_tensor_slices(
        {"inputs": tf.random.normal([512, 40]), "label": tf.zeros([512], tf.int64)}
    )
    # Filtering makes epoch lengths random: repeat, and set steps_per_epoch in fit.
    train = source.shuffle(512, seed=0).repeat().apply(stage).batch(32).map(
        lambda b: (b["inputs"], b["label"])
    )
    probe = source.shuffle(512, seed=1).repeat().batch(32)
    model = keras.Sequential([keras.Input((40,)), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callback = echoing.AssistantCallback(
        learner,
        probe,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None),
        stage=stage,
    )
    model.fit(train, epochs=2, steps_per_epoch=10, callbacks=[callback], verbose=0)
    learner.close()
    print(callback.history[-1])  # keep_rate, assistant_accuracy, queue_drops, ...

``model.fit`` does not hand per-example losses or the batch to callbacks, so after every
``every_n_batches`` training batches the callback evaluates the model (inference mode) on the next
batch of ``probe_data`` (a repeated, unfiltered stream of training batches) and pushes those
per-example losses to the learner. That costs one extra forward pass per fed batch; custom
training loops avoid it by calling ``learner.feedback(batch, losses, step)`` with the losses of
the train step itself. Errors from the learner thread surface at the next batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import keras
import tensorflow as tf

from echoing._src.assist.feedback_checks import check_label_rank
from echoing._src.assist.filter import AssistantFilter
from echoing._src.assist.learner import AssistantLearner
from echoing._src.core.checks import is_positive_int
from echoing._src.core.loss_table import FeedbackInbox


class AssistantCallback(keras.callbacks.Callback):
    """Feeds ``learner`` from ``probe_data`` during ``fit``; adds its stats to epoch logs.

    Args:
      learner: the :class:`echoing.AssistantLearner` training the Assistant.
      probe_data: a dataset of batch dicts (``"inputs"``, ``"label"``, ...), repeated.
      per_example_loss: ``(labels, predictions) -> [B]`` unreduced loss, e.g. a Keras loss
        built with ``reduction=None``.
      stage: the :class:`echoing.AssistantFilter`, to log its keep rate too.
      every_n_batches: feed after every this many training batches.
      inputs_key: the batch key holding the model's inputs.
    """

    def __init__(
        self,
        learner: AssistantLearner,
        probe_data: tf.data.Dataset,
        per_example_loss: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
        *,
        stage: AssistantFilter | None = None,
        every_n_batches: int = 1,
        inputs_key: str = "inputs",
    ):
        super().__init__()
        if not isinstance(learner, AssistantLearner):
            raise TypeError(
                f"AssistantCallback(learner={learner!r}): expected an echoing.AssistantLearner."
            )
        if not isinstance(probe_data, tf.data.Dataset):
            raise TypeError(
                f"AssistantCallback(probe_data={probe_data!r}): expected a tf.data.Dataset of "
                "batch dicts, e.g. the unfiltered training source .repeat().batch(B)."
            )
        if not callable(per_example_loss):
            raise TypeError(
                f"AssistantCallback(per_example_loss={per_example_loss!r}): expected a callable "
                "(labels, predictions) -> [B], e.g. keras.losses.SparseCategoricalCrossentropy("
                "from_logits=True, reduction=None)."
            )
        _check_stage_and_every("AssistantCallback", stage, every_n_batches)
        _check_probe_batches(probe_data.element_spec, inputs_key, learner.label_key)
        if probe_data.cardinality() >= 0:  # finite and known: it would run out mid-fit
            raise ValueError(
                f"AssistantCallback(probe_data=...): it holds {int(probe_data.cardinality())} "
                "batches and ends, and the callback takes one every every_n_batches training "
                "batches until fit ends; pass a repeated dataset (source.repeat().batch(B))."
            )
        self.learner = learner
        self.probe_data = probe_data
        self.per_example_loss = per_example_loss
        self.stage = stage
        self.every_n_batches = every_n_batches
        self.inputs_key = inputs_key
        self.history: list[dict[str, Any]] = []
        self._iterator = None
        self._batches = 0
        self._probe_losses = None

    def on_train_begin(self, logs=None):
        self.learner.require_open(type(self).__name__)
        self._iterator = iter(self.probe_data)
        model, loss_fn, inputs_key = self.model, self.per_example_loss, self.inputs_key
        label_key = self.learner.label_key

        @tf.function(reduce_retracing=True)
        def probe_losses(batch):
            return loss_fn(batch[label_key], model(batch[inputs_key], training=False))

        self._probe_losses = probe_losses

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches % self.every_n_batches:
            return
        try:
            probe = next(self._iterator)
        except StopIteration as exhausted:
            raise ValueError(
                "AssistantCallback: probe_data ran out; pass a repeated dataset "
                "(source.repeat().batch(B))."
            ) from exhausted
        self.learner.feedback(probe, self._probe_losses(probe), step=self._batches)

    def on_epoch_end(self, epoch, logs=None):
        _log_stats(self, epoch, logs)


class AssistantFeedbackCallback(keras.callbacks.Callback):
    """Feeds ``learner`` the losses of ``fit``'s own train steps: no extra forward pass.

    Example::

        import keras
        import numpy as np
        import tensorflow as tf
        import echoing

        n = 512
        x = np.random.default_rng(0).normal(size=(n, 40)).astype("float32")
        y = np.arange(n) % 10
        assistant = echoing.Assistant(num_classes=10, input_shape=(40,))
        stage = echoing.assistant_filter(assistant, base_prob=0.3, seed=0)
        learner = echoing.AssistantLearner(assistant, examples={"inputs": x, "label": y})
        inbox = echoing.FeedbackInbox(n)
        source = tf.data.Dataset.from_tensor_slices({"inputs": x, "label": y, "id": np.arange(n)})
        train = source.shuffle(n, seed=0).repeat().apply(stage).batch(32)
        model = echoing.keras.LossFeedback(
            keras.Sequential([keras.Input((40,)), keras.layers.Dense(10)]),
            per_example_loss=keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=None),
            observers=[inbox.update],
        )
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        callback = echoing.AssistantFeedbackCallback(learner, inbox, stage=stage)
        model.fit(train.map(echoing.keras.fit_inputs), epochs=2, steps_per_epoch=10,
                  callbacks=[callback], verbose=0)
        learner.wait_until_idle(timeout=60)  # let the learner's thread catch up
        print(learner.stats()["trained_examples"])  # 640: every trained row, from its own step
        learner.close()

    The model is wrapped in ``echoing.keras.LossFeedback`` with ``inbox.update`` among its
    observers, so every train step records its rows' losses by id in ``inbox`` (an
    ``echoing.FeedbackInbox``, in the step's graph); every ``every_n_batches`` batches the
    callback drains the ids updated since and hands them to ``learner.feedback_ids``, which looks
    their features up in the learner's ``examples``. An id trained twice between drains is fed
    once, with its newest loss. The learner's (and the stage's) statistics go into the epoch logs.

    Args:
      learner: the :class:`echoing.AssistantLearner`, built with ``examples`` (the training
        set by id).
      inbox: the :class:`echoing.FeedbackInbox` the model's ``LossFeedback`` updates.
      stage: the :class:`echoing.AssistantFilter`, to log its keep rate too.
      every_n_batches: drain after every this many calls of fit's train function.
    """

    def __init__(
        self,
        learner: AssistantLearner,
        inbox: FeedbackInbox,
        *,
        stage: AssistantFilter | None = None,
        every_n_batches: int = 1,
    ):
        super().__init__()
        if not isinstance(learner, AssistantLearner) or learner.examples is None:
            raise TypeError(
                f"{type(self).__name__}(learner={learner!r}): expected an "
                "echoing.AssistantLearner built with examples={'inputs': x_train, 'label': "
                "y_train}, so that it can look up the rows the inbox names by id."
            )
        if not isinstance(inbox, FeedbackInbox):
            raise TypeError(
                f"{type(self).__name__}(inbox={inbox!r}): expected an echoing.FeedbackInbox, "
                "given to the model's echoing.keras.LossFeedback as an observer (inbox.update)."
            )
        _check_stage_and_every(type(self).__name__, stage, every_n_batches)
        self.learner, self.inbox, self.stage = learner, inbox, stage
        self.every_n_batches = every_n_batches
        self.history: list[dict[str, Any]] = []
        self._batches = 0
        self._fed = False  # whether any drain found an update (checked at a fit's first epoch)
        self._checked = False
        self._fit_start = 0  # _batches when this fit began

    def on_train_begin(self, logs=None):
        self.learner.require_open(type(self).__name__)
        # Judged per fit: a later fit's model may report into another inbox.
        self._checked, self._fed, self._fit_start = False, False, self._batches

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches % self.every_n_batches:
            return
        ids, losses = self.inbox.drain()
        if ids.size:
            self._fed = True
            self.learner.feedback_ids(ids, losses, step=self._batches)

    def on_epoch_end(self, epoch, logs=None):
        if not self._checked:
            self._checked = True
            _warn_if_inbox_unfed(self)
        _log_stats(self, epoch, logs)


class AssistantFeedCallback(AssistantFeedbackCallback):
    """Deprecated, goes in the next release: ``echoing.AssistantFeedbackCallback`` (renamed)."""

    def __init__(self, learner: AssistantLearner, inbox: FeedbackInbox, **arguments):
        warnings.warn(
            "echoing.AssistantFeedCallback is deprecated and goes in the next release: use "
            "echoing.AssistantFeedbackCallback, the same callback under per-example loss "
            "feedback's one name.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(learner, inbox, **arguments)


def _warn_if_inbox_unfed(callback: AssistantFeedbackCallback) -> None:
    """Warns when a whole epoch of drains found the inbox never updated: the model's
    ``LossFeedback`` reports into another inbox (or none), and the Assistant never trains."""
    batches = callback._batches - callback._fit_start
    if callback._fed or batches < callback.every_n_batches:
        return
    warnings.warn(
        f"{type(callback).__name__}: fit trained {batches} batches and the inbox was "
        "never updated, so the Assistant learns nothing (its filter drops examples at "
        "random); give the model's echoing.keras.LossFeedback this same inbox's update as an "
        "observer: LossFeedback(..., observers=[inbox.update]).",
        UserWarning,
        stacklevel=2,
    )


def _check_probe_batches(spec, inputs_key: str, label_key: str | None) -> None:
    """``probe_data`` holds batch dicts with the model's inputs and ``[B]`` labels; checked
    when the callback is built, not at fit's first batch inside a ``tf.function``."""
    if not isinstance(spec, Mapping):
        raise TypeError(
            f"AssistantCallback(probe_data=...): its elements are {type(spec).__name__}s, but "
            f"the callback reads batch dicts ({{{inputs_key!r}: ..., {label_key!r}: ...}}); map "
            f"them: probe_data.map(lambda x, y: {{{inputs_key!r}: x, {label_key!r}: y}})."
        )
    for key, argument in ((inputs_key, "AssistantCallback(inputs_key=)"),
                          (label_key, "the learner's label_key=")):  # fmt: skip
        if key is not None and key not in spec:
            raise ValueError(
                f"AssistantCallback(probe_data=...): its batches hold {sorted(spec)}, not "
                f"{key!r}; set {argument} to one of those, or add {key!r} to the batches."
            )
    if label_key is not None:
        check_label_rank(
            spec[label_key].shape,
            f"AssistantCallback(probe_data=...) holds {label_key!r}",
        )


def _check_stage_and_every(owner: str, stage, every_n_batches) -> None:
    if stage is not None and not isinstance(stage, AssistantFilter):
        raise TypeError(
            f"{owner}(stage={stage!r}): expected the echoing.assistant_filter result or None."
        )
    if not is_positive_int(every_n_batches):
        raise ValueError(f"{owner}(every_n_batches={every_n_batches!r}): expected an int >= 1.")


def _log_stats(callback, epoch: int, logs) -> None:
    """The learner's (and the stage's) statistics into ``callback.history`` and the epoch logs."""
    stats = {"epoch": epoch, **callback.learner.stats()}
    if callback.stage is not None:
        stats.update(callback.stage.stats())
    callback.history.append(stats)
    if logs is not None:
        logs.update({key: value for key, value in stats.items() if key != "epoch"})
