"""Local ``tf.distribute`` clusters: servers on this machine, in this process or in children.

Example::

    import tensorflow as tf
    from trainers import local_cluster

    cluster = local_cluster.start_in_process(num_workers=2)
    strategy = tf.distribute.ParameterServerStrategy(cluster.resolver)

A child-process cluster (one process per worker and parameter server, so a test can kill one)::

    cluster = local_cluster.start_child_processes(num_workers=2)
    ...  # connect a coordinator to cluster.spec (its "chief" address is left free for it)
    cluster.kill("worker", 1)
    cluster.close()

A child server is the training binary in its server role::

    python -m trainers.train --serve=worker:0 --cluster_spec='{"worker": [...], ...}'

The cluster spec names every task ``127.0.0.1:<port>``, so clients dial the loopback interface,
but the servers **listen on every interface** (``ss -ltn`` shows ``*:<port>``): TensorFlow binds
each gRPC server it starts to ``0.0.0.0:<port>`` (``GrpcServer::Init`` in
``tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc``; gRPC turns it into a dual-stack
``[::]`` socket), and no ``ServerDef`` or ``ConfigProto`` field changes that (checked on TF 2.21;
the host in the spec only names the server). The chief's port opens the same way when a
coordinator connects. Anyone who can reach this machine can reach these ports and run graphs on
them, so firewall them on a shared machine. Each start logs the ports it opened, as a warning.

Workers get ``inter_op_parallelism_threads = num_workers + 1``: with fewer, a worker that blocks
in a closure while the coordinator queues the next one can starve the thread pool and hang the
cluster (verified on TF 2.21). In-process servers cannot be stopped; they live until the process
exits, so start one cluster per process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import tensorflow as tf
from absl import logging


def free_port() -> int:
    """Returns a TCP port that was free on every interface when asked.

    Probed on the wildcard address because TensorFlow's servers bind that, not 127.0.0.1.
    """
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _warn_open_ports(where: str, spec: dict[str, list[str]], tasks: dict[str, list[int]]) -> None:
    """Logs which ports ``where`` opened, as a warning: TensorFlow binds them on all interfaces.

    Example (logs "tf.distribute servers of worker 0 listen on ALL interfaces ... ports worker
    5000: ..."; with a "chief" task in ``tasks`` it adds the chief's port)::

        _warn_open_ports("of worker 0", {"worker": ["127.0.0.1:5000"]}, {"worker": [0]})
    """
    ports = "; ".join(
        f"{job} {', '.join(_port(spec[job][index]) for index in indices)}"
        for job, indices in tasks.items()
        if job != "chief"
    )
    if "chief" in tasks:
        ports += f" (and the chief's port {_port(spec['chief'][0])} once a coordinator connects)"
    logging.warning(
        "tf.distribute servers %s listen on ALL interfaces (0.0.0.0 and [::]), not only "
        "loopback, on ports %s: TensorFlow has no option to bind them to 127.0.0.1, so "
        "firewall these ports on a shared machine.",
        where,
        ports,
    )


def _port(address: str) -> str:
    return address.rpartition(":")[2]


def make_cluster_spec(num_workers: int, num_ps: int = 1) -> dict[str, list[str]]:
    """A cluster dict with free ports for workers, parameter servers and a chief.

    Tasks are named ``127.0.0.1:<port>`` so clients dial loopback; the servers still listen on
    every interface (see the module docstring).
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers must be a positive int, got {num_workers!r}.")
    if isinstance(num_ps, bool) or not isinstance(num_ps, int) or num_ps < 1:
        raise ValueError(f"num_ps must be a positive int, got {num_ps!r}.")
    return {
        "worker": [f"127.0.0.1:{free_port()}" for _ in range(num_workers)],
        "ps": [f"127.0.0.1:{free_port()}" for _ in range(num_ps)],
        "chief": [f"127.0.0.1:{free_port()}"],
    }


def server_config(num_workers: int) -> tf.compat.v1.ConfigProto:
    """Session config for a worker or PS of a cluster with ``num_workers`` workers."""
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = num_workers + 1
    return config


def chief_resolver(spec: dict[str, list[str]]) -> tf.distribute.cluster_resolver.ClusterResolver:
    """The coordinator's (chief's) resolver for ``spec``."""
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(spec), task_type="chief", task_id=0, rpc_layer="grpc"
    )


