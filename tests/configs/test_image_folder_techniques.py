"""configs/image_folder.py runs AutoEcho and loss-table pruning on JPEGs (echo at each point
is in tests/pipelines/sources/test_image_folder.py)."""

import pytest

from trainers import experiment, metrics_writer


@pytest.fixture
def smoke(load_config, data_dir):
    def load(argument: str):
        config = load_config("image_folder", f"{argument},smoke")
        config.progress_bar = False
        config.data.data_dir = data_dir
        return config

    return load


def test_auto_echo_and_pruning_run_together_on_jpegs(smoke, tmp_path):
    config = smoke("echo=auto,max_echo=4,prune=1")
    config.num_steps = 40  # a few epochs of the 64-image smoke set, so pruning has a table
    summary = experiment.run(config, str(tmp_path))
    rows = metrics_writer.read_metrics(str(tmp_path))
    assert all(1.0 <= r["echo_factor"] <= 4.0 for r in rows if "echo_factor" in r)
    # Pruning ran past its first epoch, on a table of the JPEGs' losses, and dropped some.
    assert rows[-1]["prune_epoch"] >= 1 and rows[-1]["prune_keep_rate"] < 1.0
    assert summary["step"] > 0
