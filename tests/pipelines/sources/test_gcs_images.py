"""Generated images as PNG TFRecord shards in a gs:// bucket, read back through gcsfs."""

import numpy as np

import pipelines
from pipelines.sources import tfrecord

NUM_TRAIN, NUM_EVAL, NUM_CLASSES = 12, 4, 3


def test_png_image_shards_on_gcs_decode_to_the_written_pixels(gcs):
    pixels = np.random.default_rng(0).integers(0, 256, size=(NUM_TRAIN + NUM_EVAL, 8, 8, 3))
    pixels = pixels.astype(np.uint8)
    labels = np.arange(NUM_TRAIN + NUM_EVAL) % NUM_CLASSES
    tfrecord.gcs_filesystem().mkdir("echoing-images")
    train_files = tfrecord.write_shards(
        "gs://echoing-images/train", pixels[:NUM_TRAIN], labels[:NUM_TRAIN], num_shards=3,
        encoding="png",
    )  # fmt: skip
    eval_files = tfrecord.write_shards(
        "gs://echoing-images/eval", pixels[NUM_TRAIN:], labels[NUM_TRAIN:], num_shards=1,
        encoding="png",
    )  # fmt: skip
    config = pipelines.default_data_config()
    config.source, config.num_classes, config.augment = "tfrecord", NUM_CLASSES, "none"
    config.train_files, config.eval_files = train_files, eval_files
    config.batch_size, config.eval_batch_size, config.shuffle_buffer = 4, 4, 0
    datasets = pipelines.make_datasets(config, seed=0)
    assert datasets.num_train_examples == NUM_TRAIN
    assert datasets.input_shape == (8, 8, 3)
    ids = []
    for batch in datasets.train.take(NUM_TRAIN // 4).as_numpy_iterator():
        # Images arrive as floats in [0, 1]; PNG is lossless, so they are the written pixels.
        np.testing.assert_allclose(batch["inputs"] * 255, pixels[batch["id"]], atol=1e-3)
        np.testing.assert_array_equal(batch["label"], labels[batch["id"]])
        ids.extend(batch["id"])
    assert sorted(ids) == list(range(NUM_TRAIN))
