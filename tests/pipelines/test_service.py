"""make_datasets with service_address: upstream on a tf.data service worker, echo after it."""

import logging
import re
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import echoing
import pipelines
from echoing import meters
from pipelines import service


@pytest.fixture(scope="module")
def dispatcher():
    """An in-process dispatcher and one worker reached at localhost, free ports."""
    server, worker = service.start_local_servers()
    assert server.target.startswith("grpc://localhost:")
    yield server.target
    worker.stop()
    server.stop()


PROC_NET = pytest.mark.skipif(not Path("/proc/net/tcp6").exists(), reason="reads /proc/net")


@PROC_NET
@pytest.mark.parametrize(
    ("family", "host", "shown"),
    [
        (socket.AF_INET, "127.0.0.1", {"127.0.0.1"}),
        (socket.AF_INET, "0.0.0.0", {"0.0.0.0"}),
        (socket.AF_INET6, "::1", {"::1"}),
        (socket.AF_INET6, "::", {"::"}),
    ],
)
def test_listening_hosts_tells_loopback_from_every_interface(family, host, shown, listening_hosts):
    with socket.socket(family) as listener:
        listener.bind((host, 0))
        listener.listen()
        assert listening_hosts(listener.getsockname()[1]) == shown


@PROC_NET
def test_local_servers_say_truthfully_that_they_listen_on_every_interface(caplog, listening_hosts):
    with caplog.at_level(logging.WARNING):
        server, worker = service.start_local_servers()
    try:
        warnings = [r.getMessage() for r in caplog.records if "tf.data service" in r.getMessage()]
        assert len(warnings) == 1
        assert "listen on ALL interfaces (0.0.0.0 and [::])" in warnings[0]
        assert "no option to bind them to 127.0.0.1" in warnings[0]
        ports = [
            int(p) for p in re.findall(r"dispatcher port (\d+), worker port (\d+)", warnings[0])[0]
        ]
        assert ports[0] == int(server.target.rpartition(":")[2])
        # What the line claims is what the kernel shows: the wildcard address, not 127.0.0.1.
        # Should TensorFlow ever bind loopback only, this fails: then fix the docs and the log.
        for port in ports:
            assert listening_hosts(port) and listening_hosts(port) <= {"0.0.0.0", "::"}
        values = [int(x) for x in tf.data.Dataset.range(3).apply(service.distribute(server.target))]
        assert values == [0, 1, 2]
    finally:
        worker.stop()
        server.stop()


def _rows(dataset, count):
    """The first ``count`` rows of a batched dataset, as numpy, in order."""
    ids, inputs = [], []
    for batch in dataset.as_numpy_iterator():
        ids.extend(batch["id"])
        inputs.extend(batch["inputs"])
        if len(ids) >= count:
            break
    return np.array(ids[:count]), np.array(inputs[:count])


@pytest.mark.parametrize(
    ("echo", "echo_insert", "echoes_identical"),
    [
        (2, "after_augment", True),  # example echo of augmented examples
        (3, "before_augment", False),  # raw examples echoed, then augmented on the trainer side
    ],
)
def test_example_echo_after_the_service(
    tiny_config, tiny_sizes, dispatcher, echo_at, echo, echo_insert, echoes_identical
):
    num_train, _ = tiny_sizes
    config = tiny_config(service_address=dispatcher)
    insertions = echo_at(echo_insert, float(echo))
    datasets = pipelines.make_datasets(config, seed=0, insertions=insertions)
    # The service ends right before the first inserted stage.
    assert datasets.train_pipeline.inserted[:2] == ((echo_insert, "service"), (echo_insert, "echo"))
    # Shuffle precedes repeat upstream: the first echo * num_train rows are one epoch, echoed.
    ids, inputs = _rows(datasets.train, echo * num_train)
    grouped = ids.reshape(num_train, echo)
    assert np.all(grouped == grouped[:, :1])  # no buffer_size: echoes are adjacent
    assert sorted(grouped[:, 0]) == list(range(num_train))  # each example exactly echo times
    inputs = inputs.reshape(num_train, echo, *inputs.shape[1:])
    same = [np.array_equal(group[0], group[1]) for group in inputs]
    assert all(same) if echoes_identical else not any(same)


def test_batch_echo_after_the_service(tiny_config, dispatcher, echo_at):
    config = tiny_config(service_address=dispatcher)
    datasets = pipelines.make_datasets(config, seed=0, insertions=echo_at("after_batch", 2.0))
    batches = list(datasets.train.take(4).as_numpy_iterator())
    tf.nest.map_structure(np.testing.assert_array_equal, batches[0], batches[1])
    tf.nest.map_structure(np.testing.assert_array_equal, batches[2], batches[3])
    assert not np.array_equal(batches[0]["id"], batches[2]["id"])


