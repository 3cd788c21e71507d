"""Fixtures every test directory shares: benchmark scripts as modules, and notebook execution."""

import importlib.util
import re
import socket
import sys
from pathlib import Path

import nbformat
import pytest
from absl import flags
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def _load_script(path: Path, name: str):
    """A Python file as a module: benchmarks and configs are scripts, not package members (the
    way ``config_flags`` loads config files)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _absl_flags_back_to_defaults():
    """Tests parse the binary's flags into the process-wide ``flags.FLAGS``; without this a
    ``--strategy=parameter_server`` parsed by one test is still set in the next test that runs
    in the same worker. (``config.*`` flags are redefined by each test that parses a config.)"""
    yield
    for name in list(flags.FLAGS):
        flag = flags.FLAGS[name]
        if not name.startswith("config") and (flag.present or flag.value != flag.default):
            flag.unparse()


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """One data_dir for the session's trainer, config and benchmark runs, so the smoke-sized
    data sets (MNIST-1D, the photo set, the text corpus and its vocabulary) are generated once,
    not in ~/.cache."""
    return str(tmp_path_factory.mktemp("echoing_data"))


# What a person should never see on the binary's console unless they ask (--verbose): TF C++
# notices, TFDS generation chatter, cursor escapes in non-TTY logs (issue 15).
CONSOLE_NOISE = re.compile(r"I0000|W0000|E0000|oneDNN|cuInit|Downloading and preparing|\x1b\[A")


@pytest.fixture(scope="session")
def console_noise():
    """The lines the binary's default console must not print (a compiled regex)."""
    return CONSOLE_NOISE


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark("pgd")`` -> ``benchmarks/pgd.py`` as a module."""
    return lambda name: _load_script(ROOT / "benchmarks" / f"{name}.py", f"{name}_benchmark")


@pytest.fixture(scope="session")
def load_config():
    """``load_config("mnist1d", "echo=2,smoke")`` -> ``configs/mnist1d.py``'s
    ``get_config("echo=2,smoke")``."""

    def load(name: str, argument: str = ""):
        return _load_script(ROOT / "configs" / f"{name}.py", f"{name}_config").get_config(argument)

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


def _listening_hosts(port: int) -> set[str]:
    """The local addresses of TCP sockets listening on ``port`` (Linux: /proc/net/tcp, tcp6)."""
    hosts = set()
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(path).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            host, _, port_hex = local.partition(":")
            if state != "0A" or int(port_hex, 16) != port:  # 0A: TCP_LISTEN
                continue
            raw = bytes.fromhex(host)
            if sys.byteorder == "little":  # the kernel prints each 32-bit word in host order
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            hosts.add(socket.inet_ntop(family, raw))
    return hosts


@pytest.fixture(scope="session")
def listening_hosts():
    """``listening_hosts(port)`` -> the addresses a TCP socket listens on for ``port``."""
    return _listening_hosts
