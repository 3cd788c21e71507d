"""Type aliases shared across the package (argument checks live in ``checks``).

Example::

    from echoing._src.core.types import DatasetTransformation

    def identity() -> DatasetTransformation:
        return lambda dataset: dataset
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import tensorflow as tf

# Moved to ``checks``; re-exported so that imports of its old home keep working.
from echoing._src.core.checks import is_positive_int  # noqa: F401

# What every factory in `echoing` returns: a function for `tf.data.Dataset.apply`.
DatasetTransformation = Callable[[tf.data.Dataset], tf.data.Dataset]


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
