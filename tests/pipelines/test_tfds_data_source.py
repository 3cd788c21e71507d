"""pipelines.sources.tfds.data_source: an ArrayRecord copy by name; clear errors otherwise."""

import numpy as np
import pytest

from pipelines.sources import mnist1d
from pipelines.sources import tfds as tfds_source

NUM_TRAIN, NUM_EVAL = 30, 10
NAME = f"mnist1d/train{NUM_TRAIN}_eval{NUM_EVAL}_seed{mnist1d.GENERATION_SEED}"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("tfds"))
    mnist1d.data_source(NUM_TRAIN, NUM_EVAL, directory)  # ArrayRecord copy
    mnist1d.load(NUM_TRAIN, NUM_EVAL, directory)  # TFRecord copy (sequential only)
    return directory


@pytest.mark.parametrize("split,size", [("train", NUM_TRAIN), ("test", NUM_EVAL)])
def test_array_record_copy_by_name(data_dir, split, size):
    source = tfds_source.data_source(f"{NAME}_array_record", data_dir=data_dir, split=split)
    expected = mnist1d.data_source(NUM_TRAIN, NUM_EVAL, data_dir, split=split)
    assert len(source) == size
    for index in (0, size - 1):
        np.testing.assert_array_equal(source[index]["inputs"], expected[index]["inputs"])
        assert source[index]["id"] == expected[index]["id"]


@pytest.mark.parametrize(
    "name,split,message",
    [
        (NAME, "train", "is stored as tfrecord, which has no random access.*array_record"),
        (f"{NAME}_array_record", "validation", r"no split 'validation'.*\['test', 'train'\]"),
        ("mnist", "train", "needs a download.*no prepared copy"),
        ("not_prepared_here", "train", "there is no TFDS dataset named 'not_prepared_here'"),
    ],
)
def test_errors(data_dir, name, split, message):
    with pytest.raises(ValueError, match=message):
        tfds_source.data_source(name, data_dir=data_dir, split=split)
