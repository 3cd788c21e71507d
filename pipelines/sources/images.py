"""Image decoding shared by sources: encoded bytes or uint8 pixels -> float32 in [0, 1].

Example::

    import tensorflow as tf
    from pipelines.sources import images

    png = tf.io.encode_png(tf.zeros([8, 8, 3], tf.uint8))
    pixels = images.decode(png, shape=(8, 8, 3))  # float32 [8, 8, 3]

This is the pipeline's ``decode`` stage for images, so echoing ``before_decode`` repeats the
compressed bytes and ``after_decode`` the pixels.
"""

from __future__ import annotations

import tensorflow as tf


def static_shape(shape, image_size: int | None, what: str) -> tuple[int, int, int]:
    """The decoded shape: ``shape`` itself, or ``image_size`` square when it is set.

    Raises:
      ValueError: the image shape is not [height, width, channels] with known channels, or the
        height/width vary and ``image_size`` is None (batches need one size).
    """
    shape = tuple(shape)
    if len(shape) != 3 or shape[-1] is None:
        raise ValueError(
            f"{what} must be images [height, width, channels] with known channels, got shape "
            f"{shape}."
        )
    if image_size is not None:
        return (image_size, image_size, shape[-1])
    if None in shape[:2]:
        raise ValueError(
            f"{what} has images of varying size {shape}; set data config image_size "
            "(e.g. image_size=224) so that they can be batched."
        )
    return shape


def decode(value: tf.Tensor, *, shape: tuple[int, int, int], resize: bool = False) -> tf.Tensor:
    """Decodes PNG/JPEG/BMP/GIF bytes or converts uint8 pixels to float32 in [0, 1].

    Args:
      value: a scalar string (encoded image) or an integer/float [H, W, C] tensor.
      shape: the static output shape [height, width, channels].
      resize: resize to ``shape``'s height and width (for sources of varying image size).
    """
    if value.dtype == tf.string:
        value = tf.io.decode_image(value, channels=shape[-1], expand_animations=False)
    image = tf.image.convert_image_dtype(value, tf.float32)
    if resize:
        image = tf.image.resize(image, shape[:2])
    return tf.ensure_shape(image, shape)


# ImageNet-style crops (Szegedy et al.'s "Inception" preprocessing, as in TF's ResNet models).
CROP_AREA_RANGE = (0.08, 1.0)
CROP_ASPECT_RATIO_RANGE = (3 / 4, 4 / 3)
CENTER_CROP_FRACTION = 0.875  # 224 of 256, the usual eval crop


def decode_random_crop(
    encoded: tf.Tensor,
    seed: tf.Tensor,
    *,
    size: int,
    channels: int = 3,
    area_range: tuple[float, float] = CROP_AREA_RANGE,
    aspect_ratio_range: tuple[float, float] = CROP_ASPECT_RATIO_RANGE,
) -> tf.Tensor:
    """Random-resized crop of encoded image bytes to float32 [size, size, channels] in [0, 1].

    JPEGs are cropped while decoding (``tf.io.decode_and_crop_jpeg``): only the crop window's
    blocks are decoded, which is what makes this cheaper than decoding the whole image. Other
    formats (PNG, BMP, GIF) are decoded whole, then cropped. Grayscale and CMYK JPEGs come out
    with ``channels`` channels; images smaller than ``size`` are upsampled.

    Example::

        png = tf.io.encode_png(tf.zeros([40, 60, 3], tf.uint8))
        crop = decode_random_crop(png, tf.constant([0, 1]), size=32)  # [32, 32, 3]

    Args:
      encoded: a scalar string, the file's bytes.
      seed: int32/int64 [2], a stateless seed (one per element: see ``Dataset.random``).
      size: the output's height and width.
    """
    image_shape = _encoded_shape(encoded, channels)
    begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
        image_shape,
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=seed,
        min_object_covered=0.0,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    window = tf.stack([begin[0], begin[1], crop_size[0], crop_size[1]])
    return _decode_window(encoded, window, size=size, channels=channels)


