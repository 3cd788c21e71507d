"""Tests for trainers.checkpointing: round trip, fresh directory, incompatible checkpoints."""

import gc
import glob
import logging
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from echoing import techniques
from trainers import checkpointing, loop, models


def _objects(model_name):
    keras.utils.set_random_seed(0)
    model = models.build_model(model_name, (40,), 10)
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    return {"model": model, "optimizer": optimizer, "step": step}


def test_restore_latest_returns_none_on_a_fresh_directory(tmp_path):
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=1, **_objects("mnist1d_mlp"))
    assert checkpointing.restore_latest(manager) is None


def test_round_trip_restores_weights_optimizer_and_step(tmp_path):
    saved = _objects("mnist1d_mlp")
    saved["step"].assign(42)
    saved["optimizer"].iterations.assign(7)
    weights = [w + 1.0 for w in saved["model"].get_weights()]
    saved["model"].set_weights(weights)
    checkpointing.make_manager(str(tmp_path), max_to_keep=2, **saved).save(checkpoint_number=42)

    restored = _objects("mnist1d_mlp")
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=2, **restored)
    assert checkpointing.restore_latest(manager).endswith("ckpt-42")
    assert int(restored["step"].numpy()) == 42
    assert int(restored["optimizer"].iterations.numpy()) == 7
    for expected, actual in zip(weights, restored["model"].get_weights(), strict=True):
        tf.debugging.assert_equal(expected, actual)


def test_state_newer_than_a_checkpoint_restores_from_first_when_not_required(tmp_path):
    # A checkpoint written before the run also saved a counter.
    checkpointing.make_manager(str(tmp_path), max_to_keep=1, step=tf.Variable(5)).save()
    step, counter = tf.Variable(0), tf.Variable(-1)
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=1, step=step, counter=counter)
    with pytest.raises(checkpointing.CheckpointRestoreError, match="does not match"):
        checkpointing.restore_latest(manager)  # everything is required by default
    restored = checkpointing.restore_latest(
        manager,
        first=tf.train.Checkpoint(counter=counter),
        required=tf.train.Checkpoint(step=step),
    )
    assert restored.endswith("ckpt-1") and int(step.numpy()) == 5 and int(counter.numpy()) == -1
    counter.assign(3)
    checkpointing.save(manager, 6)  # saved with the counter from now on
    counter.assign(0)
    checkpointing.restore_latest(manager, first=tf.train.Checkpoint(counter=counter))
    assert int(counter.numpy()) == 3


def test_restores_leave_no_tensorflow_warnings_value_by_value(tmp_path, caplog):
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.removeFilter(checkpointing._keep_log_record)  # as in a fresh process
    checkpointing.make_manager(
        str(tmp_path), max_to_keep=1, step=tf.Variable(5), counter=tf.Variable(3)
    ).save()
    step, counter = tf.Variable(0), tf.Variable(0)
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=1, step=step, counter=counter)
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        checkpointing.restore_latest(  # the counter restored by first, the step by required
            manager,
            first=tf.train.Checkpoint(counter=counter),
            required=tf.train.Checkpoint(step=step),
        )
        gc.collect()
        assert int(counter.numpy()) == 3 and not caplog.records
        other = _objects("mnist1d_cnn")  # a model the checkpoint does not hold
        with pytest.raises(checkpointing.CheckpointRestoreError):
            checkpointing.restore_latest(
                checkpointing.make_manager(str(tmp_path), max_to_keep=1, **other)
            )
        del other
        gc.collect()
    assert not [r for r in caplog.records if "could not be found" in r.getMessage()]


def test_incompatible_checkpoint_raises_a_clear_error(tmp_path):
    checkpointing.make_manager(str(tmp_path), max_to_keep=1, **_objects("mnist1d_mlp")).save()
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=1, **_objects("mnist1d_cnn"))
    with pytest.raises(ValueError, match=r"does not match .*fresh --workdir"):
        checkpointing.restore_latest(manager)


def test_a_variable_of_another_shape_is_named_with_both_shapes(tmp_path):
    # Pruning keeps a value per training example: a data set grown from 38 to 45 examples.
    saved = tf.Variable(tf.zeros([38]), name="draws")
    checkpointing.make_manager(str(tmp_path), max_to_keep=1, table=saved).save()
    manager = checkpointing.make_manager(
        str(tmp_path), max_to_keep=1, table=tf.Variable(tf.zeros([45]), name="draws")
    )
    with pytest.raises(checkpointing.CheckpointRestoreError) as raised:
        checkpointing.restore_latest(manager)
    assert str(raised.value) == (
        f"the checkpoint {tmp_path}/ckpt-1 does not match this run's model or data: its variable "
        "draws:0 has shape (38,) there and (45,) in this run. A checkpoint's variables fit only "
        "the model, techniques and data that wrote them: the model or a technique changed, or "
        "the data set's size or classes, or the batch size. Use a fresh --workdir, or the config "
        "that wrote this checkpoint (with the same data)."
    )
    assert isinstance(raised.value, ValueError)  # what callers that predate the class catch


