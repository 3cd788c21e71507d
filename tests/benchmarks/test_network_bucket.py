"""benchmarks/network_bucket.py: a gs:// bucket behind a capped link, torn down on exit.

The cap is checked as a LOWER bound on transfer time (bytes / rate): load on a shared machine can
only make a transfer slower, so the check cannot fail because the machine is busy, only if the
cap is missing.
"""

import importlib.util
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from pipelines.sources import tfrecord

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD_BYTES = 500_000  # 4 Mbit: 2 s at the 2 Mbit/s cap below
# What a capped link may pass at once: tbf's 64 kB bucket (or the proxy's 16 kB chunks), rounded up.
BURST_BYTES = 100_000


def _module():
    spec = importlib.util.spec_from_file_location(
        "network_bucket", ROOT / "benchmarks/network_bucket.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


network_bucket = _module()
LIMITERS = [
    "in-process",
    pytest.param(
        "netns+tbf",
        marks=pytest.mark.skipif(
            not network_bucket.namespaces_available(), reason="needs root, ip and tc"
        ),
    ),
]


@pytest.mark.parametrize("limiter", LIMITERS)
def test_downloads_are_capped_and_everything_is_torn_down(limiter):
    assert "STORAGE_EMULATOR_HOST" not in os.environ
    payload = os.urandom(PAYLOAD_BYTES)
    with network_bucket.ThrottledBucket(2.0, limiter=limiter) as bucket:
        assert bucket.limiter == limiter
        namespace = bucket.namespace
        assert (namespace is not None) == (limiter == "netns+tbf")
        assert os.environ["STORAGE_EMULATOR_HOST"] == bucket.emulator_host
        host = bucket.emulator_host.split("//")[1].split(":")[0]
        assert host == "127.0.0.1" or host.startswith("10.233.")  # never anywhere else
        filesystem = tfrecord.gcs_filesystem()
        # gcsfs caches listings across emulators in one process: a fresh bucket name each time.
        bucket_name = f"capped-{uuid.uuid4().hex[:8]}"
        filesystem.mkdir(bucket_name)
        filesystem.pipe(f"gs://{bucket_name}/blob", payload)  # uploads are not capped
        start = time.perf_counter()
        assert filesystem.cat(f"gs://{bucket_name}/blob") == payload
        seconds = time.perf_counter() - start
    # 2 Mbit/s = 250 kB/s, less what the initial burst lets through at once.
    assert seconds >= (PAYLOAD_BYTES - BURST_BYTES) / 250_000
    assert "STORAGE_EMULATOR_HOST" not in os.environ
    # Its own namespace (and the veth pair in it) is gone; other runs' may be alive in parallel.
    if namespace is not None:
        namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        assert namespace not in namespaces.stdout.split()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"megabits_per_second": 0}, "must be a positive number"),
        ({"megabits_per_second": 1, "limiter": "netem"}, "limiter must be one of"),
    ],
)
def test_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        network_bucket.ThrottledBucket(**arguments)
