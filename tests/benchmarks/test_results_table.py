"""RESULTS.md is what benchmarks/results_table.py writes, and every figure it reads exists."""

import dataclasses
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_script(path: Path):
    """The script as a module, at collection time: its rows parametrise the tests below."""
    spec = importlib.util.spec_from_file_location("results_table_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


table = _load_script(ROOT / "benchmarks" / "results_table.py")


def test_results_md_is_what_the_script_writes(tmp_path):
    # A stale table fails here: rerun `python benchmarks/results_table.py` and commit RESULTS.md.
    output = tmp_path / "RESULTS.md"
    assert table.main(["--output", str(output)]) == 0
    assert output.read_text() == (ROOT / "RESULTS.md").read_text(), (
        "RESULTS.md is out of date: run `python benchmarks/results_table.py`."
    )


def test_check_fails_in_one_line_on_a_stale_file(tmp_path, capsys):
    output = tmp_path / "RESULTS.md"
    output.write_text("an edit by hand\n")
    assert table.main(["--check", "--output", str(output)]) == 1
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and "results_table.py" in message
    table.main(["--output", str(output)])
    assert table.main(["--check", "--output", str(output)]) == 0


@pytest.mark.parametrize("row", table.ROWS, ids=lambda row: f"{row.source}:{row.figure}")
def test_every_figure_a_row_reads_exists(row):
    assert (table.RESULTS / row.source).is_file(), row.source
    headline = json.loads((table.RESULTS / row.source).read_text())["headline"]
    assert row.figure in headline, f"{row.source}: the headline has no {row.figure!r}"
    results = table.Results(table.RESULTS)
    for source, path in table.reads(row):
        results.read(source, path)  # raises RowError naming the file and the key


def test_no_row_reads_a_superseded_file():
    superseded = re.compile(r"_before|_run\d|_[0-9a-f]{7}\.|refactor_parity|iterator_teardown")
    for row in table.ROWS:
        for source, _ in table.reads(row):
            assert not superseded.search(source), source
            assert source in table.COMMANDS, f"COMMANDS has no command for {source}"


def test_a_renamed_headline_key_stops_the_script_naming_it():
    renamed = dataclasses.replace(table.ROWS[0], figure="cpu_best_e4_speedup_renamed")
    with pytest.raises(
        table.RowError,
        match=r"echo_time_to_target\.json: headline\.cpu_best_e4_speedup_renamed: no such key",
    ):
        table.render([renamed])


def test_an_unknown_key_or_file_is_a_clear_error():
    results = table.Results(table.RESULTS)
    with pytest.raises(table.RowError, match=r"keras_fit\.json: headline\.no_such_key"):
        results.read("keras_fit.json", ("headline", "no_such_key"))
    with pytest.raises(table.RowError, match=r"0 entries match"):
        results.read("workloads.json", ("table", {"workload": "no_such_workload"}))
    with pytest.raises(table.RowError, match="no such results file"):
        results.read("no_such_study.json", ("headline",))


def test_a_null_figure_reads_not_reached():
    row = next(row for row in table.ROWS if row.source == "pgd_clean.json")
    cells = table.cells(table.Results(table.RESULTS), row)
    assert cells[2].startswith("not reached; ")


@pytest.mark.parametrize("row", table.ROWS, ids=lambda row: f"{row.source}:{row.figure}")
def test_every_row_links_its_study_write_up(row):
    link = table.study_link(row)  # raises RowError for a missing write-up or heading
    path, _, anchor = link.partition("#")
    assert path.startswith("docs/studies/") and (ROOT / path).is_file(), link
    if anchor:
        assert anchor in table.heading_anchors((ROOT / path).read_text()).values(), link


def test_a_missing_write_up_or_heading_stops_the_script_naming_it(tmp_path):
    row = next(row for row in table.ROWS if "#" in row.study)
    name, _, fragment = row.study.partition("#")
    with pytest.raises(table.RowError, match="no study write-up"):
        table.study_link(row, tmp_path)
    (tmp_path / name).write_text("# A study\n\n## Another heading\n")
    with pytest.raises(table.RowError, match=f"no heading containing {re.escape(repr(fragment))}"):
        table.study_link(row, tmp_path)
