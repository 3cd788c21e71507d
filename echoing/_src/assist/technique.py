"""AutoAssist as a technique: an Assistant filter after augmentation and its online learner.

Example::

    import numpy as np
    from echoing.techniques import AssistantTechnique, ExamplesById

    examples = ExamplesById(
        {"inputs": np.random.rand(100, 8).astype("float32"), "label": np.arange(100) % 2},
        num_classes=2,
        input_shape=(8,),
    )
    technique = AssistantTechnique(examples, base_prob=0.3, seed=0, asynchronous=False)
    (insertion,) = technique.stages()  # ("after_augment", "assistant", the filter)
    technique.close()

The filter keeps each example with probability ``base_prob + (1 - base_prob)·g(x, y)``; the
learner trains g on a background thread from every inner loop's ids and per-example losses
(``Feedback``), so the Boss never waits for it. Config fields: ``assist``,
``assist_base_prob``, ``assist_reweight`` (attach ``sample_weight = 1 / keep probability``),
``assist_asynchronous`` (False: train inside the feedback call, the paper's sequential mode),
``assist_train_every`` (train on every k-th fed-back batch).

On text (``data.source="text"``) examples have no class and no fixed size: the Assistant scores
each line's bag of words (``echoing.BagOfWords`` over the vocabulary) with one label.
"""

from __future__ import annotations

import tensorflow as tf

from echoing._src.assist.assistant import Assistant
from echoing._src.assist.bag_of_words import BagOfWords
from echoing._src.assist.filter import assistant_filter
from echoing._src.assist.learner import AssistantLearner
from echoing._src.core import config_checks
from echoing._src.core.technique import Context, ExamplesById, Feedback, Insertion, Technique


class AssistantTechnique(Technique):
    """An ``echoing.Assistant`` filter at ``after_augment`` and an ``AssistantLearner``."""

    name = "assistant"
    wants_losses = True
    # Said when a run with the filter resumes (trainers.checkpointing.run_manager): as pruning's
    # epochs, its decisions follow the pipeline's read-ahead, which a restore does not repeat.
    resume_caveat = (
        "the Assistant's filter keeps each example with the Assistant as trained when the "
        "input pipeline reaches that example, and how far the pipeline reads ahead of training "
        "(and, with assist_asynchronous, when the learner's thread trains) is a matter of "
        "thread timing, which a restored pipeline does not repeat: this resumed run may keep "
        "other examples than the run never stopped would have and end a little apart from it "
        "in accuracy, as two uninterrupted runs on a busy machine can"
    )

    def __init__(
        self,
        examples: ExamplesById,
        *,
        base_prob: float,
        reweight: bool = False,
        seed: int | None = None,
        asynchronous: bool = True,
        bag_of_words: bool = False,
        train_every: int = 1,
    ):
        """``bag_of_words``: the examples are token sequences over ``examples.num_classes``
        tokens (a language model's); score their ``echoing.BagOfWords``, with no label."""
        features, label_key = None, "label"
        num_classes, input_shape = examples.num_classes, tuple(examples.input_shape)
        if bag_of_words:
            features, label_key = BagOfWords(examples.num_classes), None
            num_classes, input_shape = 1, (examples.num_classes,)
        self.assistant = Assistant(num_classes, input_shape=input_shape)
        self.filter = assistant_filter(
            self.assistant,
            base_prob=float(base_prob),
            features=features,
            label_key=label_key,
            reweight=reweight,
            seed=seed,
        )
        self.learner = AssistantLearner(
            self.assistant,
            examples=examples.arrays,
            features=features,
            label_key=label_key,
            asynchronous=asynchronous,
            train_every=train_every,
        )
        # The trainer feeds its learner from the first step: the untrained-Assistant warning
        # is for a user's fit that forgot to.
        self.filter.warned_untrained.assign(True)
        # Built now, eagerly and on the host, so a checkpoint restores its slots at once.
        with tf.device("/cpu:0"):
            self.learner.optimizer.build(self.assistant.trainable_variables)

    def stages(self) -> list[Insertion]:
        return [Insertion("after_augment", self.name, self.filter)]

    def observe(self, feedback: Feedback) -> None:
        self.learner.feedback_ids(feedback.ids, feedback.losses, feedback.step)

    def checkpointed(self) -> dict[str, object]:
        # The learner's T and counts too: without them a resumed run restarted T at 0 and its
        # logged counts (assist_pushed_batches, assistant_accuracy, ...) from nothing.
        return {
            "assistant": self.assistant,
            "assistant_optimizer": self.learner.optimizer,
            "assistant_learner": self.learner.checkpoint_state,
        }

    def scalars(self) -> dict[str, float]:
        stats = self.learner.stats()
        return {
            "assist_keep_rate": self.filter.keep_rate(),
            "assistant_accuracy": stats["assistant_accuracy"],
            "assist_queue_drops": stats["queue_drops"],
            "assist_nonfinite_losses": stats["nonfinite_losses"],
            "assist_pushed_batches": stats["pushed_batches"],
            "assist_skipped_batches": stats["skipped_batches"],
            "assist_trained_batches": stats["trained_batches"],
        }

    def close(self) -> None:
        self.learner.close()


def default_config(config) -> None:
    # AutoAssist: an Assistant filter after augmentation keeps each example with probability
    # base_prob + (1 - base_prob)·g(x, y); a background learner trains g from every inner loop's
    # per-example losses. reweight attaches sample_weight = 1 / keep probability.
    config.assist = False
    config.assist_base_prob = 0.3
    config.assist_reweight = False
    # False trains the Assistant inside each feedback call (the paper's "sequential" mode).
    config.assist_asynchronous = True
    # Train the Assistant on every k-th fed-back batch only (see AssistantLearner.train_every):
    # its cost falls k-fold where it shares the CPU with the Boss.
    config.assist_train_every = 1


def check_config(config) -> None:
    config_checks.fraction("assist_base_prob", config.assist_base_prob)
    if config.assist_train_every < 1:
        raise ValueError(
            f"config assist_train_every must be >= 1, got {config.assist_train_every!r}; 1 "
            "trains the Assistant on every fed-back batch, k on every k-th."
        )
    if not config.assist:
        config_checks.refuse_options_when_off(config, "assist")
        return
    if not config.assist_base_prob > 0:
        raise ValueError(
            "config assist_base_prob must be > 0 (0 could starve training), got "
            f"{config.assist_base_prob!r}; the paper uses 0.3."
        )
    config_checks.refuse_fresh_evaluation(config, "the Assistant filters")


def from_config(context: Context) -> AssistantTechnique | None:
    config = context.config
    if not config.assist:
        return None
    return AssistantTechnique(
        context.examples(),
        base_prob=config.assist_base_prob,
        reweight=config.assist_reweight,
        seed=config.seed,
        asynchronous=config.assist_asynchronous,
        bag_of_words=config.data.source == "text",
        train_every=config.assist_train_every,
    )
