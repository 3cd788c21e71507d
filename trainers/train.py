"""The training binary: ``python -m trainers.train --config=configs/mnist1d.py --workdir=DIR``.

Example::

    python -m trainers.train --config=configs/mnist1d.py --workdir=/tmp/mnist1d
    python -m trainers.train --config=configs/mnist1d.py:echo=2,insert=before_augment \\
        --workdir=/tmp/mnist1d_echo2
    python -m trainers.train --config=configs/mnist1d.py:smoke --workdir=/tmp/smoke \\
        --config.num_steps=40   # any field can be overridden from the command line
    python -m trainers.train --config=configs/mnist1d.py --workdir=/tmp/diagnose --diagnose
    python -m trainers.train --config=configs/mnist1d.py --workdir=/tmp/mnist1d --eval_only
    python -m trainers.train --config=configs/mnist1d.py --workdir=/tmp/m --strategy=mirrored
    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/passm
        # the asynchronous partitioned trainer (PASSM+): worker threads over one model
    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/passm_ps \\
        --strategy=parameter_server   # the same on a loopback parameter-server cluster
    python -m trainers.train --serve=ps:0 --cluster_spec='{"worker": [...], "ps": [...]}'
        # one server of a parameter-server cluster (its coordinator: --config.passm.cluster_spec)

``--strategy`` (default: the config's ``strategy``) is one of ``default``, ``mirrored``,
``multi_worker`` (``MultiWorkerMirroredStrategy``: start the same command in every worker with
``TF_CONFIG`` set, or with ``--config.workers=HOST:PORT,HOST:PORT --config.task_index=I``;
each worker reads its shard of the data; the chief writes ``--workdir``, the others
``WORKDIR/workers/worker_I``),
``tpu`` (``--config.tpu=local`` on a TPU VM; train and eval steps are XLA-compiled) and
``parameter_server``, which runs ``trainers.passm.experiment`` on a parameter-server cluster
and needs a config with ``trainer = "passm"`` (``configs/passm.py``). A ``configs/passm.py``
config runs the asynchronous trainer without the flag too: on one host on its shared-memory
backend (worker threads over one model, ``trainers.passm``); under a synchronous strategy it
trains synchronously and says so.

The console shows the progress bar (on a terminal), evaluations and the summary;
``--verbose`` brings back TensorFlow's C++ notices, absl INFO lines and TFDS's messages
(``trainers.console``). Re-running with the same ``--workdir`` resumes from its newest
checkpoint; Ctrl-C or SIGTERM save one at the step reached first (exit status 130 / 143).
A value that cannot work (a config field out of range, a train split smaller than one batch, a
workdir without a checkpoint for ``--eval_only``) ends the binary with one line, ``error: ...``
naming the flag to change, and exit status 1 (``--verbose`` shows the traceback too); a mistake
in the command line itself (an unknown flag, a value of the wrong kind, a ``--config`` file that
does not exist) is one line ``error: --FLAG: ...`` with exit status 2 (``parse_flags``). A config's
warm-up that would take a quarter of a run made shorter (``--config.num_steps``) or more becomes
a tenth of the run, in one line, unless ``--config.warmup_steps`` is given
(``trainers.run_config.scale_warmup``). Image folders: the run prints the classes and the images
per class it found.
A finished run leaves ``WORKDIR/model.keras`` (its ``trained model:`` line gives the loading code)
and, for image folders, ``WORKDIR/classes.txt``; ``--eval_only`` evaluates the newest checkpoint on
the config's eval split and prints its accuracy, without training
(``trainers.experiment.evaluate``).
Everything else (progress bar, ``metrics.jsonl``, TensorBoard, checkpoints, the final summary
with R, the closing ``tensorboard --logdir=WORKDIR`` line) is ``trainers.experiment.run``; this
module only holds the flags.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys

from trainers import console, flag_errors

# Before TensorFlow is imported (it reads the level once); flags are not parsed yet.
if "--verbose" not in sys.argv:
    console.quiet_native_logs()
    console.import_tensorflow_quietly()

from absl import app, flags
from ml_collections import config_flags

from trainers import (
    checkpointing,
    experiment,
    interrupts,
    moved_flags,
    one_line_errors,
    run_config,
    strategies,
    workdir_lock,
)
from trainers.passm import config as passm_config
from trainers.summary import trained_model_line

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Config file, e.g. configs/mnist1d.py or configs/mnist1d.py:smoke.",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics.jsonl, TensorBoard and summary.json."
)
_DIAGNOSE = flags.DEFINE_bool(
    "diagnose",
    False,
    "Instead of training: time config.diagnose_steps steps, print R, the input-wait fraction and "
    "the recommended echo factor and insertion point, and write workdir/diagnosis.json.",
)
_EVAL_ONLY = flags.DEFINE_bool(
    "eval_only",
    False,
    "Instead of training: restore the newest checkpoint in --workdir (written by a run of the "
    "same --config) and print its eval accuracy and loss on the config's eval split.",
)
_STRATEGY = flags.DEFINE_string(
    "strategy",
    None,
    f"One of {', '.join(strategies.NAMES)}; overrides config.strategy (see the module doc).",
)


def _check_strategy(name: str | None) -> bool:
    """``--strategy``'s validator; its message names the value given (absl prints it as
    ``flag --strategy=VALUE: MESSAGE``, which ``parse_flags`` turns into one line)."""
    if name is None or name in strategies.NAMES:
        return True
    raise flags.ValidationError(
        f"{name!r} is not a strategy; use one of {', '.join(strategies.NAMES)}, "
        "e.g. --strategy=mirrored"
    )


flags.register_validator("strategy", _check_strategy)
_SERVE = flags.DEFINE_string(
    "serve",
    None,
    "Instead of training: run task JOB:INDEX (worker:0, ps:0, ...) of --cluster_spec as a "
    "tf.distribute server until killed; what every worker and parameter server of a "
    "parameter-server cluster runs (the coordinator runs --config=configs/passm.py with "
    "--config.passm.cluster_spec).",
)
_VERBOSE = flags.DEFINE_bool(
    "verbose",
    False,
    "Show TensorFlow's C++ log lines, absl INFO records and TFDS's messages and progress bars, "
    "and the traceback of an error.",
)
_CLUSTER_SPEC = flags.DEFINE_string(
    "cluster_spec", None, 'With --serve: the cluster, JSON {"worker": [...], "ps": [...], ...}.'
)


def main(argv: list[str]) -> None:
    """The binary; a usage error (a flag missing or one that cannot go with the others) ends it
    with one line, ``error: ...``, and exit status 2, instead of absl's whole usage text, and
    Ctrl-C outside training (``--eval_only``, ``--diagnose``, set-up) with one line and 130."""
    try:
        _main(argv)
    except app.UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        # Outside training (set-up, --eval_only, --diagnose): training's own stops say what
        # they saved (RunInterrupted) and exit inside.
        print(
            "Interrupted before the run saved anything new; run the same command again.",
            file=sys.stderr,
        )
        sys.exit(128 + signal.SIGINT)


def _main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}; use --config and --workdir.")
    # Checked here, not by a flags validator, whose message would print the whole config.
    if _SERVE.value is None and (_CONFIG.value is None or _WORKDIR.value is None):
        missing = [name for name in ("config", "workdir") if flags.FLAGS[name].value is None]
        raise app.UsageError(
            f"--{' and --'.join(missing)} {'is' if len(missing) == 1 else 'are'} required "
            "(unless --serve runs a cluster server), e.g. --config=configs/mnist1d.py "
            "--workdir=/tmp/mnist1d."
        )
    if not _VERBOSE.value:
        console.quiet_python_logs()
    if _SERVE.value is not None:
        with one_line_errors.reported(verbose=_VERBOSE.value):
            _serve(_SERVE.value, _CLUSTER_SPEC.value)
        return
    config = _CONFIG.value
    if _STRATEGY.value is not None:
        config.strategy = _STRATEGY.value
    if _EVAL_ONLY.value and _DIAGNOSE.value:
        raise app.UsageError("--eval_only and --diagnose each replace training: pass one.")
    if passm_config.is_passm(config):
        # configs/passm.py and the like (trainer = "passm"): the asynchronous trainer.
        conflict = flag_errors.not_for_passm(diagnose=_DIAGNOSE.value, eval_only=_EVAL_ONLY.value)
        conflict = conflict or passm_config.unread_overrides(_overrides())
        if conflict:
            raise app.UsageError(conflict)
        with one_line_errors.reported(verbose=_VERBOSE.value):
            _run_partitioned(config, _WORKDIR.value, strategy_flag=_STRATEGY.value)
    elif config.strategy == "parameter_server":
        raise app.UsageError(
            "--strategy=parameter_server runs the asynchronous partitioned trainer, which needs "
            "a config with trainer='passm' (its passm.mode: assm | passm | passm_plus), e.g. "
            "--config=configs/passm.py; "
            "this config trains with the synchronous loop: use --strategy=default, mirrored, "
            "multi_worker or tpu."
        )
    else:
        _move_echo_flags(config)
        _rename_priority_flags(config)
        unused = flag_errors.echo_insert_without_echo(config, sys.argv, _overrides())
        unused = unused or flag_errors.unread_data_flags(config.data, _overrides())
        unused = unused or flag_errors.options_without_technique(config, sys.argv, _overrides())
        if unused:
            raise app.UsageError(unused)
        _drop_fields_of_the_replaced_source(config)
        _scale_default_warmup(config, quiet=_EVAL_ONLY.value)
        with one_line_errors.reported(verbose=_VERBOSE.value):
            if _DIAGNOSE.value:
                experiment.diagnose(config, _WORKDIR.value)
            elif _EVAL_ONLY.value:
                print(experiment.format_evaluation(experiment.evaluate(config, _WORKDIR.value)))
            else:
                _run_resumably(config, _WORKDIR.value)


def _move_echo_flags(config) -> None:
    """``moved_flags.move_echo_flags`` with this command line's ``--config.*`` overrides."""
    moved_flags.move_echo_flags(config, _overrides())


