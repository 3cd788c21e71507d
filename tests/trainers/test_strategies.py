"""trainers.strategies and ``python -m trainers.train --strategy=...`` (in this process; the
child-process clusters are in test_strategies_cluster.py)."""

import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import warnings

import pytest
import tensorflow as tf
from absl import flags

from trainers import metrics_writer, strategies, train

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PASSM = os.path.join(REPOSITORY, "configs", "passm.py")


@pytest.mark.parametrize(
    ("name", "options", "error", "message"),
    [
        ("horovod", {}, ValueError, r"strategy must be one of \['default', 'mirrored'"),
        (
            "parameter_server",
            {"cluster_spec": '{"worker": []}'},
            ValueError,
            r"needs exactly the jobs worker, ps and chief, got \['worker'\]",
        ),
        ("default", {"cluster_spec": "{}"}, ValueError, "only used by strategy='parameter_server'"),
        ("default", {"workers": ["127.0.0.1:1"]}, ValueError, "only used by strategy='multi"),
        ("mirrored", {"tpu": "local"}, ValueError, "only used by strategy='tpu'"),
        ("multi_worker", {"workers": ["localhost"]}, ValueError, "must look like 'host:port'"),
        ("multi_worker", {"workers": [1]}, TypeError, "workers must be a list"),
        ("multi_worker", {"workers": ["a:1", "a:1"]}, ValueError, "must be distinct"),
        ("multi_worker", {"workers": ["a:1"], "task_index": 1}, ValueError, "out of range"),
        ("multi_worker", {"task_index": 1}, ValueError, "needs the worker addresses"),
        ("multi_worker", {"task_index": -1}, ValueError, "task_index must be an int >= 0"),
        ("tpu", {"tpu": 3}, TypeError, "tpu must be a string"),
    ],
)
def test_make_strategy_rejects_bad_arguments(name, options, error, message):
    with pytest.raises(error, match=message):
        strategies.make_strategy(name, **options)


