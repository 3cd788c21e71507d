"""Every train pipeline the experiment builds has static batch shapes (what XLA and TPUs need),
per input pipeline and per replica."""

import numpy as np
import pytest
import tensorflow as tf

import pipelines
from echoing import meters, techniques
from trainers import experiment, inputs

# Worker 1 of 2, one replica each: per-replica batches of 32 / 2 rows.
CONTEXT = dict(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)


def _config(load_config, argument, data_dir):
    config = experiment.resolve_config(load_config("mnist1d", argument))
    config.data.data_dir = data_dir
    return config


def _techniques(config):
    """The run's techniques, as ``experiment.run`` builds them for two input pipelines."""
    context = techniques.Context(
        config=config,
        stage_seed=lambda stage: pipelines.stage_seed(config.seed, stage),
        num_input_pipelines=CONTEXT["num_input_pipelines"],
        examples=lambda: pipelines.examples_by_id(config.data),
    )
    return techniques.from_config(context)


@pytest.mark.parametrize(
    "argument",
    [
        "smoke",
        "echo=2,insert=after_augment,smoke",
        "echo=1.5,insert=after_batch,smoke",
        "echo=auto,smoke",
        "assist=1,assist_reweight=1,smoke",
        "priority=1,smoke",
    ],
)
def test_train_batches_have_static_per_replica_shapes(argument, load_config, data_dir):
    config = _config(load_config, argument, data_dir)
    techniques = _techniques(config)
    train_dataset_fn, _ = inputs.dataset_fns(config, techniques, meters.EchoMeters())
    dataset = train_dataset_fn(tf.distribute.InputContext(**CONTEXT))
    per_replica = config.data.batch_size // 2
    specs = dataset.element_spec
    assert {"inputs", "label", "id"} <= set(specs)
    for key, spec in specs.items():
        assert spec.shape.is_fully_defined(), (key, spec.shape)
        assert spec.shape[0] == per_replica, (key, spec.shape)
    batch = next(iter(dataset))
    assert batch["inputs"].shape == (per_replica, 40, 1)
    if config.priority:
        # Priority sampling on worker 1 of 2 selects only from its shard: odd ids.
        assert (batch["id"].numpy() % 2 == 1).all()


@pytest.mark.parametrize(
    ("eval_batch_size", "padding_rows"),
    [
        (200, 0),  # per replica 100: the shard of 100 fills one batch exactly
        (64, 28),  # per replica 32: 100 = 3 x 32 + 4, so 28 padding rows
    ],
)
def test_compiled_eval_batches_are_padded_to_a_static_shape(
    eval_batch_size, padding_rows, load_config, data_dir
):
    config = _config(load_config, "smoke", data_dir)
    config.jit_compile = True
    config.data.eval_batch_size = eval_batch_size
    _, eval_dataset_fn = inputs.dataset_fns(config, _techniques(config), meters.EchoMeters())
    dataset = eval_dataset_fn(tf.distribute.InputContext(**CONTEXT))
    per_replica = eval_batch_size // 2
    for key, spec in dataset.element_spec.items():
        assert spec.shape.is_fully_defined() and spec.shape[0] == per_replica, (key, spec.shape)
    masks = np.concatenate([batch["mask"].numpy() for batch in dataset])
    # This worker's shard of the 200 eval examples is 100 rows, each once, then the padding.
    assert masks.sum() == 100
    assert (masks == 0).sum() == padding_rows
    assert (masks[:100] == 1).all()
