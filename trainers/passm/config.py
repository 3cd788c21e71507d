"""The asynchronous trainer's fields in the one run-config schema, and the flat view it reads.

A run config (``trainers.run_config.default_config()``) names its trainer: ``trainer = "sync"``
(the loop of ``trainers.experiment``) or ``"passm"`` (ASSM / PASSM / PASSM+, this package). The
fields both read keep their one place: ``seed``, ``model``, ``learning_rate``, ``num_steps``,
``eval_every_steps``, ``target_accuracy``, ``strategy``, and ``data.num_train``,
``data.num_eval``, ``data.batch_size``; the asynchronous trainer's own are in ``config.passm``::

    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/passm \
        --config.passm.mode=passm --config.passm.num_workers=4 --config.num_steps=200

    from trainers import run_config
    from trainers.passm import config as passm_config

    config = run_config.default_config()
    config.trainer, config.passm.mode = "passm", "assm"
    flat = passm_config.flat_view(config)  # flat.mode == "assm", flat.eval_every == 200

The flat keys of the schema before (``--config.mode``, ``--config.num_workers``, ...) are still
read, with a FutureWarning that names the new key, for one more release: ``configs/passm.py``
keeps them as unset placeholders (``add_legacy_placeholders``) so that the command line parses.
"""

from __future__ import annotations

import warnings

import ml_collections
from ml_collections import config_dict

TRAINERS = ("sync", "passm")

# The flat keys of the schema before -> their place now (and the type of their placeholder).
LEGACY_KEYS = {
    "mode": ("passm.mode", str),
    "num_workers": ("passm.num_workers", int),
    "backend": ("passm.backend", str),
    "cluster_spec": ("passm.cluster_spec", str),
    "momentum": ("passm.momentum", float),
    "decay_fractions": ("passm.decay_fractions", tuple),
    "decay_factor": ("passm.decay_factor", float),
    "assm_warmup_fraction": ("passm.assm_warmup_fraction", float),
    "assm_window_fraction": ("passm.assm_window_fraction", float),
    "steps_per_closure": ("passm.steps_per_call", int),
    "dataset": ("passm.dataset", str),
    "data_seed": ("passm.data_seed", int),
    "eval_every": ("eval_every_steps", int),
    "num_train": ("data.num_train", int),
    "num_eval": ("data.num_eval", int),
    "batch_size": ("data.batch_size", int),
}


# Every flat name the trainer's code reads -> its field in the run config: the schema before's
# keys where they moved, and the fields both trainers share.
_FLAT_PATHS = {
    **{key: path for key, (path, _) in LEGACY_KEYS.items()},
    **{key: key for key in ("strategy", "model", "seed", "num_steps", "learning_rate")},
    "target_accuracy": "target_accuracy",
    "weight_prediction": "passm.weight_prediction",
    "progress_bar": "progress_bar",
}


def default_section() -> ml_collections.ConfigDict:
    """``config.passm``: the asynchronous trainer's own fields, at their defaults."""
    section = ml_collections.ConfigDict()
    section.mode = "passm_plus"  # sync | assm | passm | passm_plus
    section.num_workers = 2
    # auto: shared_memory (threads over one model, this host) unless cluster_spec names a
    # cluster, then parameter_server; or name either.
    section.backend = "auto"
    section.cluster_spec = ""  # JSON {worker, ps, chief}: train on that parameter-server cluster
    section.momentum = 0.9
    section.decay_fractions = (0.5, 0.75)  # learning rate x decay_factor at these run fractions
    section.decay_factor = 0.1
    section.assm_warmup_fraction = 0.25  # PASSM+: full-gradient steps before PASSM starts
    section.assm_window_fraction = 0.1  # PASSM+: full-gradient window around each LR decay
    # Steps per scheduled closure (parameter server) or per compiled call of a worker thread
    # (shared memory): amortises dispatch; fewer balance the end of a phase better.
    section.steps_per_call = 10
    # Shared memory: each worker takes its gradient at its read less its own momentum's next
    # step (weight prediction), not at the read: on by default because with it PASSM+ reaches
    # synchronous accuracy (docs/studies/async_partitioned.md); other backends train without.
    section.weight_prediction = True
    # The generated data set (pipelines.sources.generated): "mnist1d" | "generated_images".
    section.dataset = "mnist1d"
    section.data_seed = 0
    return section