def decode_center_crop(
    encoded: tf.Tensor,
    *,
    size: int,
    channels: int = 3,
    crop_fraction: float = CENTER_CROP_FRACTION,
) -> tf.Tensor:
    """The central square (``crop_fraction`` of the short side) resized to [size, size, channels].

    The eval counterpart of ``decode_random_crop``; JPEGs are likewise cropped while decoding.
    """
    shape = _encoded_shape(encoded, channels)
    side = tf.cast(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32) * crop_fraction, tf.int32)
    side = tf.maximum(side, 1)
    window = tf.stack([(shape[0] - side) // 2, (shape[1] - side) // 2, side, side])
    return _decode_window(encoded, window, size=size, channels=channels)


# Images with more pixels than this are refused before decoding, naming the file: a 40000 x
# 40000 PNG would take 4.8 GB as RGB bytes (and four times that as floats) on every read.
MAX_PIXELS = 100_000_000


def encoded_size(encoded: tf.Tensor) -> tf.Tensor:
    """[height, width] (int64) of JPEG, PNG, GIF or BMP bytes, read from the file's header.

    Nothing is decoded: the crops need the size first, and decoding a large PNG whole only to
    learn it, then again for the crop, cost a 20000 x 20000 image 2.7 GB. Other bytes are
    decoded to find it.

    Example::

        png = tf.io.encode_png(tf.zeros([40, 60, 3], tf.uint8))
        encoded_size(png)  # [40, 60]
    """
    head = tf.strings.substr(encoded, 0, 4)

    def number(offset: int, size: int, *, big_endian: bool) -> tf.Tensor:
        digits = tf.cast(
            tf.io.decode_raw(tf.strings.substr(encoded, offset, size), tf.uint8), tf.int64
        )
        weights = tf.constant([256**k for k in range(size)], tf.int64)
        return tf.reduce_sum(digits * (tf.reverse(weights, [0]) if big_endian else weights))

    def bmp():  # a negative height (top-down rows) is stored as int32, two's complement
        height = number(22, 4, big_endian=False)
        return tf.stack(
            [tf.where(height >= 2**31, 2**32 - height, height), number(18, 4, big_endian=False)]
        )

    return tf.case(
        [
            (
                tf.io.is_jpeg(encoded),
                lambda: tf.cast(tf.image.extract_jpeg_shape(encoded)[:2], tf.int64),
            ),
            # PNG: the IHDR chunk's width and height, big-endian, at bytes 16 and 20.
            (
                tf.equal(head, b"\x89PNG"),
                lambda: tf.stack([number(20, 4, big_endian=True), number(16, 4, big_endian=True)]),
            ),
            # GIF: the logical screen's width and height, little-endian, at bytes 6 and 8.
            (
                tf.equal(head, b"GIF8"),
                lambda: tf.stack([number(8, 2, big_endian=False), number(6, 2, big_endian=False)]),
            ),
            (tf.equal(tf.strings.substr(encoded, 0, 2), b"BM"), bmp),
        ],
        default=lambda: tf.cast(
            tf.shape(tf.io.decode_image(encoded, expand_animations=False))[:2], tf.int64
        ),
        exclusive=False,
    )


def _encoded_shape(encoded: tf.Tensor, channels: int = 3) -> tf.Tensor:
    """[height, width, channels] (int32), from the header (``encoded_size``)."""
    return tf.concat([tf.cast(encoded_size(encoded), tf.int32), [channels]], axis=0)


def _decode_window(encoded: tf.Tensor, window: tf.Tensor, *, size: int, channels: int):
    """Decodes ``window`` = [top, left, height, width] of ``encoded``, resized to ``size``."""

    def whole_then_crop():
        image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
        return tf.slice(image, [window[0], window[1], 0], [window[2], window[3], channels])

    pixels = tf.cond(
        tf.io.is_jpeg(encoded),
        lambda: tf.io.decode_and_crop_jpeg(encoded, window, channels=channels),
        whole_then_crop,
    )
    pixels = tf.image.resize(pixels, [size, size]) / 255.0
    return tf.ensure_shape(tf.clip_by_value(pixels, 0.0, 1.0), (size, size, channels))


def check_intact(encoded: tf.Tensor, path: tf.Tensor) -> tf.Tensor:
    """``encoded``, after checking in the graph that it is an image file and not cut short.

    A JPEG must start with its SOI marker and end with its EOI marker (FFD9, allowing a few
    trailing bytes); a PNG must end with its IEND chunk. A truncated JPEG would otherwise fail
    only when a random crop happens to reach the missing part, with an error that names no file.

    Raises (when run):
      tf.errors.InvalidArgumentError: naming ``path``, when ``is_intact`` is False.
    """
    return tf.cond(
        is_intact(encoded),
        lambda: encoded,
        lambda: _fail(path, encoded),
    )


def is_intact(encoded: tf.Tensor) -> tf.Tensor:
    """Whether ``encoded`` is a JPEG/PNG with its end marker, or a GIF/BMP (a bool scalar)."""
    length = tf.strings.length(encoded)
    tail = tf.io.decode_raw(tf.strings.substr(encoded, tf.maximum(length - 32, 0), 32), tf.uint8)
    jpeg_end = tf.reduce_any((tail[:-1] == 0xFF) & (tail[1:] == 0xD9))
    png_end = tf.strings.substr(encoded, tf.maximum(length - 8, 0), 4) == "IEND"
    head = tf.strings.substr(encoded, 0, 4)
    is_png = head == b"\x89PNG"
    # GIF and BMP carry no end marker: only their signature is checked.
    other = (head == b"GIF8") | (tf.strings.substr(encoded, 0, 2) == b"BM")
    return tf.where(tf.io.is_jpeg(encoded), jpeg_end, tf.where(is_png, png_end, other))


def check_pixels(encoded: tf.Tensor, path: tf.Tensor, max_pixels: int = MAX_PIXELS) -> tf.Tensor:
    """``encoded``, after checking in the graph, from its header, that its height x width is at
    most ``max_pixels``: a huge image stops the run naming its file before it is decoded.

    Raises (when run):
      tf.errors.InvalidArgumentError: naming ``path`` and its size.
    """
    size = encoded_size(encoded)
    check = tf.debugging.Assert(
        tf.reduce_prod(size) <= max_pixels,
        [
            "image too large:",
            path,
            "is",
            size[0],
            "x",
            size[1],
            f"pixels, more than {max_pixels:,} - resize it (its crops are resized to "
            "image_size anyway), or set data config skip_corrupt=True to skip and count it.",
        ],
        summarize=3,
    )
    with tf.control_dependencies([check]):
        return tf.identity(encoded)


def _fail(path: tf.Tensor, encoded: tf.Tensor) -> tf.Tensor:
    check = tf.debugging.Assert(
        False,
        [
            "corrupt, truncated or not an image (JPEG, PNG, GIF, BMP):",
            path,
            "- re-copy it, or set data config skip_corrupt=True to skip and count unreadable "
            "images.",
        ],
    )
    with tf.control_dependencies([check]):
        return tf.identity(encoded)
