"""What ``LossFeedback.fit`` and ``PriorityModel.fit`` check before Keras trains.

Each check reads ``fit``'s arguments and the stages of the dataset it is given
(``dataset_graph``), and refuses or warns where Keras would train without a word but not as the
user meant: a per-pass stage whose decisions a ``cache()`` replays, validation read through a
pruning stage, an endless sampler with no ``steps_per_epoch``, a pruning run that ``fit``'s
epochs end early or cut short, a ``ModelCheckpoint`` of the wrapper itself. What only shows
as fit runs is said by callbacks the wrapper adds (``with_watches``): a pruned fit stopped early
or resumed by ``BackupAndRestore`` past its stage, a sampler a second fit starts again.

Example::

    import keras
    import tensorflow as tf
    import echoing
    from echoing._src.core import fit_checks

    table = echoing.LossTable(64)
    pruned = echoing.with_ids(tf.data.Dataset.range(64)).apply(
        echoing.loss_prune(table, num_epochs=4, seed=0))
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    fit_checks.check_fit(model, {"x": pruned.cache(), "epochs": 4})  # ValueError: ... cache()
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping

import keras
import tensorflow as tf

from echoing._src.core import dataset_graph

_FIT = inspect.signature(keras.Model.fit)


def fit_arguments(model: keras.Model, x, args: tuple, kwargs: dict) -> dict:
    """``fit``'s arguments by name, its defaults filled in (``epochs`` given by position too)."""
    bound = _FIT.bind(model, x, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.update(arguments.pop("kwargs", {}) or {})
    return arguments


def check_fit(model: keras.Model, arguments: dict) -> None:
    """Every check, in order; raises ValueError or TypeError, or warns (``UserWarning``), as
    each says."""
    owner = type(model).__name__
    _refuse_whole_model_checkpoint(owner, arguments.get("callbacks"))
    x = arguments.get("x")
    if not isinstance(x, tf.data.Dataset):
        return
    _refuse_replayed_stage(owner, x)
    _refuse_per_pass_validation(owner, arguments.get("validation_data"))
    _refuse_endless_epoch(owner, x, arguments)
    _refuse_class_weight_with_sample_weights(owner, x, arguments)
    _warn_if_sampler_reads_ahead(model, x)
    for stage in dataset_graph.per_pass_stages(x, "loss_prune"):
        _warn_if_pruning_weights_dropped(owner, x, stage)
        if arguments.get("steps_per_epoch") is not None:
            _check_steps_with_pruning(owner, x, stage, arguments)
        else:  # fit's epochs are passes over x, as pruning's are
            _warn_if_pruning_outlasts_fit(owner, stage, arguments)
            _warn_if_fit_starts_pruned(owner, stage, arguments)


def with_watches(model: keras.Model, arguments: dict) -> dict:
    """``arguments`` with the watches that apply added to the callbacks: a ``PruningWatch``
    when ``x`` holds pruning stages and ``epochs`` run more than one (a fit of one epoch is a
    loop's, not judged), a ``SamplerWatch`` when it holds a ``priority_sample``."""
    x = arguments.get("x")
    if not isinstance(x, tf.data.Dataset):
        return arguments
    owner, watches = type(model).__name__, []
    stages = dataset_graph.per_pass_stages(x, "loss_prune")
    if stages and arguments.get("steps_per_epoch") is None and _passes(arguments) >= 2:
        watches.append(PruningWatch(owner, stages, arguments))
    samplers = dataset_graph.per_pass_stages(x, "priority_sample")
    if samplers:
        watches.append(SamplerWatch(owner, samplers, arguments))
    if not watches:
        return arguments
    return {**arguments, "callbacks": [*(arguments.get("callbacks") or []), *watches]}


def _resumed_epoch(model: keras.Model, initial_epoch: int) -> int:
    """The epoch fit starts at: a ``BackupAndRestore`` among the callbacks given, which run
    before the watches', sets it on the model when it restores; else ``initial_epoch``."""
    return int(getattr(model, "_initial_epoch", None) or initial_epoch)


class SamplerWatch(keras.callbacks.Callback):
    """Each fit makes a new iterator of a ``priority_sample`` dataset, which starts at its
    ``start_step`` again: a second fit over the same dataset, or a fit that ``BackupAndRestore``
    resumes, would renew ids from the first again and extrapolate priorities back in time.
    Said when fit begins (after the callbacks given, so after a restore)."""

    def __init__(self, owner: str, samplers: list, arguments: dict):
        super().__init__()
        self.owner, self.samplers = owner, samplers
        self.initial_epoch = int(arguments.get("initial_epoch") or 0)

    def on_train_begin(self, logs=None):
        resumed = _resumed_epoch(self.model, self.initial_epoch)
        for sampler in self.samplers:
            last = sampler.table.last_measured_step()
            if last > sampler.start_step:
                why = f"its table holds measurements up to step {last}"
            elif resumed > self.initial_epoch:
                why = (
                    f"fit resumes at epoch {resumed} (a BackupAndRestore restored the model and "
                    "optimizer, not the table or the sampler's step)"
                )
            else:
                continue
            warnings.warn(
                f"{self.owner}.fit: this fit reads priority_sample from its step "
                f"{sampler.start_step} again (each fit makes a new iterator of it), but {why}; "
                "it would renew ids from the first again, and the ids after them would wait. "
                "Run the epochs in one fit, or build the dataset anew before each fit with "
                "start_step=int(model.optimizer.iterations), its table checkpointed with the "
                "model (tf.train.Checkpoint(table=table)).",
                UserWarning,
                stacklevel=2,
            )


class PruningWatch(keras.callbacks.Callback):
    """What fit's arguments cannot tell, said as fit runs: a ``BackupAndRestore`` that resumes
    fit at a later epoch than the pruning stage is at (it restores the model and optimizer, not
    the stage or its table), and a fit stopped early (``EarlyStopping``, ``stop_training``)
    before pruning's last epochs, which train on every example, ran."""

    def __init__(self, owner: str, stages: list, arguments: dict):
        super().__init__()
        self.owner, self.stages = owner, stages
        self.epochs = int(arguments.get("epochs") or 1)
        self.initial_epoch = int(arguments.get("initial_epoch") or 0)

    def on_train_begin(self, logs=None):
        resumed = _resumed_epoch(self.model, self.initial_epoch)
        for stage in self.stages:
            at = stage.epoch()
            if resumed > self.initial_epoch and at < resumed:
                warnings.warn(
                    f"{self.owner}.fit: fit resumes at epoch {resumed} (a BackupAndRestore "
                    f"restored the model and optimizer), but loss_prune is at its epoch {at}: "
                    "BackupAndRestore does not save the stage or its LossTable, so this fit "
                    f"ends at pruning's epoch {at + self.epochs - resumed} of "
                    f"{stage.num_epochs}, its last epochs (which train on every example) never "
                    "run, and its table starts empty. Save and restore them with the model: "
                    "tf.train.Checkpoint(table=table, prune=stage), written at each epoch's end "
                    "and read before fit.",
                    UserWarning,
                    stacklevel=2,
                )

    def on_train_end(self, logs=None):
        if not self.model.stop_training:
            return
        for stage in self.stages:
            if stage.epoch() < stage.num_epochs:
                warnings.warn(
                    f"{self.owner}.fit: fit was stopped (EarlyStopping, or a callback setting "
                    f"model.stop_training) at loss_prune's epoch {stage.epoch()} of its "
                    f"num_epochs={stage.num_epochs}, so its last epochs, which train on every "
                    "example, never ran and every epoch trained was pruned. Let the anneal run "
                    "first: EarlyStopping(start_from_epoch=num_epochs), or build the stage "
                    "with the epochs training runs.",
                    UserWarning,
                    stacklevel=2,
                )


def _warn_if_sampler_reads_ahead(model: keras.Model, dataset: tf.data.Dataset) -> None:
    """With ``steps_per_execution`` k > 1, Keras reads a call's k batches before any of its
    steps writes priorities: the sampler picks from priorities up to k - 1 steps old, and
    top-k batches repeat (measured: 40-56 of 64 examples reached in 8 top-k steps at k = 2-8,
    varying run to run, against 56 every run at k = 1)."""
    steps = int(getattr(model, "steps_per_execution", 1) or 1)
    if steps < 2 or not dataset_graph.per_pass_stages(dataset, "priority_sample"):
        return
    warnings.warn(
        f"{type(model).__name__}.fit: the model is compiled with steps_per_execution={steps}, "
        f"so Keras reads {steps} batches before any of their steps writes its priorities, and "
        f"priority_sample picks from priorities up to {steps - 1} steps old (top-k batches "
        "repeat); compile with steps_per_execution=1 for priority sampling.",
        UserWarning,
        stacklevel=4,
    )


def _refuse_whole_model_checkpoint(owner: str, callbacks) -> None:
    """A ``ModelCheckpoint`` of the whole wrapper would fail at the first epoch's end: the
    wrapper, which only trains, is not saved itself (its ``save`` refuses)."""
    for callback in callbacks or ():
        whole = isinstance(callback, keras.callbacks.ModelCheckpoint)
        if whole and not callback.save_weights_only:
            raise TypeError(
                f"{owner}.fit: ModelCheckpoint({callback.filepath!r}) would save the whole "
                f"{owner}, a training wrapper that is not saved itself (at the end of the first "
                "epoch); pass save_weights_only=True (a .weights.h5 path), or save the wrapped "
                "model, model.model.save(path), after fit."
            )


def _refuse_replayed_stage(owner: str, dataset: tf.data.Dataset) -> None:
    """A ``cache()`` or ``snapshot()`` after a stage that decides anew each pass replays the first
    epoch's elements in every later one: from the second epoch on the stage would never run,
    with no word (pruning would prune nothing)."""
    replayed = dataset_graph.per_pass_stage_replayed(dataset)
    if replayed is None:
        return
    stage, replay = replayed
    raise ValueError(
        f"{owner}.fit: the dataset's {stage} comes before a {replay}, which replays the first "
        f"epoch's elements in every later one, so {stage} would decide once and never again "
        f"(its later epochs would not prune, filter or sample); move the {replay} before "
        f"{stage} (cache the source, then {stage}), or drop it."
    )


def _refuse_per_pass_validation(owner: str, validation) -> None:
    """Validation read through a pruning, filtering or sampling stage would score the examples
    it keeps, not the split; and each validation pass would count as one of its epochs (a
    pruning run's anneal came halfway through)."""
    if not isinstance(validation, tf.data.Dataset):
        return
    if isinstance(validation.element_spec, Mapping):
        raise ValueError(
            f"{owner}.fit: validation_data holds batch dicts (keys "
            f"{sorted(validation.element_spec)}), which evaluation would reach without labels, "
            "after the epochs before the first validation; map them to (x, y) first: "
            "validation_data=batches.map(echoing.keras.fit_inputs)."
        )
    stages = sorted({name for name, _ in dataset_graph.per_pass_marks(validation)})
    if stages:
        raise ValueError(
            f"{owner}.fit: validation_data reads the output of {' and '.join(stages)}, so it "
            f"would score only the examples the stage keeps, and each validation pass would "
            "run the stage once more (a loss_prune stage would count it as one of its epochs); "
            "validate on data that does not pass through the stage (a split of its own, "
            "batched and mapped with fit_inputs)."
        )


def _refuse_endless_epoch(owner: str, dataset: tf.data.Dataset, arguments: dict) -> None:
    """An infinite dataset (``priority_sample``'s, a ``repeat()``) with no ``steps_per_epoch``:
    fit's first epoch would never end, printing nothing under ``verbose=0``."""
    if arguments.get("steps_per_epoch") is not None:
        return
    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            f"{owner}.fit: the dataset is infinite (priority_sample's batches, or a repeat()) "
            "and no steps_per_epoch is given, so the first epoch would never end; pass "
            "steps_per_epoch, e.g. the examples per epoch // batch_size."
        )


