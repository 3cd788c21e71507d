"""configs/mnist1d.py:pgd=1 through trainers.experiment.run: priorities measured and logged."""

import pytest
import tensorflow as tf

from trainers import experiment, metrics_writer


@pytest.mark.parametrize(
    ("top_ratio", "renew_ratio"),
    [
        (0.1, 0.9),  # the helper's suggested split
        (0.5, 0.5),
    ],
)
def test_pgd_measures_priorities_and_checkpoints_the_table(
    top_ratio, renew_ratio, load_config, data_dir, tmp_path
):
    config = load_config("mnist1d", f"pgd=1,top_ratio={top_ratio},renew_ratio={renew_ratio},smoke")
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


def test_pgd_refuses_echo(load_config):
    config = load_config("mnist1d", "pgd=1,echo=2,smoke")
    with pytest.raises(
        ValueError,
        match=r"pgd=True cannot be combined with echo=2\.0: pgd draws the train batches from a",
    ):
        experiment.resolve_config(config)
