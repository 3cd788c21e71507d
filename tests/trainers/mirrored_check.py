"""Run by test_loop.py in a subprocess: Mirrored on 2 logical CPUs equals the default strategy.

Logical devices must be configured before TensorFlow initialises its runtime, which the rest of
the test session has already done, hence a fresh process. Prints one JSON line with the results.
"""

import json
import sys

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402

from echoing import techniques  # noqa: E402
from trainers import loop, models  # noqa: E402

GLOBAL_BATCH, STEPS = 8, 3


def examples():
    return {
        "inputs": tf.random.stateless_normal([32, 40], seed=[1, 2]),
        "label": tf.range(32, dtype=tf.int64) % 4,
        "id": tf.range(32, dtype=tf.int64) + 100,
    }


def train(strategy, initial_weights):
    with strategy.scope():
        model = models.build_model("mnist1d_mlp", (40,), 4)
        model.set_weights(initial_weights)
        optimizer = keras.optimizers.SGD(0.1)
    seen = []
    trainer = loop.Trainer(
        model=model,
        optimizer=optimizer,
        train_dataset_fn=loop.per_replica_batches(
            lambda: (
                tf.data.Dataset.from_tensor_slices(examples())
                .repeat()
                .batch(GLOBAL_BATCH, drop_remainder=True)
            ),
            global_batch_size=GLOBAL_BATCH,
        ),
        eval_dataset_fn=loop.per_replica_batches(
            # 32 examples in batches of 6: the last batch (2 rows) is partial.
            lambda: tf.data.Dataset.from_tensor_slices(examples()).batch(6),
            global_batch_size=6,
        ),
        strategy=strategy,
        techniques=[
            techniques.FeedbackCallback(
                lambda ids, losses, step: seen.append((ids.numpy(), losses.numpy(), step))
            )
        ],
    )
    result = trainer.train(STEPS)
    evaluation = trainer.evaluate()
    return model.get_weights(), result, evaluation, seen


def main():
    keras.utils.set_random_seed(0)
    initial = models.build_model("mnist1d_mlp", (40,), 4).get_weights()
    default = train(tf.distribute.get_strategy(), initial)
    mirrored_strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    mirrored = train(mirrored_strategy, initial)
    unplaced_error = ""
    try:
        loop.Trainer(
            model=models.build_model("mnist1d_mlp", (40,), 4),
            optimizer=keras.optimizers.SGD(0.1),
            train_dataset_fn=lambda context: tf.data.Dataset.range(1),
            strategy=mirrored_strategy,
        )
    except ValueError as error:
        unplaced_error = str(error)
    jit_error = ""
    with mirrored_strategy.scope():
        placed = models.build_model("mnist1d_mlp", (40,), 4)
        placed_optimizer = keras.optimizers.SGD(0.1)
    try:
        loop.Trainer(
            model=placed,
            optimizer=placed_optimizer,
            train_dataset_fn=lambda context: tf.data.Dataset.range(1),
            strategy=mirrored_strategy,
            jit_compile=True,
        )
    except ValueError as error:
        jit_error = str(error)
    print(
        json.dumps(
            {
                "replicas": mirrored_strategy.num_replicas_in_sync,
                "max_weight_difference": max(
                    float(np.max(np.abs(a - b)))
                    for a, b in zip(default[0], mirrored[0], strict=True)
                ),
                "train_loss": [default[1]["train_loss"], mirrored[1]["train_loss"]],
                "evaluation": [default[2], mirrored[2]],
                "feedback_ids": [default[3][0][0].tolist(), mirrored[3][0][0].tolist()],
                "feedback_losses": [default[3][0][1].tolist(), mirrored[3][0][1].tolist()],
                "feedback_steps": [default[3][0][2], mirrored[3][0][2]],
                "unplaced_error": unplaced_error,
                "jit_error": jit_error,
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