def _refuse_class_weight_with_sample_weights(owner: str, dataset, arguments: dict) -> None:
    """Pruning's and priority sampling's batches carry a ``sample_weight`` (``fit_inputs``'s
    third item), which Keras will not combine with ``class_weight``: say how to fold it in."""
    spec = dataset.element_spec
    if arguments.get("class_weight") is None or not (isinstance(spec, tuple) and len(spec) == 3):
        return
    raise ValueError(
        f"{owner}.fit: class_weight cannot be used with batches that carry a sample_weight "
        "(loss_prune's and priority_sample's do: their weights keep the gradient unbiased), "
        "and Keras refuses the two together; fold the class weights into sample_weight "
        "instead: .map(lambda x, y, w: (x, y, w * tf.gather(class_weights, y))) after "
        "fit_inputs, with class_weights a float tensor indexed by label."
    )


def _warn_if_pruning_weights_dropped(owner: str, dataset, stage) -> None:
    """Pruning keeps a below-mean example with probability ``1 - prune_ratio`` and weights it
    by the inverse, so that the expected gradient is the full data's; batches that reach fit
    without the weight (a map that regroups the batch dict and leaves ``sample_weight`` out)
    train the kept easy examples at weight 1, biased towards the hard ones."""
    spec = dataset.element_spec
    if stage.prune_ratio == 0 or (isinstance(spec, tuple) and len(spec) == 3):
        return
    warnings.warn(
        f"{owner}.fit: the batches come from loss_prune(prune_ratio={stage.prune_ratio}) but "
        "reach fit without its sample_weight, so the below-mean examples it keeps train at "
        f"weight 1, not {1 / (1 - stage.prune_ratio):g}, and the gradient leans towards the "
        "hard examples; keep 'sample_weight' in the batch dict (a map that regroups it must "
        "carry e['sample_weight'] over), which fit_inputs passes to fit as its third item.",
        UserWarning,
        stacklevel=4,
    )


