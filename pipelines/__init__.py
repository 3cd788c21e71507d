"""Input pipelines built from named stages, with sources and the embedded MNIST-1D default.

Example::

    import pipelines

    config = pipelines.default_data_config()  # MNIST-1D, generated locally on first use
    config.num_train, config.num_eval = 1_000, 200
    datasets = pipelines.make_datasets(config, seed=0)
    for batch in datasets.train.take(1):
        print(batch["inputs"].shape, batch["label"].shape, batch["id"].shape)
"""

from pipelines.config import (
    default_data_config,
    locked_update,
    moved_echo_fields,
    resolve_data_config,
)
from pipelines.datasets import (
    TRAIN_INSERTION_POINTS,
    Datasets,
    checkpointable,
    make_datasets,
    stage_seed,
    with_autotune,
)
from pipelines.examples import examples_by_id, num_train_examples
from pipelines.pipeline import Pipeline, Stage

__all__ = [
    "TRAIN_INSERTION_POINTS",
    "Datasets",
    "Pipeline",
    "Stage",
    "checkpointable",
    "default_data_config",
    "examples_by_id",
    "locked_update",
    "make_datasets",
    "moved_echo_fields",
    "num_train_examples",
    "resolve_data_config",
    "stage_seed",
    "with_autotune",
]
