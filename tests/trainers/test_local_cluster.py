"""local_cluster: the servers listen on every interface, and every way of starting them says so.

TensorFlow binds each tf.distribute server to 0.0.0.0:<port> with no option for 127.0.0.1, so the
tests check the warning each start logs against what the kernel shows in /proc/net.
"""

import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainers import local_cluster

ROOT = Path(__file__).resolve().parents[2]
WILDCARD = {"0.0.0.0", "::"}

pytestmark = pytest.mark.skipif(
    not Path("/proc/net/tcp6").exists(), reason="reads Linux's /proc/net"
)


def _ports(spec: dict[str, list[str]], jobs=("worker", "ps")) -> list[int]:
    return [int(address.rpartition(":")[2]) for job in jobs for address in spec[job]]


def _assert_warning_matches(message: str, where: str, spec, jobs=("worker", "ps")) -> None:
    """The warning names ``where``, every server port of ``jobs``, and all interfaces."""
    assert f"tf.distribute servers {where} listen on ALL interfaces (0.0.0.0 and [::])" in message
    assert "no option to bind them to 127.0.0.1" in message
    for job in jobs:
        ports = ", ".join(address.rpartition(":")[2] for address in spec[job])
        assert f"{job} {ports}" in message


def _python(code_or_module: list[str], **kwargs) -> subprocess.Popen:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen([sys.executable, *code_or_module], env=environment, **kwargs)


def _wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_child_process_cluster_warns_and_listens_on_every_interface(caplog, listening_hosts):
    with caplog.at_level(logging.WARNING):
        cluster = local_cluster.start_child_processes(num_workers=1)
    try:
        warnings = [r.getMessage() for r in caplog.records if "tf.distribute" in r.getMessage()]
        assert len(warnings) == 1
        _assert_warning_matches(warnings[0], "in child processes", cluster.spec)
        chief = cluster.spec["chief"][0].rpartition(":")[2]
        assert f"(and the chief's port {chief} once a coordinator connects)" in warnings[0]
        # The spec says 127.0.0.1; the kernel shows the wildcard, as the warning says.
        for port in _ports(cluster.spec):
            assert listening_hosts(port) and listening_hosts(port) <= WILDCARD
    finally:
        cluster.close()


def test_in_process_cluster_warns_and_listens_on_every_interface(tmp_path, listening_hosts):
    # In-process servers cannot be stopped, so they run in a child process of their own.
    script = (
        "import json, sys\n"
        "from trainers import local_cluster\n"
        "cluster = local_cluster.start_in_process(num_workers=1)\n"
        "print(json.dumps(cluster.spec), flush=True)\n"
        "sys.stdin.read()\n"
    )
    with (tmp_path / "stderr").open("w") as stderr:
        child = _python(
            ["-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        spec = json.loads(child.stdout.readline())
        for port in _ports(spec):
            assert listening_hosts(port) and listening_hosts(port) <= WILDCARD
    finally:
        child.communicate(timeout=60)  # closes stdin: the child exits
    _assert_warning_matches((tmp_path / "stderr").read_text(), "in this process", spec)


def test_the_server_binary_warns_and_listens_on_every_interface(tmp_path, listening_hosts):
    spec = local_cluster.make_cluster_spec(num_workers=1)
    arguments = ["--serve=ps:0"]
    stderr_path = tmp_path / "stderr"
    with stderr_path.open("w") as stderr:
        child = _python(
            ["-m", "trainers.train", f"--cluster_spec={json.dumps(spec)}", *arguments],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        # The warning follows the server's start, so once it is written the port is open.
        _wait_for(lambda: "tf.distribute servers" in stderr_path.read_text())
        (port,) = _ports(spec, jobs=("ps",))
        assert listening_hosts(port) and listening_hosts(port) <= WILDCARD
    finally:
        child.kill()
        child.wait(timeout=30)
    message = re.search(r"tf\.distribute servers .*", stderr_path.read_text()).group(0)
    _assert_warning_matches(message, "of ps 0", spec, jobs=("ps",))
    assert "worker" not in message and "chief" not in message


@pytest.mark.parametrize(
    ("job", "index", "message"),
    [
        ("chief", 0, "a server is a 'worker' or 'ps' task"),
        ("ps", 3, "task index 3 is out of range for the 1 ps task"),
    ],
)
def test_serve_refuses_tasks_not_in_the_spec(job, index, message):
    spec = local_cluster.make_cluster_spec(num_workers=1)
    with pytest.raises(ValueError, match=message):
        local_cluster.serve(spec, job, index)


def test_the_binary_refuses_serve_without_a_task_index():
    completed = subprocess.run(
        [sys.executable, "-m", "trainers.train", "--serve=ps", "--cluster_spec={}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert completed.returncode != 0
    assert "--serve takes JOB:INDEX with --cluster_spec" in completed.stderr
