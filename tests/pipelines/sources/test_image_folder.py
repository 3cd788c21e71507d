"""Image folders: layouts, labels and ids, ImageNet-style crops, the photo set, and bad input."""

import io
import itertools
import os
import re
import zlib

import numpy as np
import pytest
import tensorflow as tf
from absl import logging
from keras import utils as keras_utils
from PIL import Image

import echoing
import pipelines
from pipelines.sources import image_folder, images, photos

SIZE = 32


@pytest.fixture(scope="module")
def photo_root(tmp_path_factory) -> str:
    return photos.make_folder(str(tmp_path_factory.mktemp("photos")), num_train=30, num_eval=10)


def _jpeg(shape=(60, 80, 3), mode=None, seed=0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    picture = Image.fromarray(pixels.squeeze())
    if mode:
        picture = picture.convert(mode)
    buffer = io.BytesIO()
    picture.save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def _png(shape=(60, 80, 3)) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full(shape, 200, np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def _folder(root, files: dict[str, bytes]) -> str:
    """Writes ``{"class/name.jpg": bytes}`` under ``root``; returns ``root``."""
    for relative, data in files.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(data)
    return str(root)


def _config(root, **overrides):
    config = pipelines.default_data_config()
    config.source, config.image_dir, config.image_size = "image_folder", str(root), SIZE
    config.augment, config.batch_size, config.eval_batch_size = "inception", 4, 4
    config.shuffle_buffer = 0
    for key, value in overrides.items():
        config[key] = value
    return config


def test_photo_set_is_real_jpegs_at_imagenet_sizes_in_class_folders(photo_root):
    train = os.path.join(photo_root, "train")
    assert sorted(os.listdir(train)) == sorted(photos.PHOTOS)
    files = [os.path.join(d, f) for d, _, fs in os.walk(train) for f in fs]
    assert len(files) == 30
    for path in files[:6]:
        encoded = tf.io.read_file(path)
        assert bool(tf.io.is_jpeg(encoded))
        height, width, _ = tf.image.extract_jpeg_shape(encoded).numpy()
        assert photos.LONG_SIDE_RANGE[0] <= max(height, width) <= photos.LONG_SIDE_RANGE[1]
    gray = os.path.join(train, "camera", os.listdir(os.path.join(train, "camera"))[0])
    assert tf.image.extract_jpeg_shape(tf.io.read_file(gray)).numpy()[-1] == 1


def test_photo_set_is_written_once(photo_root):
    marker = os.path.join(photo_root, "train", "camera")
    before = os.stat(marker).st_mtime_ns
    again = photos.make_folder(
        os.path.dirname(os.path.dirname(photo_root)), num_train=30, num_eval=10
    )
    assert again == photo_root and os.stat(marker).st_mtime_ns == before


def test_split_layout_labels_by_sorted_class_and_ids_by_file(photo_root):
    source = image_folder.load(photo_root, image_size=SIZE)
    assert source.num_classes == len(photos.PHOTOS)
    assert source.input_shape == (SIZE, SIZE, 3)
    assert (source.train.num_examples, source.eval.num_examples) == (30, 10)
    raw = list(source.train.dataset.as_numpy_iterator())
    assert [r["id"] for r in raw] == list(range(30))
    for element in raw:
        class_name = os.path.basename(os.path.dirname(element["path"].decode()))
        assert sorted(photos.PHOTOS).index(class_name) == element["label"]


def test_inception_train_crops_differ_per_epoch_and_eval_is_fixed(photo_root):
    config = _config(photo_root, batch_size=30)
    datasets = pipelines.make_datasets(config, seed=0)
    first, second = itertools.islice(datasets.train, 2)
    assert first["inputs"].shape == (30, SIZE, SIZE, 3)
    assert set(first["id"].numpy()) == set(range(30)) == set(second["id"].numpy())
    order = np.argsort(first["id"].numpy()), np.argsort(second["id"].numpy())
    a, b = first["inputs"].numpy()[order[0]], second["inputs"].numpy()[order[1]]
    assert a.min() >= 0.0 and a.max() <= 1.0
    assert np.abs(a - b).mean() > 0.01  # a new crop each epoch
    again = pipelines.make_datasets(config, seed=0)
    np.testing.assert_array_equal(next(iter(again.train))["inputs"], first["inputs"])
    eval_once = np.concatenate([b["inputs"] for b in datasets.eval])
    eval_twice = np.concatenate([b["inputs"] for b in datasets.eval])
    np.testing.assert_array_equal(eval_once, eval_twice)


def test_center_crop_is_the_middle_of_the_image():
    pixels = np.zeros([40, 80, 3], np.uint8)
    pixels[:, 20:60] = 255  # a white square in the middle, black bars left and right
    crop = images.decode_center_crop(tf.io.encode_png(pixels), size=8, crop_fraction=1.0)
    np.testing.assert_allclose(crop.numpy(), 1.0, atol=0.02)


def test_keras_layout_holds_out_a_stable_eval_fraction(tmp_path):
    files = {f"c{k % 3}/{k:03d}.jpg": _jpeg(seed=k) for k in range(60)}
    root = _folder(tmp_path, files)
    source = image_folder.load(root, image_size=SIZE, eval_fraction=0.25)
    train = {r["path"] for r in source.train.dataset.as_numpy_iterator()}
    held = {r["path"] for r in source.eval.dataset.as_numpy_iterator()}
    assert not train & held and len(train | held) == 60
    assert 5 <= len(held) <= 25
    _folder(tmp_path, {"c0/999.jpg": _jpeg(seed=99)})  # adding a file moves no other
    grown = image_folder.load(root, image_size=SIZE, eval_fraction=0.25)
    assert held <= {r["path"] for r in grown.eval.dataset.as_numpy_iterator()}


def test_hidden_folders_and_files_are_no_classes_or_images_as_for_keras(tmp_path):
    # A notebook's .ipynb_checkpoints became class 0 and shifted every label (issue 33).
    files = {f"{c}/{k}.jpg": _jpeg(seed=k) for c in ("blue", "red") for k in range(3)}
    files[".ipynb_checkpoints/0-checkpoint.jpg"] = _jpeg(seed=9)
    files["red/.ipynb_checkpoints/0-checkpoint.jpg"] = _jpeg(seed=9)
    files["red/._1.jpg"] = b"AppleDouble metadata, not an image"
    root = _folder(tmp_path, files)
    source = image_folder.load(root, image_size=SIZE, eval_fraction=0.3)
    assert list(source.class_names) == ["blue", "red"]
    splits = (source.train.dataset, source.eval.dataset)
    paths = sorted(os.path.relpath(r["path"].numpy().decode(), root) for s in splits for r in s)
    assert paths == sorted(f"{c}/{k}.jpg" for c in ("blue", "red") for k in range(3))
    keras_classes = keras_utils.image_dataset_from_directory(root, batch_size=None).class_names
    assert keras_classes == list(source.class_names)


def test_png_gray_cmyk_and_tiny_images_decode_to_rgb_at_the_crop_size(tmp_path):
    files = {
        "a/png.png": _png(),
        "a/gray.jpg": _jpeg((60, 80), mode="L"),
        "a/cmyk.jpg": _jpeg(mode="CMYK"),
        "a/tiny.jpg": _jpeg((10, 8, 3)),
        "a/upper.JPEG": _jpeg(),
    }
    root = _folder(tmp_path, {f"train/{k}": v for k, v in files.items()})
    _folder(tmp_path, {"test/a/x.jpg": _jpeg()})
    datasets = pipelines.make_datasets(_config(root, batch_size=5), seed=0)
    batch = next(iter(datasets.train))
    assert batch["inputs"].shape == (5, SIZE, SIZE, 3)
    assert np.isfinite(batch["inputs"].numpy()).all()


def test_non_images_and_empty_classes_are_reported_not_silently_dropped(tmp_path, monkeypatch):
    warnings = []
    monkeypatch.setattr(logging, "warning", lambda message, *args: warnings.append(message % args))
    files = {"a/x.jpg": _jpeg(), "a/notes.txt": b"hi", "a/.DS_Store": b""}
    root = _folder(tmp_path, {**{f"train/{k}": v for k, v in files.items()}, "test/a/y.jpg": b""})
    os.makedirs(tmp_path / "train" / "b")
    source = image_folder.load(root, image_size=SIZE)
    assert source.num_classes == 2 and source.train.num_examples == 1
    assert any("left out 2 files that are not images" in w for w in warnings)
    assert any("class 'b' has no image" in w for w in warnings)


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, "has no class folders"),
        ({"a/notes.txt": b"hi"}, "holds no image"),
        ({"train/a/x.jpg": b"", "test/b/y.jpg": b""}, "class folders the train split lacks"),
    ],
)
def test_bad_folders_are_clear_errors(tmp_path, files, message):
    root = _folder(tmp_path, files)
    with pytest.raises(ValueError, match=message):
        image_folder.load(root, image_size=SIZE)


