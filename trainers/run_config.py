"""The run config: every field ``trainers.experiment.run`` reads, its default and its checks.

Example::

    from trainers import run_config

    config = run_config.default_config()
    config.data.num_train, config.num_steps, config.warmup_steps = 1_000, 20, 2
    config = run_config.resolve_config(config)  # raises naming any bad key or value

A config's warm-up is chosen for its ``num_steps``; a user who shortens the run without choosing
a warm-up gets one that scales (``scale_warmup``, which the training binary applies unless
``--config.warmup_steps`` is given)::

    config = run_config.default_config()  # warmup_steps=100 for num_steps=600
    config.num_steps = 200
    print(run_config.scale_warmup(config))  # warm-up: ... warming up for 20 steps ...
    config.warmup_steps  # 20

The data section is ``pipelines.default_data_config()``; the fields of each technique (echo's,
AutoEcho's, the Assistant's, pruning's, priority sampling's) are added and checked by its module
in ``echoing.techniques``. Echo's fields were the data section's (``--config.data.echo=2``), and
priority sampling's were named ``pgd``, ``pgd_top_ratio``, ``pgd_renew_ratio`` (now
``priority``, ``priority_top_ratio``, ``priority_renew_ratio``); a config that still sets them
there or by those names is read, with a FutureWarning, for one more release.
"""

from __future__ import annotations

import json

import ml_collections
from ml_collections import config_dict

import pipelines
from echoing import techniques
from echoing._src.priority import technique as priority_technique
from trainers import models, strategies
from trainers.passm import config as passm_config


def default_config() -> ml_collections.ConfigDict:
    """Every field ``run`` reads, at its default (the MNIST-1D CNN baseline)."""
    config = ml_collections.ConfigDict()
    # "sync": this loop (trainers.experiment); "passm": the asynchronous partitioned trainer
    # (trainers.passm, configs/passm.py), which reads its own fields from config.passm.
    config.trainer = "sync"
    config.seed = 0
    config.data = pipelines.default_data_config()
    # None-valued fields become typed placeholders, so `--config.data.data_dir=DIR` and friends
    # can be set from the command line (config_flags cannot override a plain None).
    for key, kind in (("data_dir", str), ("num_classes", int), ("image_size", int)):
        if config.data[key] is None:
            config.data[key] = config_dict.placeholder(kind)
    config.model = "mnist1d_cnn"
    # AdamW with linear warm-up then cosine decay to 0 over num_steps.
    config.learning_rate = 3e-3
    config.weight_decay = 1e-4
    # Linear warm-up steps; the binary shortens one the user did not set that would take a
    # quarter of a shortened run or more (scale_warmup).
    config.warmup_steps = 100
    config.num_steps = 600
    # Train steps per tf.function call (and per progress/feedback update).
    config.steps_per_loop = 100
    config.eval_every_steps = 200
    # > 0: also evaluate after each inner loop in which the fresh examples training has consumed
    # (batch_size / echo factor per step, counted from the start of the process) cross a
    # multiple of this. With a changing echo factor (AutoEcho) steps are no fixed measure of
    # fresh data; this judges runs at the same fresh-data granularity.
    config.eval_every_fresh_examples = 0
    config.checkpoint_every_steps = 200
    config.max_checkpoints_to_keep = 2
    # Save the tf.data iterator's position (and shuffle buffers) in checkpoints, so a resumed
    # run continues the same stream; set False for pipelines tf.data cannot serialise.
    config.checkpoint_iterator = True
    # Accuracy whose first crossing (at an eval) is reported as steps/time/fresh examples;
    # 0 means no target.
    config.target_accuracy = 0.0
    # True ends training at that first crossing (benchmarks of time to target stop there).
    config.stop_at_target = False
    _default_strategy_fields(config)
    # Steps (each side) for the t_up / t_down measurement at the end; 0 skips it.
    config.timing_steps = 30
    config.progress_bar = True
    # Train steps (and batches per timing) of `python -m trainers.train --diagnose`.
    config.diagnose_steps = 300
    techniques.default_config(config)
    config.passm = passm_config.default_section()
    return config


# A warm-up the config chose that takes at least this fraction of the run was chosen for a longer
# run (every config's own takes at most a fifth): it becomes a tenth of the run instead.
MAX_DEFAULT_WARMUP_FRACTION = 0.25


