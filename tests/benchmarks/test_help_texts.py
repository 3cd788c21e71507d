"""Every command-line help text in benchmarks/ and trainers/ renders.

argparse expands each ``help=`` string with ``%``-formatting when ``--help`` is asked for, so a
bare ``%`` (``"80% train"``) crashes ``--help`` with "unsupported format character" while every
normal run works. Checked from the source, without importing TensorFlow.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("trainers/**/*.py")])


def _help_strings(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                value = keyword.value
                text = value.value if isinstance(value, ast.Constant) else None
                if keyword.arg == "help" and isinstance(text, str):
                    yield value.lineno, text


def test_the_scripts_are_found():
    assert any(path.name == "selection.py" for path in SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_help_strings_survive_argparse_formatting(path):
    for line, text in _help_strings(path):
        try:
            # What argparse's HelpFormatter._expand_help does with the text.
            text % {"prog": "x", "default": 0, "dest": "x", "type": None, "choices": None}
        except (ValueError, TypeError) as error:
            pytest.fail(
                f"{path.name}:{line}: help={text!r} breaks --help ({error}); write %% for %"
            )
