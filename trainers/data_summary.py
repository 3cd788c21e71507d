"""What a run's data holds, printed before training: an image folder's classes and files, a
text corpus's examples and vocabulary; and a train split too small for one batch, refused.

Example::

    from trainers import data_summary, run_config

    config = run_config.resolve_config(run_config.default_config())
    data_summary.check_data(config)  # MNIST-1D: nothing to print, and enough for a batch
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import ml_collections
import numpy as np

from pipelines import sources


def check_data(config: ml_collections.ConfigDict) -> None:
    """Prints what an image folder holds (classes, images per class and split) or a text corpus
    (examples, the vocabulary learned) on stderr, and
    refuses a train split smaller than one batch, naming the flag to change. ``config`` must be
    resolved; inside a run the source is loaded once (``sources.loaded_once``).

    Raises:
      ValueError: the train split has fewer examples than ``data.batch_size``.
    """
    source = sources.load(config.data)
    names = getattr(source, "class_names", ())
    if names:
        print(image_folder_line(config, source, names), file=sys.stderr)
    if getattr(source, "vocab_file", ""):
        print(text_line(config, source), file=sys.stderr)
    if len(names) == 1:
        raise ValueError(
            f"the image folder {config.data.image_dir!r} has one class folder, {names[0]!r}; a "
            "classifier needs two or more: add a folder of images per class "
            "(image_dir/<class>/<image>.jpg)."
        )
    found, batch_size = source.train.num_examples, config.data.batch_size
    if 0 < found < batch_size:  # an empty split has its own error (make_datasets)
        what = "images" if names else "examples"
        raise ValueError(
            f"the train split has {found} {what}, fewer than one batch of data.batch_size="
            f"{batch_size}, so it yields no batch: set --config.data.batch_size="
            f"{2 ** (found.bit_length() - 1)} (or smaller), or add training data."
        )


def image_folder_line(config, source, names: Sequence[str]) -> str:
    """'Found 53 train + 6 eval images in 2 classes in DIR: cat (27 + 3), dog (26 + 3)'."""
    shown = 10  # classes listed by name; ImageNet's thousand would fill the screen
    listed = list(names[:shown])
    if source.train.rows is not None and source.eval.rows is not None:
        train, eval_ = (
            np.bincount(split.rows()["label"].numpy(), minlength=len(names))
            for split in (source.train, source.eval)
        )
        listed = [f"{name} ({train[label]} + {eval_[label]})" for label, name in enumerate(listed)]
    if len(names) > shown:
        listed.append(f"... ({len(names) - shown} more)")
    folder = config.data.image_dir or "the embedded photo set"
    return (
        f"Found {source.train.num_examples} train + {source.eval.num_examples} eval images in "
        f"{len(names)} classes in {folder}: {', '.join(listed)}"
    )


def text_line(config, source) -> str:
    """'Found 5,120 train + 1,300 eval examples of at most 64 tokens in the embedded corpus; a
    2,717-token WordPiece vocabulary (of vocab_size=4000: fewer words recur often enough)'."""
    data = config.data
    where = (
        f"the TFDS dataset {data.name!r}"
        if data.name
        else f"{data.train_files} + {data.eval_files}"
        if data.train_files
        else "the embedded corpus"
    )
    learned = source.vocab_size
    short = (
        f" (of vocab_size={data.vocab_size}: fewer words recur often enough for WordPiece to "
        "learn more)"
        # WordPiece's own shortfall is a few percent; under half, the source warns instead.
        if data.vocab_size / 2 <= learned < 0.9 * data.vocab_size
        else ""
    )
    return (
        f"Found {source.train.num_examples:,} train + {source.eval.num_examples:,} eval examples "
        f"of at most {data.text_max_length} tokens in {where}; a {learned:,}-token WordPiece "
        f"vocabulary{short}, {source.vocab_file}"
    )
