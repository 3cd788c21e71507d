"""The config a workdir's run started with: saved then, and named when a resume fails.

Example::

    from trainers import run_config, workdir_config

    config = run_config.default_config()
    workdir_config.changes(config, "/tmp/run")  # []: the first run writes /tmp/run/config.json
    config.data.batch_size = 16
    print(workdir_config.changes(config, "/tmp/run"))  # ['data.batch_size: 128 -> 16']

A resumed run may change some fields (``RESUMABLE``: ``num_steps``, the echo factor, when it
evaluates and saves) and not others (the batch size, a technique's stages: the checkpointed input
iterator no longer fits). TensorFlow's errors for the latter name an iterator's internals;
``explain`` names the fields that changed instead, and never blames a ``RESUMABLE`` one. The
record also holds what the run's data source held (``found.train_examples``, ``found.classes``),
since a checkpoint can hold a value per training example (pruning's tables): a data set grown by
a few images fails the resume with the config unchanged.
"""

from __future__ import annotations

import json
import os

import ml_collections
import tensorflow as tf

from pipelines import sources

FILENAME = "config.json"

# Fields a resumed run may change (docs/training_binary.md): when it ends, its learning-rate
# schedule, when it evaluates, saves and logs. No checkpoint holds them, so none is the cause of
# a checkpoint that does not fit. The last ones are the asynchronous trainer's (trainers.passm).
RESUMABLE = frozenset(
    {
        "num_steps",
        "echo",
        "learning_rate",
        "warmup_steps",
        "steps_per_loop",
        "eval_every_steps",
        "eval_every_fresh_examples",
        "checkpoint_every_steps",
        "max_checkpoints_to_keep",
        "target_accuracy",
        "stop_at_target",
        "timing_steps",
        "progress_bar",
        "diagnose_steps",
        "passm.decay_fractions",
        "passm.decay_factor",
        "passm.assm_warmup_fraction",
        "passm.assm_window_fraction",
        "passm.steps_per_call",
    }
)

# Of those, the ones that change how training goes on (its learning rates): a resume changing
# them is warned about, as one changing the data or the seed is (``resume_warning``).
CHANGES_TRAINING = frozenset(
    {
        "learning_rate",
        "warmup_steps",
        "passm.decay_fractions",
        "passm.decay_factor",
        "passm.assm_warmup_fraction",
        "passm.assm_window_fraction",
    }
)

# Fields no checkpoint holds that change only how the model is evaluated.
EVALUATION_ONLY = frozenset({"data.eval_batch_size"})

# Keys of what the data source held, recorded beside the config's fields.
FOUND = "found."


def changes(config, workdir: str) -> list[str]:
    """The fields ``config`` changes from the one ``workdir``'s run started with, as
    ``"data.batch_size: 32 -> 16"``, and what its data source holds that differs
    (``"found.train_examples: 38 -> 45"``); a workdir without checkpoints records ``config``
    instead (also over the record of a run stopped before its first save) and gives ``[]``, as
    does one written before the record existed. The fields a resume may change are recorded as
    the last resume that trained took them (``trained_on``)."""
    current = _current(config)
    if tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")) is None:
        # Nothing to resume (also a run stopped before its first save): this config starts it.
        _write(current, workdir)
        return []
    saved = _read(workdir)
    return [difference for _, difference in _differing(saved or current, current)]


def trained_on(config, workdir: str, rename=None) -> None:
    """Called once a resumed run has trained a loop with ``config``: the record takes the
    values it changed of the fields a resume may change (``RESUMABLE``), so the next resume
    compares with what this one trained with (its ``num_steps`` note says 20 -> 30, not the
    first run's 10 -> 30); the others stay the first run's, which its warnings and a failed
    resume's message name. ``rename``: ``changes``' list as the run config names the fields
    (the asynchronous trainer's flat view, ``trainers.passm.config``)."""
    saved, current = _read(workdir), _current(config)
    if saved is None:
        return
    for key, difference in _differing(saved, current):
        named = rename([difference])[0] if rename else difference
        if _resumable(named) and key in current:
            saved[key] = current[key]
    _write(saved, workdir)


