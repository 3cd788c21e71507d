"""``python -m trainers.train`` as loopback clusters of child processes on 127.0.0.1: two
MultiWorkerMirrored workers, and the parameter-server route (its own in-process cluster)."""

import json
import os
import signal
import subprocess
import sys

import pytest
import tensorflow as tf

import pipelines
from echoing._src.priority.table import NEVER_MEASURED
from pipelines import sources
from trainers import experiment, local_cluster, metrics_writer

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS, GLOBAL_BATCH = 20, 32  # configs/mnist1d.py:smoke
CHILD_TIMEOUT = 150  # seconds; a healthy run takes ~25 s on 2 loaded cores


@pytest.fixture(scope="module")
def prepared_data_dir(data_dir, load_config):
    """The smoke MNIST-1D generated once here: two children preparing it at once would race."""
    config = _smoke_config(load_config, data_dir)
    sources.load(pipelines.resolve_data_config(config.data))
    return data_dir


def _smoke_config(load_config, data_dir):
    config = load_config("mnist1d", "smoke")
    config.data.data_dir = data_dir
    config.progress_bar, config.timing_steps = False, 0
    return config


def _start(argv, env, log_path):
    """A child in its own process group (so a failure can kill it and anything it started)."""
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "trainers.train", *argv],
            cwd=REPOSITORY,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_all(children, logs):
    try:
        for child, log in zip(children, logs, strict=True):
            code = child.wait(timeout=CHILD_TIMEOUT)
            if code != 0:
                with open(log) as file:
                    raise AssertionError(f"{log} exited with {code}:\n{file.read()[-4000:]}")
    finally:
        for child in children:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def _read_summary(directory):
    with open(os.path.join(directory, "summary.json")) as file:
        return json.load(file)


def _start_two_workers(config_path, data_dir, tmp_path, config_argument="smoke"):
    """Two workers of one MultiWorkerMirrored run in child processes; returns them and logs."""
    workers = [f"127.0.0.1:{local_cluster.free_port()}" for _ in range(2)]
    common = [
        f"--config={config_path}:{config_argument}",
        f"--workdir={tmp_path / 'run'}",
        "--strategy=multi_worker",
        f"--config.data.data_dir={data_dir}",
        "--config.progress_bar=False",
        "--config.timing_steps=0",
    ]
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    children, logs = [], []
    for index in range(2):
        # Worker 0 by TF_CONFIG, worker 1 by --config.workers/task_index: both routes work.
        if index == 0:
            worker_env = {
                **env,
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}}
                ),
            }
            argv = common
        else:
            worker_env = env
            argv = [*common, f"--config.workers={','.join(workers)}", "--config.task_index=1"]
        logs.append(str(tmp_path / f"worker_{index}.log"))
        children.append(_start(argv, worker_env, logs[-1]))
    return children, logs


def _worker_directories(tmp_path):
    workdir = str(tmp_path / "run")
    return workdir, os.path.join(workdir, "workers", "worker_1")


def _assert_workers_agree(tmp_path):
    """Synchronous training: both end at the same step with the same (all-reduced) metrics."""
    directories = _worker_directories(tmp_path)
    chief, other = (_read_summary(directory) for directory in directories)
    assert chief["step"] == other["step"] == STEPS
    assert chief["eval_accuracy"] == other["eval_accuracy"]
    assert chief["eval_loss"] == pytest.approx(other["eval_loss"], rel=1e-6)
    chief_losses, other_losses = (
        [r["train_loss"] for r in metrics_writer.read_metrics(directory)]
        for directory in directories
    )
    assert chief_losses == pytest.approx(other_losses, rel=1e-6)
    return chief, other


def test_two_multi_worker_processes_train_together_each_on_its_shard(
    mnist1d_config_path, prepared_data_dir, tmp_path, load_config
):
    data_dir = prepared_data_dir
    children, logs = _start_two_workers(mnist1d_config_path, data_dir, tmp_path)
    # Meanwhile, the same config in this process alone (default strategy) for comparison.
    single = _single_worker_summary(load_config, data_dir, str(tmp_path / "single"))
    _wait_all(children, logs)
    chief, other = _assert_workers_agree(tmp_path)
    for summary in (chief, other):
        # Each worker reads its own shard and batches 16 rows per step for its replica: its
        # pipeline reads its 20 x 16 rows plus what its buffers read ahead, which depends on
        # timing (up to 162 rows seen), and stays below the 20 x 32 one process trains on.
        per_worker = STEPS * GLOBAL_BATCH // 2
        assert per_worker <= summary["fresh_examples"] < single["fresh_examples_trained"]
        assert STEPS * GLOBAL_BATCH // 2 <= summary["emitted_examples"] < STEPS * GLOBAL_BATCH
    assert single["emitted_examples"] >= STEPS * GLOBAL_BATCH


def _single_worker_summary(load_config, data_dir, workdir):
    return experiment.run(_smoke_config(load_config, data_dir), workdir)


def test_two_multi_worker_processes_select_priorities_each_from_its_own_shard(
    mnist1d_config_path, prepared_data_dir, tmp_path
):
    children, logs = _start_two_workers(
        mnist1d_config_path, prepared_data_dir, tmp_path, config_argument="priority=1,smoke"
    )
    _wait_all(children, logs)
    _assert_workers_agree(tmp_path)
    for index, directory in enumerate(_worker_directories(tmp_path)):
        summary = _read_summary(directory)
        # 20 steps x 16 rows per worker, plus what the multi-worker iterator reads ahead even
        # with fetch_to_device=False (2 batches measured, so selection may be up to 2 steps
        # stale; a one-process run reads exactly 20 x 32, test_integration_pgd.py).
        per_worker = STEPS * GLOBAL_BATCH // 2
        assert per_worker <= summary["emitted_examples"] <= per_worker + 2 * GLOBAL_BATCH // 2
        reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(f"{directory}/checkpoints"))
        measured = {
            shard: reader.get_tensor(
                f"priority_table/shards/{shard}/measured_step/.ATTRIBUTES/VARIABLE_VALUE"
            )
            for shard in (0, 1)
        }
        # Worker i selected and measured only ids i::2 (its shard); the other shard stays
        # unmeasured in its table. Steps 1..19 measure 16 distinct ids each (step 0: ḡ = 0).
        never = NEVER_MEASURED
        assert (measured[1 - index] == never).all()
        assert (measured[index] != never).sum() >= 16 * (STEPS - 1) * 0.5


def test_parameter_server_strategy_runs_the_partitioned_trainer(tmp_path):
    log = str(tmp_path / "passm.log")
    child = _start(
        [
            f"--config={os.path.join(REPOSITORY, 'configs', 'passm.py')}:smoke",
            f"--workdir={tmp_path}",
            "--strategy=parameter_server",
        ],
        {k: v for k, v in os.environ.items() if k != "TF_CONFIG"},
        log,
    )
    _wait_all([child], [log])
    with open(os.path.join(tmp_path, "result.json")) as file:
        result = json.load(file)
    assert result["strategy"].startswith("ParameterServerStrategy")
    assert result["mode"] == result["requested_mode"] == "passm_plus"
    assert result["num_workers"] == 2
    assert result["completed_steps"] == 16
    # PASSM phases wrote both blocks (one per worker).
    assert all(updates > 0 for updates in result["block_updates"])
