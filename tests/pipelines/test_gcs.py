"""TFRecord files on gs://, read through gcsfs from a gcp-storage-emulator on 127.0.0.1."""

import numpy as np
import pytest

import pipelines
from pipelines.sources import gcs_emulator, tfrecord

NUM_TRAIN, NUM_EVAL, NUM_CLASSES = 20, 6, 4


@pytest.fixture(scope="module")
def bucket():
    """A bucket with train/eval TFRecord shards on an emulator this fixture starts and stops."""
    with gcs_emulator.running() as host, gcs_emulator.client_environment(host):
        filesystem = tfrecord.gcs_filesystem()
        filesystem.mkdir("echoing-test")
        inputs = np.random.default_rng(0).normal(size=(NUM_TRAIN + NUM_EVAL, 5)).astype(np.float32)
        labels = np.arange(NUM_TRAIN + NUM_EVAL) % NUM_CLASSES
        # Written straight to gs:// (the writer uploads through gcsfs): two train shards.
        tfrecord.write_shards(
            "gs://echoing-test/data/train", inputs[:NUM_TRAIN], labels[:NUM_TRAIN], num_shards=2
        )
        tfrecord.write(
            "gs://echoing-test/data/eval.tfrecord", inputs[NUM_TRAIN:], labels[NUM_TRAIN:]
        )
        assert len(filesystem.glob("gs://echoing-test/data/train-*.tfrecord")) == 2
        yield {"inputs": inputs, "labels": labels}


def _config(train_files, eval_files="gs://echoing-test/data/eval.tfrecord"):
    config = pipelines.default_data_config()
    config.source, config.num_classes, config.augment = "tfrecord", NUM_CLASSES, "none"
    config.train_files, config.eval_files = train_files, eval_files
    config.batch_size, config.eval_batch_size, config.shuffle_buffer = 4, 4, 8
    return config


def test_gcs_tfrecords_read_through_gcsfs(bucket):
    datasets = pipelines.make_datasets(_config("gs://echoing-test/data/train-*.tfrecord"), seed=0)
    assert datasets.num_train_examples == NUM_TRAIN
    assert datasets.input_shape == (5,)
    train_ids = []
    for batch in datasets.train.take(2 * NUM_TRAIN // 4).as_numpy_iterator():
        np.testing.assert_array_equal(batch["inputs"], bucket["inputs"][batch["id"]])
        np.testing.assert_array_equal(batch["label"], bucket["labels"][batch["id"]])
        train_ids.extend(batch["id"])
    assert sorted(train_ids) == sorted(list(range(NUM_TRAIN)) * 2)  # two epochs, both shards
    evaluation = list(datasets.eval.as_numpy_iterator())
    eval_inputs = np.concatenate([batch["inputs"] for batch in evaluation])
    np.testing.assert_array_equal(eval_inputs, bucket["inputs"][NUM_TRAIN:])


@pytest.mark.parametrize(
    ("train_files", "message"),
    [
        ("gs://echoing-test/data/missing-*.tfrecord", "matches no file"),
        ("gs://no-such-bucket/train-*.tfrecord", "cannot read data config train_files=.*no-such"),
    ],
)
def test_unreadable_gcs_path(bucket, train_files, message):
    with pytest.raises(ValueError, match=message):
        pipelines.make_datasets(_config(train_files), seed=0)


def test_record_counts_come_from_object_metadata_or_a_header_pass(bucket, tmp_path):
    filesystem = tfrecord.gcs_filesystem()
    # Written by tfrecord.write: the count is in the object's metadata.
    info = filesystem.info("gs://echoing-test/data/eval.tfrecord")
    assert info["metadata"] == {"tfrecord_records": str(NUM_EVAL)}
    assert tfrecord._gcs_count("gs://echoing-test/data/eval.tfrecord") == NUM_EVAL
    # Uploaded by other means (no metadata): counted by reading the record headers.
    local = str(tmp_path / "plain.tfrecord")
    tfrecord.write(local, bucket["inputs"][:7], bucket["labels"][:7])
    filesystem.put(local, "gs://echoing-test/plain/plain.tfrecord")
    assert not filesystem.info("gs://echoing-test/plain/plain.tfrecord").get("metadata")
    assert tfrecord._gcs_count("gs://echoing-test/plain/plain.tfrecord") == 7
