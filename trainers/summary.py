"""The end-of-run summary: what ``trainers.experiment.run`` returns, writes and prints.

Example::

    from trainers import summary

    print(summary.format_summary(result))  # result = experiment.run(config, workdir)
    print(summary.trained_model_line("/tmp/run/model.keras"))
    # trained model: /tmp/run/model.keras (keras.models.load_model), or for a model with
    # custom layers (the language model's): ... (import keras, trainers.models;
    # keras.models.load_model('/tmp/run/model.keras'))
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Iterator, Sequence

import tensorflow as tf

from echoing import meters as echo_meters


def make_summary(
    config,
    step,
    evaluation,
    counts: echo_meters.EchoMeters,
    clock,
    timings,
    fresh_trained,
    read_stats=(),
):
    """The summary dict (see ``trainers.experiment.run``); target/timing entries None if unset.

    ``read_stats`` (``(split, ReadStats)`` pairs, see ``trainers.inputs.dataset_fns``) gives
    ``skipped_corrupt_train``/``_eval``: the distinct corrupt records or images ``skip_corrupt``
    skipped (a record skipped again in a later epoch counts once), ``lost_file_tails_train``/
    ``_eval``: those of them that lost the rest of their file (damage that cannot be framed past,
    whose records cannot be counted), and ``reopened_files``: gs:// reads resumed after a
    retriable error.

    ``trained_examples`` (steps x batch) and ``fresh_examples_trained`` (the fresh examples
    behind them, batch / echo factor per step) are what training consumed, so a run without echo
    has ``echo_ratio`` 1.0 exactly; ``fresh_examples`` and ``emitted_examples`` are the input
    pipeline's meters, which include what its buffers read ahead (and what filters dropped).
    """
    reached = clock.reached()
    result = counts.result()
    trained = step * config.data.batch_size
    return {
        "step": step,
        "eval_accuracy": evaluation["eval_accuracy"],
        "eval_loss": evaluation["eval_loss"],
        # Language models: eval_loss is the mean per-token loss, and exp of it the perplexity.
        "eval_perplexity": (
            math.exp(min(evaluation["eval_loss"], 700.0)) if config.data.source == "text" else None
        ),
        "trained_examples": trained,
        **_technique_counts(config, step),
        "fresh_examples_trained": fresh_trained,
        "echo_ratio": trained / fresh_trained if fresh_trained else None,
        "fresh_examples": result["fresh_examples"],
        "emitted_examples": result["emitted_examples"],
        "train_seconds": float(clock.seconds.numpy()),
        "target_accuracy": config.target_accuracy or None,
        "steps_to_target": int(clock.target_step.numpy()) if reached else None,
        "seconds_to_target": float(clock.target_seconds.numpy()) if reached else None,
        "fresh_examples_to_target": int(clock.target_fresh.numpy()) if reached else None,
        "upstream_seconds_per_step": timings.get("upstream"),
        "downstream_seconds_per_step": timings.get("downstream"),
        "upstream_downstream_ratio": (
            timings["upstream"] / timings["downstream"] if timings else None
        ),
        **_read_report(read_stats),
    }


def _technique_counts(config, step: int) -> dict[str, object]:
    """What in-batch selection used of the batches, and whether the echo ratio is nominal."""
    selecting = config.select_ratio < 1
    return {
        # In-batch selection: the share of each batch the steps' gradients used.
        "select_ratio": config.select_ratio if selecting else None,
        # Fresh examples are counted as rows / the echo factor. That is nominal, and said so,
        # under AutoEcho (an example-level stage applies a new factor hundreds of elements late),
        # at a fractional factor (each example repeats floor(e) or ceil(e) times at random) and
        # with echo and the Assistant's filter, which drops an example's copies one by one.
        "echo_ratio_nominal": bool(
            config.get("auto_echo_max_factor")
            or not float(config.echo).is_integer()
            or (config.get("assist") and config.echo != 1)
        ),
        # The rows the gradients used: the selection's rule, max(1, round(ratio * batch)) per
        # step (on one replica; each replica rounds its share of the batch), not trained * ratio.
        "selected_examples": (
            step * max(1, round(config.select_ratio * config.data.batch_size))
            if selecting
            else None
        ),
    }


def _read_report(read_stats) -> dict[str, int]:
    skipped = {"train": set(), "eval": set()}
    tails = {"train": set(), "eval": set()}
    reopened, counted = 0, set()
    for split, stats in read_stats:
        skipped[split].update((path, index) for path, index, *_ in stats.skipped_records)
        tails[split].update(getattr(stats, "lost_tails", ()))
        if id(stats) not in counted:  # one object can serve several pipelines (image folders)
            counted.add(id(stats))
            reopened += stats.reopened
    return {
        "skipped_corrupt_train": len(skipped["train"]),
        "skipped_corrupt_eval": len(skipped["eval"]),
        # Of those, the skips that lost the rest of a file: records there go uncounted.
        "lost_file_tails_train": len(tails["train"]),
        "lost_file_tails_eval": len(tails["eval"]),
        "reopened_files": reopened,
    }


def _lost_tails(summary: dict[str, object]) -> str:
    """What the skip count leaves out: a skip that lost the rest of a file lost its records."""
    train, evaluation = (summary.get(f"lost_file_tails_{s}", 0) for s in ("train", "eval"))
    if not (train or evaluation):
        return ""
    return (
        f"; {train} train and {evaluation} eval of those lost the rest of their file, whose "
        "records cannot be counted (the run read only the records before the damage)"
    )


def _selected(summary: dict[str, object]) -> str:
    ratio = summary.get("select_ratio")
    if not ratio:
        return ""
    used = summary.get("selected_examples")
    if used is None:  # a summary written before selected_examples was
        used = round(summary["trained_examples"] * ratio)
    return f" (the gradients used {used} of them: select_ratio {ratio:g})"


def format_summary(summary: dict[str, object]) -> str:
    """The human-readable end-of-run report."""
    lines = [
        f"step {summary['step']}: eval accuracy {summary['eval_accuracy']:.4f} "
        f"(loss {summary['eval_loss']:.4f}"
        + (
            f", perplexity {summary['eval_perplexity']:.1f}"
            if summary.get("eval_perplexity") is not None
            else ""
        )
        + f") after {summary['train_seconds']:.1f} s of training",
        f"trained on {summary['trained_examples']} examples{_selected(summary)} behind "
        f"{summary['fresh_examples_trained']} fresh ones (echo ratio {_ratio(summary)}); the input "
        f"pipeline read {summary['fresh_examples']} (with what its buffers read ahead)",
    ]
    if summary["target_accuracy"]:
        if summary["steps_to_target"] is None:
            lines.append(f"target accuracy {summary['target_accuracy']} not reached")
        else:
            lines.append(
                f"target accuracy {summary['target_accuracy']} reached at step "
                f"{summary['steps_to_target']} after {summary['seconds_to_target']:.1f} s and "
                f"{summary['fresh_examples_to_target']} fresh examples"
            )
    if summary.get("skipped_corrupt_train") or summary.get("skipped_corrupt_eval"):
        lines.append(
            f"skip_corrupt: skipped {summary['skipped_corrupt_train']} corrupt train and "
            f"{summary['skipped_corrupt_eval']} eval records or images (each named in the log)"
            + _lost_tails(summary)
        )
    if summary.get("reopened_files"):
        lines.append(f"{summary['reopened_files']} gs:// reads resumed after errors (see the log)")
    if summary["upstream_downstream_ratio"] is not None:
        lines.append(
            f"t_up {1e3 * summary['upstream_seconds_per_step']:.2f} ms/batch (input pipeline "
            f"alone), t_down {1e3 * summary['downstream_seconds_per_step']:.2f} ms/step (cached "
            f"batch): R = {summary['upstream_downstream_ratio']:.2f}"
        )
    return "\n".join(lines)


def _ratio(summary: dict[str, object]) -> str:
    if summary["echo_ratio"] is None:
        return "-"
    if summary.get("echo_ratio_nominal"):
        return (
            f"{summary['echo_ratio']:.2f}, nominal: rows / the echo factor; AutoEcho's stage "
            "takes a new factor late, a fractional factor repeats each example floor(e) or "
            "ceil(e) times at random, and a filter after echo drops copies one by one, so other "
            "counts of fresh examples may lie behind them"
        )
    return f"{summary['echo_ratio']:.2f}"


def trained_model_line(model_path: str, class_names: Sequence[str] = ()) -> str:
    """The summary's line naming the trained model (and an image folder's class names file)
    with how to load it: ``keras.models.load_model``, or, when the model has custom layers,
    the code that loads it in a fresh Python, which imports the modules that register them
    first (``import keras, trainers.models; keras.models.load_model('.../model.keras')``)."""
    modules = custom_modules(model_path)
    how = "keras.models.load_model"
    if modules:
        how = f"import {', '.join(['keras', *modules])}; keras.models.load_model({model_path!r})"
    names = "".join(f", class names: {path}" for path in class_names)
    return f"trained model: {model_path} ({how}){names}"


# Keras finds its own classes (and these packages') by importing their module when it loads.
_KERAS_PACKAGES = frozenset({"keras", "keras_hub", "keras_cv", "keras_nlp", "builtins"})


def custom_modules(model_path: str) -> tuple[str, ...]:
    """The modules of the custom classes in the saved Keras model ``model_path`` (a
    ``.keras`` file), which must be imported before ``keras.models.load_model`` finds them
    (Keras imports only its own); () when there are none or the file cannot be read."""
    try:
        with tf.io.gfile.GFile(model_path, "rb") as file:
            archive = zipfile.ZipFile(io.BytesIO(file.read()))
        config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, tf.errors.OpError):
        return ()
    return tuple(
        sorted(
            {module for module in _modules(config) if module.split(".")[0] not in _KERAS_PACKAGES}
        )
    )


def _modules(node: object) -> Iterator[str]:
    """Every ``"module"`` a Keras config names (each serialized object records its class's)."""
    if isinstance(node, dict):
        if isinstance(node.get("module"), str):
            yield node["module"]
        for value in node.values():
            yield from _modules(value)
    elif isinstance(node, list):
        for value in node:
            yield from _modules(value)
