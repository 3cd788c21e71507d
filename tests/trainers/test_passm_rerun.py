"""Rerunning a PASSM workdir (issue 33): metrics.jsonl counts the examples trained."""

import json
import os

import pytest

from trainers import metrics_writer
from trainers.passm import experiment as async_experiment

BATCH_SIZE = 16  # configs/passm.py:smoke's, per worker and step


@pytest.fixture
def finished(load_config, tmp_path, monkeypatch):
    """A workdir of a finished configs/passm.py:smoke run (16 steps, evaluated at 8 and 16)
    and the result.json it wrote."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    workdir = str(tmp_path / "run")
    async_experiment.train_and_evaluate(load_config("passm", "smoke"), workdir)
    return workdir, _written(workdir)


def _written(workdir: str) -> dict:
    with open(os.path.join(workdir, "result.json")) as file:
        return json.load(file)


def test_metrics_count_the_examples_the_updates_trained_on(finished, load_config):
    workdir, first = finished
    config = load_config("passm", "smoke")
    config.num_steps = 24
    async_experiment.train_and_evaluate(config, workdir)
    rows = metrics_writer.read_metrics(workdir)
    counts = [(r["step"], r["trained_examples"], r["fresh_examples_trained"]) for r in rows]
    # Counted by the checkpointed state, so the resumed run's row counts on from 256.
    assert counts == [(step, step * BATCH_SIZE, step * BATCH_SIZE) for step in (8, 16, 24)]
    assert rows[1]["trained_examples"] == first["examples_seen"]
    assert all(r["echo_ratio"] == 1.0 for r in rows)