def scale_warmup(config: ml_collections.ConfigDict) -> str | None:
    """Shortens a warm-up the user did not choose to fit a shortened run, in place.

    When ``config.warmup_steps`` is at least a quarter of ``config.num_steps`` (a config's
    warm-up kept for a run made shorter, e.g. ``configs/text_lm.py``'s 200 steps in a 200-step
    run), sets it to a tenth of the run (``num_steps // 10``). A warm-up that takes less is
    kept, so every config's own schedule is unchanged. Call it only for a warm-up the user did
    not set: ``resolve_config`` refuses an explicit one that is not shorter than the run.

    Returns:
      The line that says what changed and how to choose instead, or None if nothing changed.
    """
    warmup, num_steps = config.warmup_steps, config.num_steps
    if not all(
        isinstance(value, int) and not isinstance(value, bool) for value in (warmup, num_steps)
    ):
        return None  # resolve_config names the bad value
    if num_steps < 1 or warmup < MAX_DEFAULT_WARMUP_FRACTION * num_steps:
        return None
    config.warmup_steps = num_steps // 10
    return (
        f"warm-up: the config's warmup_steps={warmup} would take {warmup / num_steps:.0%} of "
        f"the {num_steps}-step run; warming up for {config.warmup_steps} steps instead (a tenth "
        "of the run); --config.warmup_steps=N sets it."
    )


def _default_strategy_fields(config: ml_collections.ConfigDict) -> None:
    # default | mirrored | multi_worker | tpu (python -m trainers.train --strategy=... overrides).
    config.strategy = "default"
    # multi_worker: every worker's host:port, comma-separated, the same in every worker, and this
    # process's index in it; empty takes the cluster from TF_CONFIG (one local worker without).
    config.workers = ""
    config.task_index = 0
    # tpu: "local" on a Cloud TPU VM, a TPU name or grpc://host:port; empty reads TPU_NAME.
    config.tpu = ""
    # XLA-compile every train and eval step; unset means True under "tpu", False otherwise.
    config.jit_compile = config_dict.placeholder(bool)


def resolve_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Checks ``config`` against ``default_config()``: unknown keys and bad values raise.

    The defaults are a locked, type-safe ConfigDict, so ml_collections refuses unknown keys and
    wrongly typed values; the checks here are what types cannot say (ranges, choices,
    combinations). The data section is checked by ``pipelines.resolve_data_config``, technique
    fields by ``echoing.techniques.check_config``.

    Raises:
      TypeError: ``config`` is not a ConfigDict, or a value of the wrong type.
      ValueError: an unknown key or an out-of-range value, naming the key and what is expected.
    """
    if not isinstance(config, ml_collections.ConfigDict):
        raise TypeError(
            f"config must be an ml_collections.ConfigDict, got {type(config).__name__}; start "
            "from trainers.experiment.default_config()."
        )
    given = config.to_dict()
    data = pipelines.resolve_data_config(given.pop("data", {}))
    given.update(_moved_echo_fields(data, given))
    given.update(_renamed_priority_fields(given))
    resolved = pipelines.locked_update(default_config(), given, "config")
    with resolved.unlocked():
        resolved.data = data
    _check_trainer(resolved)
    _check_schedule(resolved)
    _check_strategy(resolved)
    _check_echo_insert(resolved)
    _check_service_checkpoint(resolved)
    techniques.check_config(resolved)
    _check_target(resolved)
    if resolved.model not in models.MODELS:
        raise ValueError(
            f"config model must be one of {sorted(models.MODELS)}, got {resolved.model!r}."
        )
    return resolved


def _check_trainer(config: ml_collections.ConfigDict) -> None:
    if config.trainer not in passm_config.TRAINERS:
        raise ValueError(
            f"config trainer must be one of {passm_config.TRAINERS}, got {config.trainer!r}."
        )
    if config.trainer == "passm":
        raise ValueError(
            "config trainer='passm' trains with the asynchronous partitioned trainer, not this "
            "loop: run it with `python -m trainers.train` (e.g. --config=configs/passm.py), or "
            "trainers.passm.experiment.train_and_evaluate."
        )
    if json.loads(config.passm.to_json()) != json.loads(passm_config.default_section().to_json()):
        raise ValueError(
            "config passm.* fields apply to trainer='passm' (the asynchronous trainer), and this "
            "config trains with trainer='sync'; drop the passm overrides, or run the "
            "asynchronous trainer's config: --config=configs/passm.py."
        )


def _moved_echo_fields(data: ml_collections.ConfigDict, given: dict) -> dict:
    """The echo fields a config still sets in its data section, as run-config fields; the data
    section's are cleared, so that the pipeline does not echo a second time."""
    moved = pipelines.moved_echo_fields(data)
    for key, value in moved.items():
        default = default_config()[key]
        if given.get(key, default) not in (default, value):
            raise ValueError(
                f"config sets echo's {key} twice: data.{key}={value!r} (its old place) and "
                f"{key}={given[key]!r}; keep only --config.{key}."
            )
        data[key] = None
    return moved


