"""Checkpoints that resume a run: model, optimizer, step, echo meters and the input iterator.

Example::

    import tensorflow as tf
    from trainers import checkpointing

    step = tf.Variable(0, dtype=tf.int64)
    manager = checkpointing.make_manager("/tmp/run/checkpoints", max_to_keep=2, step=step)
    checkpointing.restore_latest(manager)  # None on a fresh directory, else the restored path
    step.assign_add(10)
    manager.save(checkpoint_number=10)

The restore is strict: every object the run has built must match the checkpoint, so a workdir
written by another model, pipeline or data set fails with a ``CheckpointRestoreError`` (a
``ValueError``) that says so, naming the variable that does not fit and both shapes, instead of
silently training from a half-restored state. A newest checkpoint that cannot be read (a
truncated data file, a garbled index: a kill or a full disk during a save) is named as such on
stderr and the next older one is restored instead. A save cut short (a kill, a full disk)
leaves a ``<prefix>_temp`` folder next to the checkpoints: ``make_manager`` removes such folders,
and ``save`` turns a failed write into a ``CheckpointSaveError`` naming the checkpoint that is
still intact. TensorFlow writes a checkpoint's files into that temporary folder and moves them
into place only once complete, so the checkpoints already listed stay usable.

One run writes a workdir at a time (``trainers.workdir_lock``): removing unfinished saves first
checks that no other run holds the workdir.
"""

from __future__ import annotations

import logging
import os
import re
import sys

import tensorflow as tf

from trainers import workdir_lock


def make_manager(directory: str, *, max_to_keep: int, **objects) -> tf.train.CheckpointManager:
    """A ``CheckpointManager`` over a ``tf.train.Checkpoint`` of ``objects`` (name -> trackable).

    Args:
      directory: where checkpoints are written (created if missing).
      max_to_keep: how many recent checkpoints to keep (>= 1).
      **objects: what to save, e.g. ``model=..., optimizer=..., step=..., iterator=...``.
    """
    if isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 1:
        raise ValueError(f"max_to_keep must be an int >= 1, got {max_to_keep!r}.")
    if not objects:
        raise ValueError("make_manager needs at least one object to checkpoint, got none.")
    _remove_unfinished_saves(directory)
    checkpoint = tf.train.Checkpoint(**objects)
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep)


class CheckpointRestoreError(ValueError):
    """The workdir's checkpoints do not fit this run's objects, or none of them can be read.
    ``summary``: what failed in one clause, without the causes and fixes the message guesses,
    for a caller that knows the cause (``workdir_config.failed_resume``)."""

    def __init__(self, message: str, summary: str | None = None):
        super().__init__(message)
        self.summary = summary or message


class CheckpointSaveError(RuntimeError):
    """A checkpoint could not be written (e.g. the disk is full); older ones are intact."""


def save(manager: tf.train.CheckpointManager, step: int) -> str:
    """``manager.save(checkpoint_number=step)``, with a clear error when the write fails.

    Raises:
      CheckpointSaveError: the write failed (no space left, file too large, no permission);
        the message names the error and the newest checkpoint that is still usable.
    """
    intact = manager.latest_checkpoint
    try:
        return manager.save(checkpoint_number=step)
    except (tf.errors.OpError, OSError) as error:
        raise CheckpointSaveError(
            f"could not save the checkpoint of step {step} in {manager.directory}: "
            f"{error_line(error)}. "
            + (
                f"The previous checkpoint {intact} is intact: free space (or fix the "
                "directory) and run the same command again to resume from it."
                if intact
                else "No earlier checkpoint exists: free space (or fix the directory) and "
                "run the same command again."
            )
        ) from error


def _remove_unfinished_saves(directory: str) -> None:
    # TensorFlow writes into "<prefix>_temp/" and renames when done: a leftover one is a save
    # that never finished (one run writes a workdir at a time), and can be large. While another
    # run holds the workdir, its folder is a save in progress: refuse instead of removing it.
    workdir_lock.check_not_in_use(os.path.dirname(os.path.normpath(directory)))
    for folder in tf.io.gfile.glob(os.path.join(directory, "*_temp")):
        if tf.io.gfile.isdir(folder):
            tf.io.gfile.rmtree(folder)
            print(f"Removed an unfinished checkpoint save: {folder}", file=sys.stderr)


