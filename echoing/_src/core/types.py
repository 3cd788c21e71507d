"""Type aliases and type checks shared across the package.

Example::

    from echoing._src.core.types import DatasetTransformation

    def identity() -> DatasetTransformation:
        return lambda dataset: dataset
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

# What every factory in `echoing` returns: a function for `tf.data.Dataset.apply`.
DatasetTransformation = Callable[[tf.data.Dataset], tf.data.Dataset]


def is_positive_int(value) -> bool:
    """Whether ``value`` is a Python int >= 1 (``True`` is a bool, not a count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
