"""Tests for trainers.config_args: parse (conversions, every error a config argument can hit) and
the shared technique arguments."""

import pytest

from trainers import config_args, experiment

ALLOWED = {"echo": float, "insert": str, "buffer": int, "smoke": bool}


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        (None, {}),
        ("", {}),
        ("smoke", {"smoke": True}),
        ("smoke=0", {"smoke": False}),
        ("smoke=true", {"smoke": True}),
        ("echo=2,insert=before_augment", {"echo": 2.0, "insert": "before_augment"}),
        (" echo = 1.5 , buffer=100 ,", {"echo": 1.5, "buffer": 100}),
    ],
)
def test_parse_converts_values(arg, expected):
    result = config_args.parse(arg, ALLOWED)
    assert result == expected
    assert all(type(result[key]) is ALLOWED[key] for key in result)


@pytest.mark.parametrize(
    ("arg", "error", "message"),
    [
        ("ecno=2", ValueError, r"unknown config argument key 'ecno'.*\['buffer', 'echo'"),
        ("echo=2,echo=3", ValueError, "given twice"),
        ("echo=two", ValueError, "must be a float"),
        ("buffer=1.5", ValueError, "must be a int"),
        ("smoke=maybe", ValueError, "must be a boolean"),
        (3, TypeError, "must be a string"),
    ],
)
def test_parse_rejects_bad_arguments(arg, error, message):
    with pytest.raises(error, match=message):
        config_args.parse(arg, ALLOWED)


@pytest.mark.parametrize(
    "arg, echo, auto_max, insert, prune",
    [
        ("", 1.0, 0.0, "after_decode", False),
        ("echo=2,insert=after_batch,prune=1", 2.0, 0.0, "after_batch", True),
        ("echo=auto,max_echo=4", 1.0, 4.0, "after_decode", False),
    ],
)
def test_set_techniques_reads_the_shared_arguments(arg, echo, auto_max, insert, prune):
    config = experiment.default_config()
    args = config_args.parse(arg, config_args.TECHNIQUE_ARGUMENTS)
    config_args.set_techniques(config, args, insert="after_decode")
    assert (config.echo, config.auto_echo_max_factor) == (echo, auto_max)
    assert (config.echo_insert, config.prune) == (insert, prune)


@pytest.mark.parametrize(
    "arg, message",
    [
        ("echo=fast", "must be a float or 'auto'"),
        ("echo=2,max_echo=4", "max_echo needs echo=auto"),
        # Issue 33: 0, the field's "off", trained with no echo at all, unsaid.
        ("echo=auto,max_echo=0", r"max_echo=0.0 must be >= 1 with echo=auto"),
        ("echo=auto,max_echo=nan", r"max_echo=nan must be >= 1 with echo=auto"),
    ],
)
def test_set_techniques_rejects_bad_echo_arguments(arg, message):
    args = config_args.parse(arg, config_args.TECHNIQUE_ARGUMENTS)
    with pytest.raises(ValueError, match=message):
        config_args.set_techniques(experiment.default_config(), args, insert="after_decode")


def test_each_renamed_argument_names_a_field_the_config_file_sets(load_config):
    # The table behind "--config.max_echo: ... whose field is --config.auto_echo_max_factor".
    service = load_config("data_service", "address=grpc://localhost:1,mode=distributed_epoch")
    assert service.data.service_address == "grpc://localhost:1"
    assert service.data.service_processing_mode == "distributed_epoch"
    config = load_config("mnist1d", "echo=auto,max_echo=4,buffer=7,insert=after_augment")
    assert (config.auto_echo_max_factor, config.echo_buffer_size) == (4.0, 7)
    assert config.echo_insert == "after_augment"
    config = load_config("mnist1d", "priority=1,top_ratio=0.2,renew_ratio=0.5")
    assert (config.priority_top_ratio, config.priority_renew_ratio) == (0.2, 0.5)
    assert set(config_args.FIELD_OF_ARGUMENT) == {
        "max_echo", "buffer", "insert", "top_ratio", "renew_ratio", "address", "mode"
    }  # fmt: skip