def test_meters_count_what_the_service_delivers(tiny_config, dispatcher, echo_at):
    # Echo on the trainer side: the service delivers ~1/4 of the rows the trainer sees. Were
    # echo on the worker, fresh (counted on arrival) would be >= emitted.
    counts = meters.EchoMeters()
    config = tiny_config(service_address=dispatcher)
    insertions = echo_at("after_augment", 4.0)
    batches = 200
    datasets = pipelines.make_datasets(config, seed=0, meters=counts, insertions=insertions)
    for _ in datasets.train.take(batches):
        pass
    emitted = batches * config.batch_size
    assert counts.emitted.value() == emitted
    # Read-ahead from the service is bounded by its buffers (measured ~200 rows here); the
    # bound below leaves room for 3x that and still fails if echo ran on the worker.
    assert emitted / 4 <= counts.fresh.value() <= emitted / 4 + 600


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        (
            {
                "source": "tfrecord",
                "train_files": "gs://bucket/train-*.tfrecord",
                "eval_files": "gs://bucket/eval.tfrecord",
                "num_classes": 10,
            },
            ValueError,
            r"cannot serve train_files='gs://bucket.*Python generator",
        ),
        (
            {
                "source": "tfrecord",
                "train_files": "/data/train-*.tfrecord",
                "eval_files": "/data/eval.tfrecord",
                "num_classes": 10,
                "skip_corrupt": True,
            },
            ValueError,
            "cannot be combined with skip_corrupt=True",
        ),
        ({"service_processing_mode": "dynamic"}, ValueError, "service_processing_mode must be"),
        ({"service_address": 5050}, TypeError, "'service_address'.*cannot be casted to .*str"),
    ],
)
def test_service_config_errors(overrides, error, message):
    # A dict, so a wrong type reaches make_datasets' check instead of ConfigDict's own.
    config = {"service_address": "grpc://localhost:1", **overrides}
    # Raised while checking the config, before any data or service is touched.
    with pytest.raises(error, match=message):
        pipelines.make_datasets(config, seed=0)


@pytest.mark.parametrize(
    ("address", "mode", "message"),
    [("", "parallel_epochs", "address must be"), ("local", "dynamic", "processing_mode must")],
)
def test_distribute_errors(address, mode, message):
    with pytest.raises(ValueError, match=message):
        service.distribute(address, processing_mode=mode)


def test_an_address_where_no_dispatcher_listens_is_named_after_a_bounded_wait(monkeypatch):
    # Issue 33: TensorFlow's registration retried for ever; the binary hung before its first
    # step, printing nothing, and a SIGTERM did not stop it.
    with socket.socket() as probe:  # a port nothing listens on (bound, then released)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(service, "DISPATCHER_WAIT_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(ValueError, match=rf"no tf.data service dispatcher answers at "
                       rf"grpc://127.0.0.1:{port} \(.*\) after 1 s; start one there"):  # fmt: skip
        tf.data.Dataset.range(3).apply(service.distribute(f"grpc://127.0.0.1:{port}"))
    assert time.monotonic() - started < 30
    with pytest.raises(ValueError, match=r"must be 'grpc://host:port' or 'host:port', got 'x'"):
        tf.data.Dataset.range(3).apply(service.distribute("x"))


def test_local_service_is_started_once_and_serves():
    address = service.local_address()
    assert address.startswith("grpc://localhost:") and service.local_address() == address
    values = [int(x) for x in tf.data.Dataset.range(5).apply(service.distribute("local"))]
    assert values == list(range(5))


@pytest.mark.parametrize("num_pipelines", [2])
def test_service_with_input_pipelines_shards_before_the_service(
    tiny_config, tiny_sizes, dispatcher, echo_at, num_pipelines
):
    num_train, _ = tiny_sizes
    config = tiny_config(service_address=dispatcher)
    shards = []
    for index in range(num_pipelines):
        context = tf.distribute.InputContext(num_pipelines, index, num_pipelines)
        datasets = pipelines.make_datasets(
            config, seed=0, input_context=context, insertions=echo_at("after_augment", 2.0)
        )
        ids, _ = _rows(datasets.train, 2 * datasets.num_shard_train_examples)
        pairs = ids.reshape(-1, 2)
        assert np.all(pairs[:, 0] == pairs[:, 1])  # echoed here, after the service
        shards.append(set(pairs[:, 0]))
        assert len(shards[-1]) == datasets.num_shard_train_examples  # one epoch of the shard
    assert sum(map(len, shards)) == num_train and set().union(*shards) == set(range(num_train))


def test_service_does_the_per_example_work_when_nothing_is_inserted_earlier(
    tiny_config, tiny_sizes, dispatcher
):
    # Nothing inserted: read, decode and augment run on the service workers.
    config = tiny_config(service_address=dispatcher)
    datasets = pipelines.make_datasets(config, seed=0)
    assert datasets.train_pipeline.inserted == (("after_augment", "service"),)
    # A pruning stage chooses ids where a split reads by id; its loss table cannot travel to a
    # worker, so with a service it drops examples where the service's elements arrive.
    num_train, _ = tiny_sizes
    prune = echoing.loss_prune(echoing.LossTable(num_train), num_epochs=4)
    datasets = pipelines.make_datasets(config, seed=0, insertions=[("before_read", "prune", prune)])
    assert datasets.train_pipeline.inserted == (
        ("after_augment", "service"),
        ("after_augment", "prune"),
    )
