"""The data config: defaults, and a clear error for every bad key or value."""

import re
import warnings

import ml_collections
import numpy as np
import pytest
import tensorflow as tf

import pipelines
from echoing import meters

CONTRACT_FIELDS = {
    "source": "mnist1d",
    "name": "",
    "data_dir": None,
    "train_split": "train",
    "eval_split": "test",
    "num_train": 40_000,
    "num_eval": 10_000,
    "train_files": "",
    "eval_files": "",
    "augment": "mnist1d",
    "num_parallel_calls": tf.data.AUTOTUNE,
    "prefetch": tf.data.AUTOTUNE,
    "autotune": True,
}


def test_default_config_has_every_contract_field():
    config = pipelines.default_data_config()
    assert isinstance(config, ml_collections.ConfigDict)
    for key, value in CONTRACT_FIELDS.items():
        assert config[key] == value, key
    for key in ("batch_size", "eval_batch_size", "shuffle_buffer"):
        assert isinstance(config[key], int) and config[key] > 0
    # Echo is a stage one inserts (or the run config's technique), not the pipeline's.
    assert all(config[key] is None for key in pipelines.config.MOVED_ECHO_KEYS)


def test_partial_config_takes_defaults():
    resolved = pipelines.resolve_data_config({"shuffle_buffer": 16, "batch_size": 4})
    assert (resolved.shuffle_buffer, resolved.batch_size, resolved.source) == (16, 4, "mnist1d")


def test_moved_echo_keys_still_echo_for_one_release_with_a_warning(tmp_path):
    config = {"echo": 2.0, "echo_insert": "after_augment", "num_train": 64, "num_eval": 16}
    config.update(batch_size=8, data_dir=str(tmp_path))
    with pytest.warns(FutureWarning, match=r"\['echo', 'echo_insert'\] moved.*--config.echo=2"):
        datasets = pipelines.make_datasets(config, seed=0)
    assert datasets.train_pipeline.inserted == (("after_augment", "echo"),)
    ids = next(iter(datasets.train))["id"].numpy()
    np.testing.assert_array_equal(ids[0::2], ids[1::2])  # each example twice, adjacent


def _with(**overrides):
    # A plain dict: a ConfigDict would itself refuse some wrong types before make_datasets.
    return dict(overrides)


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        (
            _with(shufle_buffer=10),
            ValueError,
            "unknown data config key 'shufle_buffer'; did you mean 'shuffle_buffer'\\?",
        ),
        (_with(source="csv"), ValueError, "source must be one of .*'mnist1d'.*got 'csv'"),
        (_with(augment="jitter"), ValueError, "augment must be one of"),
        # Before: a traceback excerpt naming image_size, which MNIST-1D does not read.
        (_with(augment="image"), ValueError, "augment='image' crops and flips images, and "),
        (_with(augment="inception"), ValueError, "source='mnist1d' holds 1-D signals; set au"),
        (_with(batch_size=0), ValueError, "batch_size must be >= 1, got 0"),
        (_with(batch_size="8"), TypeError, "data config: .*'batch_size'.* 8 is of original type"),
        (_with(eval_batch_size=2.5), TypeError, "'eval_batch_size'.*cannot be casted to .*int"),
        (_with(shuffle_buffer=-1), ValueError, "shuffle_buffer must be >= 0"),
        (_with(num_parallel_calls=0), ValueError, "num_parallel_calls must be >= 1"),
        (_with(prefetch=-3), ValueError, "prefetch must be >= 0"),
        (_with(echo="2"), TypeError, "'echo'.* 2 is of original type <class 'str'>"),
        (_with(echo_insert=3), TypeError, "'echo_insert'.*cannot be casted to type <class 'str'>"),
        (_with(num_train=0), ValueError, "num_train must be >= 1"),
        (_with(num_classes=0), ValueError, "num_classes must be >= 1"),
        (_with(image_size=-1), ValueError, "image_size must be >= 1"),
        (_with(data_dir=5), TypeError, "data_dir must be a path or None, got 5"),
        (_with(source="tfds"), ValueError, "source='tfds' needs data config name"),
        (_with(source="tfrecord"), ValueError, "source='tfrecord' needs train_files"),
        (
            _with(source="tfrecord", train_files="a", eval_files="b"),
            ValueError,
            "needs data config num_classes",
        ),
        (_with(source="arrays"), TypeError, "train_arrays must be a dict"),
        (_with(skip_corrupt=1), TypeError, "'skip_corrupt'.*cannot be casted to .*bool"),
        (_with(autotune=None), TypeError, "autotune must be True or False, got None"),
        (_with(autotune="off"), TypeError, "'autotune'.*cannot be casted to .*bool"),
        (_with(skip_corrupt=True), ValueError, "skip_corrupt applies to source='tfrecord' or"),
        (_with(gcs_request_attempts=0), ValueError, "gcs_request_attempts must be >= 1, got 0"),
        (_with(gcs_read_attempts=1.5), TypeError, "'gcs_read_attempts'.*cannot be casted"),
        (_with(gcs_block_size=0), ValueError, "gcs_block_size must be >= 1"),
        (_with(gcs_retry_delay=-1.0), ValueError, "gcs_retry_delay must be seconds >= 0"),
        (_with(gcs_max_retry_delay=-9.0), ValueError, "gcs_max_retry_delay must be seconds"),
        ("mnist1d", TypeError, "data_config must be an ml_collections.ConfigDict, got str"),
    ],
)
def test_bad_config(config, error, message):
    with pytest.raises(error, match=message):
        pipelines.make_datasets(config, seed=0)