def _rename_priority_flags(config) -> None:
    """``moved_flags.rename_priority_flags`` with this command line's overrides."""
    moved_flags.rename_priority_flags(config, _overrides())


def _overrides() -> dict:
    return config_flags.get_override_values(flags.FLAGS[_CONFIG.name])


def _drop_fields_of_the_replaced_source(config) -> None:
    """With ``--config.data.source`` given, the config file's fields for the source it replaced
    (configs/image_folder.py's photo-set sizes under ``--config.data.source=tfrecord``) go back
    to their defaults: the user switched them off with the source, so they are not warned about
    (``source_fields.warn_set_for_other_sources``), as a file's own stray field is."""
    from pipelines import config as data_config
    from pipelines import source_fields

    if "data.source" not in _overrides():
        return
    defaults = data_config.default_data_config()
    for key in source_fields.set_for_other_sources(config.data):
        config.data[key] = defaults[key]


def _scale_default_warmup(config, *, quiet: bool) -> None:
    """Unless ``--config.warmup_steps`` is given, a config's warm-up that would take a quarter
    of the run or more (the run was shortened) becomes a tenth of it, in one line on stderr
    (``run_config.scale_warmup``); an explicit one is checked by ``resolve_config``."""
    if "warmup_steps" in config_flags.get_override_values(flags.FLAGS[_CONFIG.name]):
        return
    note = run_config.scale_warmup(config)
    if note and not quiet:
        print(note, file=sys.stderr)


