"""configs/mnist1d.py:priority=1 through trainers.experiment.run: priorities measured and logged;
priority sampling's old names (``pgd=1``, ``--config.pgd=True``) still work, for one release."""

import warnings
from pathlib import Path

import pytest
import tensorflow as tf
from absl import app

from trainers import experiment, metrics_writer, train

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(
    ("top_ratio", "renew_ratio"),
    [
        (0.1, 0.9),  # the helper's suggested split
        (0.5, 0.5),
    ],
)
def test_priority_sampling_measures_priorities_and_checkpoints_the_table(
    top_ratio, renew_ratio, load_config, data_dir, tmp_path
):
    config = load_config(
        "mnist1d", f"priority=1,top_ratio={top_ratio},renew_ratio={renew_ratio},smoke"
    )
    config.data.data_dir = data_dir
    config.progress_bar, config.timing_steps = False, 0
    workdir = str(tmp_path)
    summary = experiment.run(config, workdir)
    assert summary["step"] == config.num_steps
    # Every gathered row is counted once: no echo, 20 steps of 32.
    assert summary["emitted_examples"] == config.num_steps * config.data.batch_size

    records = metrics_writer.read_metrics(workdir)
    assert [r["step"] for r in records] == [10, 20]
    batch, num_train = config.data.batch_size, config.data.num_train
    for record in records:
        # Step 0 writes no priorities (ḡ = 0 then); every later step measures its whole batch
        # of distinct ids, so at least the renewed ids of steps 1..t-1 are measured.
        renewed = round(renew_ratio * batch) * (record["step"] - 1)
        assert record["priority_measured_fraction"] >= min(renewed, num_train) / num_train
        assert record["priority_measured_fraction"] <= (record["step"] - 1) * batch / num_train
        assert record["priority_mean_staleness"] >= 0
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(f"{workdir}/checkpoints"))
    names = list(reader.get_variable_to_shape_map())
    assert any(name.startswith("priority_table/") for name in names), names
    assert any(name.startswith("priority_feedback/") for name in names), names


def test_priority_sampling_refuses_echo(load_config):
    config = load_config("mnist1d", "priority=1,echo=2,smoke")
    with pytest.raises(
        ValueError,
        match=r"priority=True cannot be combined with echo=2\.0: priority sampling draws the "
        "train batches from a",
    ):
        experiment.resolve_config(config)


def test_the_old_config_argument_pgd_is_priority_with_a_warning(load_config):
    with pytest.warns(
        FutureWarning, match=r"configs/mnist1d.py's argument pgd= is now priority=; the old name"
    ):
        old = load_config("mnist1d", "pgd=1,top_ratio=0.05,smoke")
    new = load_config("mnist1d", "priority=1,top_ratio=0.05,smoke")
    assert old.to_dict() == new.to_dict()
    assert experiment.resolve_config(old).priority


def test_the_old_and_the_new_config_argument_together_are_refused(load_config):
    with pytest.raises(
        ValueError,
        match=r"config arguments pgd and priority are one setting \(pgd is priority's old name\); "
        r"give only priority, e.g. configs/mnist1d.py:priority=1\.",
    ):
        load_config("mnist1d", "pgd=1,priority=1,smoke")


def test_an_old_flag_sets_priority_sampling_over_the_config_file_with_a_warning(
    parse_binary_flags,
):
    argv = ["train", f"--config={CONFIGS / 'mnist1d.py'}:smoke", "--workdir=/x"]
    config = parse_binary_flags([*argv, "--config.pgd=True", "--config.pgd_top_ratio=0.05"])
    with pytest.warns(
        FutureWarning,
        match=r"--config.pgd is now --config.priority, --config.pgd_top_ratio is now "
        r"--config.priority_top_ratio",
    ):
        train._rename_priority_flags(config)
    assert (config.priority, config.priority_top_ratio) == (True, 0.05)
    assert config.pgd is None and config.pgd_top_ratio is None
    resolved = experiment.resolve_config(config)
    assert (resolved.priority, resolved.priority_top_ratio) == (True, 0.05)


@pytest.mark.parametrize("new", ["--config.priority=False", "--config.priority=True"])
def test_an_old_and_a_new_flag_for_priority_sampling_are_refused(new, parse_binary_flags):
    # --config.priority=False is the default's value, yet the user gave it: not overridden.
    argv = ["train", f"--config={CONFIGS / 'mnist1d.py'}:smoke", "--workdir=/x"]
    config = parse_binary_flags([*argv, "--config.pgd=True", new])
    with pytest.raises(
        app.UsageError,
        match=r"--config.pgd and --config.priority both set priority sampling's priority; keep "
        r"only --config.priority \(--config.pgd is its old name\)\.",
    ):
        train._rename_priority_flags(config)


@pytest.mark.parametrize("strategy", ["mirrored", "default"])
def test_priority_sampling_under_a_distributed_iterator_warns_of_stale_selections(
    strategy, load_config, data_dir, tmp_path
):
    # Under mirrored, top_ratio=1 reached 224 examples in 20 steps against 608 on the default
    # strategy: the distributed iterator reads about two batches ahead (issue 33).
    config = load_config("mnist1d", "priority=1,top_ratio=1.0,renew_ratio=0.0,smoke")
    config.data.data_dir, config.strategy = data_dir, strategy
    config.progress_bar, config.timing_steps = False, 0
    config.num_steps = config.eval_every_steps = config.checkpoint_every_steps = 10
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        summary = experiment.run(config, str(tmp_path))
    said = [str(w.message) for w in warned if "priority=True with strategy" in str(w.message)]
    measured = metrics_writer.read_metrics(str(tmp_path))[-1]["priority_measured_fraction"]
    reached = round(measured * config.data.num_train)
    every_batch = (summary["step"] - 1) * config.data.batch_size  # all but step 0's (ḡ = 0)
    if strategy == "mirrored":
        assert len(said) == 1 and "about two batches ahead of the steps" in said[0]
        assert reached < every_batch
    else:
        assert not said and reached == every_batch