def restore_latest(
    manager: tf.train.CheckpointManager,
    *,
    partial: bool = False,
    first: tf.train.Checkpoint | None = None,
    required: tf.train.Checkpoint | None = None,
) -> str | None:
    """Restores the newest checkpoint of ``manager``, if there is one.

    ``partial=True`` restores what ``manager``'s checkpoint holds (e.g. only the model and step,
    to evaluate) and leaves the rest of the saved state unread, without warnings; each object
    it holds must still match. ``first``: a checkpoint of some of the same objects, restored
    from the same file before the rest (the state an input iterator's restore reads), and not
    required to be there. ``required``: the objects that must match, restored after ``first``
    (default: all of ``manager``'s); with ``first`` holding the rest, a checkpoint written
    before some state existed still restores.

    Returns:
      The restored checkpoint's path, or None when the directory holds no checkpoint.

    Raises:
      CheckpointRestoreError: the checkpoint does not fit the objects being restored (another
        model, optimizer, pipeline or data set size), or none of the checkpoints kept can be
        read; the message names them and how to proceed.
    """
    paths = list(reversed(manager.checkpoints)) or [manager.latest_checkpoint]
    if paths == [None]:
        return None
    unreadable: dict[str, list[str]] = {}  # error -> the checkpoints that gave it
    for path in paths:
        error = _restore(manager, path, first=first, required=required, partial=partial)
        if error is None:
            for message, skipped in unreadable.items():
                print(
                    f"Checkpoint unreadable (corrupt or truncated), skipped: "
                    f"{', '.join(skipped)}: {message}",
                    file=sys.stderr,
                )
            return path
        _quiet_failed_restores()
        if isinstance(error, AssertionError | ValueError):
            message = _mismatch(path, error)
            raise CheckpointRestoreError(message, message.split(". A checkpoint's")[0]) from None
        # Unreadable bytes (also a dtype clash with another config): try the next older.
        unreadable.setdefault(error_line(error), []).append(path)
    reasons = "; ".join(f"{', '.join(p)}: {message}" for message, p in unreadable.items())
    first = _RESTORING_AT.sub("", next(iter(unreadable)))
    raise CheckpointRestoreError(
        f"no checkpoint in the workdir can be read ({reasons}). They are corrupt or truncated, "
        "or were written by a different config: use a fresh --workdir.",
        f"no checkpoint in the workdir can be restored ({', '.join(paths)}): "
        + re.split(r"\. |: Iterator::", first)[0],
    )


# TensorFlow's prefix of a restore error, which names the checkpoint the summary names already.
_RESTORING_AT = re.compile(r"^Error when restoring from checkpoint or SavedModel at \S+: ")


def _restore(
    manager: tf.train.CheckpointManager,
    path: str,
    *,
    first: tf.train.Checkpoint | None,
    required: tf.train.Checkpoint | None,
    partial: bool,
) -> Exception | None:
    """Restores ``path`` (see ``restore_latest``); the error when it cannot, else None."""
    try:
        if first is not None:
            first.restore(path).expect_partial()
        checkpoint = manager.checkpoint if required is None else required
        status = checkpoint.restore(path)
        if partial or required is not None:
            status.expect_partial()  # the rest is restored by ``first``, or left unread
        status.assert_existing_objects_matched()
    except (IndexError, tf.errors.OpError, AssertionError, ValueError) as error:
        return error
    return None


# The warnings TensorFlow logs, value by value, when the objects of a restore that failed are
# collected (often only at exit: the objects keep their pending restores): the error raised
# instead names what does not fit, and a run resuming from an older checkpoint restored it all.
_UNRESTORED_WARNINGS = (
    "Value in checkpoint could not be found in the restored object",
    "Detecting that an object or model or tf.train.Checkpoint is being deleted",
    "An attribute in the restored object could not be found in the checkpoint",
)


def _keep_log_record(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_UNRESTORED_WARNINGS)


def _quiet_failed_restores() -> None:
    """From now on, drops TensorFlow's per-value warnings about restores (after one failed)."""
    logger = logging.getLogger("tensorflow")
    if _keep_log_record not in logger.filters:
        logger.addFilter(_keep_log_record)


# TensorFlow's words for a saved value whose shape is not the variable's (resource_variable_ops).
_SHAPES = re.compile(
    r"incompatible tensor with shape (\(.*?\)) when attempting to restore variable with shape "
    r"(\(.*?\)) and name (.+?)\.?$",
    re.MULTILINE,
)


# TensorFlow's words for objects of this run that the checkpoint has no value for.
_UNBOUND = re.compile(r"Found (\d+) Python objects that were not bound to checkpointed values")


def _mismatch(path: str, error: BaseException) -> str:
    """Why the checkpoint ``path`` does not fit (the variable and both shapes, when TensorFlow
    names them), what can cause it and the fix.

    The causes are what a checkpoint's shapes follow: the model, the techniques, the data set's
    size or classes (pruning keeps a value per training example), the batch size; never a field
    a resume may change, such as num_steps (``workdir_config.explain`` names config changes)."""
    shapes = _SHAPES.search(str(error))
    unbound = _UNBOUND.search(str(error))
    if shapes:
        saved, current, name = shapes.groups()
        detail = f"its variable {name} has shape {saved} there and {current} in this run"
    elif unbound:
        # TensorFlow lists the objects with their values: the names are what a user can use.
        names = re.findall(r"<tf\.Variable '([^']+?)(?::0)?'", str(error))
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        detail = f"{unbound.group(1)} of this run's variables are not in it ({shown})"
    else:
        detail = error_line(error)
    return (
        f"the checkpoint {path} does not match this run's model or data: {detail}. A "
        "checkpoint's variables fit only the model, techniques and data that wrote them: the "
        "model or a technique changed, or the data set's size or classes, or the batch size. "
        "Use a fresh --workdir, or the config that wrote this checkpoint (with the same data)."
    )


