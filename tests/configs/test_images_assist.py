"""configs/images.py:assist=1 puts the Assistant filter into the image pipeline."""

from trainers import experiment, metrics_writer


def test_assist_filters_images_and_logs_its_keep_rate(tmp_path, load_config):
    config = load_config("images", "assist=1,smoke")
    config.progress_bar = False
    assert config.assist and config.model == "resnet_small"
    summary = experiment.run(config, str(tmp_path))
    keep_rates = [
        r["assist_keep_rate"]
        for r in metrics_writer.read_metrics(str(tmp_path))
        if "assist_keep_rate" in r
    ]
    assert keep_rates and all(0.0 < rate < 1.0 for rate in keep_rates)
    # The filter drops examples, so more are read than reach the trainer.
    assert summary["fresh_examples"] > summary["emitted_examples"]
