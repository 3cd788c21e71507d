"""``python -m trainers.train`` as loopback clusters of child processes on 127.0.0.1: two
MultiWorkerMirrored workers, and the parameter-server route (its own in-process cluster)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys

import pytest

from trainers import experiment, local_cluster, metrics_writer

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS, GLOBAL_BATCH = 20, 32  # configs/mnist1d.py:smoke
CHILD_TIMEOUT = 150  # seconds; a healthy run takes ~25 s on 2 loaded cores


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


def test_two_multi_worker_processes_train_together_each_on_its_shard(
    mnist1d_config_path, data_dir, tmp_path
):
    workers = [f"127.0.0.1:{local_cluster.free_port()}" for _ in range(2)]
    workdir = str(tmp_path / "run")
    common = [
        f"--config={mnist1d_config_path}:smoke",
        f"--workdir={workdir}",
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
    # Meanwhile, the same config in this process alone (default strategy) for comparison.
    single = _single_worker_summary(mnist1d_config_path, data_dir, str(tmp_path / "single"))
    _wait_all(children, logs)

    chief = _read_summary(workdir)
    other = _read_summary(os.path.join(workdir, "workers", "worker_1"))
    # Synchronous training: both end at the same step with the same (all-reduced) metrics.
    assert chief["step"] == other["step"] == STEPS
    assert chief["eval_accuracy"] == other["eval_accuracy"]
    assert chief["eval_loss"] == pytest.approx(other["eval_loss"], rel=1e-6)
    chief_records = metrics_writer.read_metrics(workdir)
    other_records = metrics_writer.read_metrics(os.path.join(workdir, "workers", "worker_1"))
    assert [r["train_loss"] for r in chief_records] == pytest.approx(
        [r["train_loss"] for r in other_records], rel=1e-6
    )
    for summary in (chief, other):
        # Each worker reads its own shard and batches 16 rows per step for its replica, so it
        # reads about half of what one process does for the same 20 global steps (the rest of
        # the gap is prefetch and shuffle read-ahead); tolerance ±15 points.
        assert 0.35 <= summary["fresh_examples"] / single["fresh_examples"] <= 0.65
        assert STEPS * GLOBAL_BATCH // 2 <= summary["emitted_examples"] < STEPS * GLOBAL_BATCH
    assert single["emitted_examples"] >= STEPS * GLOBAL_BATCH


def _single_worker_summary(config_path, data_dir, workdir):
    spec = importlib.util.spec_from_file_location("mnist1d_config", config_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("smoke")
    config.data.data_dir = data_dir
    config.progress_bar, config.timing_steps = False, 0
    return experiment.run(config, workdir)


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
