"""Mistakes on the binary's command line end it with one line, ``error: --FLAG: what was wrong;
how to fix``, and exit status 2, instead of absl's or ml_collections' traceback; a run that
diverges ends with one line and exit status 1, on either trainer (issue 33)."""

import os
import re
import subprocess
import sys

import pytest

from echoing._src.core import config_checks
from trainers import flag_errors, train

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PASSM = os.path.join(REPOSITORY, "configs", "passm.py")
CONFIGS = sorted(
    name for name in os.listdir(os.path.join(REPOSITORY, "configs")) if name.endswith(".py")
)


def _parse_error(argv, parse_binary_flags, capsys) -> str:
    """``train.parse_flags(argv)``, which must exit 2; returns the one line it printed."""
    parse_binary_flags(argv, parse=False)
    with pytest.raises(SystemExit) as raised:
        train.parse_flags(argv)
    shown = capsys.readouterr().err.strip()
    assert raised.value.code == 2, shown
    assert len(shown.splitlines()) == 1 and "Traceback" not in shown, shown
    return shown


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            "--config.num_steps=2.5",
            r"^error: --config\.num_steps: '2\.5' is not a whole number; give one, "
            r"e\.g\. --config\.num_steps=20$",
        ),
        (
            "--config.learning_rate=abc",
            r"^error: --config\.learning_rate: 'abc' is not a number; give one, "
            r"e\.g\. --config\.learning_rate=[0-9.e-]+$",
        ),
        (
            "--strategy=foo",
            r"^error: --strategy: 'foo' is not a strategy; use one of default, mirrored, "
            r"multi_worker, tpu, parameter_server, e\.g\. --strategy=mirrored$",
        ),
        (
            "--bogus_flag",
            r"^error: --bogus_flag: no such flag; python -m trainers\.train --helpshort lists "
            r"them$",
        ),
        ("--eval_onyl", r"^error: --eval_onyl: no such flag; did you mean --eval_only\?$"),
        (
            "--eval_only=maybe",
            r"^error: --eval_only: 'maybe' is not true or false; write --eval_only=true or "
            r"--eval_only=false$",
        ),
        (
            "--config.progress_bar=sometimes",
            r"^error: --config\.progress_bar: 'sometimes' is not true or false; write "
            r"--config\.progress_bar=true or --config\.progress_bar=false$",
        ),
    ],
)
def test_a_flag_mistake_is_one_line_naming_the_flag_and_the_fix(
    flag, message, mnist1d_config_path, parse_binary_flags, capsys
):
    argv = ["train", f"--config={mnist1d_config_path}:smoke", "--workdir=/x", flag]
    shown = _parse_error(argv, parse_binary_flags, capsys)
    assert re.search(message, shown), shown


def test_a_config_override_before_the_config_says_to_put_the_config_first(
    mnist1d_config_path, parse_binary_flags, capsys
):
    argv = ["train", "--config.num_steps=10", f"--config={mnist1d_config_path}", "--workdir=/x"]
    assert _parse_error(argv, parse_binary_flags, capsys) == (
        "error: --config.num_steps: given before --config; put --config=FILE first, e.g. "
        "python -m trainers.train --config=configs/mnist1d.py --config.num_steps=..."
    )


def test_a_config_file_that_does_not_exist_is_named_with_the_configs_there_are(
    parse_binary_flags, capsys, monkeypatch
):
    monkeypatch.chdir(REPOSITORY)
    argv = ["train", "--config=configs/nope.py:smoke", "--workdir=/x"]
    assert _parse_error(argv, parse_binary_flags, capsys) == (
        "error: --config: no config file 'configs/nope.py'; the configs in configs/ are "
        f"{', '.join(CONFIGS)}, e.g. --config=configs/mnist1d.py"
    )