def _unsaved_iterator_reason(config, trainer, train_read_in_python: bool) -> str | None:
    """Why the run's input iterator cannot go in its checkpoints, or None when it can."""
    if not config.checkpoint_iterator:
        if config.data.get("service_address"):
            return "the tf.data service holds the input position, which a checkpoint cannot save"
        return "config.checkpoint_iterator is False"
    if train_read_in_python:
        return (
            "the train records are read in Python (skip_corrupt or gs://), which tf.data "
            "cannot save"
        )
    if not isinstance(trainer.iterator, tf.__internal__.tracking.Trackable):
        # tf.distribute's multi-device iterators (e.g. MirroredStrategy's) cannot be saved.
        return (
            f"{type(trainer.iterator).__name__} under {type(trainer.strategy).__name__} is not "
            "saveable"
        )
    return None


def error_line(error: BaseException) -> str:
    """The line of ``error`` that says what went wrong, at most 300 characters: its first, or
    for TensorFlow's "Graph execution error:" the message after the graph's traceback."""
    # TensorFlow prefixes op errors with "{{function_node <name>}}": noise to a user.
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(error)).strip().splitlines()
    message = text[0] if text else type(error).__name__
    if message.startswith("Graph execution error"):
        # "...Detected at node X defined at: <traceback>\n<message>\n\t [[{{node X}}]]"
        ends = [i for i, line in enumerate(text) if line.lstrip().startswith("[[")]
        before = [line.strip() for line in text[: ends[0] if ends else len(text)]]
        message = next((line for line in reversed(before) if line), message)
    return message if len(message) <= 300 else message[:300] + "..."


def run_manager(
    config, workdir: str, trainer, techniques, counts, clock, *, train_read_in_python=False
):
    """A manager over everything a resumed run needs (``workdir/checkpoints``: model,
    optimizer, step, meters, clock, every technique's state and, when
    ``config.checkpoint_iterator``, the input iterator), restored from the newest checkpoint.

    ``train_read_in_python``: the train records are read by a Python generator (TFRecords with
    ``skip_corrupt`` or on gs://), which tf.data cannot save: the iterator is left out, saying
    so, as for a distributed iterator that cannot be saved. A resumed run prints the caveats
    of its techniques that cannot promise to end as if never stopped (``warn_resume_caveats``)."""
    objects = dict(
        model=trainer.model,
        optimizer=trainer.optimizer,
        step=trainer.step,
        meters=counts,
        clock=clock,
    )
    for technique in techniques:
        objects.update(technique.checkpointed())
    unsaved = _unsaved_iterator_reason(config, trainer, train_read_in_python)
    if unsaved is None:
        objects["iterator"] = trainer.iterator
    else:
        print(
            f"Not checkpointing the input iterator: {unsaved}; a resumed run restarts the input "
            "stream (model, optimizer, step and meters are still restored).",
            file=sys.stderr,
        )
    manager = make_manager(
        os.path.join(workdir, "checkpoints"),
        max_to_keep=config.max_checkpoints_to_keep,
        **objects,
    )
    # The iterator last: restoring it calls again the dataset functions of the epoch in
    # progress (e.g. pruning's epoch by id), which rebuild it from the techniques' state, so
    # that state must already be the checkpoint's (tf.train.Checkpoint's order is by name).
    state = {name: value for name, value in objects.items() if name != "iterator"}
    first = tf.train.Checkpoint(**state) if "iterator" in objects else None
    restored = restore_latest(manager, first=first)
    if restored:
        print(f"Resumed from {restored} at step {int(trainer.step.numpy())}.", file=sys.stderr)
        warn_resume_caveats(techniques)
    elif _holds_an_earlier_run(workdir):
        print(
            f"Note: {workdir} holds an earlier run's metrics.jsonl or TensorBoard events but no "
            "checkpoint, so this run starts at step 0: its rows replace metrics.jsonl's, and "
            "TensorBoard shows both runs' curves; use a fresh --workdir to keep them apart.",
            file=sys.stderr,
        )
    return manager


def _holds_an_earlier_run(workdir: str) -> bool:
    """Whether ``workdir`` has logs of a run (``metrics.jsonl`` rows, TensorBoard events)."""
    metrics = os.path.join(workdir, "metrics.jsonl")  # trainers.metrics_writer.METRICS_FILENAME
    if tf.io.gfile.exists(metrics) and tf.io.gfile.stat(metrics).length > 0:
        return True
    events = os.path.join(workdir, "tensorboard")
    return tf.io.gfile.isdir(events) and bool(tf.io.gfile.listdir(events))


def warn_resume_caveats(techniques) -> None:
    """Prints, for a resumed run, each technique's ``resume_caveat``: why the run may not end as
    the run never stopped would (pruning decides its epochs as its pipeline reads ahead)."""
    for technique in techniques:
        caveat = getattr(technique, "resume_caveat", None)
        if not caveat:
            continue
        progress = technique.progress()
        if progress is not None and float(progress) >= 1.0:
            continue  # the technique has ended the run: nothing is left to decide differently
        print(f"Warning: {caveat}.", file=sys.stderr)