def _check_steps_with_pruning(owner: str, dataset, stage, arguments: dict) -> None:
    """``steps_per_epoch`` with a pruning stage: pruning's epochs are passes over the data, fit's
    are then that many steps. On data that ends (a pass), Keras ends an epoch where the data
    runs out and starts the next on the spent iterator: an empty epoch, and pruning epochs
    skipped (steps [8, 0, 6, 6, ...] measured, the anneal never run). Refused. Over a
    ``repeat()`` the two kinds of epoch just do not line up: said."""
    steps = arguments["steps_per_epoch"]
    fix = "leave steps_per_epoch (and any repeat()) out, so that each fit epoch is one pass"
    if dataset.cardinality() != tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            f"{owner}.fit: steps_per_epoch={steps} on a pruned dataset that ends with each "
            "pass: Keras ends an epoch where the data runs out and goes on with the spent "
            "iterator, so epochs come out empty and pruning's epochs are skipped (its last, "
            f"which train on every example, too); {fix}."
        )
    warnings.warn(
        f"{owner}.fit: steps_per_epoch={steps} over a repeated pruned dataset: loss_prune counts "
        f"its num_epochs={stage.num_epochs} in passes over the data, not in fit's epochs, so its "
        "last epochs (which train on every example) come where those passes fall, not at fit's "
        f"end; {fix}.",
        UserWarning,
        stacklevel=4,
    )


