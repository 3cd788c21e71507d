"""Type aliases and type checks shared across the package.

Example::

    from echoing._src.core.types import DatasetTransformation

    def identity() -> DatasetTransformation:
        return lambda dataset: dataset
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import tensorflow as tf

# What every factory in `echoing` returns: a function for `tf.data.Dataset.apply`.
DatasetTransformation = Callable[[tf.data.Dataset], tf.data.Dataset]


def is_positive_int(value) -> bool:
    """Whether ``value`` is a Python int >= 1 (``True`` is a bool, not a count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class ClosesOnExit:
    """``with obj:`` calls ``obj.close()`` on the way out; when the block raised, an error from
    closing is suppressed so that it never masks the one that ended the block."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        if exc_type is None:
            self.close()
        else:
            with contextlib.suppress(Exception):
                self.close()
