"""The shared-memory backend of the asynchronous trainer: c threads over one model (trainers.passm).

Worker threads really overlap here (TensorFlow releases the GIL while a graph runs), so the
concurrent tests check properties that hold under every interleaving: a PASSM worker's momentum
(its own) is non-zero only on its block, ASSM updates never write at the same time, counters
add up, staleness is positive once workers overlap and zero with one worker.
"""

from __future__ import annotations

import os
import signal

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers import controller, interrupts, metrics_writer
from trainers.passm import SharedMemoryTrainer, UpdateMeter
from trainers.passm import schedule as passm_schedule
from trainers.passm.state import TrainingState
from trainers.passm.steps import WorkerSteps

BATCH_SIZE = 16


def _model_fn(width: int = 16) -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(3),
        ]
    )


def _toy(seed: int, size: int = 512):
    # Three classes from the signs of two features: learnable, chance ~0.33.
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(size, 8)).astype(np.float32)
    labels = ((features[:, 0] > 0).astype(np.int32) + (features[:, 1] > 0)).astype(np.int32)
    return features, labels


def _dataset_fn(worker_index, batch_size: int = BATCH_SIZE):
    # No autotuning: deleting an autotuned iterator can wait seconds for the autotune thread
    # (benchmarks/iterator_teardown.py), which would land in a later test.
    options = tf.data.Options()
    options.autotune.enabled = False
    return (
        tf.data.Dataset.from_tensor_slices(_toy(0))
        .repeat()
        .shuffle(512, seed=0)
        .skip(worker_index * 256)  # each worker its own offset of the stream
        .batch(batch_size, drop_remainder=True)
        .with_options(options)
    )


def _accuracy(model) -> float:
    features, labels = _toy(1)
    return float(np.mean(np.argmax(model(features).numpy(), axis=-1) == labels))


