"""Shared fixtures for trainer tests (``data_dir``, the session's data cache, is in
tests/conftest.py)."""

import io
import os
import sys

import numpy as np
import pytest
from absl import flags
from PIL import Image

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def mnist1d_config_path():
    return os.path.join(REPOSITORY, "configs", "mnist1d.py")


@pytest.fixture
def parse_binary_flags(monkeypatch):
    """``parse_binary_flags(argv)`` parses ``argv`` as the binary would (config_flags reads its
    overrides from sys.argv) and returns the config; ``parse=False`` only clears the previous
    parse, for a test that parses itself (``trainers.train.parse_flags``)."""

    def parse(argv, *, parse=True):
        monkeypatch.setattr(sys, "argv", argv)
        for name in [name for name in flags.FLAGS if name.startswith("config.")]:
            delattr(flags.FLAGS, name)
        flags.FLAGS.unparse_flags()
        if parse:
            flags.FLAGS(argv)
            return flags.FLAGS.config
        return None

    return parse


@pytest.fixture(scope="session")
def add_images():
    """``add_images(root, {class: count}, eval_count=2, size=20)``: PNGs in
    ``root/train/<class>/`` and ``root/test/<class>/`` (``_add_images``)."""
    return _add_images


def _add_images(root, counts: dict[str, int], *, eval_count: int = 2, size: int = 20) -> None:
    """Adds ``counts[class]`` PNGs to ``root/train/<class>/`` and ``eval_count`` to
    ``root/test/<class>/``, numbered on from what each folder holds (so a folder can grow).
    Pixels are random, seeded by the file's number."""
    for name, count in counts.items():
        for split, number in (("train", count), ("test", eval_count)):
            folder = os.path.join(root, split, name)
            os.makedirs(folder, exist_ok=True)
            start = len(os.listdir(folder))
            for index in range(start, start + number):
                pixels = np.random.default_rng(index).integers(0, 256, (size, size, 3), np.uint8)
                buffer = io.BytesIO()
                Image.fromarray(pixels).save(buffer, "PNG")
                with open(os.path.join(folder, f"{index}.png"), "wb") as file:
                    file.write(buffer.getvalue())
