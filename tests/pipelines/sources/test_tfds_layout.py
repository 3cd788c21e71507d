"""TFRecord shards in TFDS's image-classification layout (ImageNet's): ids by position, crops,
sharding by file, gs://, and records in neither layout."""

import numpy as np
import pytest
import tensorflow as tf

import pipelines
from pipelines.sources import image_folder, photos, record_layouts, tfrecord

SIZE = 32


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The photo set as an image folder source, and its files as (path, label) in id order."""
    root = photos.make_folder(str(tmp_path_factory.mktemp("photos")), num_train=30, num_eval=10)
    source = image_folder.load(root, image_size=SIZE)

    def files(split):
        return [(e["path"].decode(), int(e["label"])) for e in split.dataset.as_numpy_iterator()]

    return source, files(source.train), files(source.eval)


@pytest.fixture(scope="module")
def shards(folder, tmp_path_factory):
    _, train, evaluation = folder
    directory = tmp_path_factory.mktemp("shards")
    train_glob = record_layouts.write_image_shards(f"{directory}/photos-train", train, num_shards=3)
    eval_glob = record_layouts.write_image_shards(
        f"{directory}/photos-validation", evaluation, num_shards=1
    )
    return train_glob, eval_glob


def _config(train_files, eval_files, **overrides):
    config = pipelines.default_data_config()
    config.source, config.num_classes, config.image_size = "tfrecord", len(photos.PHOTOS), SIZE
    config.train_files, config.eval_files = train_files, eval_files
    config.augment, config.batch_size, config.eval_batch_size = "inception", 5, 5
    config.shuffle_buffer = 0
    for key, value in overrides.items():
        config[key] = value
    return config


def test_shards_are_named_as_tfds_names_them_and_hold_the_files_unchanged(folder, shards):
    _, train, _ = folder
    paths = sorted(tf.io.gfile.glob(shards[0]))
    assert [p.rsplit("/", 1)[1] for p in paths] == [
        f"photos-train.tfrecord-0000{i}-of-00003" for i in range(3)
    ]
    first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(paths[0]))).numpy())
    feature = first.features.feature
    with open(train[0][0], "rb") as file:
        assert feature["image"].bytes_list.value[0] == file.read()
    assert feature["label"].int64_list.value[0] == train[0][1]
    assert record_layouts.layout_of(first.SerializeToString(), paths[0]) == record_layouts.TFDS


def test_ids_are_positions_labels_follow_them_and_eval_matches_the_image_folder(folder, shards):
    source, train, evaluation = folder
    datasets = pipelines.make_datasets(_config(*shards), seed=0)
    assert (datasets.num_train_examples, datasets.input_shape) == (30, (SIZE, SIZE, 3))
    ids, labels = [], []
    for batch in datasets.train.take(6).as_numpy_iterator():  # one epoch: 6 x 5
        assert batch["inputs"].shape == (5, SIZE, SIZE, 3)
        ids.extend(batch["id"]), labels.extend(batch["label"])
    assert sorted(ids) == list(range(30))
    assert labels == [train[i][1] for i in ids]
    # Eval is ImageNet's central crop, the same pixels as the image folder gives the same files.
    records = tfrecord.load(*shards, num_classes=len(photos.PHOTOS), image_size=SIZE)
    ours = [records.eval.decode(e) for e in records.eval.dataset]
    theirs = [source.eval.decode(e) for e in source.eval.dataset]
    assert [int(e["id"]) for e in ours] == list(range(len(evaluation)))
    for mine, reference in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(mine["inputs"].numpy(), reference["inputs"].numpy())
        assert int(mine["label"]) == int(reference["label"])


def test_sharding_by_file_keeps_each_records_id(shards):
    source = tfrecord.load(*shards, num_classes=len(photos.PHOTOS), image_size=SIZE)
    whole = {int(e["id"]): int(e["label"]) for e in source.train.dataset}
    parts = [source.train.shard(2, index) for index in range(2)]
    seen = [{int(e["id"]): int(e["label"]) for e in part.dataset} for part in parts]
    assert not set(seen[0]) & set(seen[1])
    assert {**seen[0], **seen[1]} == whole and sorted(whole) == list(range(30))
    # Files 0 and 2 go to pipeline 0, file 1 to pipeline 1: 10 records per file.
    assert sorted(seen[1]) == list(range(10, 20))


def test_shards_on_gcs_written_by_another_tool_read_the_same(shards, gcs):
    filesystem = tfrecord.gcs_filesystem()
    filesystem.mkdir("echoing-tfds")
    for path in tf.io.gfile.glob(shards[0]) + tf.io.gfile.glob(shards[1]):
        # No record-count metadata, as TFDS uploads them: the reader counts the headers.
        filesystem.put(path, "gs://echoing-tfds/" + path.rsplit("/", 1)[1])
    remote = ("gs://echoing-tfds/photos-train.tfrecord-*", "gs://echoing-tfds/photos-validation*")
    local = tfrecord.load(*shards, num_classes=len(photos.PHOTOS), image_size=SIZE)
    source = tfrecord.load(*remote, num_classes=len(photos.PHOTOS), image_size=SIZE)
    assert (source.train.num_examples, source.eval.num_examples) == (30, 10)
    assert [(int(e["id"]), int(e["label"])) for e in source.train.dataset] == [
        (int(e["id"]), int(e["label"])) for e in local.train.dataset
    ]


def test_photos_of_many_sizes_need_an_image_size(shards):
    with pytest.raises(ValueError, match=r"TFDS's image layout.*set data config image_size"):
        tfrecord.load(*shards, num_classes=len(photos.PHOTOS))


def _write_examples(path, feature):
    with tf.io.TFRecordWriter(str(path)) as writer:
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        writer.write(example.SerializeToString())
    return str(path)


def test_records_in_neither_layout_are_clear_errors(tmp_path):
    image = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"jpeg bytes"]))
    other = _write_examples(tmp_path / "other.tfrecord", {"image/encoded": image})
    with pytest.raises(
        ValueError, match=r"other.tfrecord.*\['image/encoded'\].*\['image', 'label'\]"
    ):
        tfrecord.load(other, other, num_classes=2)
    with tf.io.TFRecordWriter(str(tmp_path / "text.tfrecord")) as writer:
        writer.write(b"\xff\xfe not a protocol buffer")
    text = str(tmp_path / "text.tfrecord")
    with pytest.raises(ValueError, match=r"text.tfrecord.*does not hold tf.train.Examples"):
        tfrecord.load(text, text, num_classes=2)


@pytest.mark.parametrize(
    ("files", "num_shards", "message"),
    [
        ([], 1, "got no files"),
        ([("a.jpg", 0)], 0, r"num_shards must be in \[1, 1\].*got 0"),
        ([("a.jpg", 0)], 2, r"num_shards must be in \[1, 1\].*got 2"),
        ([("a.jpg", 0)], 1.0, "num_shards must be an int, got 1.0"),
    ],
)
def test_write_image_shards_errors(tmp_path, files, num_shards, message):
    with pytest.raises(ValueError, match=message):
        record_layouts.write_image_shards(str(tmp_path / "x"), files, num_shards=num_shards)
