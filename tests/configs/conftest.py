"""Fixtures for config tests: ``data_dir`` comes from tests/conftest.py."""