# A run of either trainer that fails so ends with one line and exit status 1: what failed and
# what is intact, which run holds the workdir, or why the loss diverged (their messages say).
_RUN_FAILURES = (
    checkpointing.CheckpointSaveError,
    workdir_lock.WorkdirInUseError,
    experiment.TrainingDiverged,
)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt so the run saves a checkpoint as for Ctrl-C."""


def _exit_interrupted(interrupted) -> None:
    """One line on what was saved, and exit status 130 (Ctrl-C) or 143 (SIGTERM)."""
    terminated = isinstance(interrupted.__cause__, _Terminated)
    again = "resume" if interrupted.checkpoint else "start the run again (nothing to resume)"
    print(
        f"{'Terminated' if terminated else 'Interrupted'} at step {interrupted.step}; "
        f"{interrupted.saved()}. Run the same command to {again}.",
        file=sys.stderr,
    )
    sys.exit(128 + (signal.SIGTERM if terminated else signal.SIGINT))


def _run_resumably(config, workdir: str) -> None:
    """``experiment.run``; Ctrl-C or SIGTERM end the current inner loop, save a checkpoint and
    exit 130 / 143 with one line (``trainers.interrupts``; a second signal stops at once)."""
    signals = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: _Terminated}
    try:
        with interrupts.stop_at_loop_end(signals):
            experiment.run(config, workdir)
    except experiment.RunInterrupted as interrupted:
        _exit_interrupted(interrupted)
    except _RUN_FAILURES as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)


def _serve(task: str, cluster_spec: str | None) -> None:
    """``--serve=JOB:INDEX``: one server of a cluster (``trainers.local_cluster.serve``)."""
    from trainers import local_cluster

    local_cluster.serve(*flag_errors.parse_serve(task, cluster_spec))


def _run_partitioned(config, workdir: str, *, strategy_flag: str | None = None) -> None:
    """``trainers.passm.experiment`` on the config's backend; prints the result's summary.

    One host (no ``cluster_spec``): the shared-memory backend, c worker threads over one model;
    ``--strategy=parameter_server`` (or ``--config.passm.backend=parameter_server``) runs a loopback
    parameter-server cluster instead. Under a synchronous strategy the asynchronous modes fall
    back to synchronous SGD with a logged warning (``passm.experiment.train_and_evaluate``).
    Ctrl-C or SIGTERM save a checkpoint at the end of the current evaluation interval (exit
    status 130 / 143), as for the synchronous loop; the same command resumes. A diverged loss, a
    workdir in use or a checkpoint that cannot be saved ends it with one line, exit status 1.
    """
    from trainers.passm import experiment as async_experiment
    from trainers.passm import phased

    config = passm_config.flat_view(config)

    if strategy_flag == "parameter_server" and config.get("backend", "auto") == "auto":
        config.backend = "parameter_server"  # asked for by name: the cluster, not threads
    strategy = None
    if config.strategy != "parameter_server" and config.get("backend") != "shared_memory":
        strategy = strategies.make_strategy(config.strategy)
    signals = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: _Terminated}
    try:
        with interrupts.stop_at_loop_end(signals):
            result = async_experiment.train_and_evaluate(config, workdir, strategy=strategy)
    except phased.ParameterServerLostError as error:
        # One clear line instead of a gRPC traceback; exit status 3 tells scripts to resume.
        print(f"error: {error}", file=sys.stderr)
        sys.exit(3)
    except _RUN_FAILURES as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    except experiment.RunInterrupted as interrupted:
        _exit_interrupted(interrupted)
    summary = {k: v for k, v in result.items() if k not in ("history", "phases")}
    print(json.dumps(summary, indent=1))
    if result.get("final_accuracy") is not None:
        print(
            f"step {result['completed_steps']}: eval accuracy {result['final_accuracy']:.4f} "
            f"({result['mode']}, {result['train_seconds']:.2f} s training)"
        )
    if "model_path" in result:
        print(trained_model_line(result["model_path"]))
        print(f"tensorboard --logdir={shlex.quote(workdir)}")


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing; a mistake in the command line (a config file that does not exist,
    an unknown flag, a value that is not of its flag's kind or that a validator refuses, a
    config key that does not exist, a config argument the config file refuses) ends the binary
    with one line, ``error: --FLAG: what was wrong; how to fix``, and exit status 2, instead of
    absl's or ml_collections' traceback (``flag_errors.flag_mistake``)."""
    mistake = flag_errors.missing_config_file(argv)
    if mistake is None:
        try:
            return flags.FLAGS(argv)
        except (flags.Error, AttributeError, KeyError) as error:
            mistake = flag_errors.flag_mistake(error, argv)
            if mistake is None:
                raise
    print(f"error: {mistake}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
