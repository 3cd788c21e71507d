"""The snippets of README.md and docs/**/*.md marked ``<!-- runs-as-a-test -->`` run as written, and
every relative link in them, BENCHMARKS.md and RESULTS.md points at a file that exists (and, for a
link into a Markdown file with ``#anchor``, at a heading of that file)."""

import re
from pathlib import Path

import pytest
from results_table import heading_anchors  # benchmarks/, on pytest's path: one anchor rule

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINKED = [*DOCUMENTS, ROOT / "BENCHMARKS.md", ROOT / "RESULTS.md"]
_MARKED = re.compile(r"<!-- runs-as-a-test -->\n```python\n(.*?)```", re.DOTALL)
_LINK = re.compile(r"\]\(([^)#:]+)(?:#([^)]*))?\)")  # [text](relative/path#anchor), no URLs


def _snippets() -> list[tuple[str, int, str]]:
    return [
        (path.relative_to(ROOT).as_posix(), index, code)
        for path in DOCUMENTS
        for index, code in enumerate(_MARKED.findall(path.read_text()))
    ]


def test_the_readme_marks_a_snippet_for_each_path():
    in_readme = [code for where, _, code in _snippets() if where == "README.md"]
    assert len(in_readme) >= 2  # the tf.data path and the model.fit path
    assert any(where.startswith("docs/") for where, _, _ in _snippets())


@pytest.mark.parametrize(("where", "index", "code"), _snippets(), ids=lambda v: str(v)[:20])
def test_snippet_runs_as_written(where, index, code):
    namespace = {"__name__": f"snippet_{index}"}
    exec(compile(code, f"{where} snippet {index}", "exec"), namespace)
    if "prune" in namespace:  # the pruning snippet: it pruned, and it learned
        assert 0.3 < namespace["prune"].stats()["prune_keep_rate"] < 1.0
        assert namespace["accuracy"] > 0.8
    if "report" in namespace:  # the model.fit snippet: input-bound, so AutoEcho echoed
        assert namespace["report"]["ratio"] > 2.0
        assert namespace["history"].history["echo_factor"][-1] > 1.0
    if "batches" in namespace:  # the tf.data snippet: whole batches repeated
        assert [list(b) for b in namespace["batches"].as_numpy_iterator()][:2] == [[0, 1, 2, 3]] * 2


@pytest.mark.parametrize("document", LINKED, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_relative_links_point_at_files_that_exist(document):
    links = _LINK.findall(document.read_text())
    missing = [link for link, _ in links if not (document.parent / link).exists()]
    assert not missing, f"{document.name} links to missing files: {missing}"
    bad_anchors = [
        f"{link}#{anchor}"
        for link, anchor in links
        if anchor
        and link.endswith(".md")
        and anchor not in heading_anchors((document.parent / link).read_text()).values()
    ]
    assert not bad_anchors, f"{document.name} links to missing headings: {bad_anchors}"