@pytest.mark.parametrize(
    ("name", "named"),
    [(b"b\xe9te/x.jpg", "b\\xe9te"), (b"cat/caf\xe9.jpg", "cat/caf\\xe9.jpg")],
    ids=["class", "file"],
)
def test_names_that_are_not_utf8_are_named_with_the_fix(tmp_path, name, named):
    # Issue 33: a Latin-1 file or class name failed with "'utf-8' codec can't encode character
    # '\udce9' ... surrogates not allowed", naming no file.
    for path in (b"cat/a.jpg", name):
        os.makedirs(os.path.dirname(os.path.join(os.fsencode(tmp_path), path)), exist_ok=True)
        with open(os.path.join(os.fsencode(tmp_path), path), "wb") as file:
            file.write(_jpeg())
    shown = re.escape(os.path.join(str(tmp_path), named))
    with pytest.raises(ValueError, match=rf"names not in UTF-8 \(1 in all, e.g. {shown}: .*rename"):
        image_folder.load(str(tmp_path), image_size=SIZE)


def test_a_missing_folder_and_an_empty_eval_split_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="is not a folder"):
        image_folder.load(str(tmp_path / "nope"), image_size=SIZE)
    root = _folder(tmp_path, {"a/x.jpg": _jpeg()})
    with pytest.raises(ValueError, match=r"\(eval\) is empty.*eval_fraction"):
        image_folder.load(root, image_size=SIZE, eval_fraction=0.0)


