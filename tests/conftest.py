"""Fixtures every test directory shares: benchmark scripts as modules, and notebook execution."""

import importlib.util
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark("pgd")`` -> ``benchmarks/pgd.py`` as a module (it is a script, not a
    package member)."""

    def load(name: str):
        spec = importlib.util.spec_from_file_location(
            f"{name}_benchmark", ROOT / "benchmarks" / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def execute_notebook(monkeypatch):
    """``execute_notebook("echoing", ECHO_RESULTS=path)`` runs ``notebooks/echoing.ipynb`` with
    those environment variables set and returns the outputs of its code cells."""

    def execute(name: str, **environment) -> list:
        for key, value in environment.items():
            monkeypatch.setenv(key, str(value))
        notebook = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        NotebookClient(
            notebook,
            timeout=120,
            kernel_name="python3",
            resources={"metadata": {"path": str(ROOT / "notebooks")}},
        ).execute()
        return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]

    return execute
