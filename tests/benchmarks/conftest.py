"""Shared fixture: run a benchmark script's ``--quick`` mode in a child process."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A quick run takes under 2 minutes on 2 busy cores; more than this is a hang to diagnose.
TIMEOUT_SECONDS = 600


@pytest.fixture(scope="session")
def run_quick_benchmark(tmp_path_factory):
    """``run_quick_benchmark("echo_throughput", *extra_arguments)`` -> the JSON path it wrote.

    The script runs as users run it (``python benchmarks/NAME.py --quick --output ...``), from the
    repository root; a failure shows its stderr.
    """

    def run(name: str, *arguments: str) -> Path:
        output = tmp_path_factory.mktemp(name) / f"{name}.json"
        # -X faulthandler: on a time-out, SIGABRT makes the child print every thread's stack.
        command = [sys.executable, "-X", "faulthandler", str(ROOT / "benchmarks" / f"{name}.py")]
        command += ["--quick", "--output", str(output), *arguments]
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
        ) as child:
            try:
                stdout, stderr = child.communicate(timeout=TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGABRT)
                stdout, stderr = child.communicate()
                pytest.fail(
                    f"{name} --quick ran over {TIMEOUT_SECONDS} s; its last output:\n"
                    f"{stdout[-2000:]}\nand its threads' stacks:\n{stderr[-12000:]}"
                )
        assert child.returncode == 0, stderr[-3000:]
        return output

    return run
