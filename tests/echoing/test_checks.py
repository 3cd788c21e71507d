"""Tests for echoing._src.core.checks: the predicates every module validates its arguments with."""

import math
import textwrap

import numpy as np
import pytest

from echoing._src.core import checks, types

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("value", "plain", "with_numpy"),
    [
        (0, True, True),
        (-3, True, True),
        (10**30, True, True),
        (True, False, False),
        (False, False, False),
        (np.int64(5), False, True),
        (np.int32(-1), False, True),
        (np.uint8(7), False, True),
        (np.bool_(True), False, False),
        (1.0, False, False),
        (np.float64(2.0), False, False),
        ("3", False, False),
        (None, False, False),
        (np.array(3), False, False),
    ],
)
def test_is_int(value, plain, with_numpy):
    assert checks.is_int(value) is plain
    assert checks.is_int(value, numpy=True) is with_numpy


@pytest.mark.parametrize(
    ("value", "plain", "with_numpy"),
    [
        (1, True, True),
        (4096, True, True),
        (0, False, False),
        (-1, False, False),
        (True, False, False),
        (np.int64(2), False, True),
        (np.int64(0), False, False),
        (2.0, False, False),
        ("2", False, False),
    ],
)
def test_is_positive_int(value, plain, with_numpy):
    assert checks.is_positive_int(value) is plain
    assert checks.is_positive_int(value, numpy=True) is with_numpy


def test_is_positive_int_keeps_its_old_import_path():
    assert types.is_positive_int is checks.is_positive_int


@pytest.mark.parametrize(
    ("value", "finite", "any_real"),
    [
        (0, True, True),
        (0.3, True, True),
        (-1e300, True, True),
        (np.float32(0.5), True, True),
        (np.float64(-2.5), True, True),
        (np.int64(3), True, True),
        (NAN, False, True),
        (INF, False, True),
        (-INF, False, True),
        (np.float64("nan"), False, True),
        (True, False, False),
        (False, False, False),
        (np.bool_(False), False, False),
        (1 + 0j, False, False),
        ("0.5", False, False),
        (None, False, False),
        (np.array(0.5), False, False),
    ],
)
def test_is_real(value, finite, any_real):
    assert checks.is_real(value) is finite
    assert checks.is_real(value, finite=False) is any_real


@pytest.mark.parametrize(
    ("value", "closed", "low_open", "high_open", "open_"),
    [
        (0.0, True, False, True, False),
        (1.0, True, True, False, False),
        (0.5, True, True, True, True),
        (-0.1, False, False, False, False),
        (1.1, False, False, False, False),
        (NAN, False, False, False, False),
        (INF, False, False, False, False),
        (np.float32(1.0), True, True, False, False),
        (np.int64(0), True, False, True, False),
    ],
)
def test_in_interval_bounds(value, closed, low_open, high_open, open_):
    assert checks.in_interval(value, 0, 1) is closed
    assert checks.in_interval(value, 0, 1, low_open=True) is low_open
    assert checks.in_interval(value, 0, 1, high_open=True) is high_open
    assert checks.in_interval(value, 0, 1, low_open=True, high_open=True) is open_


def test_in_interval_unbounded_side_and_incomparable_values():
    assert checks.in_interval(INF, 0, math.inf)
    assert not checks.in_interval(INF, 0, math.inf, high_open=True)
    assert not checks.in_interval(NAN, -math.inf, math.inf)
    with pytest.raises(TypeError):  # only compares: check is_real first for a clear message
        checks.in_interval("0.5", 0, 1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, True),
        (0, True),
        (-7, True),
        (2**40, True),
        (True, False),
        (False, False),
        (np.int64(3), False),
        (1.0, False),
        ("0", False),
    ],
)
def test_is_seed(value, expected):
    assert checks.is_seed(value) is expected


def test_require_raises_the_callers_error_with_the_callers_message():
    checks.require(True, "never raised")
    with pytest.raises(ValueError, match=r"^f\(x=2\): expected an int >= 3\.$"):
        checks.require(False, "f(x=2): expected an int >= 3.")
    with pytest.raises(TypeError, match="expected a string key"):
        checks.require(False, "g(key=1): expected a string key.", TypeError)


def test_module_docstring_example_runs():
    example = checks.__doc__.split("Example::", 1)[1]
    exec(textwrap.dedent(example), {})  # the module's own documented example
