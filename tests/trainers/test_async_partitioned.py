"""Tests of the async partitioned trainer: PASSM blocks, counters, momentum, fallback, errors.

Cluster scenarios run once, in a child process (`async_cluster_scenarios.py`), because a
ParameterServerStrategy connects this whole process's eager context to its cluster.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers.passm import experiment as async_experiment
from trainers.passm import parameter_server as async_partitioned
from trainers.passm import schedule as passm_schedule
from trainers.passm import state as async_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_config_module():
    # configs/ is a directory of config files, not a package (like config_flags loads them).
    spec = importlib.util.spec_from_file_location("passm_config", f"{ROOT}/configs/passm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


passm_config = _load_config_module()


@pytest.fixture(scope="module")
def scenarios() -> dict:
    script = os.path.join(os.path.dirname(__file__), "async_cluster_scenarios.py")
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    completed = subprocess.run(
        [sys.executable, script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULTS ")]
    assert completed.returncode == 0 and lines, completed.stderr[-4000:]
    return json.loads(lines[-1][len("RESULTS ") :])


def test_passm_step_updates_exactly_its_block(scenarios):
    single = scenarios["passm_single_steps"]
    blocks = [range(*block) for block in single["blocks"]]
    assert len(blocks) == 2
    for step in single["steps"]:
        # Exactly one block's version moved, and exactly that block's variables changed.
        assert sorted(step["version_deltas"]) == [0, 1]
        block = blocks[step["version_deltas"].index(1)]
        expected = [int(i in block) for i in range(len(step["changed"]))]
        assert step["changed"] == expected


@pytest.mark.parametrize(
    "name, num_steps, assm_steps, passm_steps",
    [
        ("assm", 60, 60, 0),
        ("passm", 60, 0, 60),
        # 25% ASSM warm-up, no decays configured: 50 ASSM steps, then 150 PASSM steps.
        ("passm_plus", 200, 50, 150),
    ],
)
def test_counters_add_up_under_async_writes(scenarios, name, num_steps, assm_steps, passm_steps):
    result = scenarios[name]
    num_blocks = len(result["blocks"])
    assert result["updates_applied"] == num_steps
    assert result["steps_started"] == num_steps
    assert result["completed_steps"] == num_steps
    assert result["retried_steps"] == 0 and result["duplicate_updates"] == 0
    assert result["examples_seen"] == num_steps * result["batch_size"]
    # An ASSM step writes every block; a PASSM step writes one.
    assert sum(result["block_updates"]) == assm_steps * num_blocks + passm_steps
    if passm_steps == 0:
        assert result["block_updates"] == [num_steps] * num_blocks
    for mean, maximum in zip(
        result["block_staleness_mean"], result["block_staleness_max"], strict=True
    ):
        # With 2 workers at most the other worker's in-flight steps can land in between.
        assert 0 <= mean <= maximum <= num_steps


def test_passm_plus_learns_the_toy_problem(scenarios):
    # Three classes from the signs of two features; chance is ~0.33. 200 steps of PASSM+ reach
    # ~0.9 (seed 0); 0.8 leaves room for the scheduling nondeterminism of async updates.
    assert scenarios["passm_plus"]["final_accuracy"] >= 0.8


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_momentum_update_matches_heavy_ball(momentum):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    state = async_state.TrainingState(model, [range(2)], momentum)
    rate = 0.1
    initial = [v.numpy().copy() for v in state.parameters]
    gradients = [
        [np.full(v.shape, 1.0, np.float32) for v in initial],
        [np.full(v.shape, -2.0, np.float32) for v in initial],
    ]
    for step_gradients in gradients:
        state.apply(range(2), [tf.constant(g) for g in step_gradients], tf.constant(rate))
    # u1 = g1; x1 = x0 − η·u1; u2 = m·u1 + g2; x2 = x1 − η·u2.
    for index, start in enumerate(initial):
        u1 = gradients[0][index]
        u2 = momentum * u1 + gradients[1][index]
        expected = start - rate * u1 - rate * u2
        np.testing.assert_allclose(state.parameters[index].numpy(), expected, rtol=1e-6)
        np.testing.assert_allclose(state.momenta[index].numpy(), u2, rtol=1e-6)


def _smoke_config(mode: str):
    config = passm_config.get_config("smoke")
    config.strategy = "default"
    config.passm.mode = mode
    return config


@pytest.mark.parametrize(
    "mode, make_strategy, strategy_name",
    [
        ("passm", tf.distribute.get_strategy, "_DefaultDistributionStrategy"),
        ("passm_plus", tf.distribute.MirroredStrategy, "MirroredStrategy"),
        ("assm", tf.distribute.get_strategy, "_DefaultDistributionStrategy"),
    ],
)
def test_non_ps_strategy_falls_back_to_sync_with_a_message(
    mode, make_strategy, strategy_name, caplog, tmp_path
):
    with caplog.at_level(logging.WARNING):
        result = async_experiment.train_and_evaluate(
            _smoke_config(mode), str(tmp_path), make_strategy()
        )
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert f"mode={mode} needs asynchronous updates" in messages
    assert f"{strategy_name} is synchronous" in messages
    assert "falls back to synchronous SGD" in messages
    assert result["mode"] == "sync" and result["requested_mode"] == mode
    assert result["updates_applied"] == result["completed_steps"] == 16
    assert result["block_staleness_max"] == [0]  # synchronous: nothing lands in between
    assert os.path.exists(tmp_path / "result.json")


def test_sync_mode_logs_no_fallback(caplog, tmp_path):
    with caplog.at_level(logging.WARNING):
        result = async_experiment.train_and_evaluate(
            _smoke_config("sync"), None, tf.distribute.get_strategy()
        )
    assert "falls back" not in " ".join(r.getMessage() for r in caplog.records)
    assert result["mode"] == "sync"


def _config_with(strategy="parameter_server", mode="passm_plus", cluster_spec=""):
    config = passm_config.get_config("smoke")
    config.strategy, config.passm.mode = strategy, mode
    config.passm.cluster_spec = cluster_spec
    return config


def _tiny_model():
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: async_partitioned.AsyncPartitionedTrainer(
                tf.distribute.get_strategy(), _tiny_model
            ),
            TypeError,
            "needs a tf.distribute.ParameterServerStrategy, got _DefaultDistributionStrategy",
        ),
        (
            lambda: async_partitioned.SynchronousTrainer(
                tf.distribute.get_strategy(), _tiny_model, momentum=1.0
            ),
            ValueError,
            r"momentum must be a float in \[0, 1\), got 1.0",
        ),
        (
            lambda: async_partitioned.SynchronousTrainer(
                tf.distribute.get_strategy(), _tiny_model
            ).run(lambda worker: None, [], eval_every=1),
            ValueError,
            "phases is empty",
        ),
        (
            lambda: async_partitioned.SynchronousTrainer(
                tf.distribute.get_strategy(), _tiny_model
            ).run(lambda worker: None, [passm_schedule.Phase(0, 1, "sync", 0.1)], eval_every=0),
            ValueError,
            "eval_every must be a positive int, got 0",
        ),
        (
            lambda: async_experiment.train_and_evaluate(
                _config_with(cluster_spec='{"worker": []}'), None
            ),
            ValueError,
            "needs exactly the jobs worker, ps and chief, got \\['worker'\\]",
        ),
        (
            lambda: async_experiment.train_and_evaluate(_config_with(strategy="tpu_pod"), None),
            ValueError,
            "config.strategy must be one of .*got 'tpu_pod'",
        ),
        (
            lambda: async_experiment.train_and_evaluate(
                _smoke_config("fast"), None, tf.distribute.get_strategy()
            ),
            ValueError,
            "config.passm.mode must be one of .*got 'fast'",
        ),
        (
            lambda: async_experiment.train_and_evaluate(
                _config_with(mode="sync", strategy="parameter_server"), None
            ),
            ValueError,
            "passm.mode='sync' with a ParameterServerStrategy: parameter-server training is",
        ),
        (lambda: passm_config.get_config("big"), ValueError, "variant must be one of"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("variant", ["smoke", "resnet_smoke"])
def test_config_smoke_variants_train(variant, tmp_path):
    config = passm_config.get_config(variant)
    config.strategy, config.passm.mode = "default", "sync"
    result = async_experiment.train_and_evaluate(config, str(tmp_path))
    assert result["completed_steps"] == result["updates_applied"] == config.num_steps
    assert [h["step"] for h in result["history"]] == list(
        range(config.eval_every_steps, config.num_steps + 1, config.eval_every_steps)
    )
    assert 0.0 <= result["final_accuracy"] <= 1.0
    assert (
        json.loads((tmp_path / "result.json").read_text())["final_accuracy"]
        == (result["final_accuracy"])
    )
