"""Shared fixtures for trainer tests (``data_dir``, the session's data cache, is in
tests/conftest.py)."""

import os
import sys

import pytest
from absl import flags

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
