"""The README's snippets marked ``<!-- runs-as-a-test -->`` run as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_MARKED = re.compile(r"<!-- runs-as-a-test -->\n```python\n(.*?)```", re.DOTALL)


def _snippets() -> list[str]:
    return _MARKED.findall(README.read_text())


def test_the_readme_marks_its_runnable_snippets():
    assert len(_snippets()) >= 1


@pytest.mark.parametrize("index", range(len(_snippets())))
def test_snippet_runs_as_written(index):
    namespace = {"__name__": f"readme_snippet_{index}"}
    exec(compile(_snippets()[index], f"README.md snippet {index}", "exec"), namespace)
    if "prune" in namespace:  # the pruning snippet: it pruned, and it learned
        assert 0.3 < namespace["prune"].stats()["prune_keep_rate"] < 1.0
        assert namespace["accuracy"] > 0.8
