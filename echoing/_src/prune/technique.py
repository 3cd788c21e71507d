"""Loss-table pruning as a technique: ``echoing.loss_prune`` on ids before reading, fed by the loop.

Example::

    from echoing.techniques import PruningTechnique

    technique = PruningTechnique(num_examples=1_000, num_epochs=10, prune_ratio=0.5, seed=0)
    (insertion,) = technique.stages()  # ("before_read", "prune", the pruning stage)
    print(float(technique.progress()))  # 0.0: the fraction of the 10 epochs trained so far

After every inner loop the per-example losses of the rows trained on (``Feedback``) go into the
``LossTable``; the stage keeps every example at or above the epoch's mean loss and the rest with
probability ``1 - prune_ratio`` (weighted ``1 / (1 - prune_ratio)``), and the last
``prune_anneal`` of the epochs train on everything. Pruning saves steps per epoch, so the run is
measured in epochs: ``progress()`` (epochs trained / ``num_epochs``, updated after each inner
loop) indexes the learning-rate schedule and ends the run at 1 (``trainers.controller``), while
``num_steps`` stays the upper bound. Config fields: ``prune``, ``prune_ratio``,
``prune_anneal``, ``prune_epochs`` (0: the whole epochs ``num_steps`` full batches cover:
pruning does the full run's epochs in fewer steps).
"""

from __future__ import annotations

import math
import warnings

import tensorflow as tf

from echoing._src.core import config_checks
from echoing._src.core.checks import in_interval
from echoing._src.core.loss_table import LossTable, _host_variable
from echoing._src.core.technique import Context, Feedback, Insertion, Technique
from echoing._src.prune.checks import pruned_epochs
from echoing._src.prune.loss_pruning import loss_prune

# Pruning that dropped under this share of what it would drop with half of each pruned epoch
# below the mean (prune_ratio / 2 of those epochs' examples) hardly ran: say so at the end.
_HARDLY = 0.25