@pytest.mark.parametrize(
    ("tpu", "message"),
    [
        # No name and no TPU_NAME: refused before any resolver could ask the GCE metadata server.
        ("", "this machine has none configured"),
        # A TPU VM's local TPU: the resolver is built, initialize_tpu_system finds no TPU.
        ("local", r"found no usable TPU at tpu='local'.*devices \['CPU'"),
    ],
)
def test_tpu_without_a_tpu_says_so(tpu, message, monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    # In a fresh process, as a user runs it: late in the full suite, the TPU system's
    # initialisation took 62 s to fail in the suite's process (0.2 s in a fresh one).
    code = (
        "from trainers import strategies\n"
        f"try:\n    strategies.make_strategy('tpu', tpu={tpu!r})\n"
        "except ValueError as error:\n    print(error)\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(message, result.stdout), result.stdout


@pytest.mark.parametrize(
    ("name", "kind", "replicas"),
    [
        ("default", type(tf.distribute.get_strategy()), 1),
        ("mirrored", tf.distribute.MirroredStrategy, 1),
        ("multi_worker", tf.distribute.MultiWorkerMirroredStrategy, 1),
    ],
)
def test_make_strategy_builds_the_named_strategy(name, kind, replicas, tmp_path, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = strategies.make_strategy(name)
    # multi_worker with no cluster named trained as one local worker without a word (issue 33).
    alone = [w for w in caught if "neither config workers nor TF_CONFIG" in str(w.message)]
    assert len(alone) == (name == "multi_worker")
    assert isinstance(strategy, kind)
    assert strategy.num_replicas_in_sync == replicas
    # Alone (no TF_CONFIG), a process is its own chief and writes the workdir itself.
    assert strategies.is_chief(strategy)
    assert strategies.worker_directory(strategy, str(tmp_path)) == str(tmp_path)


class _Resolver:
    def __init__(self, task_type, task_id, jobs):
        self.task_type, self.task_id, self._jobs = task_type, task_id, jobs

    def cluster_spec(self):
        return tf.train.ClusterSpec(
            {job: [f"127.0.0.1:{2000 + i}"] for i, job in enumerate(self._jobs)}
        )


class _MultiWorker(tf.distribute.MultiWorkerMirroredStrategy):
    """Only what is_chief reads: the type and the cluster resolver (no cluster is started)."""

    def __init__(self, resolver):  # deliberately skips the strategy's setup
        self._resolver = resolver

    @property
    def cluster_resolver(self):
        return self._resolver


@pytest.mark.parametrize(
    ("task_type", "task_id", "jobs", "chief", "subdirectory"),
    [
        ("worker", 0, ["worker"], True, None),
        ("worker", 1, ["worker"], False, "workers/worker_1"),
        ("chief", 0, ["chief", "worker"], True, None),
        ("worker", 0, ["chief", "worker"], False, "workers/worker_0"),
    ],
)
def test_only_the_chief_writes_the_workdir(task_type, task_id, jobs, chief, subdirectory):
    strategy = _MultiWorker(_Resolver(task_type, task_id, jobs))
    assert strategies.is_chief(strategy) is chief
    expected = "/w" if subdirectory is None else os.path.join("/w", subdirectory)
    assert strategies.worker_directory(strategy, "/w") == expected


@pytest.fixture(autouse=True)
def _reset_flags():
    """Flags parsed here (e.g. --strategy) must not leak into later tests of the binary."""
    yield
    flags.FLAGS.unparse_flags()


def _one_line_exit(capsys) -> tuple[int, str]:
    """Runs the parsed binary; returns its exit status and the one line it printed."""
    with pytest.raises(SystemExit) as raised:
        train.main(["train"])
    shown = capsys.readouterr().err.strip()
    assert len(shown.splitlines()) == 1, shown
    return raised.value.code, shown


def test_the_strategy_flag_is_validated_when_parsed(mnist1d_config_path, monkeypatch):
    argv = ["train", f"--config={mnist1d_config_path}:smoke", "--workdir=/x", "--strategy=gpu"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(
        flags.IllegalFlagValueError, match="'gpu' is not a strategy; use one of default"
    ):
        flags.FLAGS(argv)


@pytest.mark.parametrize(
    ("strategy", "status", "message"),
    [
        # A usage error: one line on stderr and exit status 2 (no usage text).
        ("parameter_server", 2, "^error: .*needs a config with trainer='passm'"),
        # A ValueError of the run: one line on stderr and exit status 1 (no traceback).
        ("tpu", 1, "^error: .*strategy='tpu' needs a TPU"),
    ],
)
def test_the_binary_refuses_strategies_this_config_or_machine_cannot_run(
    strategy,
    status,
    message,
    mnist1d_config_path,
    tmp_path,
    monkeypatch,
    capsys,
    parse_binary_flags,
):
    monkeypatch.delenv("TPU_NAME", raising=False)
    argv = [
        "train",
        f"--config={mnist1d_config_path}:smoke",
        f"--workdir={tmp_path}",
        f"--strategy={strategy}",
    ]
    parse_binary_flags(argv)
    code, shown = _one_line_exit(capsys)
    assert code == status and re.search(message, shown), shown
    assert not os.listdir(tmp_path)  # refused before anything was written


@pytest.mark.parametrize(
    ("flags_given", "status", "message"),
    [
        (["--config={config}:smoke"], 2, "^error: --workdir is required .*--workdir=/tmp/"),
        (
            ["--config={config}:smoke", "--workdir=/proc/no_such_dir/run"],
            1,
            "^error: cannot create the workdir '/proc/no_such_dir/run' .*choose a directory",
        ),
        (
            ["--serve=worker:0", "--cluster_spec={{bad"],
            2,
            '^error: --cluster_spec is not JSON .*\\{"worker": \\[',
        ),
    ],
)
def test_the_binary_says_what_is_wrong_with_its_flags_in_one_line(
    flags_given, status, message, mnist1d_config_path, capsys, parse_binary_flags
):
    argv = ["train", *(flag.format(config=mnist1d_config_path) for flag in flags_given)]
    parse_binary_flags(argv)
    code, shown = _one_line_exit(capsys)
    assert code == status and re.search(message, shown), shown


def test_multi_worker_alone_runs_the_loop_with_compiled_steps(
    mnist1d_config_path, data_dir, tmp_path, monkeypatch, parse_binary_flags
):
    """MultiWorkerMirrored as a one-worker cluster (no TF_CONFIG), XLA-compiled steps."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    argv = [
        "train",
        f"--config={mnist1d_config_path}:smoke",
        f"--workdir={tmp_path}",
        "--strategy=multi_worker",
        f"--config.data.data_dir={data_dir}",
        "--config.progress_bar=False",
        "--config.timing_steps=0",
        "--config.jit_compile=True",
    ]
    parse_binary_flags(argv)
    train.main(["train"])
    with open(os.path.join(tmp_path, "summary.json")) as file:
        summary = json.load(file)
    assert summary["step"] == 20
    records = metrics_writer.read_metrics(str(tmp_path))
    losses = [r["train_loss"] for r in records]
    assert losses[-1] < losses[0]  # it trains (2.3 -> ~2.0 on MNIST-1D smoke)
    # One worker reads the whole train stream: at least 20 steps x 32 rows.
    assert summary["emitted_examples"] >= 20 * 32


@pytest.mark.parametrize("strategy", ["mirrored", "multi_worker"])
def test_passm_config_under_a_synchronous_strategy_falls_back_with_a_message(
    strategy, tmp_path, monkeypatch, caplog, parse_binary_flags
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    argv = ["train", f"--config={PASSM}:smoke", f"--workdir={tmp_path}", f"--strategy={strategy}"]
    parse_binary_flags(argv)
    with caplog.at_level(logging.WARNING):
        train.main(["train"])
    with open(os.path.join(tmp_path, "result.json")) as file:
        result = json.load(file)
    assert result["requested_mode"] == "passm_plus"
    assert result["mode"] == "sync"
    assert (
        result["strategy"]
        == {
            "mirrored": "MirroredStrategy",
            "multi_worker": "CollectiveAllReduceStrategy",
        }[strategy]
    )
    assert result["completed_steps"] == 16
    assert "falls back to synchronous SGD" in caplog.text


@pytest.mark.parametrize(
    ("flag", "shown"),
    [
        (
            "--config.num_step=2",
            "error: --config.num_step: the config has no key 'num_step'; did you mean "
            "--config.num_steps?",
        ),
        (  # a config file's argument given as a flag: its field is named
            "--config.max_echo=4",
            "error: --config.max_echo: the config has no key 'max_echo'; max_echo is a "
            "config-file argument (--config=FILE:max_echo=...), whose field is "
            "--config.auto_echo_max_factor",
        ),
    ],
)
def test_a_config_key_that_does_not_exist_is_one_line_with_the_fix(
    mnist1d_config_path, capsys, parse_binary_flags, flag, shown
):
    argv = ["train", f"--config={mnist1d_config_path}:smoke", "--workdir=/x", flag]
    parse_binary_flags(argv, parse=False)
    with pytest.raises(SystemExit) as raised:
        train.parse_flags(argv)
    assert raised.value.code == 2
    assert capsys.readouterr().err.strip() == shown


def test_a_config_argument_the_config_file_refuses_is_one_line(
    mnist1d_config_path, capsys, parse_binary_flags
):
    argv = ["train", f"--config={mnist1d_config_path}:smoke,bogus=1", "--workdir=/x"]
    parse_binary_flags(argv, parse=False)
    with pytest.raises(SystemExit) as raised:
        train.parse_flags(argv)
    assert raised.value.code == 2
    shown = capsys.readouterr().err.strip()
    assert shown.startswith(
        "error: --config: unknown config argument key 'bogus' in 'smoke,bogus=1'; valid keys are"
    )
    assert "\n" not in shown and "Traceback" not in shown


def test_a_corrupt_image_met_in_training_is_one_line_naming_the_file(
    mnist1d_config_path, tmp_path, capsys, parse_binary_flags
):
    import io

    import numpy as np
    from PIL import Image

    def jpeg(seed):
        buffer = io.BytesIO()
        pixels = np.random.default_rng(seed).integers(0, 256, (40, 50, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(buffer, "JPEG")
        return buffer.getvalue()

    files = {f"train/{c}/{k}.jpg": jpeg(k) for c in "ab" for k in range(2)}
    files["train/a/bad.jpg"] = b"not a jpeg at all"
    files.update({f"test/{c}/x.jpg": jpeg(9) for c in "ab"})
    for relative, data in files.items():
        (tmp_path / "images" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "images" / relative).write_bytes(data)
    config_path = os.path.join(os.path.dirname(mnist1d_config_path), "image_folder.py")
    argv = ["train", f"--config={config_path}:smoke", f"--workdir={tmp_path / 'run'}"]
    argv += [f"--config.data.image_dir={tmp_path / 'images'}", "--config.data.batch_size=5"]
    argv += ["--config.data.eval_batch_size=2", "--config.progress_bar=False"]
    parse_binary_flags(argv)
    with pytest.raises(SystemExit) as raised:
        train.main(["train"])
    assert raised.value.code == 1
    shown = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(
        r"error: corrupt, truncated or not an image \(JPEG, PNG, GIF, BMP\): \S+/bad\.jpg - "
        r"re-copy it, or set --config\.data\.skip_corrupt=True .*",
        shown,
    ), shown
