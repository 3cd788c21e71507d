"""Runs the in-process-cluster scenarios of test_async_partitioned.py; prints one JSON dict.

    python tests/trainers/async_cluster_scenarios.py

A separate process because a ParameterServerStrategy connects the whole eager context to its
cluster for the rest of the process; the test session must not inherit that. Inside, one
loopback cluster (2 workers, 1 PS, servers in this process) serves every scenario.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from trainers import local_cluster
from trainers.passm import parameter_server as async_partitioned
from trainers.passm import schedule as passm_schedule

NUM_WORKERS = 2
BATCH_SIZE = 16


def _model_fn() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(3),
        ]
    )


def _toy_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(512, 8)).astype(np.float32)
    labels = ((features[:, 0] > 0).astype(np.int32) + (features[:, 1] > 0)).astype(np.int32)
    return features, labels


def _dataset_fn(worker_index):
    features, labels = _toy_data()
    return (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .repeat()
        .shuffle(512, seed=0)
        .skip(worker_index * 256)
        .batch(BATCH_SIZE, drop_remainder=True)
    )


def _evaluate(model) -> float:
    features, labels = _toy_data(seed=1)
    predictions = np.argmax(model(features, training=False).numpy(), axis=-1)
    return float(np.mean(predictions == labels))


def passm_single_steps(strategy) -> dict:
    """One PASSM step at a time: which block's version moved and which variables changed."""
    trainer = async_partitioned.AsyncPartitionedTrainer(strategy, _model_fn, steps_per_closure=1)
    trainer._start(_dataset_fn)
    steps = []
    for _ in range(6):
        before = [v.numpy().copy() for v in trainer.state.parameters]
        versions_before = [int(v.numpy()) for v in trainer.state.versions]
        trainer._train_chunk("passm", 1, 0.1)
        trainer._finish_chunk()
        after = [v.numpy() for v in trainer.state.parameters]
        versions_after = [int(v.numpy()) for v in trainer.state.versions]
        steps.append(
            {
                "version_deltas": [
                    a - b for a, b in zip(versions_after, versions_before, strict=True)
                ],
                "changed": [
                    int(not np.array_equal(a, b)) for a, b in zip(after, before, strict=True)
                ],
            }
        )
    return {"blocks": [[b.start, b.stop] for b in trainer.blocks], "steps": steps}


def run(strategy, mode: str, num_steps: int, steps_per_closure: int) -> dict:
    trainer = async_partitioned.AsyncPartitionedTrainer(
        strategy, _model_fn, steps_per_closure=steps_per_closure
    )
    phases = passm_schedule.make_schedule(
        mode, num_steps=num_steps, num_workers=NUM_WORKERS, learning_rate=0.05
    )
    result = trainer.run(_dataset_fn, phases, eval_every=num_steps // 2, evaluate=_evaluate)
    result["batch_size"] = BATCH_SIZE
    return result


def main() -> None:
    cluster = local_cluster.start_in_process(NUM_WORKERS)
    strategy = tf.distribute.experimental.ParameterServerStrategy(cluster.resolver)
    results = {
        "passm_single_steps": passm_single_steps(strategy),
        "assm": run(strategy, "assm", 60, 5),
        "passm": run(strategy, "passm", 60, 5),
        "passm_plus": run(strategy, "passm_plus", 200, 10),
    }
    print("RESULTS " + json.dumps(results))


if __name__ == "__main__":
    main()
