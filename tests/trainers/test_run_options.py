"""experiment.run options: stop_at_target, and extra train-pipeline insertions."""

import ml_collections
import pytest

from echoing import meters
from trainers import experiment, metrics_writer


def _smoke_config(load_config, data_dir: str) -> ml_collections.ConfigDict:
    config = load_config("mnist1d", "smoke")
    config.data.data_dir = data_dir
    config.progress_bar, config.timing_steps = False, 0
    config.num_steps, config.steps_per_loop = 30, 10
    config.eval_every_steps, config.checkpoint_every_steps = 10, 1_000
    return config


@pytest.mark.parametrize("stop_at_target", [True, False])
def test_training_stops_at_the_first_eval_reaching_the_target(
    stop_at_target, load_config, data_dir, tmp_path
):
    config = _smoke_config(load_config, data_dir)
    # Chance is 10% on MNIST-1D, so a 1% target is crossed at the first eval (step 10).
    config.target_accuracy, config.stop_at_target = 0.01, stop_at_target
    summary = experiment.run(config, str(tmp_path))
    assert summary["steps_to_target"] == 10
    assert summary["step"] == (10 if stop_at_target else 30)
    steps = [record["step"] for record in metrics_writer.read_metrics(str(tmp_path))]
    assert steps == ([10] if stop_at_target else [10, 20, 30])
    # Resuming a run that stopped at its target does not train further.
    if stop_at_target:
        assert experiment.run(config, str(tmp_path))["step"] == 10


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"stop_at_target": 1}, TypeError, "'stop_at_target'.*cannot be casted to .*bool"),
        ({"stop_at_target": True, "target_accuracy": 0.0}, ValueError, "needs a target"),
    ],
)
def test_stop_at_target_config_errors(overrides, error, message):
    fields = experiment.default_config().to_dict()
    fields.update(overrides)
    with pytest.raises(error, match=message):
        experiment.resolve_config(ml_collections.ConfigDict(fields))


def test_user_insertions_run_in_the_train_pipeline(load_config, data_dir, tmp_path):
    config = _smoke_config(load_config, data_dir)
    config.num_steps = 20
    seen = meters.ElementCounter("seen_after_augment")
    summary = experiment.run(
        config, str(tmp_path), insertions=[("after_augment", "seen", seen.count())]
    )
    # Without echo or filters every example after augmentation is emitted. Both counters also
    # see the read-ahead of prefetching, the insertion (upstream of the emitted counter) most.
    emitted = summary["emitted_examples"]
    assert 20 * config.data.batch_size <= emitted <= int(seen.value())
    assert int(seen.value()) <= emitted + 16 * config.data.batch_size


def test_unknown_insertion_point_is_rejected(load_config, data_dir, tmp_path):
    config = _smoke_config(load_config, data_dir)
    with pytest.raises(ValueError, match="after_agument"):
        experiment.run(config, str(tmp_path), insertions=[("after_agument", "x", lambda d: d)])


@pytest.mark.parametrize(("echo", "fresh"), [(1.0, 640), (2.0, 320)])
def test_the_summary_counts_what_training_consumed_not_the_read_ahead(
    load_config, data_dir, tmp_path, echo, fresh
):
    config = _smoke_config(load_config, data_dir)
    config.num_steps, config.echo = 20, echo
    summary = experiment.run(config, str(tmp_path))
    assert summary["trained_examples"] == 20 * 32 == 640
    assert summary["fresh_examples_trained"] == fresh
    assert summary["echo_ratio"] == echo  # exactly: 1.00 without echo
    # The pipeline's own meter also counts what its buffers read ahead.
    assert summary["fresh_examples"] > fresh


def test_a_run_resumed_with_another_echo_factor_keeps_counting_its_fresh_examples(
    load_config, data_dir, tmp_path, capsys
):
    config = _smoke_config(load_config, data_dir)
    config.num_steps, config.echo, config.checkpoint_every_steps = 20, 2.0, 10
    experiment.run(config, str(tmp_path))
    config.num_steps, config.echo = 30, 4.0  # 20 steps behind 320 fresh, then 10 behind 80
    summary = experiment.run(config, str(tmp_path))
    # Echo alone resumes exactly: only pruning's resume caveat is printed (issue 33).
    err = capsys.readouterr().err
    assert "Resumed from" in err and "Warning: pruning" not in err
    fresh = [row["fresh_examples_trained"] for row in metrics_writer.read_metrics(str(tmp_path))]
    assert fresh == [160, 320, 400]  # not 20 steps x 32 / 4 = 160 at the resume
    assert summary["fresh_examples_trained"] == 400 and summary["echo_ratio"] == 960 / 400


def test_records_read_in_python_train_and_checkpoint_without_the_iterator(
    load_config, data_dir, tmp_path, capsys
):
    # skip_corrupt reads TFRecords with a Python generator, which tf.data cannot save: the run
    # checkpoints everything else and says so, instead of failing at its first checkpoint.
    from pipelines.sources import mnist1d

    config = _smoke_config(load_config, data_dir)
    globs = mnist1d.export_tfrecords(
        str(tmp_path / "records"), num_train=1_000, num_eval=200, data_dir=data_dir, num_shards=2
    )
    config.data.source, config.data.num_classes, config.data.skip_corrupt = "tfrecord", 10, True
    config.data.train_files, config.data.eval_files = globs["train_files"], globs["eval_files"]
    config.num_steps, config.checkpoint_every_steps = 20, 10
    summary = experiment.run(config, str(tmp_path / "run"))
    assert summary["step"] == 20
    assert "Not checkpointing the input iterator: the train records are read in Python" in (
        capsys.readouterr().err
    )


def test_a_rerun_with_fewer_steps_than_reached_says_it_has_nothing_to_train(
    load_config, data_dir, tmp_path, capsys
):
    config = _smoke_config(load_config, data_dir)
    config.num_steps, config.checkpoint_every_steps = 20, 10
    experiment.run(config, str(tmp_path))
    config.num_steps = 10
    assert experiment.run(config, str(tmp_path))["step"] == 20
    assert (
        "The workdir's run is at step 20, which num_steps=10 does not pass: nothing to train "
        "(raise --config.num_steps to train further" in capsys.readouterr().err
    )