def _renamed_priority_fields(given: dict) -> dict:
    """The priority-sampling fields a config still sets by their old names (``pgd*``), as
    run-config fields; the old keys are cleared."""
    renamed = priority_technique.renamed_fields(given)
    for old, (key, _) in priority_technique.RENAMED_KEYS.items():
        if key not in renamed:
            continue
        default = default_config()[key]
        if given.get(key, default) not in (default, renamed[key]):
            raise ValueError(
                f"config sets priority sampling's {key} twice: {old}={renamed[key]!r} (its old "
                f"name) and {key}={given[key]!r}; keep only --config.{key}."
            )
        given[old] = None
    return renamed


def _check_service_checkpoint(config: ml_collections.ConfigDict) -> None:
    """A served pipeline's position lives in the service's job: the first checkpoint that
    tried to save it would fail, steps into the run, naming the disk."""
    if config.data.service_address and config.checkpoint_iterator:
        raise ValueError(
            f"config checkpoint_iterator=True with data.service_address="
            f"{config.data.service_address!r}: the input position lives in the tf.data "
            "service's job, which a checkpoint cannot save; set --config.checkpoint_iterator="
            "False (as configs/data_service.py does): a resumed run then restarts its stream."
        )


def _check_echo_insert(config: ml_collections.ConfigDict) -> None:
    # Checked even with echo off, so that a typo never goes unnoticed.
    if config.echo_insert not in pipelines.TRAIN_INSERTION_POINTS:
        raise ValueError(
            f"config echo_insert={config.echo_insert!r} is not a point of the train pipeline; use "
            f"one of {list(pipelines.TRAIN_INSERTION_POINTS)}, e.g. echo_insert=after_augment."
        )


def _check_schedule(config: ml_collections.ConfigDict) -> None:
    for key in ("num_steps", "steps_per_loop", "eval_every_steps", "checkpoint_every_steps"):
        _check_minimum(key, config[key], 1)
    for key in ("max_checkpoints_to_keep", "diagnose_steps"):
        _check_minimum(key, config[key], 1)
    for key in ("warmup_steps", "timing_steps", "eval_every_fresh_examples", "seed"):
        _check_minimum(key, config[key], 0)
    if config.warmup_steps >= config.num_steps:
        raise ValueError(
            f"config warmup_steps={config.warmup_steps} must be < num_steps={config.num_steps}: "
            f"set --config.warmup_steps below it, e.g. --config.warmup_steps="
            f"{config.num_steps // 10} (a tenth of the run)."
        )
    if not config.learning_rate > 0:
        raise ValueError(f"config learning_rate must be > 0, got {config.learning_rate!r}.")
    if config.weight_decay < 0:
        raise ValueError(f"config weight_decay must be >= 0, got {config.weight_decay!r}.")


def _check_strategy(config: ml_collections.ConfigDict) -> None:
    if config.strategy == "parameter_server":
        raise ValueError(
            "config strategy='parameter_server' runs the asynchronous partitioned trainer, not "
            "this loop: use `python -m trainers.train --strategy=parameter_server "
            "--config=configs/passm.py` (a config with trainer='passm'), or "
            "strategy='multi_worker' for synchronous data parallelism over several workers."
        )
    if config.strategy not in strategies.SYNCHRONOUS:
        raise ValueError(
            f"config strategy must be one of {list(strategies.SYNCHRONOUS)}, got "
            f"{config.strategy!r}."
        )
    if config.jit_compile is None:
        config.jit_compile = config.strategy == "tpu"
    _check_minimum("task_index", config.task_index, 0)


def _check_target(config: ml_collections.ConfigDict) -> None:
    target = config.target_accuracy
    if not 0 <= target <= 1:
        raise ValueError(f"config target_accuracy must be in [0, 1] (0 = none), got {target!r}.")
    if config.stop_at_target and not target:
        raise ValueError(
            "config stop_at_target=True needs a target: set target_accuracy in (0, 1], e.g. 0.9."
        )


def _check_minimum(key: str, value, minimum: int) -> None:
    if value < minimum:
        raise ValueError(f"config {key} must be >= {minimum}, got {value!r}.")
