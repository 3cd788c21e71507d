"""Tests for the workdir lock: a second run in a busy workdir is refused, naming the first.

Two runs in one workdir lost and interleaved ``metrics.jsonl`` rows, and a starting run deleted
the other's checkpoint save in progress (issue 33). The lock is an ``fcntl.flock`` on
``workdir/run.lock``: held for the run, released at its end or on an exception, and by the kernel
when its process dies, so a killed run never blocks the next.
"""

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest
import tensorflow as tf

from trainers import checkpointing, experiment, metrics_writer, workdir_lock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A child process that takes the workdir lock as a run does, says so, and holds it until its stdin
# closes (or it is killed).
_HOLDER = """
import sys
from trainers import workdir_lock
with workdir_lock.WorkdirLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()
"""


def _hold_in_child(workdir: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, workdir],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPOSITORY,
        env=dict(os.environ, PYTHONPATH=REPOSITORY),
    )
    line = process.stdout.readline()
    assert line == b"locked\n", process.stderr.read().decode()[-2000:]
    return process


def _free_for_another_open_file(workdir: str) -> bool:
    """Whether a fresh open file description can take the lock now (flock is per description,
    so this conflicts with this process's own lock as with another process's)."""
    fd = os.open(os.path.join(workdir, workdir_lock.LOCK_FILENAME), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # also releases the lock if it was taken
    return True


@pytest.fixture(scope="module")
def busy_workdir(tmp_path_factory):
    """A workdir whose lock a live child process holds, with a previous run's files in it: two
    metrics rows and a checkpoint save in progress (TensorFlow's ``<prefix>_temp`` folder)."""
    workdir = str(tmp_path_factory.mktemp("busy"))
    with metrics_writer.MetricsWriter(workdir) as writer:
        writer.write(10, {"train_loss": 1.0})
        writer.write(20, {"train_loss": 0.5})
    os.makedirs(os.path.join(workdir, "checkpoints", "ckpt-30_temp"))
    process = _hold_in_child(workdir)
    yield workdir, process.pid
    process.stdin.close()
    assert process.wait(timeout=60) == 0


def _run_experiment(workdir, load_config, data_dir):
    config = load_config("mnist1d", "smoke")
    config.data.data_dir = data_dir
    config.progress_bar = False
    experiment.run(config, workdir)


def _open_metrics(workdir, load_config, data_dir):
    metrics_writer.MetricsWriter(workdir, start_step=10)  # a resume at step 10 drops row 20


def _make_checkpoint_manager(workdir, load_config, data_dir):
    checkpointing.make_manager(
        os.path.join(workdir, "checkpoints"), max_to_keep=1, step=tf.Variable(0)
    )


def _run_async_trainer(workdir, load_config, data_dir):
    from trainers.passm import experiment as async_experiment

    async_experiment.train_and_evaluate(load_config("passm", "smoke"), workdir)


@pytest.mark.parametrize(
    "start",
    [_run_experiment, _run_async_trainer, _open_metrics, _make_checkpoint_manager],
    ids=lambda f: f.__name__,
)
def test_a_second_run_is_refused_naming_the_first(busy_workdir, load_config, data_dir, start):
    workdir, pid = busy_workdir
    with pytest.raises(workdir_lock.WorkdirInUseError) as raised:
        start(workdir, load_config, data_dir)
    message = str(raised.value)
    assert f"process {pid} on host {socket.gethostname()}" in message
    assert workdir in message
    assert "wait for it to finish" in message and "another --workdir" in message
    # Nothing of the first run was touched: its rows and its save in progress are still there.
    assert [r["step"] for r in metrics_writer.read_metrics(workdir)] == [10, 20]
    assert os.path.isdir(os.path.join(workdir, "checkpoints", "ckpt-30_temp"))
    assert not _free_for_another_open_file(workdir)


def test_a_lock_on_another_open_file_of_this_process_refuses(tmp_path):
    workdir = str(tmp_path)
    fd = os.open(os.path.join(workdir, workdir_lock.LOCK_FILENAME), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(workdir_lock.WorkdirInUseError, match=r"is in use by another run"):
            metrics_writer.MetricsWriter(workdir)
    finally:
        os.close(fd)
    metrics_writer.MetricsWriter(workdir).close()  # free again


def test_a_killed_run_does_not_block_the_next(tmp_path):
    workdir = str(tmp_path)
    process = _hold_in_child(workdir)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    with workdir_lock.WorkdirLock(workdir):
        with open(os.path.join(workdir, workdir_lock.LOCK_FILENAME)) as file:
            owner = json.load(file)
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        assert not _free_for_another_open_file(workdir)
    assert _free_for_another_open_file(workdir)


def test_a_run_that_raises_releases_the_lock(tmp_path, load_config, data_dir):
    workdir = str(tmp_path)
    config = load_config("mnist1d", "smoke")
    config.data.data_dir = data_dir
    # A bad insertion raises inside the run, after the lock was taken.
    with pytest.raises(TypeError, match="insertions must be"):
        experiment.run(config, workdir, insertions=["not a tuple"])
    assert _free_for_another_open_file(workdir)


def test_released_at_the_end_nested_in_one_thread_refused_in_another(tmp_path):
    workdir = str(tmp_path)
    refused = []

    def start_in_another_thread():
        try:
            workdir_lock.WorkdirLock(workdir).acquire()
        except workdir_lock.WorkdirInUseError as error:
            refused.append(str(error))

    with workdir_lock.WorkdirLock(workdir):
        # The run's own metrics writer takes the lock it already holds.
        with metrics_writer.MetricsWriter(workdir) as writer:
            writer.write(1, {"train_loss": 1.0})
        assert not _free_for_another_open_file(workdir)
        thread = threading.Thread(target=start_in_another_thread)
        thread.start()
        thread.join()
    assert len(refused) == 1 and "another thread of this process" in refused[0]
    assert _free_for_another_open_file(workdir)
    # Released: the lock file no longer names a holder.
    with open(os.path.join(workdir, workdir_lock.LOCK_FILENAME)) as file:
        assert file.read() == ""


def test_a_workdir_in_object_storage_is_not_locked(capsys):
    with workdir_lock.WorkdirLock("gs://bucket/run"):
        pass
    assert "not locked" in capsys.readouterr().err


def test_the_binary_refuses_a_busy_workdir_in_one_line(busy_workdir):
    workdir, pid = busy_workdir
    command = [sys.executable, "-m", "trainers.train", "--config=configs/mnist1d.py:smoke"]
    finished = subprocess.run(
        [*command, f"--workdir={workdir}"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert finished.returncode == 1
    last = finished.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the workdir {workdir} is in use by another run: process {pid}")
