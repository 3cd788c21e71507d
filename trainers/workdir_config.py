"""The config a workdir's run started with: saved then, and named when a resume fails.

Example::

    from trainers import run_config, workdir_config

    config = run_config.default_config()
    workdir_config.changes(config, "/tmp/run")  # []: the first run writes /tmp/run/config.json
    config.data.batch_size = 16
    print(workdir_config.changes(config, "/tmp/run"))  # ['data.batch_size: 128 -> 16']

A resumed run may change some fields (``num_steps``, the echo factor) and not others (the batch
size, a technique's stages: the checkpointed input iterator no longer fits). TensorFlow's errors
for the latter name an iterator's internals; ``explain`` names the fields that changed instead.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

FILENAME = "config.json"


def changes(config, workdir: str) -> list[str]:
    """The fields ``config`` changes from the one ``workdir``'s run started with, as
    ``"data.batch_size: 32 -> 16"``; a workdir without checkpoints records ``config`` instead
    (and gives ``[]``), as does one written before the record existed."""
    path = os.path.join(workdir, FILENAME)
    current = _flat(json.loads(config.to_json_best_effort()))
    if not tf.io.gfile.exists(path):
        if tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")) is None:
            tf.io.gfile.makedirs(workdir)
            temporary = path + ".unfinished"
            with tf.io.gfile.GFile(temporary, "w") as file:
                file.write(json.dumps(current, indent=1, sort_keys=True))
            tf.io.gfile.rename(temporary, path, overwrite=True)
        return []
    with tf.io.gfile.GFile(path) as file:
        saved = json.loads(file.read())
    unset = "(unset)"
    return [
        f"{key}: {saved.get(key, unset)!r} -> {current.get(key, unset)!r}"
        for key in sorted(set(saved) | set(current))
        if saved.get(key, unset) != current.get(key, unset)
    ]


def explain(differences: list[str]) -> str:
    """One sentence naming ``differences`` (``changes``), or "" when there are none."""
    if not differences:
        return ""
    more = len(differences) - 6
    shown = ", ".join(differences[:6]) + (f" and {more} more" if more > 0 else "")
    return (
        f"This config differs from the one the workdir's run started with ({FILENAME}) in "
        f"{shown}: resume with those values, or use a fresh --workdir."
    )


def _flat(tree: dict, prefix: str = "") -> dict[str, object]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
