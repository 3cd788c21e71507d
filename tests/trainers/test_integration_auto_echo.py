"""configs/mnist1d.py:echo=auto through trainers.experiment.run: the factor is logged per loop."""

import pytest
import tensorflow as tf

from echoing._src.echo.auto_echo import UnobservedCheck
from trainers import experiment, metrics_writer


@pytest.mark.parametrize(
    ("argument", "max_factor"),
    [
        ("echo=auto,max_echo=3,insert=before_augment,smoke", 3.0),
        ("echo=auto,insert=after_batch,smoke", 8.0),  # max_echo defaults to 8
    ],
)
def test_auto_echo_factor_is_logged_each_loop_within_bounds(
    argument, max_factor, load_config, data_dir, tmp_path, monkeypatch, capfd
):
    # The trainer observes from its second loop on: the warning for a factor nothing observes,
    # at its smallest here, is not for it.
    monkeypatch.setattr(UnobservedCheck, "BATCHES", 5)
    monkeypatch.setattr(UnobservedCheck, "EXAMPLES", 5)
    config = load_config("mnist1d", argument)
    assert config.auto_echo_max_factor == max_factor
    config.data.data_dir = data_dir
    config.progress_bar = False
    config.num_steps, config.steps_per_loop = 40, 10
    config.eval_every_steps = config.checkpoint_every_steps = 20
    workdir = str(tmp_path)
    summary = experiment.run(config, workdir)
    assert summary["step"] == 40

    records = metrics_writer.read_metrics(workdir)
    assert [r["step"] for r in records] == [10, 20, 30, 40]
    for record in records:
        assert 1.0 <= record["echo_factor"] <= max_factor
    # The first loop of a process includes tracing and is not observed; every later one is.
    assert "input_wait_fraction" not in records[0]
    for record in records[1:]:
        assert 0.0 <= record["input_wait_fraction"] <= 1.0
    # The controller's live factor is checkpointed and is the last logged one.
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(f"{workdir}/checkpoints"))
    saved = reader.get_tensor("auto_echo/factor/.ATTRIBUTES/VARIABLE_VALUE")
    assert saved == pytest.approx(records[-1]["echo_factor"], rel=1e-6)
    assert "nothing has called observe" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("echo=auto,max_echo=0.5,smoke", r"config argument max_echo=0.5 must be >= 1 with "
         r"echo=auto \(the largest factor AutoEcho may set, e.g. max_echo=8\)"),
        # Issue 33: above the stage's bound the message named echoing.AutoEcho's argument.
        ("echo=auto,max_echo=5000,smoke", r"auto_echo_max_factor must be 0 .off. or a number in "
         r"\[1, 1000\], got 5000"),
        ("echo=2,max_echo=4,smoke", "max_echo needs echo=auto"),
    ],
)  # fmt: skip
def test_bad_auto_echo_arguments_are_refused(argument, message, load_config):
    with pytest.raises(ValueError, match=message):
        experiment.resolve_config(load_config("mnist1d", argument))


def test_eval_every_fresh_examples_evaluates_when_a_multiple_is_crossed(
    load_config, data_dir, tmp_path
):
    config = load_config("mnist1d", "echo=auto,insert=after_batch,smoke")
    config.data.data_dir = data_dir
    config.progress_bar = False
    config.num_steps, config.steps_per_loop = 60, 5
    config.eval_every_steps = config.checkpoint_every_steps = 60  # only the last step by steps
    every = 7 * config.data.batch_size  # more than one loop's fresh data (5 batches or fewer)
    config.eval_every_fresh_examples = every
    workdir = str(tmp_path)
    experiment.run(config, workdir)

    records = metrics_writer.read_metrics(workdir)
    evaluated = [r for r in records if "eval_accuracy" in r]
    assert 2 <= len(evaluated) < len(records)  # some loops are evaluated, not all
    # Fresh examples consumed: batch / factor per step, at the factor set before each loop.
    consumed = consumed_at_eval = 0.0
    factor, step = 1.0, 0
    for record in records:
        consumed += (record["step"] - step) * config.data.batch_size / factor
        factor, step = record["echo_factor"], record["step"]
        crossed = consumed // every > consumed_at_eval // every
        assert ("eval_accuracy" in record) == (crossed or record["step"] == 60), record
        if "eval_accuracy" in record:
            consumed_at_eval = consumed


def test_bad_eval_every_fresh_examples_is_refused(load_config):
    config = load_config("mnist1d", "smoke")
    config.eval_every_fresh_examples = -1
    with pytest.raises(ValueError, match="eval_every_fresh_examples must be >= 0, got -1"):
        experiment.resolve_config(config)
    config.eval_every_fresh_examples, config.assist = 128, True
    with pytest.raises(ValueError, match="does not hold when the Assistant filters"):
        experiment.resolve_config(config)