def _current(config) -> dict:
    return {**flat_fields(json.loads(config.to_json_best_effort())), **_found(config)}


def _differing(saved: dict, current: dict) -> list[tuple[str, str]]:
    """``(key, "key: old -> new")`` for each field ``current`` changes from ``saved``."""
    unset = "(unset)"
    # A record from before the data was recorded says nothing about it.
    keys = set(saved) | {key for key in current if not key.startswith(FOUND) or key in saved}
    return [
        (key, f"{key}: {saved.get(key, unset)!r} -> {current.get(key, unset)!r}")
        for key in sorted(keys)
        if saved.get(key, unset) != current.get(key, unset)
    ]


def _read(workdir: str) -> dict | None:
    """The workdir's record, or None for one written before the record existed."""
    path = os.path.join(workdir, FILENAME)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as file:
        text = file.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path} cannot be read ({error}): it records the config this workdir's run started "
            "with, to check a resume against. Restore it, or delete it to resume unchecked, or "
            "use a fresh --workdir."
        ) from None


def _write(record: dict, workdir: str) -> None:
    tf.io.gfile.makedirs(workdir)
    path = os.path.join(workdir, FILENAME)
    temporary = path + ".unfinished"  # renamed over the record: never half written
    with tf.io.gfile.GFile(temporary, "w") as file:
        file.write(json.dumps(record, indent=1, sort_keys=True))
    tf.io.gfile.rename(temporary, path, overwrite=True)


def explain(differences: list[str], *, evaluating: bool = False) -> str:
    """What ``differences`` (``changes``) say about a resume that failed, or "" when there are
    none: the data and the fields that changed, with the fix; when only ``RESUMABLE`` fields
    changed, that they are not the cause (something the record does not hold changed).
    ``evaluating``: the checkpoint was restored to evaluate (``--eval_only``), not to resume."""
    if not differences:
        return ""
    data, causes = _causes(differences)
    # The fix: resume (or evaluate) with the recorded values, or start a fresh workdir.
    verb, fresh = ("resume", ", or use a fresh --workdir.")
    if evaluating:
        verb, fresh = ("evaluate", " (the config the workdir's run trained with).")
    if not (data or causes):
        return (
            f"The config differs from the one the workdir's run started with ({FILENAME}) only "
            f"in {_listed(differences)}, which a resume may change: what changed is something "
            f"{FILENAME} does not record, such as the data (e.g. images or classes added to its "
            "folder)" + ("." if evaluating else "; a fresh --workdir starts over.")
        )
    if not data:
        return (
            f"This config differs from the one the workdir's run started with ({FILENAME}) in "
            f"{_listed(causes)}: {verb} with those values{fresh}"
        )
    config_too, values = "", ""
    if causes:
        config_too, values = f"; and this config in {_listed(causes)}", " and those values"
    return (
        f"The data differs from what the workdir's run started with ({FILENAME}): "
        f"{_listed(data)}{config_too}: {verb} with that data{values}{fresh}"
    )


def _causes(differences: list[str]) -> tuple[list[str], list[str]]:
    """``differences`` split into what the data holds (``found.*``) and the config fields a
    resume may not change: the changes that can make a checkpoint not fit."""
    data = [d for d in differences if d.startswith(FOUND)]
    causes = [d for d in differences if not d.startswith(FOUND) and not _resumable(d)]
    return data, causes


def failed_resume(reason: str, differences: list[str], *, summary: str | None = None) -> str:
    """The message of a resume that failed with ``reason`` (TensorFlow's words, or the
    checkpoint's): led by the fields or data that changed when ``explain`` names some, since
    they are the cause and ``reason`` only its symptom (e.g. an input iterator that no longer
    fits the pipeline, which TensorFlow calls unreadable), which ``summary`` then states
    without ``reason``'s guesses at other causes."""
    explanation = explain(differences)
    if not any(_causes(differences)):
        return f"{reason} {explanation}".strip()
    return f"{explanation} What failed: {(summary or reason).rstrip('.')}."