def _passes(arguments: dict) -> int:
    return int(arguments.get("epochs") or 1) - int(arguments.get("initial_epoch") or 0)


def _fit_epochs(arguments: dict) -> str:
    initial = int(arguments.get("initial_epoch") or 0)
    epochs = int(arguments.get("epochs") or 1)
    return f"epochs={epochs}" + (f" - initial_epoch={initial}" if initial else "")


def _warn_if_pruning_outlasts_fit(owner: str, stage, arguments: dict) -> None:
    """Warns when a fit of several epochs ends before the stage's ``num_epochs``: unless later
    fits run the rest, its last epochs, which train on every example (the anneal), never run.
    A fit of one epoch is a loop's (one fit per epoch) and is not judged; past ``num_epochs``
    the stage says so itself."""
    passes, done = _passes(arguments), stage.epoch()
    if passes < 2 or done + passes >= stage.num_epochs:
        return
    warnings.warn(
        f"{owner}.fit: fit runs {passes} epochs ({_fit_epochs(arguments)}), to loss_prune's "
        f"epoch {done + passes} of its num_epochs={stage.num_epochs}: unless later fits run the "
        "rest, its last epochs, which train on every example, never run and every epoch is "
        "pruned; build the stage with num_epochs = the epochs training runs in all.",
        UserWarning,
        stacklevel=4,  # check_fit, the wrapper's fit, then the user's line
    )


def _warn_if_fit_starts_pruned(owner: str, stage, arguments: dict) -> None:
    """Warns when fit's first epoch is a pruned one and more follow. Keras takes the length of
    every epoch of a fit from its first when the dataset's size is unknown, so a later epoch
    that keeps more examples (the anneal's keep every one) is cut short, the rest never
    trained. A fit that starts on the first, whole epoch is safe: no later epoch is longer."""
    passes, done = _passes(arguments), stage.epoch()
    if passes < 2 or not 1 <= done < stage.full_data_epoch:
        return
    warnings.warn(
        f"{owner}.fit: fit starts on loss_prune's epoch {done + 1}, a pruned one, and runs "
        f"{passes} epochs; Keras takes each epoch of this fit to be as long as its first (the "
        "dataset's size is unknown), so later epochs that keep more examples, such as the last "
        "ones, which keep every example, are cut short. Run the epochs in one fit from the "
        "first, or one fit per epoch: for epoch in range(start, end): model.fit(..., "
        "initial_epoch=epoch, epochs=epoch + 1).",
        UserWarning,
        stacklevel=4,
    )