def test_a_config_file_setting_a_field_to_another_type_names_the_field_and_the_type(
    tmp_path, parse_binary_flags, capsys
):
    # Issue 33: ml_collections' "Could not override field 'learning_rate' (reference). 0.5 is of
    # original type <class 'str'> and cannot be casted ...", an override the user never gave.
    with open(os.path.join(REPOSITORY, "configs", "mnist1d.py")) as file:
        text = file.read()
    text = text.replace("    return config", '    config.learning_rate = "0.5"\n    return config')
    path = tmp_path / "my_config.py"
    path.write_text(text)
    argv = ["train", f"--config={path}:smoke", "--workdir=/tmp/unused"]
    shown = _parse_error(argv, parse_binary_flags, capsys)
    assert shown == (
        "error: --config: the config file sets learning_rate to a str ('0.5'), but "
        "learning_rate is a float; set it to one, e.g. config.learning_rate = 0.5"
    )


def test_a_config_path_relative_to_another_directory_lists_the_configs_by_full_path(
    parse_binary_flags, capsys, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)  # configs/mnist1d.py exists, but not from here
    argv = ["train", "--config", "configs/mnist1d.py", "--workdir=/x"]
    configs = os.path.join(REPOSITORY, "configs")
    assert _parse_error(argv, parse_binary_flags, capsys) == (
        f"error: --config: no config file 'configs/mnist1d.py'; the configs in {configs}/ are "
        f"{', '.join(CONFIGS)}, e.g. --config={configs}/mnist1d.py"
    )


@pytest.mark.parametrize(
    ("flags_given", "message"),
    [
        (["--config=configs/nope.py"], "error: --config: no config file 'configs/nope.py'; "),
        (
            ["--config=configs/mnist1d.py:smoke", "--config.num_steps=2.5"],
            "error: --config.num_steps: '2.5' is not a whole number; ",
        ),
        (
            ["--config=configs/passm.py:smoke", "--eval_only"],
            "error: --eval_only reads the synchronous loop's checkpoints; this config "
            "(trainer='passm') belongs to the asynchronous trainer, whose checkpoints hold other "
            "state. To evaluate its workdir, rerun the same command without --eval_only",
        ),
    ],
)
def test_the_binary_prints_a_flag_mistake_as_one_line_without_a_traceback(
    flags_given, message, tmp_path
):
    result = subprocess.run(
        [sys.executable, "-m", "trainers.train", *flags_given, f"--workdir={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_diverged_asynchronous_run_is_one_line_as_a_synchronous_one(
    tmp_path, capsys, monkeypatch, parse_binary_flags
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    argv = [
        "train",
        f"--config={PASSM}:smoke",
        f"--workdir={tmp_path}",
        "--config.learning_rate=1e12",
    ]
    parse_binary_flags(argv)
    with pytest.raises(SystemExit) as raised:
        train.main(["train"])
    shown = capsys.readouterr().err.strip()
    assert raised.value.code == 1, shown
    assert "Traceback" not in shown
    assert re.match(
        r"error: the training loss is (nan|-?inf) in the steps up to \d+: training diverged\. "
        r"Lower the learning rate \(--config\.learning_rate",
        shown.splitlines()[-1],
    ), shown


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        (
            "data config source='tfds' needs data config name, e.g. name='cifar10'; got name=''.",
            "--config.data.source='tfds' needs --config.data.name, e.g. "
            "--config.data.name='cifar10'; got --config.data.name=''.",
        ),
        (
            "bad.jpg - re-copy it, or set data config skip_corrupt=True to skip it",
            "bad.jpg - re-copy it, or set --config.data.skip_corrupt=True to skip it",
        ),
        # A message about no data config, and a key inside another word or flag, stay as they are.
        (
            "config warmup_steps=8 must be < num_steps=4",
            "config warmup_steps=8 must be < num_steps=4",
        ),
        (
            "data config x: --config.data.name=a, my_name=b",
            "data config x: --config.data.name=a, my_name=b",
        ),
    ],
)
def test_a_data_config_error_names_its_fields_as_the_binary_flags(message, shown):
    keys = ["name", "num_classes", "skip_corrupt", "source"]
    assert flag_errors.as_data_flags(message, keys) == shown