@pytest.mark.parametrize(
    "bad",
    [_jpeg()[:-400], b"", b"plain text, not a picture", _png()[:-20]],
    ids=["truncated_jpeg", "empty", "text", "truncated_png"],
)
def test_a_corrupt_file_fails_naming_it_unless_skipped_and_counted(tmp_path, bad):
    good = {f"a/{k}.jpg": _jpeg(seed=k) for k in range(3)}
    root = _folder(
        tmp_path,
        {
            **{f"train/{k}": v for k, v in good.items()},
            "train/a/bad.jpg": bad,
            "test/a/x.jpg": _jpeg(),
        },
    )
    datasets = pipelines.make_datasets(_config(root, shuffle_buffer=8), seed=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"not an image[\s\S]*bad\.jpg"):
        list(itertools.islice(datasets.train, 4))
    skipping = pipelines.make_datasets(_config(root, skip_corrupt=True, batch_size=3), seed=0)
    assert skipping.num_train_examples == 3
    assert skipping.train_read_stats.skipped == 1
    assert skipping.train_read_stats.skipped_records[0][0].endswith("bad.jpg")
    for batch in itertools.islice(skipping.train, 3):
        assert batch["inputs"].shape == (3, SIZE, SIZE, 3)


def test_a_jpeg_garbled_inside_is_skipped_with_skip_corrupt(tmp_path):
    garbled = bytearray(_jpeg((200, 200, 3)))
    garbled[600:2600] = np.random.default_rng(0).integers(0, 256, 2000, np.uint8).tobytes()
    files = {"train/a/good.jpg": _jpeg(), "train/a/garbled.jpg": bytes(garbled)}
    files["test/a/x.jpg"] = _jpeg()
    source = image_folder.load(_folder(tmp_path, files), image_size=SIZE, skip_corrupt=True)
    assert source.train.num_examples == 1 and source.train.read_stats.skipped == 1
    assert source.train.read_stats.skipped_records[0][0].endswith("garbled.jpg")
    # A trainer builds its datasets several times: the scan (and its count) happens once.
    again = image_folder.load(_folder(tmp_path, {}), image_size=SIZE, skip_corrupt=True)
    assert again.train.read_stats is source.train.read_stats
    assert again.train.read_stats.skipped == 1


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"image_size": None}, "needs data config image_size"),
        ({"eval_fraction": 1.0}, "eval_fraction must be in"),
    ],
)
def test_config_errors_for_image_folders(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        pipelines.resolve_data_config(_config(tmp_path, **overrides))


def test_echo_after_decode_is_allowed(photo_root):
    echo = ("after_decode", "echo", echoing.echo(2.0))
    datasets = pipelines.make_datasets(_config(photo_root), seed=0, insertions=[echo])
    ids = next(iter(datasets.train))["id"].numpy()
    assert ids[0] == ids[1] and ids[2] == ids[3]  # each decoded crop, twice


def test_inception_needs_encoded_images():
    config = pipelines.default_data_config()
    config.source, config.augment, config.num_classes = "arrays", "inception", 2
    config.train_arrays = {"inputs": np.zeros([8, 4, 4, 3]), "label": np.arange(8) % 2}
    config.eval_arrays = config.train_arrays
    config.batch_size = 4
    with pytest.raises(ValueError, match=r"augment='inception'.*encoded images"):
        pipelines.make_datasets(config, seed=0)


def test_jpeg_tfrecords_crop_while_decoding_too(tmp_path):
    from pipelines.sources import tfrecord

    pixels = np.random.default_rng(0).integers(0, 256, (8, 48, 40, 3), dtype=np.uint8)
    labels = np.arange(8) % 2
    for split in ("train", "eval"):
        tfrecord.write(str(tmp_path / f"{split}.tfrecord"), pixels, labels, encoding="jpeg")
    config = pipelines.default_data_config()
    config.source, config.num_classes, config.image_size = "tfrecord", 2, SIZE
    config.train_files, config.eval_files = (
        str(tmp_path / f"{s}.tfrecord") for s in ("train", "eval")
    )
    config.augment, config.batch_size, config.eval_batch_size = "inception", 8, 8
    config.shuffle_buffer = 0
    first, second = itertools.islice(pipelines.make_datasets(config, seed=0).train, 2)
    assert first["inputs"].shape == (8, SIZE, SIZE, 3)
    assert np.abs(first["inputs"].numpy() - second["inputs"].numpy()).mean() > 0.01


def _encoded(shape, fmt: str) -> bytes:
    buffer = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "BMP"])
