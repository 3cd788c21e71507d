"""configs/data_service.py against a dispatcher + worker this test starts on localhost."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import echoing
import pipelines
from echoing import meters

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_PATH = os.path.join(REPOSITORY, "configs", "data_service.py")


@pytest.fixture(scope="module")
def dispatcher():
    server = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0)
    )
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=server.target.split("://")[1])
    )
    yield server.target
    worker.stop()
    server.stop()


@pytest.mark.parametrize(("echo", "insert"), [(2, "after_augment"), (3, "after_batch")])
def test_config_echoes_on_the_trainer_side(dispatcher, data_dir, echo, insert, load_config):
    config = load_config("data_service", f"address={dispatcher},echo={echo},insert={insert},smoke")
    assert config.data.service_address == dispatcher
    assert (config.echo, config.echo_insert) == (echo, insert)
    config.data.data_dir = data_dir
    counts = meters.EchoMeters()
    # The echo stage the trainer's echo technique inserts (the service ends right before it).
    stage = (config.echo_insert, "echo", echoing.echo(config.echo))
    datasets = pipelines.make_datasets(config.data, seed=0, meters=counts, insertions=[stage])
    batch_size = config.data.batch_size
    assert datasets.train.element_spec["inputs"].shape == [batch_size, 40, 1]
    batches = list(datasets.train.take(2 * echo).as_numpy_iterator())
    if insert == "after_batch":
        # Whole batches come from the service once and are repeated echo times here.
        for group in (batches[:echo], batches[echo:]):
            for batch in group[1:]:
                tf.nest.map_structure(np.testing.assert_array_equal, group[0], batch)
        assert not np.array_equal(batches[0]["id"], batches[echo]["id"])
    else:
        ids = np.concatenate([batch["id"] for batch in batches]).reshape(-1, echo)
        assert np.all(ids == ids[:, :1])  # each upstream example appears echo times in a row
        assert len(set(ids[:, 0])) == len(ids)
    assert counts.emitted.value() >= 2 * echo * batch_size


def test_training_binary_runs_against_the_service(dispatcher, data_dir, tmp_path):
    workdir = str(tmp_path / "run")
    command = [
        sys.executable,
        "-m",
        "trainers.train",
        f"--config={CONFIG_PATH}:address={dispatcher},smoke",
        f"--workdir={workdir}",
        f"--config.data.data_dir={data_dir}",
        "--config.progress_bar=False",
    ]
    result = subprocess.run(
        command, cwd=REPOSITORY, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(workdir, "summary.json")) as file:
        summary = json.load(file)
    assert summary["step"] == 20
    assert summary["emitted_examples"] >= 20 * 32
    # Counted on arrival from the service (20 steps are too few to see the echo ratio through
    # the read-ahead; test_config_echoes_on_the_trainer_side checks the echo itself).
    assert summary["fresh_examples"] > 0
    assert 0.0 <= summary["eval_accuracy"] <= 1.0
    # A resume restarts the service's input stream, and says so (it printed nothing).
    assert (
        "Not checkpointing the input iterator: the tf.data service holds the input position, "
        "which a checkpoint cannot save; a resumed run restarts the input stream"
    ) in result.stderr
