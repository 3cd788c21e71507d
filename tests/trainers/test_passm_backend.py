"""Which backend a configs/passm.py run trains on, and the binary running it on shared memory."""

from __future__ import annotations

import json
import os

import keras
import pytest
import tensorflow as tf

from trainers import run_config, train
from trainers.passm import config as passm_config
from trainers.passm import experiment as async_experiment
from trainers.passm import resolve_backend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PASSM = os.path.join(ROOT, "configs", "passm.py")
SPEC = '{"worker": ["a:1"], "ps": ["a:2"], "chief": ["a:3"]}'


@pytest.mark.parametrize(
    "overrides, strategy, expected",
    [
        ({}, None, "shared_memory"),  # one host: the default
        ({"cluster_spec": SPEC}, None, "parameter_server"),
        ({"backend": "parameter_server"}, None, "parameter_server"),  # a loopback cluster
        ({"backend": "shared_memory", "strategy": "default"}, None, "shared_memory"),
        ({"strategy": "default"}, None, "synchronous"),  # the documented fall-back
        ({"strategy": "mirrored"}, None, "synchronous"),
        ({"strategy": "default", "mode": "sync"}, None, "synchronous"),
        ({}, tf.distribute.get_strategy(), "synchronous"),
        ({"config": "smoke"}, None, "shared_memory"),
    ],
)
def test_backend_follows_the_config(load_config, overrides, strategy, expected):
    overrides = dict(overrides)
    config = load_config("passm", overrides.pop("config", ""))
    config.update(overrides)
    assert resolve_backend(config, strategy) == expected


@pytest.mark.parametrize(
    "overrides, strategy, match",
    [
        ({"backend": "threads"}, None, "config.passm.backend must be one of .*got 'threads'"),
        ({"backend": "shared_memory", "cluster_spec": SPEC}, None,
         "config.passm.cluster_spec names a cluster; drop --config.passm.cluster_spec, or use "
         "--config.passm.backend=parameter_server"),
        ({"backend": "shared_memory", "strategy": "mirrored"}, None,
         "runs its own worker threads, not config.strategy='mirrored'"),
        ({"backend": "parameter_server", "strategy": "default"}, None,
         "needs config.strategy='parameter_server', got 'default'"),
        ({"backend": "shared_memory"}, tf.distribute.get_strategy(),
         "takes no tf.distribute strategy, got _DefaultDistributionStrategy; pass strategy=None"),
        ({"backend": "parameter_server"}, tf.distribute.get_strategy(),
         "needs a ParameterServerStrategy, got _DefaultDistributionStrategy"),
    ],
)  # fmt: skip
def test_contradictory_backends_name_both_and_the_fix(load_config, overrides, strategy, match):
    config = load_config("passm", "smoke")
    for key, value in overrides.items():  # strategy is the run's; the rest the passm section's
        (config if key == "strategy" else config.passm)[key] = value
    with pytest.raises(ValueError, match=match):
        resolve_backend(config, strategy)


