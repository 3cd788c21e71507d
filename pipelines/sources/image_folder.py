"""A folder of JPEG/PNG images, one sub-folder per class, decoded with ImageNet-style crops.

Example::

    from pipelines.sources import image_folder, photos

    root = photos.make_folder("/tmp/echoing", num_train=200, num_eval=50)
    source = image_folder.load(root, image_size=64)
    # source.train.dataset yields {"path", "label", "id"}; source.train.decode makes pixels

Two layouts are read, the ones ``tfds.folder_dataset.ImageFolder`` and
``keras.utils.image_dataset_from_directory`` read:

- ``root/<train_split>/<class>/<image>`` and ``root/<eval_split>/<class>/<image>``;
- ``root/<class>/<image>``: then a fixed ``eval_fraction`` of the images (chosen by a hash of
  each file's path, so adding images never moves the others between splits) is held out.

Classes are the sorted sub-folder names of the train split (label = index), as Keras does; a
class folder with no image keeps its label, with a warning. Ids are each file's index in its
split's sorted file list. Files with other extensions are not images and are left out (counted,
with a warning); images are ``.jpg``/``.jpeg``/``.png``/``.gif``/``.bmp`` in any case.

Reading is in the graph: the split holds file paths, and the pipeline's ``decode`` stage reads
each file, checks it is intact (``images.check_intact``: a truncated file is an error naming it)
and not over ``images.MAX_PIXELS`` (read from its header: a huge image is an error naming it
before it is decoded), and decodes it. ``decode`` (eval) takes the central 87.5% square;
``crop_decode`` (train, for ``augment="inception"``) a random-resized crop, decoding only that
window of a JPEG. With
``skip_corrupt=True`` every file is decoded once at ``load`` and the ones that fail are left
out (too large ones without decoding), logged and counted in ``read_stats``: about 1 ms per
image, once per process and file list.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import zlib

import tensorflow as tf
from absl import logging

from pipelines.sources import images
from pipelines.sources.files import is_utf8, not_utf8
from pipelines.sources.record_reader import ReadStats
from pipelines.sources.source import Source, SourceSplit

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
CHANNELS = 3
# skip_corrupt scans, by file list: a trainer builds its datasets several times per run, and a
# scan decodes every file. The stats object is shared too, so each file is counted once.
_SCANS: dict[tuple[tuple[str, int], ...], tuple[list[tuple[str, int]], ReadStats]] = {}


# The share of a folder of class folders held out for eval, unless the config says otherwise.
DEFAULT_EVAL_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class ImageFolderSource(Source):
    """A ``Source`` with the names of its classes (the trainer writes them beside the model).

    Attributes:
      class_names: the train split's class folder names, sorted; label ``i`` is
        ``class_names[i]``.
    """

    class_names: tuple[str, ...] = ()


def load(
    root: str,
    *,
    image_size: int,
    train_split: str = "train",
    eval_split: str = "test",
    eval_fraction: float = DEFAULT_EVAL_FRACTION,
    skip_corrupt: bool = False,
) -> ImageFolderSource:
    """Returns the source over the image folder ``root`` (see the module docstring).

    Raises:
      ValueError: ``root`` is not a folder, holds no class folder or no image, a split is empty,
        or the eval split has a class the train split lacks.
    """
    if not os.path.isdir(root):
        raise ValueError(
            f"data config image_dir {root!r} is not a folder; point it at a folder of class "
            "folders (root/<class>/<image>.jpg) or of split folders (root/train/<class>/...)."
        )
    train_dir, eval_dir = os.path.join(root, train_split), os.path.join(root, eval_split)
    if os.path.isdir(train_dir) and os.path.isdir(eval_dir):
        _refuse_eval_fraction(root, train_split, eval_split, eval_fraction)
        classes = _classes(train_dir)
        train_files = _files(train_dir, classes)
        eval_files = _files(eval_dir, classes, check_against=_classes(eval_dir))
        _warn_if_classes_untrained(train_dir, classes, train_files, train_files)
    else:
        classes = _classes(root)
        _refuse_unnamed_splits(root, classes, train_split, eval_split)
        files = _files(root, classes)
        held_out = [_held_out(path, root, eval_fraction) for path, _ in files]
        train_files = [file for file, out in zip(files, held_out, strict=True) if not out]
        eval_files = [file for file, out in zip(files, held_out, strict=True) if out]
        _warn_if_classes_untrained(root, classes, files, train_files)
    train, eval_ = (
        _split(files, name, image_size, skip_corrupt)
        for files, name in ((train_files, f"{root} (train)"), (eval_files, f"{root} (eval)"))
    )
    return ImageFolderSource(
        train=train,
        eval=eval_,
        num_classes=len(classes),
        input_shape=(image_size, image_size, CHANNELS),
        class_names=tuple(classes),
    )


# Folder names that mean a train or an eval split (Keras, TFDS and ImageNet's own).
_TRAIN_SPLIT_NAMES = ("train", "training")
_EVAL_SPLIT_NAMES = ("val", "valid", "validation", "eval", "test", "dev")


def _refuse_unnamed_splits(root: str, classes: list[str], train_split: str, eval_split: str):
    """Refuses a folder read as class folders whose folders are splits, or that lacks the split
    folders the config names: read as classes, ``train/`` and ``test/`` would teach the run to
    tell the splits apart, two "classes", and its accuracy would say nothing."""
    lower = {name.lower(): name for name in classes}
    trains = [lower[name] for name in (train_split.lower(), *_TRAIN_SPLIT_NAMES) if name in lower]
    evals = [lower[name] for name in (eval_split.lower(), *_EVAL_SPLIT_NAMES) if name in lower]
    if trains and evals:
        raise ValueError(
            f"image folder {root!r} holds {trains[0]!r} and {evals[0]!r} folders, which look like "
            f"splits, but data config train_split={train_split!r} and eval_split={eval_split!r} "
            f"do not both name them, so they would be read as classes ({classes}); set "
            f"train_split={trains[0]!r} and eval_split={evals[0]!r} to read them as the splits."
        )
    if (train_split, eval_split) != ("train", "test"):  # the config asks for split folders
        # The first absent folder (one is, or the folder would have the split layout), a name
        # the config changed before a default.
        pairs = [("train_split", train_split, "train"), ("eval_split", eval_split, "test")]
        key, name = next(
            (key, name)
            for key, name, default in sorted(pairs, key=lambda pair: pair[1] == pair[2])
            if name not in classes
        )
        raise ValueError(
            f"image folder {root!r} has no split folder {name!r} (data config {key}); its "
            f"folders, read as classes, are {classes}. Name its split folders with train_split "
            "and eval_split, or leave both at their defaults ('train', 'test') for a folder of "
            "class folders, whose eval split is held out by eval_fraction."
        )


def _warn_if_classes_untrained(root: str, classes: list[str], files, train_files) -> None:
    """Warns naming the classes the model cannot learn: an empty class folder, which is still a
    class (an output, as Keras' image_dataset_from_directory makes it), and a class whose every
    image the hash held out for eval (one image, say), whose eval images count as errors.
    ``files`` are the folder's images, ``train_files`` those the run trains on."""
    present = {label for _, label in files}
    trained = {label for _, label in train_files}
    empty = [name for label, name in enumerate(classes) if label not in present]
    lost = [name for label, name in enumerate(classes) if label in present - trained]
    if empty:
        logging.warning(
            "image folder %r: class %s %s no images, yet %s a class (an output the model "
            "never trains); remove %s, or add images.",
            root,
            "folder" if len(empty) == 1 else "folders",
            f"{empty} holds" if len(empty) == 1 else f"{empty} hold",
            "it is" if len(empty) == 1 else "each is",
            "it" if len(empty) == 1 else "them",
        )
    if lost:
        logging.warning(
            "image folder %r: every image of %s %s is held out for eval (eval_fraction), so the "
            "model cannot learn %s; add training images, or lay the folder out as "
            "train/<class>/ and test/<class>/.",
            root,
            "class" if len(lost) == 1 else "classes",
            lost,
            "it" if len(lost) == 1 else "them",
        )


def _refuse_eval_fraction(root: str, train_split: str, eval_split: str, eval_fraction: float):
    """Refuses an ``eval_fraction`` other than its default for a folder with split folders,
    whose eval split is its own folder: the fraction would be ignored."""
    if eval_fraction != DEFAULT_EVAL_FRACTION:
        raise ValueError(
            f"data config eval_fraction={eval_fraction!r} holds out a share of a folder of class "
            f"folders, but image folder {root!r} has the split folders {train_split!r} and "
            f"{eval_split!r}, whose {eval_split!r} is the eval split; leave eval_fraction at "
            f"its default, {DEFAULT_EVAL_FRACTION}."
        )


def _hidden(relative: str) -> bool:
    """Whether a relative path has a hidden part (``.ipynb_checkpoints/x.jpg``, ``._x.jpg``)."""
    return any(part.startswith(".") and part != "." for part in relative.split(os.sep))


def _require_utf8(paths: list[str], directory: str) -> None:
    """Names a listing's paths that are not UTF-8 (Python keeps their bytes as surrogates),
    which TensorFlow's string tensors refuse with a codec error naming no file."""
    undecodable = [path for path in paths if not is_utf8(path)]
    if undecodable:
        raise ValueError(not_utf8(undecodable, f"image folder {directory!r}"))


def _classes(directory: str) -> list[str]:
    # Hidden folders (.ipynb_checkpoints, .git) are no classes, as for Keras'
    # image_dataset_from_directory: one would shift every label after it.
    classes = sorted(
        entry.name for entry in os.scandir(directory) if entry.is_dir() and not _hidden(entry.name)
    )
    _require_utf8([os.path.join(directory, name) for name in classes], directory)
    if not classes:
        raise ValueError(
            f"image folder {directory!r} has no class folders; expected "
            f"{directory}/<class>/<image>.jpg (one sub-folder per class)."
        )
    return classes


def _files(directory, classes, check_against=None) -> list[tuple[str, int]]:
    """Sorted ``(path, label)`` of the images under ``directory/<class>/``."""
    extra = sorted(set(check_against or ()) - set(classes))
    if extra:
        raise ValueError(
            f"image folder {directory!r} has class folders the train split lacks: {extra}; "
            f"the train split's classes are {classes}."
        )
    files, others = [], []
    for label, name in enumerate(classes):
        class_dir = os.path.join(directory, name)
        if not os.path.isdir(class_dir):
            continue
        found = 0
        for dirpath, _, filenames in sorted(os.walk(class_dir, followlinks=True)):
            if _hidden(os.path.relpath(dirpath, class_dir)):
                continue  # e.g. a notebook's .ipynb_checkpoints: copies, not more images
            for filename in sorted(filenames):
                path = os.path.join(dirpath, filename)
                if filename.lower().endswith(IMAGE_EXTENSIONS) and not _hidden(filename):
                    files.append((path, label))
                    found += 1
                else:
                    others.append(path)
        if not found:
            logging.warning("image folder class %r has no image in %s", name, class_dir)
    _require_utf8([path for path, _ in files], directory)
    if others:
        logging.warning(
            "image folder %s: left out %d files that are not images by extension (%s), e.g. %s",
            directory,
            len(others),
            "/".join(IMAGE_EXTENSIONS),
            others[:3],
        )
    if not files:
        raise ValueError(
            f"image folder {directory!r} holds no image ({'/'.join(IMAGE_EXTENSIONS)}) in its "
            f"class folders {classes}."
        )
    return files


def _held_out(path: str, root: str, eval_fraction: float) -> bool:
    key = os.path.relpath(path, root).encode()
    return zlib.crc32(key) % 10_000 < eval_fraction * 10_000


def _split(files, what: str, image_size: int, skip_corrupt: bool) -> SourceSplit:
    stats = None
    if skip_corrupt:
        key = tuple(files)
        if key not in _SCANS:
            scan_stats = ReadStats()
            _SCANS[key] = (_decodable(files, scan_stats), scan_stats)
        files, stats = _SCANS[key]
    if not files:
        raise ValueError(
            f"the image folder split {what} is empty (0 images); add images or, for a folder "
            "without split folders, raise data config eval_fraction above 0."
        )
    paths, labels = zip(*files, strict=True)
    rows = {
        "path": tf.constant(paths),
        "label": tf.constant(labels, tf.int64),
        "id": tf.range(len(paths), dtype=tf.int64),
    }
    dataset = tf.data.Dataset.from_tensor_slices(rows)

    def read(path: tf.Tensor) -> tf.Tensor:
        """The file's bytes, checked whole and not too large to decode (naming the file)."""
        return images.check_pixels(images.check_intact(tf.io.read_file(path), path), path)

    def decode(element: dict) -> dict:
        encoded = read(element["path"])
        pixels = images.decode_center_crop(encoded, size=image_size, channels=CHANNELS)
        return {"inputs": pixels, "label": element["label"], "id": element["id"]}

    def crop_decode(element: dict, seed: tf.Tensor) -> dict:
        encoded = read(element["path"])
        pixels = images.decode_random_crop(encoded, seed, size=image_size, channels=CHANNELS)
        return {"inputs": pixels, "label": element["label"], "id": element["id"]}

    return SourceSplit(
        dataset=dataset,
        decode=decode,
        crop_decode=crop_decode,
        num_examples=len(paths),
        read_stats=stats,
        rows=lambda: rows,  # the file list: pruning by id opens only the kept files
    )


def _decodable(files, stats: ReadStats) -> list[tuple[str, int]]:
    """``files`` without the ones that fail a full decode, each logged and counted in ``stats``."""

    def problem(path: str) -> str | None:
        try:
            encoded = tf.io.read_file(path)
            if not bool(images.is_intact(encoded)):
                return "corrupt, truncated or not an image (no end marker or signature)"
            height, width = (int(side) for side in images.encoded_size(encoded))
            if height * width > images.MAX_PIXELS:
                return f"too large to decode: {height} x {width} pixels, over {images.MAX_PIXELS:,}"
            tf.io.decode_image(encoded, channels=CHANNELS, expand_animations=False)
        except tf.errors.OpError as error:
            return error.message.splitlines()[0]
        return None

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        problems = list(pool.map(problem, [path for path, _ in files]))
    for (path, _), found in zip(files, problems, strict=True):
        if found is not None:
            stats.skip_file(path, found)
    return [file for file, found in zip(files, problems, strict=True) if found is None]