def test_a_tfrecord_label_out_of_range_names_the_flag_without_escaped_quotes(
    tmp_path, capsys, mnist1d_config_path, parse_binary_flags
):
    import numpy as np

    from pipelines.sources import tfrecord

    for split, count in (("train", 40), ("eval", 8)):
        inputs = np.zeros((count, 40, 1), np.float32)
        tfrecord.write(str(tmp_path / f"{split}.tfrecord"), inputs, np.arange(count) % 10)
    argv = ["train", f"--config={mnist1d_config_path}:smoke", f"--workdir={tmp_path / 'run'}"]
    argv += ["--config.data.source=tfrecord", "--config.data.num_classes=5"]
    argv += [f"--config.data.train_files={tmp_path}/train*", "--config.progress_bar=False"]
    argv += [f"--config.data.eval_files={tmp_path}/eval*"]
    parse_binary_flags(argv)
    with pytest.raises(SystemExit) as raised:
        train.main(["train"])
    assert raised.value.code == 1
    shown = capsys.readouterr().err.strip().splitlines()[-1]
    assert shown.startswith(f"error: TFRecord files '{tmp_path}/train*' / '{tmp_path}/eval*' hold ")
    assert "set --config.data.num_classes to the largest label + 1" in shown, shown
    assert "\\" not in shown, shown


@pytest.mark.parametrize(
    ("argument", "overrides", "given"),
    [
        ("smoke,insert=after_batch", {}, "--config=...:insert=after_batch"),
        ("smoke", {"echo_insert": "after_batch"}, "--config.echo_insert=after_batch"),
        ("smoke,insert=after_batch", {"echo": 1.0}, "--config=...:insert=after_batch"),
    ],
)
def test_an_echo_insertion_point_with_echo_off_is_refused(
    argument, overrides, given, load_config, mnist1d_config_path
):
    # It trained the baseline without a word (issue 33); buffer= alone was already refused.
    config = load_config("mnist1d", argument)
    argv = ["train", f"--config={mnist1d_config_path}:{argument}"]
    assert flag_errors.echo_insert_without_echo(config, argv, overrides) == (
        f"{given} places the echo stage, and echo is off (echo=1); set a factor, e.g. "
        "--config=configs/mnist1d.py:echo=2,insert=... or --config.echo=2 (or echo=auto for "
        "AutoEcho), or drop the insertion point."
    )


@pytest.mark.parametrize(
    ("argument", "overrides", "given", "switch"),
    [  # Issue 33: at their default values (the docs' top_ratio=0.1) they trained the baseline.
        ("smoke,top_ratio=0.1", {}, "--config=...:top_ratio=0.1", "priority"),
        ("smoke", {"priority_top_ratio": 0.1}, "--config.priority_top_ratio=0.1", "priority"),
        ("smoke,prune_ratio=0.5", {}, "--config=...:prune_ratio=0.5", "prune"),
        ("smoke", {"prune_epochs": 0}, "--config.prune_epochs=0", "prune"),
        ("smoke,assist_reweight", {}, "--config=...:assist_reweight=1", "assist"),
    ],
)
def test_a_technique_option_with_the_technique_off_is_refused_even_at_its_default(
    argument, overrides, given, switch, load_config, mnist1d_config_path
):
    config = load_config("mnist1d", argument)
    argv = ["train", f"--config={mnist1d_config_path}:{argument}"]
    message = flag_errors.options_without_technique(config, argv, overrides)
    assert message.startswith(f"config {given} with {switch} off: the technique is off"), message
    assert f"Turn it on (e.g. --config=configs/mnist1d.py:{switch}=1," in message
    config[switch] = True  # turned on by a later flag: an option, no mistake
    assert flag_errors.options_without_technique(config, argv, overrides) is None