def _damage(path: str, how: str) -> None:
    if how == "truncated data":
        (data,) = glob.glob(f"{path}.data-*")
        with open(data, "r+b") as file:
            file.truncate(os.path.getsize(data) // 2)
    else:  # a garbled index
        with open(f"{path}.index", "wb") as file:
            file.write(b"garbage" * 10)


@pytest.mark.parametrize("how", ["truncated data", "garbled index"])
def test_an_unreadable_newest_checkpoint_is_named_and_the_previous_one_restored(
    tmp_path, capsys, how
):
    saved = _objects("mnist1d_mlp")
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=3, **saved)
    for step in (10, 20):
        saved["step"].assign(step)
        manager.save(checkpoint_number=step)
    _damage(manager.latest_checkpoint, how)
    restored = _objects("mnist1d_mlp")
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=3, **restored)
    assert checkpointing.restore_latest(manager).endswith("ckpt-10")
    assert int(restored["step"].numpy()) == 10
    assert f"Checkpoint unreadable (corrupt or truncated), skipped: {tmp_path}/ckpt-20" in (
        capsys.readouterr().err
    )
    # With the older one damaged too, nothing can be read: a clear error, not a traceback.
    _damage(str(tmp_path / "ckpt-10"), how)
    with pytest.raises(
        ValueError, match=r"no checkpoint in the workdir can be read \(.*ckpt-20, .*ckpt-10: "
    ):
        checkpointing.restore_latest(manager)


@pytest.mark.parametrize(
    ("max_to_keep", "objects", "message"),
    [(0, {"step": tf.Variable(0)}, "max_to_keep"), (1, {}, "at least one object")],
)
def test_make_manager_rejects_bad_arguments(tmp_path, max_to_keep, objects, message):
    with pytest.raises(ValueError, match=message):
        checkpointing.make_manager(str(tmp_path), max_to_keep=max_to_keep, **objects)


def _id_trainer(seen):
    examples = {
        "inputs": tf.random.stateless_normal([64, 40], seed=[5, 6]),
        "label": tf.range(64, dtype=tf.int64) % 10,
        "id": tf.range(64, dtype=tf.int64),
    }
    train = (
        tf.data.Dataset.from_tensor_slices(examples)
        .shuffle(64, seed=1, reshuffle_each_iteration=True)
        .repeat()
        .batch(4, drop_remainder=True)
    )
    model = models.build_model("mnist1d_mlp", (40,), 10)
    trainer = loop.Trainer(
        model=model,
        optimizer=keras.optimizers.SGD(0.1),
        train_dataset_fn=loop.per_replica_batches(lambda: train, global_batch_size=4),
        techniques=[
            techniques.FeedbackCallback(lambda ids, losses, step: seen.append(ids.numpy()))
        ],
    )
    objects = {"model": model, "step": trainer.step, "iterator": trainer.iterator}
    return trainer, objects


def test_restored_iterator_continues_the_same_input_stream(tmp_path):
    first = []
    trainer, objects = _id_trainer(first)
    trainer.train(5)
    checkpointing.make_manager(str(tmp_path), max_to_keep=1, **objects).save()
    trainer.train(20)  # crosses an epoch: the reshuffled order must match too
    resumed = []
    trainer, objects = _id_trainer(resumed)
    manager = checkpointing.make_manager(str(tmp_path), max_to_keep=1, **objects)
    checkpointing.restore_latest(manager)
    assert int(trainer.step.numpy()) == 5
    trainer.train(20)
    np.testing.assert_array_equal(resumed[0], first[1])
    # Without the restore, the stream would start over from the first batches.
    assert not np.array_equal(resumed[0][:5], first[0])


_FULL_DISK = """
import os, resource, signal, sys
import tensorflow as tf
from trainers import checkpointing

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
directory = sys.argv[1]
weights = tf.Variable(tf.ones([100_000]))  # a 400 KB data file
manager = checkpointing.make_manager(directory, max_to_keep=3, weights=weights)
checkpointing.save(manager, 1)
weights.assign(tf.fill([100_000], 2.0))
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))  # a full disk
try:
    checkpointing.save(manager, 2)
except checkpointing.CheckpointSaveError as error:
    print(error)
"""


def test_a_save_that_runs_out_of_disk_is_a_clear_error_and_the_previous_checkpoint_resumes(
    tmp_path, capsys
):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    directory = str(tmp_path / "checkpoints")
    result = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, directory],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    message = result.stdout.strip()
    assert message.startswith(f"could not save the checkpoint of step 2 in {directory}: "), message
    assert "File too large" in message and "function_node" not in message
    assert f"The previous checkpoint {directory}/ckpt-1 is intact" in message
    assert "run the same command again to resume" in message
    # The half-written save is left in a temporary folder; the next run removes it...
    assert glob.glob(f"{directory}/*_temp")
    weights = tf.Variable(tf.zeros([100_000]))
    manager = checkpointing.make_manager(directory, max_to_keep=3, weights=weights)
    assert not glob.glob(f"{directory}/*_temp")
    assert "Removed an unfinished checkpoint save" in capsys.readouterr().err
    # ...and resumes from the checkpoint written before the disk filled.
    assert checkpointing.restore_latest(manager) == f"{directory}/ckpt-1"
    np.testing.assert_array_equal(weights.numpy(), np.ones(100_000, np.float32))