def test_unknown_insertion_point_lists_valid_points_before_reading(tmp_path):
    # data_dir is empty: the error must come before any data is generated or read.
    config = _with(data_dir=str(tmp_path))
    insertions = [("after_shuffle", "echo", lambda ds: ds)]
    with pytest.raises(ValueError, match="unknown insertion point 'after_shuffle'") as error:
        pipelines.make_datasets(config, seed=0, insertions=insertions)
    assert "'before_augment', 'after_augment', 'before_batch', 'after_batch'" in str(error.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"seed": "0"}, TypeError, "seed must be an int, got '0'"),
        ({"seed": 0, "meters": meters.ElementCounter("x")}, TypeError, "EchoMeters or None"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        pipelines.make_datasets(pipelines.default_data_config(), **kwargs)


def test_train_split_smaller_than_batch(tiny_config):
    with pytest.raises(ValueError, match="has 200 examples, fewer than batch_size=500"):
        pipelines.make_datasets(tiny_config(batch_size=500), seed=0)


@pytest.mark.parametrize(
    ("shape", "augment", "message"),
    [
        # Before: MNIST-1D's signal shifts ran along the images' rows, silently.
        ((6, 6, 3), "mnist1d", r"augment='mnist1d' augments signals \[length, channels\], and "
         r"this data's inputs have shape \(6, 6, 3\); set augment='image' or 'none'\."),
        ((8,), "mnist1d", r"inputs have shape \(8,\); set augment='none'\."),
        ((8, 1), "image", r"augment='image' augments images .* set augment='mnist1d' or 'none'"),
    ],
)  # fmt: skip
def test_an_augmentation_that_does_not_fit_the_inputs_is_refused(shape, augment, message):
    arrays = {"inputs": np.zeros((8, *shape), np.float32), "label": np.arange(8) % 2}
    config = _with(source="arrays", train_arrays=arrays, eval_arrays=arrays, augment=augment)
    config["batch_size"] = 4
    with pytest.raises(ValueError, match=message):
        pipelines.make_datasets(config, seed=0)
    config["augment"] = "none"
    assert pipelines.make_datasets(config, seed=0).input_shape == shape


@pytest.mark.parametrize(
    ("fields", "same"),
    [
        (
            {"source": "tfrecord", "train_files": "a*", "eval_files": "a*", "num_classes": 2},
            "train_files 'a*' and eval_files 'a*' share 1 file",
        ),
        (
            {"source": "text", "train_files": "t.txt", "eval_files": "t.txt", "augment": "none"},
            "train_files 't.txt' and eval_files 't.txt' share 1 file",
        ),
        (  # the same file written another way, and a file inside the train glob
            {"source": "text", "train_files": "./t.txt", "eval_files": "t.txt", "augment": "none"},
            "train_files './t.txt' and eval_files 't.txt' share 1 file",
        ),
        (
            {"source": "text", "train_files": "*.txt", "eval_files": "t.txt", "augment": "none"},
            "train_files '*.txt' and eval_files 't.txt' share 1 file",
        ),
        (  # a symbolic link to a train file
            {"source": "text", "train_files": "t.txt", "eval_files": "l.txt", "augment": "none"},
            "train_files 't.txt' and eval_files 'l.txt' share 1 file",
        ),
        (  # a hard link to it
            {"source": "text", "train_files": "t.txt", "eval_files": "h.txt", "augment": "none"},
            "train_files 't.txt' and eval_files 'h.txt' share 1 file",
        ),
        ({"source": "tfds", "name": "mnist", "eval_split": "train"}, "train_split and eval_"),
        ({"source": "image_folder", "image_size": 8, "eval_split": "train/"}, "train_split and"),
    ],
)
def test_an_eval_split_that_is_the_train_split_is_warned_about(fields, same, tmp_path, monkeypatch):
    # Before: the run reported training accuracy as "eval accuracy", without a word (issue 33).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("words\n")
    (tmp_path / "u.txt").write_text("other words\n")
    (tmp_path / "l.txt").symlink_to(tmp_path / "t.txt")
    (tmp_path / "h.txt").hardlink_to(tmp_path / "t.txt")
    config = pipelines.resolve_data_config(_with(**fields))
    message = f"data config {re.escape(same)}.*evaluates on its training data"
    with pytest.warns(UserWarning, match=message):
        pipelines.config.warn_if_eval_is_train(config)


def test_the_same_arrays_for_both_splits_are_warned_about_and_other_splits_are_quiet():
    arrays = {"inputs": np.zeros((8, 40, 1), np.float32), "label": np.arange(8) % 2}
    config = _with(source="arrays", train_arrays=arrays, eval_arrays=arrays, batch_size=4)
    with pytest.warns(UserWarning, match="train_arrays and eval_arrays hold the same arrays"):
        pipelines.make_datasets(config, seed=0)
    config["eval_arrays"] = {"inputs": arrays["inputs"].copy(), "label": arrays["label"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipelines.config.warn_if_eval_is_train(pipelines.resolve_data_config(config))
