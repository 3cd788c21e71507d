"""Type aliases and small helpers shared across the package (argument checks live in
``checks``).

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


def as_element(args: tuple, element_spec):
    """The element whose components a ``Dataset.map`` (or ``flat_map``) function received as
    ``*args``: tf.data passes a tuple element's components as positional arguments and any other
    element as one argument, so a 1-tuple element ``(t,)`` and a bare ``t`` both arrive as
    ``(t,)``; the dataset's ``element_spec`` tells them apart. Returning ``args[0]`` for both
    would turn a 1-tuple dataset into a bare one.

    Example::

        ds = tf.data.Dataset.from_tensors((tf.zeros(3),))
        ds.map(lambda *args: as_element(args, ds.element_spec)).element_spec  # (TensorSpec,)
    """
    return args if type(element_spec) is tuple else args[0]