@dataclasses.dataclass
class InProcessCluster:
    spec: dict[str, list[str]]
    servers: list[tf.distribute.Server]

    @property
    def resolver(self) -> tf.distribute.cluster_resolver.ClusterResolver:
        return chief_resolver(self.spec)


def start_in_process(num_workers: int, num_ps: int = 1) -> InProcessCluster:
    """Starts worker and PS servers in this process; returns their spec and resolver."""
    spec = make_cluster_spec(num_workers, num_ps)
    cluster = tf.train.ClusterSpec(spec)
    servers = [
        tf.distribute.Server(
            cluster,
            job_name=job,
            task_index=index,
            protocol="grpc",
            config=server_config(num_workers),
            start=True,
        )
        for job in ("worker", "ps")
        for index in range(len(spec[job]))
    ]
    _warn_open_ports("in this process", spec, _all_tasks(spec))
    return InProcessCluster(spec, servers)


def _all_tasks(spec: dict[str, list[str]]) -> dict[str, list[int]]:
    """Every task of ``spec``: the servers a cluster start opens, plus the coordinator's."""
    return {job: list(range(len(addresses))) for job, addresses in spec.items()}


@dataclasses.dataclass
class ChildProcessCluster:
    """Worker and PS servers, each in its own child process."""

    spec: dict[str, list[str]]
    processes: dict[tuple[str, int], subprocess.Popen]

    @property
    def resolver(self) -> tf.distribute.cluster_resolver.ClusterResolver:
        return chief_resolver(self.spec)

    def kill(self, job_name: str, task_index: int) -> None:
        """Kills one server with SIGKILL (no chance to clean up, like a lost machine)."""
        process = self.processes[(job_name, task_index)]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def close(self) -> None:
        """Terminates every server this cluster started."""
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait_for_port(address: str, process: subprocess.Popen, timeout: float) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"server for {address} exited with code {process.returncode} before listening."
            )
        with socket.socket() as probe:
            if probe.connect_ex((host, int(port))) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"server for {address} did not listen within {timeout} s.")


def start_child_processes(
    num_workers: int, num_ps: int = 1, *, timeout: float = 120.0
) -> ChildProcessCluster:
    """Starts each worker and PS server as ``python -m trainers.train --serve=JOB:INDEX``;
    waits for them."""
    spec = make_cluster_spec(num_workers, num_ps)
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    processes = {}
    for job in ("worker", "ps"):
        for index in range(len(spec[job])):
            processes[(job, index)] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainers.train",
                    f"--serve={job}:{index}",
                    f"--cluster_spec={json.dumps(spec)}",
                ],
                env=environment,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
    cluster = ChildProcessCluster(spec, processes)
    try:
        for (job, index), process in processes.items():
            _wait_for_port(spec[job][index], process, timeout)
    except BaseException:
        cluster.close()
        raise
    _warn_open_ports("in child processes", spec, _all_tasks(spec))
    return cluster


def serve(spec: dict[str, list[str]], job_name: str, task_index: int) -> None:
    """Runs task ``job_name:task_index`` of ``spec`` in this process until it is killed.

    ``python -m trainers.train --serve=JOB:INDEX --cluster_spec=JSON`` is this function.
    """
    if job_name not in ("worker", "ps") or job_name not in spec:
        raise ValueError(
            f"a server is a 'worker' or 'ps' task of the cluster spec, got {job_name!r} "
            f"(jobs in the spec: {sorted(spec)})."
        )
    if not 0 <= task_index < len(spec[job_name]):
        raise ValueError(
            f"task index {task_index} is out of range for the {len(spec[job_name])} "
            f"{job_name} task(s) in the cluster spec."
        )
    server = tf.distribute.Server(
        tf.train.ClusterSpec(spec),
        job_name=job_name,
        task_index=task_index,
        protocol="grpc",
        config=server_config(len(spec["worker"])),
        start=True,
    )
    # The parent logs the whole cluster; this line is for a server started by hand.
    _warn_open_ports(f"of {job_name} {task_index}", spec, {job_name: [task_index]})
    server.join()
