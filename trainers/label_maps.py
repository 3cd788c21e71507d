"""What a workdir's model was trained to mean by label ``i`` and token ``i``, checked against data.

Example::

    from trainers import label_maps

    # Before a resume or an evaluation restores /tmp/run's model:
    label_maps.check("/tmp/run", class_names=("cat", "dog"), vocab_file=None)

A run on an image folder writes its class names, line ``i`` for label ``i``, to
``WORKDIR/classes.txt``; a text run copies its vocabulary to ``WORKDIR/vocab.txt``. Both maps are
rebuilt from the data each time (the classes sorted by folder name, the vocabulary learned from
``data.train_files``), so data that differs a little (a class folder renamed ``Zebra`` ->
``zebra``, a text with the same words at other frequencies) maps the same numbers to other
classes or tokens. With as many classes or tokens as before, nothing else notices: the restored
model trains or is evaluated against labels that mean something else, and its accuracy is wrong
without a word. ``check`` refuses that, naming the first difference.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf

CLASSES_FILENAME = "classes.txt"
VOCAB_FILENAME = "vocab.txt"


def check(workdir: str, *, class_names: Sequence[str] = (), vocab_file: str | None = None) -> None:
    """Raises ValueError when ``class_names`` or the vocabulary in ``vocab_file`` differ from
    the ones ``workdir``'s run saved (a workdir without them, or data without names, passes)."""
    saved_classes = _lines(os.path.join(workdir, CLASSES_FILENAME))
    if class_names and saved_classes is not None and saved_classes != list(class_names):
        index, there, here = _first_difference(saved_classes, list(class_names))
        raise ValueError(
            f"the image folder's classes differ from the ones this workdir's model was trained "
            f"with ({os.path.join(workdir, CLASSES_FILENAME)}): label {index} is {there!r} there "
            f"and {here!r} now ({len(saved_classes)} classes there, {len(class_names)} now), so "
            "the model's labels would mean other classes. Use the class folders the run started "
            "with (the names sort into label order), or a fresh --workdir."
        )
    saved_vocab = _lines(os.path.join(workdir, VOCAB_FILENAME))
    current_vocab = _lines(vocab_file) if vocab_file else None
    if saved_vocab is not None and current_vocab is not None and saved_vocab != current_vocab:
        index, there, here = _first_difference(saved_vocab, current_vocab)
        raise ValueError(
            f"the text's vocabulary differs from the one this workdir's model was trained with "
            f"({os.path.join(workdir, VOCAB_FILENAME)}): token id {index} is {there!r} there and "
            f"{here!r} now, so the model's token ids would mean other tokens. The vocabulary is "
            "learned from data.train_files: give the training run's files, or use a fresh "
            "--workdir."
        )


def _lines(path: str) -> list[str] | None:
    """The lines of ``path``, or None when there is no such file."""
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as file:
        return file.read().splitlines()


def _first_difference(there: list[str], here: list[str]) -> tuple[int, str | None, str | None]:
    """The first index where the two lists differ, and their entries there (None past an end)."""
    for index in range(max(len(there), len(here))):
        first = there[index] if index < len(there) else None
        second = here[index] if index < len(here) else None
        if first != second:
            return index, first, second
    raise ValueError("the lists are equal")  # callers compare them first