def test_the_options_table_holds_each_techniques_defaults(load_config):
    config = load_config("mnist1d", "smoke")
    for switch, (defaults, _) in config_checks.OPTIONS_WHEN_OFF.items():
        assert not config[switch]
        assert {key: config[key] for key in defaults} == defaults


@pytest.mark.parametrize(
    ("argument", "echo"),
    [("smoke,echo=2,insert=after_batch", None), ("smoke,insert=after_batch", 2.0), ("smoke", 1.0)],
)
def test_an_echo_insertion_point_with_echo_on_or_the_configs_own_is_no_mistake(
    argument, echo, load_config
):
    config = load_config("mnist1d", argument)
    if echo is not None:
        config.echo = echo  # --config.echo=2 after :insert=after_batch
    argv = ["train", f"--config=configs/mnist1d.py:{argument}"]
    assert flag_errors.echo_insert_without_echo(config, argv, {}) is None


@pytest.mark.parametrize(
    ("argument", "flag", "said"),
    [
        ("smoke", "--config.echo_insert=after_batch", "--config.echo_insert=after_batch places "
         "the echo stage"),
        ("smoke,top_ratio=0.1", None, "config --config=...:top_ratio=0.1 with priority off"),
    ],
)  # fmt: skip
def test_the_binary_refuses_an_option_of_a_stage_that_is_off_in_one_line(
    argument, flag, said, tmp_path, capsys, mnist1d_config_path, parse_binary_flags
):
    argv = ["train", f"--config={mnist1d_config_path}:{argument}", f"--workdir={tmp_path}"]
    parse_binary_flags(argv + ([flag] if flag else []))
    with pytest.raises(SystemExit) as raised:
        train.main(["train"])
    assert raised.value.code == 2
    shown = capsys.readouterr().err.strip()
    assert shown.startswith(f"error: {said}"), shown
    assert not os.path.exists(tmp_path / "checkpoints")


@pytest.mark.parametrize(
    ("flags_given", "named"),
    [
        (["--config.weight_decay=0.5"], "--config.weight_decay: "),
        (
            ["--config.data.source=image_folder", "--config.data.image_dir=/x"],
            "--config.data.image_dir, --config.data.source: ",
        ),
        (["--config.stop_at_target=True"], "--config.stop_at_target: "),
        (["--config.checkpoint_every_steps=2"], "--config.checkpoint_every_steps: "),
    ],
)
def test_a_field_the_asynchronous_trainer_does_not_read_is_refused(
    flags_given, named, parse_binary_flags, capsys, tmp_path
):
    # PASSM trained on MNIST-1D with --config.data.source=image_folder given, and without the
    # weight decay, the target stop or the checkpoint cadence asked for, in silence (issue 33).
    argv = ["train", f"--config={PASSM}:smoke", f"--workdir={tmp_path}", *flags_given]
    parse_binary_flags(argv)
    with pytest.raises(SystemExit) as raised:
        train.main(["train"])
    assert raised.value.code == 2
    shown = capsys.readouterr().err.strip()
    assert shown.startswith(f"error: {named}the asynchronous trainer (trainer='passm') does not")
    assert not os.path.exists(tmp_path / "checkpoints")


def test_fields_the_asynchronous_trainer_reads_are_accepted():
    from trainers.passm import config as passm_config

    read = {"learning_rate": 0.05, "num_steps": 4, "data.num_train": 100, "passm.mode": "assm"}
    assert passm_config.unread_overrides({**read, "strategy": "default", "echo": 1.0}) is None
    assert passm_config.unread_overrides({"trainer": "passm"}).startswith(
        "--config.trainer=passm: the asynchronous trainer reads only some of a config's fields"
    )


def _data(**fields):
    import pipelines

    config = pipelines.default_data_config()
    config.update(fields)
    return config


