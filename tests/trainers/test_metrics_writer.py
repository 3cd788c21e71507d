"""Tests for trainers.metrics_writer: JSONL lines, TensorBoard scalars, appending on resume."""

import glob
import os

import pytest
import tensorflow as tf

from trainers import metrics_writer


def _event_file_order(path):
    # events.out.tfevents.<seconds>.<host>.<pid>.<uid>.v2: by name, uid 10 sorts before 9, and
    # two writers opened in one second (the runs of a test) must be read in their uid order.
    name = os.path.basename(path)
    _, _, _, seconds, rest = name.split(".", 4)
    *_, uid, _ = rest.rsplit(".", 2)
    return int(seconds), int(uid)


def _tensorboard_scalars(workdir):
    scalars = {}
    paths = glob.glob(os.path.join(workdir, "tensorboard", "events.*"))
    for path in sorted(paths, key=_event_file_order):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "scalars"
                number = float(tf.make_ndarray(value.tensor))
                scalars.setdefault(value.tag, []).append((event.step, number))
    return scalars


@pytest.mark.parametrize("runs", [1, 2])
def test_writes_jsonl_and_tensorboard_and_appends_across_runs(tmp_path, runs):
    workdir = str(tmp_path)
    for run in range(runs):
        with metrics_writer.MetricsWriter(workdir) as writer:
            writer.write(10 * run + 5, {"train_loss": 0.5 + run, "fresh_examples": 640})
    records = metrics_writer.read_metrics(workdir)
    assert [r["step"] for r in records] == [10 * run + 5 for run in range(runs)]
    assert [r["train_loss"] for r in records] == [0.5 + run for run in range(runs)]
    assert all(r["fresh_examples"] == 640 and r["wall_time"] > 0 for r in records)
    scalars = _tensorboard_scalars(workdir)
    assert scalars["train_loss"] == [(10 * run + 5, 0.5 + run) for run in range(runs)]
    assert scalars["fresh_examples"] == [(10 * run + 5, 640.0) for run in range(runs)]


def test_read_metrics_of_an_empty_workdir_is_empty(tmp_path):
    assert metrics_writer.read_metrics(str(tmp_path)) == []


@pytest.mark.parametrize("name", ["step", "wall_time"])
def test_reserved_names_are_rejected(tmp_path, name):
    with (
        metrics_writer.MetricsWriter(str(tmp_path)) as writer,
        pytest.raises(ValueError, match="reserved"),
    ):
        writer.write(1, {name: 1.0})


def test_a_resumed_writer_drops_rows_past_its_start_step(tmp_path):
    # A killed run logged steps 10-30 but checkpointed at 20: the resumed run starts at 20.
    with metrics_writer.MetricsWriter(str(tmp_path)) as writer:
        for step in (10, 20, 30):
            writer.write(step, {"loss": float(step)})
    with metrics_writer.MetricsWriter(str(tmp_path), start_step=20) as writer:
        assert [r["step"] for r in metrics_writer.read_metrics(str(tmp_path))] == [10, 20]
        writer.write(30, {"loss": 3.0})
    records = metrics_writer.read_metrics(str(tmp_path))
    assert [(r["step"], r["loss"]) for r in records] == [(10, 10.0), (20, 20.0), (30, 3.0)]