def add_legacy_placeholders(config: ml_collections.ConfigDict) -> None:
    """Unset placeholders for the schema before's flat keys, so ``--config.mode=...`` parses."""
    for key, (_, kind) in LEGACY_KEYS.items():
        config[key] = config_dict.placeholder(kind)


def flat_view(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The flat names the trainer's code reads (``mode``, ``eval_every``, ``num_train``, ...).

    A config of the run-config schema (with a ``passm`` section) is read from its fields, after
    moving any legacy flat key that is set there, with a FutureWarning, and refused when it turns
    a technique on (``check_no_techniques``); a flat config of the schema before is returned as
    it is.
    """
    if "passm" not in config:
        return config
    check_no_techniques(config)
    _warn_unread_fields(config)
    moved = {key: config[key] for key in LEGACY_KEYS if config.get(key) is not None}
    if moved:
        warnings.warn(
            "configs/passm.py's flat keys moved: "
            + ", ".join(f"--config.{key} is now --config.{LEGACY_KEYS[key][0]}" for key in moved)
            + "; the old ones are read for one more release.",
            FutureWarning,
            stacklevel=2,
        )
    flat = {key: moved.get(key, _read(config, path)) for key, path in _FLAT_PATHS.items()}
    _check_mode_reads(flat)
    flat["decay_fractions"] = tuple(flat["decay_fractions"])
    flat["target_accuracy"] = flat["target_accuracy"] or None  # 0.0: no target, as for sync
    return ml_collections.ConfigDict(flat)


# The fields one mode reads: PASSM+'s ASSM phases (the warm-up and the windows at each decay).
_PASSM_PLUS_FIELDS = ("assm_warmup_fraction", "assm_window_fraction")


def _check_mode_reads(flat: dict) -> None:
    """Refuses a PASSM+-only field set away from its default under another mode (it would be
    ignored: ``mode=assm`` has no phases to shape)."""
    if flat["mode"] == "passm_plus":
        return
    defaults = default_section()
    for key in _PASSM_PLUS_FIELDS:
        if flat[key] != defaults[key]:
            raise ValueError(
                f"config passm.{key}={flat[key]!r} shapes PASSM+'s ASSM phases, and "
                f"passm.mode={flat['mode']!r} has none, so it would be ignored; set "
                f"--config.passm.mode=passm_plus, or leave it at its default, {defaults[key]}."
            )


# The run config's technique switches and the value that leaves each off: the asynchronous
# trainer trains without the techniques, so it refuses a config that turns one on (it would
# otherwise train the plain model and say nothing).
TECHNIQUE_SWITCHES = {
    "echo": 1.0,
    "auto_echo_max_factor": 0.0,
    "prune": False,
    "assist": False,
    "priority": False,
    "select_ratio": 1.0,
}


def check_no_techniques(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError when ``config`` (a run config with ``trainer = "passm"``) turns on a
    technique, naming the fields and the fix."""
    on = [
        f"{key}={config[key]!r}"
        for key, off in TECHNIQUE_SWITCHES.items()
        if key in config and config[key] != off
    ]
    # The switches' old places, still read by the synchronous trainer with a FutureWarning.
    old = {"pgd": (config.get("pgd"), False), "data.echo": (config.get("data", {}).get("echo"), 1)}
    on += [f"{key}={value!r}" for key, (value, off) in old.items() if value not in (None, off)]
    if on:
        raise ValueError(
            f"config {', '.join(on)}: the asynchronous trainer (trainer='passm') trains without "
            "echo, pruning, the Assistant and priority sampling or selection, so it would "
            "ignore this. Use the technique with a synchronous config (e.g. "
            "--config=configs/mnist1d.py:echo=2,buffer=1000), or leave it off here."
        )


# Values of fields the trainer does not read that say what it does anyway (it has no warm-up).
_AGREEING = {"warmup_steps": 0}


def unread_fields_set(config: ml_collections.ConfigDict) -> list[str]:
    """The run-config fields ``config`` sets away from their defaults that the asynchronous
    trainer does not read (``weight_decay``, ``data.source``, a technique's options): it would
    train without them. ``configs/passm.py``'s own ``warmup_steps = 0`` agrees with it."""
    from pipelines.config import at_default
    from trainers import run_config, workdir_config

    def fields(tree) -> dict:  # by dotted path, a split's arrays kept whole
        return workdir_config.flat_fields(tree.to_dict(), whole=("train_arrays", "eval_arrays"))

    defaults = fields(run_config.default_config())
    read = {*_FLAT_PATHS.values(), *TECHNIQUE_SWITCHES, "trainer"}  # switches: refused
    unread = []
    for path, value in fields(config).items():
        if path in read or path.startswith("passm.") or path not in defaults:
            continue  # a legacy placeholder is not in the defaults: flat_view reads it
        if not at_default(value, defaults[path]) and _AGREEING.get(path, object()) != value:
            unread.append(path)
    return sorted(unread)


def _warn_unread_fields(config: ml_collections.ConfigDict) -> None:
    """Warns naming ``unread_fields_set``'s fields (a config file's or a Python config's; the
    binary refuses them as flags, ``unread_overrides``)."""
    unread = unread_fields_set(config)
    if unread:
        warnings.warn(
            f"config {', '.join(unread)}: the asynchronous trainer (trainer='passm') does not "
            f"read {'this field' if len(unread) == 1 else 'these fields'}, so it trains without "
            f"{'it' if len(unread) == 1 else 'them'} (its data set is generated, "
            "passm.dataset; docs/async_partitioned.md lists what it reads). Leave "
            f"{'it at its default' if len(unread) == 1 else 'them at their defaults'}, or "
            "train with a synchronous config.",
            UserWarning,
            stacklevel=3,
        )


def as_run_config_names(differences: list[str]) -> list[str]:
    """``workdir_config.changes`` of the flat view (``"num_workers: 2 -> 3"``) with each field
    named where the run config holds it, as the user sets it (``"passm.num_workers: 2 -> 3"``).

    Example::

        as_run_config_names(["eval_every: 100 -> 50"])  # ['eval_every_steps: 100 -> 50']
    """
    named = []
    for difference in differences:
        key, colon, rest = difference.partition(": ")
        named.append(f"{_FLAT_PATHS.get(key, key)}{colon}{rest}")
    return named


def unread_overrides(overrides: dict) -> str | None:
    """The one line for command-line overrides (``--config.KEY``, from ``overrides``) of
    fields the asynchronous trainer does not read, which it would ignore without a word
    (another data source, weight decay, checkpoint cadence); None when it reads them all. A
    synchronous config switched over with ``--config.trainer=passm`` is refused too: its own
    fields (augmentation, warm-up) would be dropped the same way."""
    if "trainer" in overrides:
        return (
            "--config.trainer=passm: the asynchronous trainer reads only some of a config's "
            "fields (its data set is generated: configs/passm.py's passm.dataset), so this "
            "config's others would be ignored; run --config=configs/passm.py with "
            "--config.passm.* and the fields it reads instead."
        )
    twice = [
        key for key, (path, _) in LEGACY_KEYS.items() if key in overrides and path in overrides
    ]
    if twice:
        key, path = twice[0], LEGACY_KEYS[twice[0]][0]
        return (
            f"--config.{key} and --config.{path} both set {path}; keep only --config.{path} "
            f"(--config.{key} is its old name)."
        )
    read = {*_FLAT_PATHS.values(), *LEGACY_KEYS, *TECHNIQUE_SWITCHES, "strategy"}
    unread = sorted(key for key in overrides if key not in read and not key.startswith("passm."))
    if not unread:
        return None
    flags = ", ".join(f"--config.{key}" for key in unread)
    fields = ", ".join(sorted(path for path in set(_FLAT_PATHS.values()) if "." not in path))
    return (
        f"{flags}: the asynchronous trainer (trainer='passm') does not read "
        f"{'this field' if len(unread) == 1 else 'these fields'}, and would train without "
        f"{'it' if len(unread) == 1 else 'them'}. It reads {fields}, data.num_train, "
        "data.num_eval, data.batch_size and config.passm.* (its data set is generated, "
        "passm.dataset); drop the flag, or train with a synchronous config."
    )


def _read(config: ml_collections.ConfigDict, path: str):
    """``config``'s field at a dotted ``path``, e.g. ``"passm.mode"``."""
    for key in path.split("."):
        config = config[key]
    return config


def is_passm(config: ml_collections.ConfigDict) -> bool:
    """Whether ``config`` runs on the asynchronous trainer: ``trainer = "passm"``, or a flat
    config of the schema before (with a ``mode``)."""
    if "trainer" in config:
        return config.trainer == "passm"
    return "mode" in config