def test_the_size_is_read_from_the_header(fmt):
    for shape in [(37, 61, 3), (300, 2, 3)]:
        size = images.encoded_size(tf.constant(_encoded(shape, fmt)))
        assert size.numpy().tolist() == list(shape[:2])


def _huge_png(height: int, width: int) -> bytes:
    """A PNG whose header claims ``height`` x ``width`` (no pixel data: never decoded)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def test_a_huge_image_fails_naming_it_before_decoding_unless_skipped(tmp_path):
    files = {f"train/a/{k}.jpg": _jpeg(seed=k) for k in range(3)}
    files.update({"train/a/huge.png": _huge_png(40_000, 40_000), "test/a/x.jpg": _jpeg()})
    root = _folder(tmp_path, files)
    datasets = pipelines.make_datasets(_config(root, shuffle_buffer=8), seed=0)
    message = r"image too large:[\s\S]*huge\.png[\s\S]*40000[\s\S]*resize it"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        list(itertools.islice(datasets.train, 4))
    skipping = image_folder.load(root, image_size=SIZE, skip_corrupt=True)
    assert skipping.train.num_examples == 3
    (skipped,) = skipping.train.read_stats.skipped_records
    assert skipped[0].endswith("huge.png") and "40000 x 40000 pixels" in skipped[-1]


def test_train_and_val_folders_are_refused_as_classes_naming_the_eval_split(tmp_path):
    # Before: 'Found ... in 2 classes: train (56 + 4), val (15 + 0)', a run learning to tell
    # the splits apart at accuracy 1.0.
    files = {f"{split}/{name}/{i}.jpg": _jpeg(seed=i) for split in ("train", "val")
             for name in ("a", "b") for i in range(2)}  # fmt: skip
    root = _folder(tmp_path, files)
    with pytest.raises(ValueError, match=r"'train' and 'val' folders, which look like splits.*"
                       r"set train_split='train' and eval_split='val'"):  # fmt: skip
        image_folder.load(root, image_size=SIZE)
    source = image_folder.load(root, image_size=SIZE, eval_split="val")
    assert source.class_names == ("a", "b") and source.eval.num_examples == 4
    # A class that happens to be named 'train', with no split-like sibling, is still a class.
    classes = _folder(tmp_path / "classes", {"train/x.jpg": _jpeg(), "plane/y.jpg": _jpeg()})
    assert image_folder.load(classes, image_size=SIZE, eval_fraction=0.5).class_names == (
        "plane",
        "train",
    )


def _split_folders(root, splits=("train", "test")) -> str:
    files = {f"{split}/{name}/{i}.jpg": _jpeg(seed=i) for split in splits
             for name in ("a", "b") for i in range(2)}  # fmt: skip
    return _folder(root, files)


def test_split_folders_the_config_does_not_name_are_refused_not_read_as_classes(tmp_path):
    # Before: 'in 2 classes: test (19 + 1), train (58 + 2)' with train_split='nonexistent', and
    # the same for training/ + test/ at the defaults: a run learning to tell the splits apart.
    root = _split_folders(tmp_path / "named")
    with pytest.raises(ValueError, match=r"holds 'train' and 'test' folders, which look like "
                       r"splits, but data config train_split='nonexistent'"):  # fmt: skip
        image_folder.load(root, image_size=SIZE, train_split="nonexistent")
    training = _split_folders(tmp_path / "training", ("training", "test"))
    with pytest.raises(ValueError, match=r"set train_split='training' and eval_split='test'"):
        image_folder.load(training, image_size=SIZE)
    assert image_folder.load(training, image_size=SIZE, train_split="training").class_names == (
        "a",
        "b",
    )


def test_split_names_for_a_folder_of_class_folders_are_refused(tmp_path):
    # Before: train_split='nonexistent' on DIR/<class>/ trained on the same split, silently.
    root = _folder(tmp_path, {f"{name}/{i}.jpg": _jpeg(seed=i) for name in "ab" for i in range(4)})
    message = r"no split folder 'nonexistent' \(data config train_split\); its folders, read "
    with pytest.raises(ValueError, match=message + r"as classes, are \['a', 'b'\]"):
        image_folder.load(root, image_size=SIZE, train_split="nonexistent")
    with pytest.raises(ValueError, match=r"no split folder 'val' \(data config eval_split\)"):
        image_folder.load(root, image_size=SIZE, eval_split="val")


def test_an_eval_fraction_for_a_folder_with_split_folders_is_refused(tmp_path):
    # Before: eval_fraction=0.5 on train/ + test/ still gave test/ as the eval split, silently.
    root = _split_folders(tmp_path)
    with pytest.raises(ValueError, match=r"eval_fraction=0.5 holds out a share of a folder of "
                       r"class folders, but image folder .* has the split folders 'train' and "
                       r"'test'"):  # fmt: skip
        image_folder.load(root, image_size=SIZE, eval_fraction=0.5)
    assert image_folder.load(root, image_size=SIZE).eval.num_examples == 4


def test_a_class_whose_every_image_is_held_out_is_named(tmp_path, monkeypatch):
    # Before: 'cat (0 + 1)' in the Found line, and training went on unable to learn cat.
    warnings = []
    monkeypatch.setattr(logging, "warning", lambda message, *args: warnings.append(message % args))
    root = str(tmp_path)
    held = next(  # a name the path hash holds out, for the class's only image
        f"cat/{i}.jpg"
        for i in range(100)
        if image_folder._held_out(os.path.join(root, "cat", f"{i}.jpg"), root, 0.5)
    )
    _folder(tmp_path, {held: _jpeg(), **{f"dog/{i}.jpg": _jpeg(seed=i) for i in range(8)}})
    image_folder.load(root, image_size=SIZE, eval_fraction=0.5)
    assert any("every image of class ['cat'] is held out for eval" in w for w in warnings)


@pytest.mark.parametrize("layout", ["classes", "splits"])
def test_an_empty_class_folder_is_named_as_a_class_the_model_never_trains(
    layout, tmp_path, monkeypatch
):
    # Issue 33: an empty folder was a fourth class (output) in silence, or named as "held out
    # for eval (eval_fraction)", which it was not.
    warnings = []
    monkeypatch.setattr(logging, "warning", lambda message, *args: warnings.append(message % args))
    images = {f"{name}/{i}.jpg": _jpeg(seed=i) for name in ("cat", "dog") for i in range(6)}
    if layout == "splits":
        images = {**{f"train/{k}": v for k, v in images.items()}, "test/cat/0.jpg": _jpeg()}
    root = _folder(tmp_path, images)
    os.makedirs(os.path.join(root, *(["train"] if layout == "splits" else []), "empty"))
    held_out = {"eval_fraction": 0.5} if layout == "classes" else {}
    source = image_folder.load(root, image_size=SIZE, **held_out)
    assert source.class_names == ("cat", "dog", "empty")  # a class, as Keras makes it
    said = [w for w in warnings if "holds no images" in w]
    assert len(said) == 1 and "class folder ['empty'] holds no images, yet it is a class" in said[0]
    assert not [w for w in warnings if "held out" in w and "empty" in w]