class PruningTechnique(Technique):
    """An ``echoing.loss_prune`` stage at ``before_read`` and the ``LossTable`` it reads.

    Where the source reads by id (arrays, MNIST-1D, image folders) the stage chooses the ids and
    only the kept examples are read, decoded and augmented; where it streams (TFRecords, TFDS
    datasets, text) it prunes the raw records before decoding.
    """

    name = "prune"
    wants_losses = True
    run_end_reason = (
        "pruning measures the run in epochs (prune_epochs; 0: the epochs num_steps full "
        "batches cover) and training has taken them all. The examples it prunes take no "
        "steps; set prune_epochs to train longer"
    )
    run_cut_reason = (
        "pruning measures the run in epochs (prune_epochs) and the learning rate follows them, "
        "so its decay was not finished, nor pruning's anneal; raise num_steps (a pruned run "
        "ends when its epochs are trained) or lower prune_epochs (0: the epochs num_steps "
        "covers)"
    )
    # Said when a pruned run resumes (trainers.checkpointing.run_manager). The stage decides an
    # epoch from the losses reported by the time the input pipeline reaches that epoch, which
    # its read-ahead makes a matter of thread timing; a restored pipeline reads ahead by other
    # amounts than the uninterrupted one did, so a resume (or a run on a busier machine) can
    # decide later epochs from a table a few loops older or newer (issue 33).
    resume_caveat = (
        "pruning decides each epoch's kept examples from the losses training has reported when "
        "the input pipeline reaches that epoch, and how far the pipeline reads ahead of "
        "training is a matter of thread timing, which a restored pipeline does not repeat: "
        "from the next epoch on, this resumed run may keep other examples than the run never "
        "stopped would have (most often with echo, whose groups read far ahead) and end a few "
        "steps and a little accuracy apart from it, still after its prune_epochs epochs. For "
        "runs that must match exactly, run pruning uninterrupted on an otherwise idle machine"
    )

    def __init__(
        self,
        num_examples: int,
        *,
        num_epochs: int,
        prune_ratio: float = 0.5,
        anneal_fraction: float = 0.125,
        num_input_pipelines: int = 1,
        seed: int | None = None,
    ):
        self.table = LossTable(num_examples)
        # Each input pipeline reads its shard: its epoch is its share of the examples.
        self.stage = loss_prune(
            self.table,
            num_epochs=num_epochs,
            prune_ratio=prune_ratio,
            anneal_fraction=anneal_fraction,
            examples_per_epoch=max(1, num_examples // num_input_pipelines),
            seed=seed,
        )
        self._progress = _host_variable(tf.constant(0.0), "prune_progress")
        self.num_input_pipelines = num_input_pipelines
        # The trainer feeds this table itself, once per loop, behind a read-ahead that can open
        # several epochs of a small data set first: loss_prune's unfed-table warning is not for it.
        self.stage.warned_unfed.assign(True)
        # Its run ends when num_epochs are trained, however far the pipeline has read past them.
        self.stage.says_past_end = False

    def stages(self) -> list[Insertion]:
        # The earliest point: on ids before reading where the source reads by id, else on the
        # raw records before decoding (``pipelines.datasets``).
        return [Insertion("before_read", self.name, self.stage)]

    def observe(self, feedback: Feedback) -> None:
        self.table.update(feedback.ids, feedback.losses)
        # The epochs training took, not those the pipeline read ahead of it by its buffers
        # (a shuffle buffer as large as the data set would end the run an epoch early).
        # Each input pipeline prunes its shard: the rows of the global batch are its share.
        self.stage.trained.record(feedback.ids, feedback.echo_factor * self.num_input_pipelines)
        self.restored()

    def restored(self) -> None:
        # The epochs trained over this run's epochs: a finished run resumed with more epochs
        # (num_steps or prune_epochs raised) goes on, where its saved progress said 1.
        trained = self.stage.epochs_trained() / self.stage.num_epochs
        self._progress.assign(min(trained, 1.0))

    def progress(self) -> tf.Tensor:
        # Updated after each inner loop: the learning rate follows it loop by loop.
        return self._progress.read_value()

    def fresh_examples_to_end(self) -> float | None:
        remaining = self.stage.examples_to_train_at_least()  # of this input pipeline's shard
        return None if remaining is None else remaining * self.num_input_pipelines

    def checkpointed(self) -> dict[str, object]:
        return {"prune": self.stage, "prune_progress": self._progress}

    def scalars(self) -> dict[str, float]:
        return {**self.stage.stats(), "prune_epochs_trained": self.stage.epochs_trained()}

    def end_note(self) -> str | None:
        # Kept (nearly) every example it read over 2+ epochs it could prune: the epochs were
        # decided from a table empty (or stale) when the input pipeline opened them.
        stats = self.stage.stats()
        prunable = pruned_epochs(self.stage.num_epochs, self.stage.anneal_fraction)
        if stats["prune_seen"] == 0 or prunable < 2 or self.stage.epochs_trained() < 2:
            return None
        kept = stats["prune_kept"] / stats["prune_seen"]
        expected_drop = self.stage.prune_ratio / 2 * prunable / self.stage.num_epochs
        if 1 - kept >= _HARDLY * expected_drop:
            return None
        share = "every example" if kept == 1 else f"{kept:.0%} of the examples"
        return (
            f"Pruning kept {share} it read: it decides each epoch when the input "
            "pipeline opens it, from the losses training has reported by then, and on this "
            f"data set ({self.table.num_examples} examples) the pipeline, reading ahead, and "
            "the loops, reporting losses when they end (every steps_per_loop steps), were an "
            "epoch or more apart, so it found few or no losses to prune by. Pruning pays on "
            "data sets many loops long: lower --config.steps_per_loop, or train on more data."
        )


def default_config(config) -> None:
    # Loss-table pruning (InfoBatch): keep examples at or above the epoch's mean last-seen loss,
    # the rest with probability 1 - prune_ratio (weighted up); the last prune_anneal of the
    # epochs on all data. prune_epochs = 0: the epochs num_steps full batches cover.
    config.prune = False
    config.prune_ratio = 0.5
    config.prune_anneal = 0.125
    config.prune_epochs = 0


def check_config(config) -> None:
    config_checks.fraction("prune_anneal", config.prune_anneal)
    if not in_interval(config.prune_ratio, 0, 1, high_open=True):
        raise ValueError(
            f"config prune_ratio must be in [0, 1), got {config.prune_ratio!r}: the probability "
            "of dropping a below-mean example (1 would drop them all; InfoBatch uses 0.5)."
        )
    if config.prune_epochs < 0:
        raise ValueError(
            f"config prune_epochs must be >= 0 (0: the epochs num_steps covers), got "
            f"{config.prune_epochs!r}."
        )
    if not config.prune:
        # An option of a technique that is off would silently train the baseline.
        config_checks.refuse_options_when_off(config, "prune")
        return
    if config.strategy == "tpu":
        raise ValueError(
            "config prune=True with strategy='tpu': the learning rate follows the epochs the "
            "pruning stage has read, a host variable a TPU step cannot read. Use "
            "strategy='default' or 'mirrored'."
        )
    if config.strategy == "multi_worker":
        # Measured (issue 33): both workers of configs/mnist1d.py:smoke,prune=1 logged step
        # 110 of 150 and then waited, alive and silent, until killed; each prunes its own
        # shard and ends its epochs by its own count, so they need not stop at one step.
        raise ValueError(
            "config prune=True with strategy='multi_worker': each worker prunes its own shard "
            "and ends the run when its own epochs are trained, so the workers can stop at "
            "different steps and the others then wait in a collective for ever (seen: both "
            "hung after step 110 of 150). Use strategy='default' or 'mirrored' (one host)."
        )
    config_checks.refuse_fresh_evaluation(config, "pruning drops examples")


def from_config(context: Context) -> PruningTechnique | None:
    config = context.config
    if not config.prune:
        return None
    num_examples = context.num_examples()
    # The whole epochs num_steps full batches cover, each fresh example echo times (a fixed
    # factor; AutoEcho's is not known ahead): what pruning then does in fewer steps.
    covered = int(config.num_steps * _fresh_per_step(config)) // num_examples
    epochs = config.prune_epochs or max(1, covered)
    if context.trains:  # an evaluation's build: no schedule to warn about
        _check_some_epoch_pruned(config, epochs, num_examples)
        _check_steps_cover(config, epochs, num_examples)
    return PruningTechnique(
        num_examples,
        num_epochs=epochs,
        prune_ratio=config.prune_ratio,
        anneal_fraction=config.prune_anneal,
        num_input_pipelines=context.num_input_pipelines,
        seed=config.seed,
    )


def _fresh_per_step(config) -> float:
    """The fresh examples a step trains: the batch (the rows in-batch selection keeps), over the
    echo factor (a fixed one; AutoEcho's is not known ahead)."""
    rows = config.data.batch_size
    if config.select_ratio < 1:
        rows = max(1, round(config.select_ratio * rows))  # as the selection rounds
    return rows / max(1.0, config.echo)


def _check_some_epoch_pruned(config, epochs: int, num_examples: int) -> None:
    """Warns when no epoch can be pruned: the first opens before any loss is reported, and the
    last ``prune_anneal`` train on every example. The run would end after its epochs as a
    pruned one does, having pruned nothing."""
    if pruned_epochs(epochs, config.prune_anneal) > 1:
        return
    why = (
        f"num_steps={config.num_steps} covers {epochs} epoch of the {num_examples} examples"
        if not config.prune_epochs
        else f"prune_epochs={epochs}"
    )
    warnings.warn(
        f"config prune=1 prunes nothing in this run: {why}, the first epoch opens before "
        "training has reported any loss, and the last prune_anneal of the epochs train on "
        "every example. Train 2 epochs or more (raise num_steps, or set prune_epochs), or "
        "turn pruning off.",
        UserWarning,
        stacklevel=2,
    )


def _check_steps_cover(config, epochs: int, num_examples: int) -> None:
    """Warns when ``num_steps`` cannot reach ``prune_epochs`` even if pruning drops every
    below-mean example it may: the run would end at ``num_steps`` part-way, with its learning
    rate (indexed by the epochs trained) undecayed and its last epochs untrained. A warning, not
    an error: a run may stop early on purpose and resume with more ``num_steps``."""
    pruned = pruned_epochs(epochs, config.prune_anneal)
    # The first epoch is whole (no loss is known yet); the later pruned ones keep at least
    # 1 - prune_ratio; the anneal's keep all.
    whole = min(pruned, 1) + max(pruned - 1, 0) * (1.0 - config.prune_ratio) + epochs - pruned
    fewest = whole * num_examples
    steps = math.ceil(fewest / _fresh_per_step(config))
    if config.num_steps < steps:
        warnings.warn(
            f"config prune_epochs={epochs} needs at least {steps} steps of data.batch_size="
            f"{config.data.batch_size} over the {num_examples} examples (each pruned epoch keeps "
            f"at least 1 - prune_ratio of them), and num_steps={config.num_steps} ends the run "
            "first, with its learning rate undecayed and its last epochs untrained. Raise "
            f"num_steps to {steps} or more (a pruned run ends when its epochs are trained), or "
            "lower prune_epochs (0: the epochs num_steps covers).",
            UserWarning,
            stacklevel=2,
        )
