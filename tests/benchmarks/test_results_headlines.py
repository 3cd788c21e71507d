"""Every stored result carries a readable headline: the figures its issue names, floats or null."""

import json
import math
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
RESULT_FILES = sorted(RESULTS.glob("*.json"))


def test_results_directory_is_not_empty():
    # Guards the parametrised test below against passing vacuously on a moved directory.
    assert len(RESULT_FILES) >= 10, RESULTS


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda path: path.name)
def test_result_has_a_headline_of_floats_or_nulls(path):
    result = json.loads(path.read_text())
    assert isinstance(result, dict) and "headline" in result, (
        f"{path.name} has no top-level 'headline'; its benchmark must write one"
    )
    headline = result["headline"]
    assert isinstance(headline, dict) and headline, f"{path.name}: the headline is empty"
    for key, value in headline.items():
        # bool is an int subclass, and ints are not what readers of a headline expect either.
        assert value is None or type(value) is float, f"{path.name}: {key} = {value!r}"
        assert value is None or math.isfinite(value), f"{path.name}: {key} = {value!r}"
