"""The study harness: paired ratios by seed, time to target, and the results file."""

import json

import harness
import pytest


def test_paired_ratios_pair_by_seed_and_average_geometrically():
    baseline = {0: 100.0, 1: 400.0, 2: 50.0}
    method = {1: 100.0, 0: 50.0}  # seed 2 ran only for the baseline: left out
    speedup = harness.paired(baseline, method, lambda base, new: base / new)
    assert speedup["seeds"] == [0, 1]
    assert speedup["per_seed"] == [2.0, 4.0]
    assert speedup["mean"] == pytest.approx(8**0.5)  # not the ratio of means, 500 / 150
    assert (speedup["min"], speedup["max"]) == (2.0, 4.0)


def test_paired_leaves_out_seeds_without_a_figure_and_says_none_when_none_remain():
    reached = harness.paired({0: 10.0, 1: 12.0}, {0: 5.0, 1: None}, _ratio_or_none)
    assert reached["per_seed"] == [2.0] and reached["seeds"] == [0]
    assert harness.paired({0: 10.0}, {0: None}, _ratio_or_none) is None
    assert harness.paired({0: 10.0}, {1: 5.0}, _ratio_or_none) is None


def _ratio_or_none(base, new):
    return None if new is None else base / new


def test_paired_refuses_a_ratio_that_cannot_be_averaged_geometrically():
    with pytest.raises(ValueError, match=r"must be > 0 .* got \[0.0\]"):
        harness.paired({0: 0.0}, {0: 1.0}, lambda base, new: base / new)


def test_first_reaching():
    curve = [(10, 0.5), (20, 0.91), (30, 0.89), (40, 0.95)]
    assert harness.first_reaching(curve, 0.9) == 20
    assert harness.first_reaching(curve, 0.99) is None


def test_results_file_starts_with_its_headline(tmp_path):
    path = tmp_path / "out" / "study.json"
    harness.write_results(
        path, headline={"speedup": 2, "gap": None}, command="python x.py", summary={"a": 1}
    )
    result = json.loads(path.read_text())
    assert list(result)[:4] == ["headline", "command", "commit", "machine"]
    assert result["headline"] == {"speedup": 2.0, "gap": None}
    assert result["summary"] == {"a": 1}
    assert result["machine"]["cpus"] >= 1


@pytest.mark.parametrize("value", ["1.5x", True, {"mean": 1.5}])
def test_a_headline_figure_must_be_a_float_or_none(tmp_path, value):
    with pytest.raises(TypeError, match="headline 'speedup' must be a float or None"):
        harness.write_results(tmp_path / "x.json", headline={"speedup": value}, command="c")


def test_paired_headline_splits_means_from_their_spread():
    speedup = harness.paired({0: 10.0, 1: 40.0}, {0: 5.0, 1: 10.0}, lambda base, new: base / new)
    headline, spread = harness.paired_headline({"speedup": speedup, "R": 3, "missed": None})
    assert headline == pytest.approx({"speedup": 8**0.5, "R": 3.0, "missed": None})
    assert spread == {"speedup": speedup}
    assert harness.per_seed(speedup) == {0: 2.0, 1: 4.0} and harness.per_seed(None) == {}


def test_recompute_rederives_a_stored_file_and_says_so(tmp_path):
    path = tmp_path / "study.json"
    stored = {"headline": {"speedup": 1.0}, "command": "python study.py", "runs": [2.0, 8.0]}
    path.write_text(json.dumps(stored, indent=2) + "\n")
    result = harness.recompute(path, lambda s: {"headline": {"speedup": sum(s["runs"]) / 2}})
    written = json.loads(path.read_text())
    assert written == result and next(iter(written)) == "headline"
    assert written["headline"] == {"speedup": 5.0} and written["runs"] == [2.0, 8.0]
    assert written["command"] == "python study.py"  # the run's command, not the re-derivation's
    assert "recomputed_from_stored_runs" in written
    assert path.read_text().splitlines()[1].startswith('  "headline"')  # the indent it had
