"""The parts of a run built from its config: techniques, model, optimizer and ``loop.Trainer``.

Example::

    from echoing import meters
    from trainers import build, run_config, strategies

    config = run_config.resolve_config(run_config.default_config())
    strategy = strategies.from_config(config)
    trainer = build.build_trainer(config, strategy, meters.EchoMeters(), workdir="/tmp/run")
    print(build.headline(config, trainer.techniques, "/tmp/run"))

The order matters for seeds: the data is prepared (generated on first use) before the global
seed is set, then the techniques, the model and the optimizer are built from it, so a run that
finds its data cached initialises exactly as one that generated it.
"""

from __future__ import annotations

import os

import keras
import tensorflow as tf

import pipelines
from echoing import techniques as technique_modules
from pipelines import sources
from trainers import inputs, label_maps, loop, models, optimizers, strategies


def build_trainer(
    config,
    strategy,
    counts,
    workdir: str | None,
    extra=(),
    read_stats: list | None = None,
    restores_from: str | None = None,
    trains: bool = True,
) -> loop.Trainer:
    """The run's techniques (the config's, then ``extra``), model, optimizer and ``Trainer``,
    in the order seeds expect; a text run's vocabulary is copied to ``workdir/vocab.txt``,
    beside the model it trains (``workdir=None`` writes nothing: an evaluation's build, which
    also passes ``trains=False``: the techniques then skip their training-schedule warnings).
    ``read_stats`` collects the pipelines' read statistics (see ``inputs.dataset_fns``).

    Raises:
      ValueError: the data's class names or vocabulary differ from the ones saved in the
        workdir whose model will be restored (``restores_from``, default ``workdir``):
        ``trainers.label_maps``."""
    # Shapes and classes for the model, and the data prepared (generated on first use) before
    # seeding: generation draws from the global generators, and a run must initialise its
    # Assistant and model as a run that finds the data cached does. The pipelines that train
    # are built per input pipeline (host/worker) by the dataset functions.
    datasets = inputs.make_datasets(config)
    if (restores_from or workdir) is not None:  # before this run's vocabulary replaces it
        label_maps.check(
            restores_from or workdir,
            class_names=getattr(sources.load(config.data), "class_names", ()),
            vocab_file=datasets.vocab_file,
        )
    if datasets.vocab_file and workdir is not None:
        tf.io.gfile.copy(datasets.vocab_file, os.path.join(workdir, "vocab.txt"), overwrite=True)
    keras.utils.set_random_seed(config.seed)
    # Host state (meters, technique tables and filters) lives outside the strategy scope.
    techniques = technique_modules.from_config(
        technique_context(config, strategy, trains=trains), extra=extra
    )
    with strategy.scope():
        model = models.build_model(config.model, datasets.input_shape, datasets.num_classes)
        optimizer = optimizers.make_optimizer(config, progress=run_progress(techniques))
        for technique in techniques:
            technique.build(model)
    train_dataset_fn, eval_dataset_fn = inputs.dataset_fns(
        config, techniques, counts, read_stats=read_stats
    )
    return loop.Trainer(
        model=model,
        optimizer=optimizer,
        train_dataset_fn=train_dataset_fn,
        eval_dataset_fn=eval_dataset_fn,
        strategy=strategy,
        techniques=techniques,
        jit_compile=config.jit_compile,
    )


def headline(config, techniques, workdir: str) -> str:
    """One line saying what this run trains, on what, for how long, and where it writes."""
    # A TFDS name only where the source reads one (a stray name is warned about, not trained on).
    data = config.data.name if config.data.source in ("tfds", "text") else ""
    data = data or config.data.source
    used = ", ".join(technique.name for technique in techniques if technique.name != "stages")
    return (
        f"Training {config.model} on {data} (batch {config.data.batch_size}) for "
        f"{config.num_steps} steps under the {config.strategy} strategy"
        f"{f' with {used}' if used else ''}; writing to {workdir}"
    )


def run_progress(techniques):
    """The fraction of the run done, for a run a technique measures in its own units (epochs
    for pruning), or None for a run measured in steps."""
    measured = [technique for technique in techniques if technique.progress() is not None]
    if not measured:
        return None
    return lambda: tf.reduce_max([technique.progress() for technique in measured])


def technique_context(config, strategy, *, trains: bool = True) -> technique_modules.Context:
    return technique_modules.Context(
        config=config,
        stage_seed=lambda stage: pipelines.stage_seed(config.seed, stage),
        num_input_pipelines=strategies.num_input_pipelines(strategy),
        examples=lambda: pipelines.examples_by_id(config.data),
        num_examples=lambda: pipelines.num_train_examples(config.data),
        trains=trains,
    )
