"""Per-pipeline priority selection under MirroredStrategy on 2 logical CPUs, a pipeline per replica.

Runs in a subprocess (``python this_file``): logical devices must be configured before TensorFlow
initialises, which the rest of the test session has already done.
"""

import pathlib
import subprocess
import sys

import numpy as np

NUM_EXAMPLES, GLOBAL_BATCH, STEPS = 40, 8, 4


def _check():
    import keras
    import tensorflow as tf

    from echoing import PriorityMeter, ShardedPriorityTable, priority_sample

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    x = tf.random.stateless_normal([NUM_EXAMPLES, 6], seed=[0, 0]).numpy()
    source = {"x": x, "y": np.arange(NUM_EXAMPLES) % 3}
    table = ShardedPriorityTable(NUM_EXAMPLES, num_shards=2)  # host state, outside the scope
    # Measured, distinct priorities: every shard's top-k is decided by them from step 0.
    table.update(
        tf.range(NUM_EXAMPLES), np.random.default_rng(0).permutation(NUM_EXAMPLES) + 1.0, 0
    )
    contexts = []

    def dataset_fn(context):
        contexts.append((context.num_input_pipelines, context.input_pipeline_id))
        return priority_sample(
            table, source, batch_size=GLOBAL_BATCH, top_ratio=0.5, renew_ratio=0.5, seed=0,
            input_context=context,
        )  # fmt: skip

    options = tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        # Selection must read the priorities the previous step wrote: no prefetch to device.
        experimental_fetch_to_device=False,
    )
    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn, options))
    assert sorted(contexts) == [(2, 0), (2, 1)], contexts

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
        optimizer = keras.optimizers.SGD(0.5)
        meter = PriorityMeter(table, model.trainable_variables)

    @tf.function
    def step(batch, number):
        def replica_step(batch):
            _, gradients, priorities = meter.losses_gradients_priorities(
                lambda: loss_fn(batch["y"], model(batch["x"], training=True))
            )
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            meter.update(batch["id"], priorities, gradients, number)

        strategy.run(replica_step, args=(batch,))

    for number in range(1, STEPS + 1):
        estimates = [shard.log_estimate(number - 1).numpy() for shard in table.shards]
        measured = [shard.measured_step.numpy().copy() for shard in table.shards]
        batch = next(iterator)
        per_replica = [value.numpy() for value in strategy.experimental_local_results(batch["id"])]
        union = np.concatenate(per_replica)
        assert len(set(union.tolist())) == GLOBAL_BATCH, "no id selected by two pipelines"
        for replica, ids in enumerate(per_replica):
            assert np.all(ids % 2 == replica), ("replica r reads pipeline r's shard", per_replica)
            local = ids // 2
            # The pipeline's selection for step number-1: top 2 of its shard outside renewal.
            renew = [(2 * (number - 1) + j) % 20 for j in range(2)]
            assert local[2:].tolist() == renew
            ranked = [i for i in np.argsort(-estimates[replica]) if i not in renew]
            assert sorted(local[:2].tolist()) == sorted(ranked[:2]), (number, replica, local)
        step(batch, tf.constant(number, tf.int64))
        # Priorities written by the replicas landed in the owning shard, at the local ids.
        for shard_index, shard in enumerate(table.shards):
            local = per_replica[shard_index] // 2
            changed = np.flatnonzero(shard.measured_step.numpy() != measured[shard_index])
            expected = sorted(local.tolist()) if number > 1 else []  # step 1: ḡ = 0 writes none
            assert changed.tolist() == expected, (number, shard_index, changed, local)
            if number > 1:
                assert np.all(shard.measured_step.numpy()[local] == number)
    print("PER_PIPELINE_SELECTION_OK")


def test_mirrored_per_pipeline_selection_and_priorities():
    result = subprocess.run(
        [sys.executable, str(pathlib.Path(__file__).resolve())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "PER_PIPELINE_SELECTION_OK" in result.stdout, result.stderr[-3000:]


if __name__ == "__main__":
    _check()
