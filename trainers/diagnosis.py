"""Is this run input-bound? t_up, t_down, R and the input wait, and where to echo.

Example::

    from trainers import diagnosis, run_config

    config = run_config.default_config()
    config.data.num_train, config.diagnose_steps = 1_000, 20
    result = diagnosis.diagnose(config, "/tmp/diagnose")  # also prints the report
    print(result["ratio"], result["echo_factor"], result["echo_insert"])

R (upstream vs downstream time per step) is measured apart from training: t_up is the time per
batch of the train pipeline alone with echo switched off, t_down the time per train step of a
fresh copy of the model on one cached batch (``timing``). ``trainers.experiment.run`` measures
it at the end of every run (``timing_steps`` steps each side); ``diagnose`` also runs the
echo-free loop to measure the input-wait fraction, and recommends a factor and a point.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import keras
import ml_collections
import tensorflow as tf

import pipelines
from trainers import (
    inputs,
    loop,
    models,
    optimizers,
    run_config,
    strategies,
    timing,
    workdir_lock,
)


def measure_ratio(config, strategy, upstream_stages=()) -> dict[str, float]:
    """``{"upstream": t_up, "downstream": t_down}`` in seconds per step (see module doc).

    ``upstream_stages`` are a user's own input stages (insertions), part of t_up.
    """
    upstream = pipelines.make_datasets(
        config.data, seed=config.seed, insertions=upstream_stages
    ).train
    t_up = timing.seconds_per_batch(upstream, num_batches=config.timing_steps)
    return {"upstream": t_up, "downstream": downstream_seconds(config, strategy)}


def downstream_seconds(config, strategy, num_steps: int | None = None) -> float:
    """Seconds per train step of a fresh model copy on one cached batch (no input cost)."""
    # From a pipeline without techniques or meters: the run's counters never see this batch.
    datasets = inputs.make_datasets(config)
    (seconds,) = _downstream_rounds(config, strategy, datasets, num_steps or config.timing_steps, 1)
    return seconds


def _fresh_trainer(config, datasets, strategy, make_train) -> loop.Trainer:
    with strategy.scope():
        # A fresh model and optimizer, so the measurement never touches the trained weights.
        model = models.build_model(config.model, datasets.input_shape, datasets.num_classes)
        optimizer = optimizers.make_optimizer(config)
    return loop.Trainer(
        model=model,
        optimizer=optimizer,
        train_dataset_fn=loop.per_replica_batches(
            make_train, global_batch_size=config.data.batch_size
        ),
        strategy=strategy,
        jit_compile=config.jit_compile,
    )


# The timings are split into rounds: the spread of R between them is the machine's noise, and a
# verdict whose range straddles the no-echo threshold says so instead of picking a side.
ROUNDS = 3


def diagnose(config: ml_collections.ConfigDict, workdir: str) -> dict[str, object]:
    """Times the input pipeline and the train step; says whether the run is input-bound, by how
    much, and what echo factor and point to try.

    Runs ``config.diagnose_steps`` train steps of a fresh model on the echo-free pipeline (the
    input-wait fraction ``1 - t_down / t_step``), and times, over as many batches in ``ROUNDS``
    rounds, the pipeline alone (t_up), the pipeline without augmentation and the train step on a
    cached batch (t_down). Prints each phase as it starts (stderr) and then the report; nothing
    is checkpointed; the result is written to ``workdir/diagnosis.json``.

    Returns:
      ``{"steps", "upstream_seconds_per_step", "unaugmented_upstream_seconds_per_step",
      "downstream_seconds_per_step", "train_seconds_per_step", "input_wait_fraction", "ratio",
      "ratio_low", "ratio_high", "verdict", "echo_factor", "echo_insert", "augment_fraction"}``
      (see ``timing.recommend_echo``; ``ratio_low``/``ratio_high``: R's range over the rounds;
      ``verdict``: ``input_bound``, ``not_input_bound`` or ``borderline``).
    """
    config = run_config.resolve_config(config)
    if not isinstance(workdir, str) or not workdir:
        raise ValueError(f"workdir must be a non-empty path, got {workdir!r}.")
    workdir_lock.make_workdir(workdir)
    keras.utils.set_random_seed(config.seed)
    strategy = strategies.from_config(config)
    steps = config.diagnose_steps
    per_round = max(1, steps // ROUNDS)
    datasets = inputs.make_datasets(config)
    unaugmented = ml_collections.ConfigDict(config.data.to_dict())
    unaugmented.augment = "none"
    _progress(f"timing the input pipeline alone ({ROUNDS} rounds of {per_round} batches)")
    t_ups = [timing.seconds_per_batch(datasets.train, num_batches=per_round) for _ in range(ROUNDS)]
    _progress("timing it without augmentation")
    t_plain = timing.seconds_per_batch(
        pipelines.make_datasets(unaugmented, seed=config.seed).train, num_batches=steps
    )
    _progress(f"timing the train step on a cached batch ({ROUNDS} rounds of {per_round} steps)")
    t_downs = _downstream_rounds(config, strategy, datasets, per_round, ROUNDS)
    _progress(f"training {steps} steps with the input pipeline, for the input wait")
    trainer = _fresh_trainer(config, datasets, strategy, lambda: datasets.train)
    trainer.train(3)  # traces
    start = time.perf_counter()
    input_wait = trainer.train(steps)["input_wait_seconds"]
    t_step = (time.perf_counter() - start) / steps
    t_up, t_down = sum(t_ups) / ROUNDS, sum(t_downs) / ROUNDS
    ratios = [up / down for up, down in zip(t_ups, t_downs, strict=True)]
    result = {
        "steps": steps,
        "upstream_seconds_per_step": t_up,
        "unaugmented_upstream_seconds_per_step": t_plain,
        "downstream_seconds_per_step": t_down,
        "train_seconds_per_step": t_step,
        # Measured in the loop (time blocked on the iterator), as AutoEcho sees it.
        "input_wait_fraction": min(1.0, input_wait / steps / t_step),
        "ratio_low": min(ratios),
        "ratio_high": max(ratios),
        "verdict": _verdict(min(ratios), max(ratios)),
        **timing.recommend_echo(
            upstream_seconds=t_up,
            downstream_seconds=t_down,
            unaugmented_upstream_seconds=t_plain,
        ),
    }
    return _report(result, config, workdir)


def _report(result: dict[str, object], config, workdir: str) -> dict[str, object]:
    """Adds the shuffle the recommended echo needs, writes ``workdir/diagnosis.json`` and
    prints the report; returns ``result``."""
    result["echo_buffer_size"] = echo_buffer_size(
        result["echo_factor"], result["echo_insert"], config.data.batch_size
    )
    with tf.io.gfile.GFile(os.path.join(workdir, "diagnosis.json"), "w") as file:
        file.write(json.dumps(result, indent=2) + "\n")
    print(format_diagnosis(result))
    return result


def _progress(message: str) -> None:
    print(f"diagnose: {message}...", file=sys.stderr, flush=True)


def _downstream_rounds(config, strategy, datasets, steps: int, rounds: int) -> list[float]:
    """t_down of each round: one fresh model copy (traced once) on one cached batch."""
    cached = timing.cached_batch(datasets.train)
    trainer = _fresh_trainer(config, datasets, strategy, lambda: cached)
    return [timing.seconds_per_step(trainer.train, num_steps=steps) for _ in range(rounds)]


def _verdict(ratio_low: float, ratio_high: float) -> str:
    if ratio_high < timing.NO_ECHO_BELOW_RATIO:
        return "not_input_bound"
    if ratio_low >= timing.NO_ECHO_BELOW_RATIO:
        return "input_bound"
    return "borderline"


def echo_buffer_size(factor: float, insert: str, batch_size: int) -> int:
    """The shuffle buffer that spreads an example's copies over batches: four batches per copy
    (0 after ``batch()``, where whole batches are echoed and nothing needs spreading). Without
    one, a stage before ``batch()`` puts an example's copies in the same batch, and the run warns
    that its echo is worth little."""
    if insert == "after_batch":
        return 0
    return 4 * batch_size * math.ceil(factor)


def format_diagnosis(diagnosis: dict[str, object]) -> str:
    """The human-readable ``--diagnose`` report: the timings, then one verdict line whose advice
    follows from it (an echo factor and point only when the run is input-bound)."""
    spread = (
        f"R = {diagnosis['ratio']:.2f}, {diagnosis['ratio_low']:.2f}-{diagnosis['ratio_high']:.2f}"
    )
    spread += f" over {ROUNDS} rounds"
    verdict = {
        "input_bound": (
            f"verdict: input-bound ({spread}): the step waits for input; recommended: "
            f"echo={diagnosis['echo_factor']:.2f}, insert={diagnosis['echo_insert']} "
            f"(--config.echo={diagnosis['echo_factor']:g} "
            f"--config.echo_insert={diagnosis['echo_insert']}"
            + (
                f" --config.echo_buffer_size={diagnosis['echo_buffer_size']}"
                if diagnosis.get("echo_buffer_size")
                else ""
            )
            + ")"
        ),
        "not_input_bound": (
            f"verdict: not input-bound ({spread}): the input keeps up, so echo would only repeat "
            "data; train without it"
        ),
        "borderline": (
            f"verdict: borderline ({spread}): R moved across {timing.NO_ECHO_BELOW_RATIO} between "
            "rounds (a busy machine?); measure again on a quiet one before echoing"
        ),
    }[diagnosis["verdict"]]
    return "\n".join(
        [
            f"t_up {1e3 * diagnosis['upstream_seconds_per_step']:.2f} ms/batch (without "
            f"augmentation {1e3 * diagnosis['unaugmented_upstream_seconds_per_step']:.2f}; "
            f"augmentation is {100 * diagnosis['augment_fraction']:.0f}% of it), "
            f"t_down {1e3 * diagnosis['downstream_seconds_per_step']:.2f} ms/step: "
            f"R = {diagnosis['ratio']:.2f}",
            f"train step with input {1e3 * diagnosis['train_seconds_per_step']:.2f} ms: input "
            f"wait {100 * diagnosis['input_wait_fraction']:.1f}% of the step "
            f"({diagnosis['steps']} steps)",
            verdict,
        ]
    )