def resume_warning(differences: list[str]) -> str | None:
    """For a resume whose checkpoint fit, the warning its ``differences`` (``changes``) call for,
    or None when only ``RESUMABLE`` fields changed: a fitting checkpoint does not make the run
    the same (another data set or seed trains on from the restored model; the input iterator,
    when it no longer fits, restarts), so the result mixes both configs. A changed
    ``num_steps``, which a resume may make (to extend a run), is noted on its own: the
    learning-rate schedule is laid over the new length, so the rate jumps at the restored step."""
    changed = [d for d in differences if not _quiet_on_resume(d)]
    lengths = [d for d in differences if _key(d) == "num_steps"]
    lines = []
    if changed:
        lines.append(
            f"Warning: this resume's config or data differs from what the workdir's run started "
            f"with ({FILENAME}) in {_listed(changed)}. Training goes on with the new values from "
            "the restored step, so the run's result mixes both: resume with the old values to "
            "continue that run, or use a fresh --workdir for this one."
        )
    if lengths:
        lines.append(
            f"Note: this resume changes {lengths[0]}. The learning rate's schedule is laid "
            "over num_steps (it decays towards the run's end), so from the restored step it "
            "follows the new length's: the rate jumps there, and the run is neither the old "
            "length's nor one trained at the new length from the start (a fresh --workdir "
            "trains that)."
        )
    return "\n".join(lines) or None


def evaluation_note(differences: list[str]) -> str | None:
    """For ``--eval_only`` whose checkpoint fit: the config or data changes (``changes``) that
    can move the figures (another eval split or size, data, seed), or None. When the run ends,
    evaluates, saves or logs, and the evaluation batch size, change nothing evaluated."""
    changed = [d for d in differences if not _resumable(d) and _key(d) not in EVALUATION_ONLY]
    if not changed:
        return None
    return (
        f"Note: this config or data differs from what the workdir's run trained with "
        f"({FILENAME}) in {_listed(changed)}: the figures are for this config's evaluation, "
        "not the run's; pass the run's --config to evaluate as it did."
    )


def _key(difference: str) -> str:
    return difference.split(":", 1)[0]


def _resumable(difference: str) -> bool:
    """Whether a resume may make the change ``difference`` ("key: old -> new"): a ``RESUMABLE``
    field's, except echo turned on or off (echo 1 has no echo stage in the input pipeline, whose
    checkpointed iterator then no longer fits; 2 -> 4 changes only the stage's factor)."""
    key, values = difference.split(": ", 1)
    if key != "echo":
        return key in RESUMABLE
    return all(value.strip() not in ("1", "1.0") for value in values.split(" -> "))


def _quiet_on_resume(difference: str) -> bool:
    """Whether a fitting resume may make the change without a warning: when the run ends,
    evaluates, saves and logs, and the echo factor (docs/training_binary.md)."""
    key = difference.split(":", 1)[0]
    return key in EVALUATION_ONLY or (_resumable(difference) and key not in CHANGES_TRAINING)


def _listed(differences: list[str], shown: int = 6) -> str:
    """The first ``shown`` of ``differences``, comma-separated, and how many more there are."""
    more = len(differences) - shown
    return ", ".join(differences[:shown]) + (f" and {more} more" if more > 0 else "")


def _found(config) -> dict[str, int]:
    """What ``config``'s data source holds: ``{"found.train_examples": 38, "found.classes": 2}``
    (no classes for a source without class names); ``{}`` for a config without a data section
    (configs/passm.py's flat view). Inside a run (``sources.loaded_once``) the source is the one
    the run loaded, so nothing is read twice."""
    data = config.get("data") if isinstance(config, ml_collections.ConfigDict) else None
    if not isinstance(data, ml_collections.ConfigDict) or "source" not in data:
        return {}
    source = sources.load(data)
    found = {f"{FOUND}train_examples": int(source.train.num_examples)}
    names = getattr(source, "class_names", ())
    if names:
        found[f"{FOUND}classes"] = len(names)
    return found


def flat_fields(tree: dict, prefix: str = "", *, whole=()) -> dict[str, object]:
    """``{"data.batch_size": 32, ...}``: a config dict's fields by dotted path; a dict under a
    key in ``whole`` is kept as one field."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and key not in whole:
            flat.update(flat_fields(value, f"{prefix}{key}.", whole=whole))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
