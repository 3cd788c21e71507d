"""The embedded default image set: JPEG crops of real photographs, in class folders, no download.

Example::

    from pipelines.sources import photos

    root = photos.make_folder("/tmp/echoing", num_train=200, num_eval=50)
    # /tmp/echoing/photos/v1-200-50/{train,test}/<photo>/<id>.jpg, written once, reused after

Ten of the photographs scikit-image ships inside its package (``skimage.data``: the astronaut,
the cat, the coffee cup, the rocket, the Hubble deep field, ...; three are grayscale) are the
ten classes. Each example is a random crop of one photo (25-80% of its area, aspect 3:4 to
4:3, flipped at random) resized so that its long side is 400-500 px, like an ImageNet photo,
with sensor-like grain, and stored as a JPEG at quality 90 (about 40-90 KB): the pipeline then
pays real JPEG decoding, as on ImageNet. The task (which photo is this crop from?) is learnable
by a small CNN from 64-px crops. Generation runs in TensorFlow, about 35 ms per image per core,
once per size.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from pipelines.sources import files

VERSION = "v2"
# skimage.data loaders, one class each (their names are the class folders).
PHOTOS = (
    "astronaut",
    "brick",
    "camera",
    "chelsea",
    "coffee",
    "coins",
    "grass",
    "gravel",
    "hubble_deep_field",
    "immunohistochemistry",
    "moon",
    "page",
    "retina",
    "rocket",
    "stereo_motorcycle",
    "text",
)
LONG_SIDE_RANGE = (400, 500)
CROP_AREA_RANGE = (0.05, 0.3)
# Sensor-like grain (std in 0-255 levels): upsampled crops are smoother than camera photos.
GRAIN = 5.0
JPEG_QUALITY = 90


def make_folder(data_dir: str, *, num_train: int, num_eval: int, seed: int = 0) -> str:
    """The root of the photo set with these sizes under ``data_dir``, generated if missing.

    The root holds ``train/<class>/<id>.jpg`` and ``test/<class>/<id>.jpg`` (the layout of
    ``tfds.folder_dataset.ImageFolder``). A set is written to a temporary folder and renamed into
    place, so an interrupted generation never leaves a partial set behind.

    Raises:
      ValueError: a size is below 1.
    """
    for name, value in (("num_train", num_train), ("num_eval", num_eval)):
        if value < 1:
            raise ValueError(f"the photo set needs {name} >= 1, got {value!r}.")
    root = os.path.join(data_dir, "photos", f"{VERSION}-{num_train}-{num_eval}")
    if os.path.isdir(root):
        return root
    os.makedirs(os.path.dirname(root), exist_ok=True)
    print(
        f"Generating the photo set ({num_train} train + {num_eval} test JPEGs from scikit-image's "
        f"sample photographs) into {root} ...",
        flush=True,
    )
    staging = tempfile.mkdtemp(prefix=".staging-", dir=os.path.dirname(root))
    try:
        sources = [_photo(name) for name in PHOTOS]
        try:
            _write_split(os.path.join(staging, "train"), sources, num_train, seed)
            _write_split(os.path.join(staging, "test"), sources, num_eval, seed + 1)
        except (OSError, tf.errors.OpError) as error:  # a full disk, a read-only directory
            raise files.cannot_store("the photo set", os.path.dirname(root), error) from error
        try:
            os.rename(staging, root)
        except OSError:  # another process finished the same set first
            if not os.path.isdir(root):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root


def _photo(name: str) -> tf.Tensor:
    """uint8 [H, W, 1 or 3]: the photo as scikit-image ships it (grayscale ones keep 1 channel)."""
    import skimage.data

    pixels = getattr(skimage.data, name)()
    if isinstance(pixels, tuple):  # stereo_motorcycle: (left, right, disparity)
        pixels = pixels[0]
    pixels = np.asarray(pixels)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    return tf.constant(pixels[..., :3], tf.uint8)


def _write_split(directory: str, sources: list[tf.Tensor], num_examples: int, seed: int) -> None:
    labels = np.arange(num_examples) % len(PHOTOS)
    np.random.default_rng(seed).shuffle(labels)
    for name in PHOTOS:
        os.makedirs(os.path.join(directory, name))

    def write(index: int) -> None:
        label = labels[index]
        encoded = _crop(sources[label], tf.constant([seed, index], tf.int64))
        tf.io.write_file(os.path.join(directory, PHOTOS[label], f"{index:06d}.jpg"), encoded)

    # TensorFlow ops release the GIL: threads use every core.
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(write, range(num_examples)))


@tf.function(reduce_retracing=True)
def _crop(photo: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    seeds = tf.random.experimental.stateless_split(seed, num=4)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(photo),
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=seeds[0],
        min_object_covered=0.0,
        aspect_ratio_range=(3 / 4, 4 / 3),
        area_range=CROP_AREA_RANGE,
        use_image_if_no_bounding_boxes=True,
    )
    crop = tf.image.stateless_random_flip_left_right(tf.slice(photo, begin, size), seeds[1])
    long_side = tf.random.stateless_uniform(
        [], seeds[2], LONG_SIDE_RANGE[0], LONG_SIDE_RANGE[1] + 1, tf.int32
    )
    scale = tf.cast(long_side, tf.float32) / tf.cast(tf.reduce_max(size[:2]), tf.float32)
    new_size = tf.cast(tf.round(tf.cast(size[:2], tf.float32) * scale), tf.int32)
    resized = tf.image.resize(crop, new_size, antialias=True)
    resized += tf.random.stateless_normal(tf.shape(resized), seeds[3], stddev=GRAIN)
    pixels = tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
    return tf.io.encode_jpeg(pixels, quality=JPEG_QUALITY)
