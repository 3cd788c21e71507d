"""A data-config field that only another source reads is named, not silently ignored."""

import warnings

import pytest

import pipelines
from pipelines import source_fields


def _data(**fields):
    config = pipelines.default_data_config()
    config.update(fields)
    return config


@pytest.mark.parametrize(
    ("fields", "stray"),
    [
        ({"name": "cifar10"}, ["name"]),  # MNIST-1D is generated: it reads no TFDS name
        (
            {"name": "cifar10", "image_dir": "/photos", "num_classes": 3},
            ["image_dir", "name", "num_classes"],
        ),
        ({"source": "tfrecord", "num_train": 2_000}, ["num_train"]),
        ({"source": "tfrecord", "train_arrays": {"inputs": [0.0], "label": [0]}}, ["train_arrays"]),
        ({"source": "tfds", "name": "mnist", "image_size": 28}, []),  # both read by TFDS
        ({"num_train": 100, "batch_size": 8, "shuffle_buffer": 0}, []),  # read, or by every source
        ({"source": "tfrecord"}, []),  # num_train at its default is no choice of the user's
    ],
)
def test_fields_set_for_other_sources_are_found(fields, stray):
    assert source_fields.set_for_other_sources(_data(**fields)) == stray


@pytest.mark.parametrize(
    ("fields", "unread"),
    [
        # Every image under image_dir is used; num_train/num_eval size the embedded photos.
        ({"source": "image_folder", "image_dir": "/photos"}, ["num_eval", "num_train"]),
        ({"source": "image_folder"}, []),
        (
            {"source": "text", "train_files": "a", "eval_files": "b"},
            ["eval_split", "num_eval", "num_train", "train_split"],
        ),
        ({"source": "text", "name": "lm1b"}, ["gcs_request_attempts", "num_eval", "num_train"]),
        # The embedded corpus: its first num_train paragraphs, in no named split.
        ({"source": "text"}, ["eval_split", "train_split"]),
    ],
)
def test_fields_a_source_skips_given_its_other_fields_are_unread(fields, unread):
    keys = ["num_train", "num_eval", "gcs_request_attempts", "train_split", "eval_split"]
    if fields["source"] == "image_folder":  # it reads the split names at load (its layout)
        keys = keys[:2]
    assert source_fields.unread_fields(_data(**fields), keys) == unread


def test_make_datasets_warns_once_naming_a_field_its_source_does_not_read(tiny_config):
    # A config file's data.name='cifar10' on MNIST-1D trained on MNIST-1D headed "on cifar10",
    # without a word (issue 33).
    config = tiny_config(name="cifar10")
    with pytest.warns(UserWarning) as caught:
        pipelines.make_datasets(config, seed=0)
    shown = [str(w.message) for w in caught if "does not read" in str(w.message)]
    assert shown == [
        "data config name='cifar10': the data source 'mnist1d' does not read this field, so the "
        "data is built without it (it reads num_eval, num_train). Set data config source to the "
        "source that reads it, or leave it at its default."
    ]


def test_make_datasets_is_quiet_when_every_field_set_is_read(tiny_config):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipelines.make_datasets(tiny_config(), seed=0)
