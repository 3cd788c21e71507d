"""Predicates for argument validation, shared by every factory and constructor in ``echoing``.

Each predicate answers one question about a value and returns a bool; the caller words the
error (naming the value received, what is expected and how to fix it) and raises it, directly
or through :func:`require`. So every module keeps its own messages while the rules (a bool is
not a number, NaN is not in any interval, NumPy integers count where a module says so) are
written once, here.

Example::

    import numpy as np
    from echoing._src.core import checks

    assert checks.is_positive_int(3) and not checks.is_positive_int(True)
    assert checks.is_int(np.int64(5), numpy=True) and not checks.is_int(np.int64(5))
    assert not checks.is_real(float("nan")) and checks.is_real(float("inf"), finite=False)
    assert checks.in_interval(1.0, 0, 1, low_open=True)  # (0, 1]
    assert not checks.in_interval(1.0, 0, 1, high_open=True)  # [0, 1)
    assert checks.is_seed(None) and checks.is_seed(7) and not checks.is_seed(False)
    checks.require(checks.is_real(0.3), "base_prob must be a number, got 0.3.")  # passes
"""

from __future__ import annotations

import math
import numbers


def is_int(value, *, numpy: bool = False) -> bool:
    """Whether ``value`` is a Python int, never a bool (``True`` is a flag, not a count).

    With ``numpy=True`` any integer type counts (``numbers.Integral``: ``np.int64(3)`` too).
    """
    if isinstance(value, bool):
        return False
    return isinstance(value, numbers.Integral if numpy else int)


def is_positive_int(value, *, numpy: bool = False) -> bool:
    """Whether ``value`` is an int >= 1 (see :func:`is_int` for ``numpy``); ``True`` is not."""
    return is_int(value, numpy=numpy) and bool(value >= 1)


def is_real(value, *, finite: bool = True) -> bool:
    """Whether ``value`` is a real number (Python or NumPy), never a bool.

    ``finite=True`` also refuses NaN and ±inf; ``finite=False`` accepts them (an interval check
    after it refuses NaN, as every comparison with NaN is false).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return math.isfinite(value) if finite else True


def in_interval(value, low, high, *, low_open: bool = False, high_open: bool = False) -> bool:
    """Whether ``low <= value <= high`` (``<`` at an open end); NaN is in no interval.

    Only compares: a value that does not compare with numbers raises Python's ``TypeError``, so
    check :func:`is_real` first where a clear message is wanted.
    """
    above = low < value if low_open else low <= value
    return bool(above and (value < high if high_open else value <= high))


def is_seed(value) -> bool:
    """Whether ``value`` is a seed argument: ``None`` (draw one) or a Python int, not a bool."""
    return value is None or is_int(value)


def require(ok: bool, message: str, error: type[Exception] = ValueError) -> None:
    """Raises ``error(message)`` unless ``ok``: the caller's wording, the caller's error type.

    The message is built before the call, so it must only format the value (``{value!r}``), never
    compute with it.
    """
    if not ok:
        raise error(message)
