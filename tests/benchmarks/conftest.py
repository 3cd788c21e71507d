"""Shared fixture: run a benchmark script's ``--quick`` mode in a child process."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def run_quick_benchmark(tmp_path_factory):
    """``run_quick_benchmark("echo_throughput", *extra_arguments)`` -> the JSON path it wrote.

    The script runs as users run it (``python benchmarks/NAME.py --quick --output ...``), from the
    repository root; a failure shows its stderr.
    """

    def run(name: str, *arguments: str) -> Path:
        output = tmp_path_factory.mktemp(name) / f"{name}.json"
        command = [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--quick"]
        result = subprocess.run(
            [*command, "--output", str(output), *arguments],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return output

    return run
