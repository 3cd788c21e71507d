"""Fault tests of the async trainer on child-process loopback clusters (one server per process).

A worker killed mid-run: the coordinator reruns its closure on the other worker, the run finishes
and reports the retried steps. The parameter server killed: the binary exits with a clear error
naming the last checkpoint, and rerunning it once the parameter server is restarted (a fresh
process, with none of the old variables) resumes from that checkpoint.

Both tests share one child-process cluster (starting one costs three TensorFlow imports); a
server a test killed is restarted, as a fresh process on its port, before the next test runs.
The parameter-server test comes first: it restarts the server it killed itself (to resume), so
the worker test finds the cluster whole and nothing is restarted for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from trainers import local_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUM_STEPS = 1000
EVAL_EVERY = 500
# Each worker runs one 250-step closure per chunk (~2-3 s here), so a kill 0.5 s after a chunk
# starts always lands inside a closure.
STEPS_PER_CLOSURE = 250


def _start_coordinator(spec: dict, workdir: str, output) -> subprocess.Popen:
    # Output goes to a file: a pipe nobody reads while we wait would fill and stall the child.
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainers.train",
            "--config=configs/passm.py:smoke",
            f"--workdir={workdir}",
            f"--config.passm.cluster_spec={json.dumps(spec)}",
            "--config.passm.mode=assm",
            f"--config.num_steps={NUM_STEPS}",
            f"--config.eval_every_steps={EVAL_EVERY}",
            f"--config.passm.steps_per_call={STEPS_PER_CLOSURE}",
            "--config.passm.decay_fractions=()",
        ],
        cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
        stdout=output,
        stderr=subprocess.STDOUT,
    )


def _read(path: str) -> str:
    with open(path) as file:
        return file.read()


def _said(stderr: str) -> str:
    """The coordinator's own lines (its error, a traceback's last lines): the end of its stderr
    is often only gRPC's lines about the dead server, which hide what the run said."""
    noise = ("GRPC", "grpc_", "This could happen", "Failed to remove function")
    lines = [
        line
        for line in stderr.splitlines()
        if line.strip() and not any(fragment in line for fragment in noise)
    ]
    return "\n".join(lines[-40:])


def _wait_for_first_evaluation(workdir: str, process: subprocess.Popen) -> dict:
    log = os.path.join(workdir, "metrics.jsonl")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert process.poll() is None, f"coordinator exited with {process.returncode}"
        if os.path.exists(log):
            with open(log) as lines:
                first = lines.readline()
            if first.endswith("\n"):
                return json.loads(first)
        time.sleep(0.1)
    raise TimeoutError("no evaluation within 180 s")


def _restart_dead_servers(cluster: local_cluster.ChildProcessCluster) -> None:
    """Starts a fresh server process (``trainers.train --serve``, as ``start_child_processes``
    does) for each server of ``cluster`` that has exited, on its port; waits for them."""
    restarted = []
    for (job, index), process in cluster.processes.items():
        if process.poll() is not None:
            cluster.processes[(job, index)] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainers.train",
                    f"--serve={job}:{index}",
                    f"--cluster_spec={json.dumps(cluster.spec)}",
                ],
                cwd=ROOT,
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            restarted.append((job, index))
    for job, index in restarted:
        local_cluster._wait_for_port(
            cluster.spec[job][index], cluster.processes[(job, index)], timeout=120
        )


@pytest.fixture(scope="module")
def shared_cluster():
    cluster = local_cluster.start_child_processes(num_workers=2)
    yield cluster
    cluster.close()


@pytest.fixture
def cluster(shared_cluster):
    """The module's cluster with every server up (a server an earlier test killed restarted)."""
    _restart_dead_servers(shared_cluster)
    return shared_cluster


def test_parameter_server_killed_gives_clear_error_and_resumable_checkpoint(cluster, tmp_path):
    workdir = str(tmp_path / "run")
    output_path = str(tmp_path / "output.txt")
    with open(output_path, "w") as output:
        coordinator = _start_coordinator(cluster.spec, workdir, output)
        try:
            _wait_for_first_evaluation(workdir, coordinator)
            time.sleep(0.5)
            cluster.kill("ps", 0)
            coordinator.wait(timeout=300)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
    stderr = _read(output_path)
    assert coordinator.returncode == 3, _said(stderr)
    checkpoint = os.path.join(workdir, "checkpoints", f"ckpt-{EVAL_EVERY}")
    assert (
        f"error: a parameter server stopped answering after step {EVAL_EVERY} "
        f"(UnavailableError). Last checkpoint: {checkpoint}. Restart the parameter server"
    ) in stderr
    # What the message says to do: restart the parameter server (with none of its variables),
    # rerun the same command.
    _restart_dead_servers(cluster)
    with open(output_path, "w") as output:
        resumed = _start_coordinator(cluster.spec, workdir, output)
        try:
            resumed.wait(timeout=300)
        finally:
            if resumed.poll() is None:
                resumed.kill()
    assert resumed.returncode == 0, _read(output_path)[-3000:]
    result = json.loads(_read(os.path.join(workdir, "result.json")))
    assert result["start_step"] == EVAL_EVERY
    assert result["completed_steps"] == NUM_STEPS
    # The whole run's history: the evaluation before the loss came back with the checkpoint.
    assert [h["step"] for h in result["history"]] == [EVAL_EVERY, NUM_STEPS]
    assert 0 < result["history"][0]["train_seconds"] < result["train_seconds"]


def test_worker_killed_mid_run_training_continues_and_reports_retries(cluster, tmp_path):
    workdir = str(tmp_path / "run")
    output_path = str(tmp_path / "output.txt")
    with open(output_path, "w") as output:
        coordinator = _start_coordinator(cluster.spec, workdir, output)
        try:
            first = _wait_for_first_evaluation(workdir, coordinator)
            time.sleep(0.5)
            cluster.kill("worker", 1)
            coordinator.wait(timeout=300)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
    assert coordinator.returncode == 0, _read(output_path)[-3000:]
    assert first["step"] == EVAL_EVERY
    result = json.loads(_read(os.path.join(workdir, "result.json")))
    assert result["completed_steps"] == NUM_STEPS
    assert [h["step"] for h in result["history"]] == [500, 1000]
    # The killed worker's closure had started; it ran again on worker 0.
    assert 1 <= result["retried_steps"] <= STEPS_PER_CLOSURE
    assert 0 <= result["duplicate_updates"] <= result["retried_steps"]
    assert result["updates_applied"] == NUM_STEPS + result["duplicate_updates"]
