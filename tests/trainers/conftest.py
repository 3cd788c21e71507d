"""Shared fixtures for trainer tests (``data_dir``, the session's data cache, is in
tests/conftest.py)."""

import os

import pytest

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def mnist1d_config_path():
    return os.path.join(REPOSITORY, "configs", "mnist1d.py")