@pytest.mark.parametrize(
    ("fields", "flags_given", "named"),
    [
        ({}, {"data.name": "cifar10"}, "--config.data.name: the data source 'mnist1d' does not"),
        (
            {},
            {"data.num_classes": 3, "data.eval_split": "train"},
            "--config.data.eval_split, --config.data.num_classes: the data source 'mnist1d' does",
        ),
        (
            {"source": "tfds", "name": "mnist"},
            {"data.image_dir": "/x"},
            "--config.data.image_dir: the data source 'tfds' does not read",
        ),
        (  # every image under image_dir is used: num_train sizes the embedded photo set only
            {"source": "image_folder", "image_dir": "/photos"},
            {"data.num_train": 50},
            "--config.data.num_train: the data source 'image_folder' at "
            "--config.data.image_dir=/photos (every image there is used) does not read this",
        ),
        (
            {"source": "text", "name": "lm1b"},
            {"data.num_eval": 5},
            "--config.data.num_eval: the data source 'text' reading the TFDS dataset "
            "--config.data.name=lm1b does not read this field",
        ),
    ],
)
def test_a_data_field_the_source_does_not_read_is_refused(fields, flags_given, named):
    # --config.data.name=cifar10 on MNIST-1D trained on MNIST-1D, headed "on cifar10" (issue 33).
    shown = flag_errors.unread_data_flags(_data(**fields), flags_given)
    assert shown.startswith(named), shown


def test_data_fields_the_source_reads_and_those_of_every_source_are_accepted():
    every = {"data.batch_size": 8, "data.shuffle_buffer": 0, "data.data_dir": "/x"}
    assert flag_errors.unread_data_flags(_data(), {**every, "data.num_train": 10}) is None
    tfds = _data(source="tfds", name="mnist")
    assert flag_errors.unread_data_flags(tfds, {"data.name": "mnist", **every}) is None
    photos = _data(source="image_folder")  # the embedded photo set: num_train sizes it
    assert flag_errors.unread_data_flags(photos, {"data.num_train": 10}) is None


def test_switching_the_source_drops_the_config_files_fields_for_the_old_one(parse_binary_flags):
    # docs/training_binary.md's command: configs/image_folder.py's photo-set sizes do not apply
    # to TFRecords; the user switched them off with the source, so they are not warned about.
    folder = os.path.join(REPOSITORY, "configs", "image_folder.py")
    argv = ["train", f"--config={folder}", "--workdir=/tmp/x", "--config.data.source=tfrecord"]
    config = parse_binary_flags(argv)
    assert config.data.num_train == 2_000
    train._drop_fields_of_the_replaced_source(config)
    assert (config.data.num_train, config.data.num_eval) == (40_000, 10_000)  # the defaults
    assert config.data.image_size == 64  # TFRecords read it too
    # A config file's own stray field (its source not switched) is kept, and warned about.
    config = parse_binary_flags(["train", f"--config={folder}", "--workdir=/tmp/x"])
    config.data.name = "cifar10"
    train._drop_fields_of_the_replaced_source(config)
    assert config.data.name == "cifar10"


def test_an_old_passm_key_and_its_new_name_together_are_refused():
    # The old key silently won: eval_every=4 over eval_every_steps=6 (issue 33).
    from trainers.passm import config as passm_config

    shown = passm_config.unread_overrides({"eval_every": 4, "eval_every_steps": 6})
    assert shown == (
        "--config.eval_every and --config.eval_every_steps both set eval_every_steps; keep only "
        "--config.eval_every_steps (--config.eval_every is its old name)."
    )


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        ({"name": "cifar10"}, "on mnist1d (batch"),  # a stray name is not what trains
        ({"source": "tfds", "name": "cifar10"}, "on cifar10 (batch"),
        ({"source": "tfrecord"}, "on tfrecord (batch"),
    ],
)
def test_the_headline_names_the_data_the_source_reads(load_config, fields, shown):
    from trainers import build

    config = load_config("mnist1d", "smoke")
    config.data.update(fields)
    assert shown in build.headline(config, [], "/tmp/x")
