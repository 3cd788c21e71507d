"""Stopped at random points (SIGKILL, SIGTERM, SIGINT) and resumed, a run ends as if never stopped.

Every run here is the training binary in a child process, as a user runs it. The interrupted
run is stopped three times, each a random moment after it wrote a checkpoint newer than the one
it resumed from, and restarted with the same command; its summary and every metrics row (but
the wall-clock timings and the input pipeline's own meters, which include what its buffers
read ahead) must equal those of the run that was never stopped. The random moments come from a
seed printed in every failure message, so a failing sequence can be replayed.
"""

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import tensorflow as tf

from trainers import metrics_writer

NUM_STEPS = 200
# Timings and the pipeline's meters (read-ahead) differ from run to run by nature.
UNCOMPARED = ("wall_time", "train_seconds", "input_wait_seconds", "fresh_examples")
UNCOMPARED += ("emitted_examples", "upstream_seconds_per_step", "downstream_seconds_per_step")
UNCOMPARED += ("upstream_downstream_ratio", "seconds_to_target")


def _command(config_path, workdir, data_dir):
    return [
        sys.executable,
        "-m",
        "trainers.train",
        f"--config={config_path}:echo=2,smoke",
        f"--workdir={workdir}",
        f"--config.num_steps={NUM_STEPS}",
        "--config.checkpoint_every_steps=10",
        "--config.progress_bar=False",
        "--config.timing_steps=0",  # no R measurement at the end: timings are not compared
        f"--config.data.data_dir={data_dir}",
    ]


def _latest_step(workdir):
    latest = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _stop_after_a_new_checkpoint(command, workdir, signum, rng, context):
    """Runs ``command`` until it checkpoints past where it resumed, then sends ``signum``."""
    resumed_at = _latest_step(workdir)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while _latest_step(workdir) <= resumed_at and time.monotonic() < deadline:
            if process.poll() == 0:  # finished before a new checkpoint: nothing to stop
                return 0, process.stderr.read().decode(), NUM_STEPS
            if process.poll() is not None:
                raise AssertionError(f"{context}: the run failed: {process.stderr.read()}")
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.5))  # a random point between two checkpoints
        signalled_at = _latest_step(workdir)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    stopped_at = _latest_step(workdir)
    assert resumed_at < stopped_at <= NUM_STEPS, (context, resumed_at, stopped_at)
    return process.returncode, stderr.decode(), signalled_at


def _comparable(workdir):
    summary = json.loads(pathlib.Path(workdir, "summary.json").read_text())
    rows = metrics_writer.read_metrics(workdir)
    strip = lambda record: {k: v for k, v in record.items() if k not in UNCOMPARED}  # noqa: E731
    return strip(summary), [strip(row) for row in rows]


def test_a_run_stopped_three_times_ends_exactly_as_one_never_stopped(
    tmp_path, data_dir, mnist1d_config_path
):
    seed = random.randrange(2**32)
    rng, context = random.Random(seed), f"replay with seed {seed}"
    whole, stopped = str(tmp_path / "whole"), str(tmp_path / "stopped")
    # The uninterrupted run alongside the stopped one, for time (they share nothing).
    uninterrupted = subprocess.Popen(
        _command(mnist1d_config_path, whole, data_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # Both may generate the data set at once on a fresh data_dir: the loser reads the winner's.
    command = _command(mnist1d_config_path, stopped, data_dir)
    stops = ((signal.SIGKILL, -9, None), (signal.SIGTERM, 143, "Terminated"))
    for signum, status, word in (*stops, (signal.SIGINT, 130, "Interrupted")):
        returncode, stderr, signalled_at = _stop_after_a_new_checkpoint(
            command, stopped, signum, rng, context
        )
        if returncode == 0:
            # Only a signal in the last loop may be too late to stop the run; earlier, a run
            # that finishes has ignored it.
            assert signalled_at >= NUM_STEPS - 20, (context, signum, signalled_at, stderr[-2000:])
            break
        assert returncode == status, (context, signum, stderr[-2000:])
        if word:  # one line says where it stopped and how to resume
            step, checkpoints = _latest_step(stopped), os.path.join(stopped, "checkpoints")
            assert stderr.strip().splitlines()[-1] == (
                f"{word} at step {step}; saved {checkpoints}/ckpt-{step}. Run the same command "
                "to resume."
            ), context
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, (context, finished.stderr[-2000:])
    _, stderr = uninterrupted.communicate(timeout=300)
    assert uninterrupted.returncode == 0, stderr.decode()[-2000:]

    summary, rows = _comparable(stopped)
    expected_summary, expected_rows = _comparable(whole)
    assert summary == expected_summary, context
    # Every step logged once, each row as in the uninterrupted run.
    assert [r["step"] for r in rows] == [r["step"] for r in expected_rows], context
    assert rows == expected_rows, context