def _run(mode: str, num_workers: int, num_steps: int, *, schedule=None, evaluate=None):
    # One step per call: the workers interleave as finely as they can.
    trainer = SharedMemoryTrainer(_model_fn, num_workers=num_workers, steps_per_call=1)
    phases = passm_schedule.make_schedule(
        mode, num_steps=num_steps, num_workers=max(num_workers, 2), learning_rate=0.05,
        **(schedule or {}),
    )  # fmt: skip
    result = trainer.run(_dataset_fn, phases, eval_every=num_steps // 4, evaluate=evaluate)
    return trainer, result, phases


@pytest.fixture(scope="module")
def runs():
    """One run per mode with two workers (and ASSM with one), shared by the tests below."""
    return {
        "assm": _run("assm", 2, 200, evaluate=_accuracy),
        "passm": _run("passm", 2, 200, evaluate=_accuracy),
        "passm_plus": _run("passm_plus", 2, 200, evaluate=_accuracy),
        "assm_one_worker": _run("assm", 1, 40),
        "passm_plus_decay": _run("passm_plus", 2, 40, schedule={"decay_fractions": (0.5,)}),
    }


@pytest.mark.parametrize("mode", ["assm", "passm", "passm_plus"])
def test_every_mode_learns_and_its_counters_add_up(runs, mode):
    _, result, _ = runs[mode]
    # Chance is ~0.33; 200 steps reach ~0.9 (seed 0) under any interleaving seen.
    assert result["final_accuracy"] >= 0.75
    assert result["updates_applied"] == result["completed_steps"] == 200
    assert result["steps_started"] == 200 and result["examples_seen"] == 200 * BATCH_SIZE
    assert sum(result["worker_updates"]) == 200
    assert all(updates > 0 for updates in result["worker_updates"])  # both workers took steps


def test_a_passm_worker_writes_only_its_block_with_its_own_momentum(runs):
    trainer, result, _ = runs["passm"]
    for worker, block in enumerate(trainer.blocks):
        moved = [bool(np.any(m.numpy())) for m in trainer.state.momentum_sets[worker]]
        # Momentum set w is worker w's alone; it moved on its block's variables only.
        assert moved == [i in block for i in range(len(moved))]
    assert result["block_updates"] == result["worker_updates"]


@pytest.mark.parametrize("worker", [0, 1])
def test_one_passm_step_changes_exactly_the_workers_block(worker):
    model = _model_fn()
    blocks = [range(0, 2), range(2, 6)]
    state = TrainingState(model, blocks, 0.9, num_momentum_sets=2)
    meter = UpdateMeter(2)
    steps = WorkerSteps(model, state, meter, worker=worker, lock=tf.CriticalSection())
    before = [v.numpy().copy() for v in state.parameters]
    steps.function("passm")(iter(_dataset_fn(worker)), tf.constant(0.1), tf.constant(1))
    changed = [
        not np.array_equal(b, v.numpy()) for b, v in zip(before, state.parameters, strict=True)
    ]
    assert changed == [i in blocks[worker] for i in range(6)]
    assert [int(v.numpy()) for v in state.versions] == [int(b == worker) for b in range(2)]
    assert meter.summary()["worker_updates"] == [int(w == worker) for w in range(2)]


def test_assm_writes_under_the_lock_while_reads_overlap(runs):
    _, result, _ = runs["assm"]
    # Steps overlapped (other updates landed between a step's read and its write) ...
    assert result["staleness_mean"] > 0 and result["staleness_max"] >= 1
    # ... but no two updates were ever between their first and last write at once.
    assert result["max_concurrent_writers"] == 1
    assert result["block_updates"] == [200, 200]  # every ASSM update writes every block


def test_staleness_is_zero_with_one_worker_and_bounded_with_two(runs):
    _, one, _ = runs["assm_one_worker"]
    assert one["staleness_mean"] == 0.0 and one["staleness_max"] == 0
    assert one["block_staleness_max"] == [0]
    for mode in ("assm", "passm", "passm_plus"):
        _, result, _ = runs[mode]
        assert 0 < result["staleness_mean"] <= result["staleness_max"] <= 200
        assert len(result["worker_staleness_mean"]) == 2


def test_passm_plus_follows_its_phases(runs):
    _, result, phases = runs["passm_plus_decay"]
    # 25% ASSM, PASSM at LR·(1 − 1/2), ASSM in a 10% window around the decay at step 20.
    assert [(p.start, p.stop, p.mode) for p in phases] == [
        (0, 10, "assm"), (10, 18, "passm"), (18, 20, "assm"), (20, 22, "assm"), (22, 40, "passm"),
    ]  # fmt: skip
    assert phases[1].learning_rate == pytest.approx(0.05 * 0.5)
    # ASSM steps write both blocks, PASSM steps one.
    assert sum(result["block_updates"]) == 14 * 2 + 26
    assert result["updates_applied"] == 40
    assert result["history"][-1]["mode"] == "passm"
    assert result["history"][-1]["learning_rate"] == pytest.approx(0.05 * 0.1 * 0.5)


def test_ctrl_c_saves_and_the_run_resumes(tmp_path):
    workdir = str(tmp_path)
    phases = passm_schedule.make_schedule("passm_plus", num_steps=20, num_workers=2,
                                          learning_rate=0.05)  # fmt: skip

    def interrupt_once(model) -> float:
        os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: stops after this loop
        return _accuracy(model)

    first = SharedMemoryTrainer(_model_fn, num_workers=2, steps_per_call=1)
    with (
        interrupts.stop_at_loop_end({signal.SIGINT: KeyboardInterrupt}),
        pytest.raises(controller.RunInterrupted) as raised,
    ):
        first.run(_dataset_fn, phases, eval_every=10, evaluate=interrupt_once, workdir=workdir)
    assert raised.value.step == 10 and raised.value.checkpoint.endswith("ckpt-10")
    (before,) = metrics_writer.read_metrics(workdir)

    resumed = SharedMemoryTrainer(_model_fn, num_workers=2, steps_per_call=1)
    result = resumed.run(_dataset_fn, phases, eval_every=10, evaluate=_accuracy, workdir=workdir)
    assert result["start_step"] == 10 and result["completed_steps"] == 20
    # The counters and each worker's momentum came back with the model.
    assert sum(result["worker_updates"]) == result["updates_applied"] == 20
    # So did the run's history and clock: the result is the whole run's, not the resumed part's.
    assert [h["step"] for h in result["history"]] == [10, 20]
    assert result["history"][0]["train_seconds"] == before["train_seconds"] > 0
    assert result["history"][0]["accuracy"] == before["eval_accuracy"]
    assert result["train_seconds"] == result["history"][1]["train_seconds"]
    assert result["train_seconds"] > before["train_seconds"]


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: SharedMemoryTrainer(_model_fn, num_workers=0), ValueError,
         "num_workers must be a positive int, got 0"),
        (lambda: SharedMemoryTrainer(_model_fn, num_workers=2, steps_per_call=0), ValueError,
         "steps_per_call must be a positive int, got 0"),
        (lambda: SharedMemoryTrainer(_model_fn, num_workers=2, momentum=1.5), ValueError,
         r"momentum must be a float in \[0, 1\), got 1.5"),
        (lambda: SharedMemoryTrainer(_model_fn, num_workers=7), ValueError,
         r"num_blocks must be between 1 and the number of variables \(6\), got 7"),
        (lambda: SharedMemoryTrainer(_model_fn, num_workers=2)._train_chunk("sync", 1, 0.1),
         ValueError, r"SharedMemoryTrainer runs \('assm', 'passm'\) phases, got 'sync'"),
        (lambda: _worker_steps(worker=2), ValueError, r"worker must be in \[0, 2\)"),
        (lambda: _worker_steps(worker=1, sets=1), ValueError,
         r"needs its own; build it with TrainingState\(..., num_momentum_sets=2\)"),
        (lambda: _worker_steps(worker=0).function("sgd"), ValueError,
         r"runs \('assm', 'passm'\) steps, got mode 'sgd'"),
    ],
)  # fmt: skip
def test_bad_arguments_name_the_value_and_the_fix(make, error, match):
    with pytest.raises(error, match=match):
        make()


def _worker_steps(*, worker: int, sets: int = 2) -> WorkerSteps:
    model = _model_fn()
    state = TrainingState(model, [range(0, 2), range(2, 6)], 0.9, num_momentum_sets=sets)
    return WorkerSteps(model, state, UpdateMeter(2), worker=worker, lock=tf.CriticalSection())