def test_binary_runs_the_smoke_config_on_shared_memory_by_default(
    tmp_path, monkeypatch, capsys, load_config, parse_binary_flags
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    parse_binary_flags(["train", f"--config={PASSM}:smoke", f"--workdir={tmp_path}"])
    train.main(["train"])
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["backend"] == "shared_memory" and result["mode"] == "passm_plus"
    assert result["num_workers"] == 2 and result["completed_steps"] == 16
    assert sum(result["worker_updates"]) == result["updates_applied"] == 16
    assert [h["step"] for h in result["history"]] == [8, 16]
    captured = capsys.readouterr()
    # What it trains first, as the synchronous binary says; the accuracy in a line at the end.
    assert captured.err.splitlines()[0] == (
        "Training mnist1d_mlp on mnist1d with passm_plus (2 workers, shared_memory backend; "
        f"batch 16 per step) for 16 steps; writing to {tmp_path}"
    )
    *summary, accuracy_line, model_line, tensorboard_line = captured.out.strip().splitlines()
    assert accuracy_line == (
        f"step 16: eval accuracy {result['final_accuracy']:.4f} (passm_plus, "
        f"{result['train_seconds']:.2f} s training)"
    )
    printed = json.loads("\n".join(summary))  # the summary, without the history
    assert printed["staleness_mean"] == result["staleness_mean"] >= 0
    assert "history" not in printed and os.path.isdir(tmp_path / "checkpoints")
    # It leaves what a synchronous run leaves: a model.keras that evaluates as the run ended.
    model_path = str(tmp_path / "model.keras")
    assert model_line == f"trained model: {model_path} (keras.models.load_model)"
    assert tensorboard_line == f"tensorboard --logdir={tmp_path}"
    assert result["model_path"] == model_path
    config = load_config("passm", "smoke")
    evaluate = async_experiment.make_evaluate(async_experiment.data_config(config), seed=0)
    accuracy = evaluate(keras.models.load_model(model_path))
    assert accuracy == pytest.approx(result["final_accuracy"])


@pytest.mark.parametrize(
    "arguments, backend",
    [([], "auto"), (["--strategy=parameter_server"], "parameter_server"),
     (["--config.passm.backend=shared_memory", "--strategy=parameter_server"],
      "shared_memory")],
)  # fmt: skip
def test_strategy_flag_parameter_server_asks_for_the_cluster(
    arguments, backend, tmp_path, monkeypatch, capsys, parse_binary_flags
):
    seen = {}

    def fake_run(config, workdir, strategy=None):
        seen.update(backend=config.backend, strategy=strategy)
        return {}

    monkeypatch.setattr(async_experiment, "train_and_evaluate", fake_run)
    parse_binary_flags(["train", f"--config={PASSM}:smoke", f"--workdir={tmp_path}", *arguments])
    train.main(["train"])
    assert seen == {"backend": backend, "strategy": None}


def test_the_schema_before_is_read_with_a_warning_naming_the_new_keys(load_config):
    config = load_config("passm", "smoke")
    config.mode, config.eval_every = "assm", 4  # --config.mode=assm --config.eval_every=4
    with pytest.warns(FutureWarning, match=r"--config.mode is now --config.passm.mode"):
        flat = passm_config.flat_view(config)
    assert (flat.mode, flat.eval_every, flat.num_workers) == ("assm", 4, 2)


def test_a_sync_run_config_refuses_passm_fields():
    config = run_config.default_config()
    config.passm.num_workers = 4
    with pytest.raises(ValueError, match=r"passm.\* fields apply to trainer='passm'"):
        run_config.resolve_config(config)
    config = run_config.default_config()
    config.trainer = "passm"
    with pytest.raises(ValueError, match=r"trainer='passm' trains with the asynchronous"):
        run_config.resolve_config(config)


@pytest.mark.parametrize(
    "key, value",
    [("echo", 2.0), ("auto_echo_max_factor", 8.0), ("prune", True), ("assist", True),
     ("priority", True), ("select_ratio", 0.5), ("pgd", True), ("data.echo", 4.0)],
)  # fmt: skip
def test_a_passm_config_refuses_a_technique_it_would_ignore(load_config, key, value):
    config = load_config("passm", "smoke")
    # e.g. --config.echo=2: accepted, then trained without (issue 33); pgd and data.echo are
    # priority's and echo's old places, which a config file still set in silence.
    with config.unlocked():
        config.update_from_flattened_dict({key: value})
    with pytest.raises(ValueError) as raised:
        passm_config.flat_view(config)
    assert str(raised.value) == (
        f"config {key}={value!r}: the asynchronous trainer (trainer='passm') trains without "
        "echo, pruning, the Assistant and priority sampling or selection, so it would ignore "
        "this. Use the technique with a synchronous config (e.g. "
        "--config=configs/mnist1d.py:echo=2,buffer=1000), or leave it off here."
    )


def test_a_passm_config_files_fields_it_does_not_read_are_warned_about(load_config):
    # A config file's weight_decay or data.source trained without them, without a word; the
    # binary refuses them as flags (unread_overrides), and a file's are now named (issue 33).
    config = load_config("passm", "smoke")
    config.weight_decay, config.data.source, config.prune_ratio = 1e-3, "image_folder", 0.3
    with pytest.warns(UserWarning) as caught:
        passm_config.flat_view(config)
    assert [str(w.message) for w in caught] == [
        "config data.source, prune_ratio, weight_decay: the asynchronous trainer "
        "(trainer='passm') does not read these fields, so it trains without them (its data set "
        "is generated, passm.dataset; docs/async_partitioned.md lists what it reads). Leave "
        "them at their defaults, or train with a synchronous config."
    ]


@pytest.mark.parametrize("variant", ["", "resnet", "smoke", "resnet_smoke"])
def test_the_passm_configs_set_only_fields_it_reads(load_config, variant):
    config = load_config("passm", variant)
    config.passm.mode, config.num_steps, config.data.batch_size = "assm", 8, 4  # all read
    assert passm_config.unread_fields_set(config) == []  # warmup_steps = 0 agrees with it


@pytest.mark.parametrize("mode", ["assm", "passm", "sync"])
def test_passm_plus_phase_fields_under_another_mode_are_refused(load_config, mode):
    # Before: assm_warmup_fraction=0.9 under mode=assm ran the same phases, silently (issue 33).
    config = load_config("passm", "smoke")
    config.passm.mode, config.passm.assm_warmup_fraction = mode, 0.9
    with pytest.raises(ValueError) as raised:
        passm_config.flat_view(config)
    assert str(raised.value) == (
        f"config passm.assm_warmup_fraction=0.9 shapes PASSM+'s ASSM phases, and "
        f"passm.mode={mode!r} has none, so it would be ignored; set "
        "--config.passm.mode=passm_plus, or leave it at its default, 0.25."
    )
    config.passm.mode = "passm_plus"
    assert passm_config.flat_view(config).assm_warmup_fraction == 0.9


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (  # before: "dataset must be one of (...)", naming no flag
            {"passm.dataset": "cifar10"},
            "config passm.dataset='cifar10': the asynchronous trainer trains on a generated data "
            "set, one of ['mnist1d', 'generated_images']; set --config.passm.dataset=mnist1d "
            "(e.g. with configs/passm.py) or generated_images (configs/passm.py:resnet).",
        ),
        (  # before: "use an image dataset" from inside the model's builder
            {"model": "resnet_small"},
            "config model='resnet_small' does not fit passm.dataset='mnist1d'; set "
            "--config.model to mnist1d_mlp or mnist1d_cnn, or --config.passm.dataset to the "
            "data it takes.",
        ),
    ],
)
def test_a_dataset_or_model_that_cannot_train_names_the_flag(load_config, fields, message):
    config = load_config("passm", "smoke")
    config.update_from_flattened_dict(fields)
    with pytest.raises(ValueError) as raised:
        async_experiment.train_and_evaluate(config, None)
    assert str(raised.value) == message


def test_a_worker_count_below_one_names_the_flag(load_config, tmp_path):
    config = load_config("passm", "smoke")
    config.passm.num_workers = 0
    with pytest.raises(
        ValueError, match=r"^config\.passm\.num_workers must be an int >= 1, got 0; "
    ):
        async_experiment.train_and_evaluate(config, str(tmp_path))
