"""Golden seeded smoke runs of the trainers, recorded before the trainer refactor (at 5a91aec).

Each case trains ``configs/mnist1d.py:smoke`` (20 steps of 32 on 1,000 MNIST-1D examples) with
one technique on, through public entry points only (``trainers.experiment.run``, the config
file, ``trainers.metrics_writer.read_metrics``; ``trainers.passm.experiment.train_and_evaluate``
with ``configs/passm.py``), and compares the summary and every ``metrics.jsonl`` row with the
values in ``GOLDEN``. A refactor that keeps behaviour keeps them; dropping sample weights,
changing a seed or echoing at another point does not.

Tolerances: counts (steps, fresh/emitted examples, updates) exactly. Losses to relative 1e-4:
runs are bitwise equal run to run, turning oneDNN off (other float summation orders) moves them
by at most 2e-7, a changed seed or echo point by more than 1e-3. Accuracy to one eval example.
The AutoEcho factor and ratios of counts to relative 1e-6.

Determinism, and what varied without it:

- Pipeline read-ahead made the fresh and emitted counters timing-dependent (baseline fresh
  738-866 and emitted 672 or 704 where 640 were consumed). Pinned by ``data.prefetch = 0``,
  ``data.num_parallel_calls = 1`` and a no-op ``insertions`` stage whose tf.data options (they
  apply to the whole pipeline) turn off the rewrites that add read-ahead behind the config's back
  (``inject_prefetch``, ``map_parallelization``, ``map_and_batch_fusion``) and give the pipeline
  one thread, so the Assistant filter's AUTOTUNE scoring map runs exactly one group ahead on any
  machine. The fresh counter still counts what the echo stage (groups of 256 inputs) and the
  filter (groups of 128) read ahead, a known defect fixed separately: re-record then.
- AutoEcho moves its factor from measured wall time: ``echoing.AutoEcho.observe`` is patched to
  see fixed timings (0.1 s per step, half of it input wait), so the factor path is fixed.
- The Assistant filter reads the Assistant live while its scoring map works a group ahead. The
  learner is sequential (``assist_asynchronous = False``; a background one races with training)
  and ``echoing.AssistantLearner.push`` first waits 0.5 s, so the group in flight is scored
  before the update; scoring takes milliseconds, and a deliberately slow reader that left the
  group in flight during the update changed the losses.
- MNIST-1D is generated before the first run: generating it inside ``run`` reseeds Python's and
  NumPy's global generators (mnist1d's ``set_seed(42)``) after ``keras.utils.set_random_seed``,
  which changes the model's initial weights.
- Async ASSM runs one worker: with two, which worker runs each closure (so which data stream it
  reads) varies, and the losses with it. It runs in a child process (this file as a script):
  a ParameterServerStrategy binds its whole process to the cluster.

Re-record (after an intended behaviour change; review the diff)::

    GOLDEN_RECORD=1 python -m pytest -q tests/trainers/test_golden.py

prints every case's observed values as literals to paste into ``GOLDEN`` and asserts nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pprint
import subprocess
import sys
import time

import ml_collections
import pytest
import tensorflow as tf

import echoing
import pipelines
from trainers import experiment, metrics_writer
from trainers.passm import experiment as async_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD = os.environ.get("GOLDEN_RECORD") == "1"
# num_parallel_calls = 1 makes the augment map sequential, where its deterministic=True is moot.
pytestmark = pytest.mark.filterwarnings("ignore:The `deterministic` argument:UserWarning")

NUM_EVAL = 200  # configs/mnist1d.py:smoke
ASYNC_NUM_EVAL = 100  # configs/passm.py:smoke
LOSS = {"rel": 1e-4}
RATIO = {"rel": 1e-6}
# How each recorded number is compared; anything not named here is compared exactly.
TOLERANCES = {
    "train_loss": LOSS,
    "eval_loss": LOSS,
    "loss": LOSS,  # async history
    "learning_rate": RATIO,  # async history: the schedule's decays
    # One example either way; the half example of slack keeps float rounding of fractions out.
    "eval_accuracy": {"abs": 1.5 / NUM_EVAL},
    "accuracy": {"abs": 1.5 / ASYNC_NUM_EVAL},
    "final_accuracy": {"abs": 1.5 / ASYNC_NUM_EVAL},
    "echo_factor": RATIO,
    "input_wait_fraction": RATIO,
    "assist_keep_rate": RATIO,
    "assistant_accuracy": RATIO,
    "priority_measured_fraction": RATIO,
    "priority_mean_staleness": RATIO,
    # Counts examples whose priority (a directional derivative) is > 0: one may sit near 0.
    "priority_positive_fraction": {"abs": 1.5 / 1_000},
    # A spread of log priorities, each a product of gradients: more sensitive than a loss.
    "priority_log_priority_spread": {"rel": 1e-3},
}
SUMMARY_KEYS = ("step", "fresh_examples", "emitted_examples", "eval_accuracy", "eval_loss")
ROW_KEYS = (
    "step",
    "fresh_examples",
    "emitted_examples",
    "train_loss",
    "eval_accuracy",
    "eval_loss",
)
AUTO_ECHO_KEYS = ("echo_factor", "input_wait_fraction")
ASSIST_KEYS = (
    "assist_keep_rate",
    "assistant_accuracy",
    "assist_pushed_batches",
    "assist_trained_batches",
    "assist_queue_drops",
)
PRIORITY_KEYS = (
    "priority_measured_fraction",
    "priority_positive_fraction",
    "priority_mean_staleness",
    "priority_log_priority_spread",
)
ASYNC_KEYS = (
    "mode",
    "num_workers",
    "blocks",
    "start_step",
    "completed_steps",
    "steps_started",
    "updates_applied",
    "examples_seen",
    "block_updates",
    "block_staleness_max",
    "retried_steps",
    "duplicate_updates",
    "final_accuracy",
)
ASYNC_HISTORY_KEYS = ("step", "mode", "learning_rate", "loss", "accuracy")


# name, config overrides (flattened keys), extra metrics.jsonl columns to record.
CASES = [
    ("baseline", {}, ()),
    ("echo2_before_augment", {"echo": 2.0, "echo_insert": "before_augment"}, ()),
    ("echo2_after_augment", {"echo": 2.0, "echo_insert": "after_augment"}, ()),
    ("echo2_after_batch", {"echo": 2.0, "echo_insert": "after_batch"}, ()),
    (
        "echo1.5_shuffled_after_augment",
        {"echo": 1.5, "echo_insert": "after_augment", "echo_buffer_size": 64},
        (),
    ),
    (
        # The factor moves after each inner loop but the first (not observed). The echo stage
        # reads it once per group of 256 inputs (8 steps here), so with 2-step loops the moved
        # factor echoes steps 9-20; with 5-step loops it would reach only steps 17-20, where
        # the cosine schedule's learning rate is almost 0 and the eval barely notices.
        "auto_echo",
        {"auto_echo_max_factor": 4.0, "steps_per_loop": 2},
        AUTO_ECHO_KEYS,
    ),
    (
        # Reweighting on, so the sample weights reach the loss.
        "assist",
        {"assist": True, "assist_reweight": True, "assist_asynchronous": False},
        ASSIST_KEYS,
    ),
    ("priority", {"priority": True}, PRIORITY_KEYS),
    # priority's old name (read with a FutureWarning for one release): the identical run.
    ("priority_by_its_old_name_pgd", {"pgd": True}, PRIORITY_KEYS),
]
RENAMED_CASES = {"priority_by_its_old_name_pgd": "priority"}  # case -> the golden run it repeats


@pytest.fixture(scope="module")
def prepared_data_dir(data_dir, load_config):
    """The session's data_dir with the smoke MNIST-1D already generated (see the module doc)."""
    config = load_config("mnist1d", "smoke")
    config.data.data_dir = data_dir
    pipelines.make_datasets(config.data, seed=0)
    return data_dir


def _deterministic_input() -> tuple[str, str, object]:
    """A no-op train-pipeline stage whose tf.data options (which apply to the whole pipeline)
    stop the read-ahead the config cannot switch off."""
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.map_and_batch_fusion = False
    options.threading.private_threadpool_size = 1
    options.autotune.cpu_budget = 1
    return ("after_read", "golden_options", lambda dataset: dataset.with_options(options))


@pytest.fixture
def fixed_timings(monkeypatch):
    """AutoEcho sees 0.1 s per step, half of it waiting for input; the Assistant learner waits
    for the filter's read-ahead before each update (see the module doc)."""
    observe, push = echoing.AutoEcho.observe, echoing.AssistantLearner.push

    def fixed_observe(self, *, seconds, input_wait_seconds, steps):
        del seconds, input_wait_seconds
        return observe(self, seconds=0.1 * steps, input_wait_seconds=0.05 * steps, steps=steps)

    def settled_push(self, *args, **kwargs):
        time.sleep(0.5)
        return push(self, *args, **kwargs)

    monkeypatch.setattr(echoing.AutoEcho, "observe", fixed_observe)
    monkeypatch.setattr(echoing.AssistantLearner, "push", settled_push)


@pytest.mark.parametrize(("name", "overrides", "columns"), CASES, ids=[case[0] for case in CASES])
def test_mnist1d_smoke_run_matches_golden(
    name, overrides, columns, load_config, prepared_data_dir, fixed_timings, tmp_path, capsys
):
    config = load_config("mnist1d", "smoke")
    config.data.data_dir = prepared_data_dir
    config.timing_steps = 0
    config.progress_bar = False
    config.data.prefetch = 0
    config.data.num_parallel_calls = 1
    config.update_from_flattened_dict(overrides)
    workdir = str(tmp_path)

    renamed = (
        pytest.warns(FutureWarning, match="--config.pgd is now --config.priority")
        if name in RENAMED_CASES
        else contextlib.nullcontext()
    )
    with renamed:
        summary = experiment.run(config, workdir, insertions=[_deterministic_input()])

    observed = {
        "summary": {key: summary[key] for key in SUMMARY_KEYS},
        "metrics": [
            {key: row[key] for key in (*ROW_KEYS, *columns) if key in row}
            for row in metrics_writer.read_metrics(workdir)
        ],
    }
    _check(RENAMED_CASES.get(name, name), observed, capsys)


def test_async_assm_smoke_run_matches_golden(load_config, tmp_path, capsys):
    config = load_config("passm", "smoke")
    config.passm.mode, config.passm.num_workers = "assm", 1
    config.passm.weight_prediction = False  # the run the golden recorded (its tests: own file)
    assert config.strategy == "parameter_server"
    completed = subprocess.run(
        [sys.executable, os.path.abspath(__file__), config.to_json(), str(tmp_path)],
        cwd=ROOT,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
            TF_CPP_MIN_LOG_LEVEL="2",
            CUDA_VISIBLE_DEVICES="",
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    assert completed.returncode == 0 and lines, completed.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    observed = {
        **{key: result[key] for key in ASYNC_KEYS},
        "history": [{key: h[key] for key in ASYNC_HISTORY_KEYS} for h in result["history"]],
    }
    _check("async_assm", observed, capsys)


def _check(name: str, observed: dict, capsys) -> None:
    if RECORD:
        with capsys.disabled():
            print(f"\n{name!r}: {pprint.pformat(observed, width=96, sort_dicts=False)},")
        return
    assert name in GOLDEN, f"no golden values for {name!r}; record them (see the module doc)."
    mismatches = list(_mismatches(GOLDEN[name], observed, name))
    assert not mismatches, "\n".join(
        [f"{name} differs from its golden run:", *mismatches, "observed:", pprint.pformat(observed)]
    )


def _mismatches(expected, observed, path: str, key: str = ""):
    """Yields ``path: expected ..., observed ...`` for every value outside its tolerance."""
    if isinstance(expected, dict):
        if not isinstance(observed, dict) or set(expected) != set(observed):
            yield f"{path}: keys {sorted(expected)}, observed {_keys(observed)}"
            return
        for name, value in expected.items():
            yield from _mismatches(value, observed[name], f"{path}.{name}", name)
    elif isinstance(expected, list):
        if not isinstance(observed, list) or len(expected) != len(observed):
            yield f"{path}: {len(expected)} entries, observed {observed!r}"
            return
        for index, (want, got) in enumerate(zip(expected, observed, strict=True)):
            yield from _mismatches(want, got, f"{path}[{index}]", key)
    elif key in TOLERANCES and isinstance(expected, float):
        if not (isinstance(observed, float) and math.isfinite(observed)):
            yield f"{path}: expected {expected!r}, observed {observed!r}"
        elif observed != pytest.approx(expected, **TOLERANCES[key]):
            yield f"{path}: expected {expected!r} ({TOLERANCES[key]}), observed {observed!r}"
    elif observed != expected:
        yield f"{path}: expected {expected!r} exactly, observed {observed!r}"


def _keys(value) -> object:
    return sorted(value) if isinstance(value, dict) else type(value).__name__


def _train_async(config_json: str, workdir: str) -> None:
    """The child process of the async case: one run, its result on a ``RESULT`` line."""
    config = ml_collections.ConfigDict(json.loads(config_json))
    result = async_experiment.train_and_evaluate(config, workdir)
    print("RESULT " + json.dumps(result))


# Case name -> its recorded values (printed by GOLDEN_RECORD=1).
GOLDEN = {
    "baseline": {
        "summary": {
            "step": 20,
            "fresh_examples": 640,
            "emitted_examples": 640,
            "eval_accuracy": 0.21,
            "eval_loss": 2.142569732666016,
        },
        "metrics": [
            {
                "step": 10,
                "fresh_examples": 320.0,
                "emitted_examples": 320.0,
                "train_loss": 2.3056182861328125,
                "eval_accuracy": 0.215,
                "eval_loss": 2.2294161987304686,
            },
            {
                "step": 20,
                "fresh_examples": 640.0,
                "emitted_examples": 640.0,
                "train_loss": 2.208226203918457,
                "eval_accuracy": 0.21,
                "eval_loss": 2.142569732666016,
            },
        ],
    },
    "echo2_before_augment": {
        "summary": {
            "step": 20,
            "fresh_examples": 512,
            "emitted_examples": 640,
            "eval_accuracy": 0.17,
            "eval_loss": 2.2633596801757814,
        },
        "metrics": [
            {
                "step": 10,
                "fresh_examples": 256.0,
                "emitted_examples": 320.0,
                "train_loss": 2.331463098526001,
                "eval_accuracy": 0.22,
                "eval_loss": 2.261358642578125,
            },
            {
                "step": 20,
                "fresh_examples": 512.0,
                "emitted_examples": 640.0,
                "train_loss": 2.2751059532165527,
                "eval_accuracy": 0.17,
                "eval_loss": 2.2633596801757814,
            },
        ],
    },
    "echo2_after_augment": {
        "summary": {
            "step": 20,
            "fresh_examples": 512,
            "emitted_examples": 640,
            "eval_accuracy": 0.205,
            "eval_loss": 2.2591036987304687,
        },
        "metrics": [
            {
                "step": 10,
                "fresh_examples": 256.0,
                "emitted_examples": 320.0,
                "train_loss": 2.336760997772217,
                "eval_accuracy": 0.19,
                "eval_loss": 2.254049987792969,
            },
            {
                "step": 20,
                "fresh_examples": 512.0,
                "emitted_examples": 640.0,
                "train_loss": 2.2756526470184326,
                "eval_accuracy": 0.205,
                "eval_loss": 2.2591036987304687,
            },
        ],
    },
    "echo2_after_batch": {
        "summary": {
            "step": 20,
            "fresh_examples": 1472,
            "emitted_examples": 640,
            "eval_accuracy": 0.155,
            "eval_loss": 2.220664367675781,
        },
        "metrics": [
            {
                "step": 10,
                "fresh_examples": 1472.0,
                "emitted_examples": 320.0,
                "train_loss": 2.2959179878234863,
                "eval_accuracy": 0.22,
                "eval_loss": 2.2476075744628905,
            },
            {
                "step": 20,
                "fresh_examples": 1472.0,
                "emitted_examples": 640.0,
                "train_loss": 2.252371311187744,
                "eval_accuracy": 0.155,
                "eval_loss": 2.220664367675781,
            },
        ],
    },
    "echo1.5_shuffled_after_augment": {
        "summary": {
            "step": 20,
            "fresh_examples": 512,
            "emitted_examples": 640,
            "eval_accuracy": 0.185,
            "eval_loss": 2.1858396911621094,
        },
        "metrics": [
            {
                "step": 10,
                "fresh_examples": 256.0,
                "emitted_examples": 320.0,
                "train_loss": 2.303788185119629,
                "eval_accuracy": 0.205,
                "eval_loss": 2.2373782348632814,
            },
            {
                "step": 20,
                "fresh_examples": 512.0,
                "emitted_examples": 640.0,
                "train_loss": 2.236243724822998,
                "eval_accuracy": 0.185,
                "eval_loss": 2.1858396911621094,
            },
        ],
    },
    "auto_echo": {
        "summary": {
            "step": 20,
            "fresh_examples": 512,
            "emitted_examples": 640,
            "eval_accuracy": 0.19,
            "eval_loss": 2.1544276428222657,
        },
        "metrics": [
            {
                "step": 2,
                "fresh_examples": 256.0,
                "emitted_examples": 64.0,
                "train_loss": 2.298447608947754,
                "echo_factor": 1.0,
            },
            {
                "step": 4,
                "fresh_examples": 256.0,
                "emitted_examples": 128.0,
                "train_loss": 2.3133463859558105,
                "echo_factor": 1.5,
                "input_wait_fraction": 0.5,
            },
            {
                "step": 6,
                "fresh_examples": 256.0,
                "emitted_examples": 192.0,
                "train_loss": 2.3626997470855713,
                "echo_factor": 1.9744068384170532,
                "input_wait_fraction": 0.5,
            },
            {
                "step": 8,
                "fresh_examples": 256.0,
                "emitted_examples": 256.0,
                "train_loss": 2.2892849445343018,
                "echo_factor": 2.4321234226226807,
                "input_wait_fraction": 0.5,
            },
            {
                "step": 10,
                "fresh_examples": 512.0,
                "emitted_examples": 320.0,
                "train_loss": 2.2840938568115234,
                "eval_accuracy": 0.225,
                "eval_loss": 2.2280433654785154,
                "echo_factor": 2.8838179111480713,
                "input_wait_fraction": 0.5,
            },
            {
                "step": 12,
                "fresh_examples": 512.0,
                "emitted_examples": 384.0,
                "train_loss": 2.220097064971924,
                "echo_factor": 3.339078187942505,
                "input_wait_fraction": 0.5,
            },
            {
                "step": 14,
                "fresh_examples": 512.0,
                "emitted_examples": 448.0,
                "train_loss": 2.2058653831481934,
                "echo_factor": 3.8060286045074463,
                "input_wait_fraction": 0.5,
            },
            {
                "step": 16,
                "fresh_examples": 512.0,
                "emitted_examples": 512.0,
                "train_loss": 2.1198654174804688,
                "echo_factor": 4.0,
                "input_wait_fraction": 0.5,
            },
            {
                "step": 18,
                "fresh_examples": 512.0,
                "emitted_examples": 576.0,
                "train_loss": 2.2042946815490723,
                "echo_factor": 4.0,
                "input_wait_fraction": 0.5,
            },
            {
                "step": 20,
                "fresh_examples": 512.0,
                "emitted_examples": 640.0,
                "train_loss": 2.250288486480713,
                "eval_accuracy": 0.19,
                "eval_loss": 2.1544276428222657,
                "echo_factor": 4.0,
                "input_wait_fraction": 0.5,
            },
        ],
    },
    "assist": {
        "summary": {
            "step": 20,
            "fresh_examples": 1152,
            "emitted_examples": 640,
            "eval_accuracy": 0.24,
            "eval_loss": 2.037703094482422,
        },
        "metrics": [
            {
                "step": 10,
                "fresh_examples": 640.0,
                "emitted_examples": 320.0,
                "train_loss": 3.530705213546753,
                "eval_accuracy": 0.27,
                "eval_loss": 2.194355773925781,
                "assist_keep_rate": 0.65234375,
                "assistant_accuracy": 0.521875,
                "assist_pushed_batches": 1.0,
                "assist_trained_batches": 1.0,
                "assist_queue_drops": 0.0,
            },
            {
                "step": 20,
                "fresh_examples": 1152.0,
                "emitted_examples": 640.0,
                "train_loss": 3.302964448928833,
                "eval_accuracy": 0.24,
                "eval_loss": 2.037703094482422,
                "assist_keep_rate": 0.662109375,
                "assistant_accuracy": 0.51875,
                "assist_pushed_batches": 2.0,
                "assist_trained_batches": 2.0,
                "assist_queue_drops": 0.0,
            },
        ],
    },
    "priority": {
        "summary": {
            "step": 20,
            "fresh_examples": 640,
            "emitted_examples": 640,
            "eval_accuracy": 0.24,
            "eval_loss": 1.9797959899902344,
        },
        "metrics": [
            {
                "step": 10,
                "fresh_examples": 320.0,
                "emitted_examples": 320.0,
                "train_loss": 2.2726473808288574,
                "eval_accuracy": 0.22,
                "eval_loss": 2.17138427734375,
                "priority_measured_fraction": 0.2879999876022339,
                "priority_positive_fraction": 0.15600000321865082,
                "priority_mean_staleness": 5.0,
                "priority_log_priority_spread": 1.2115193605422974,
            },
            {
                "step": 20,
                "fresh_examples": 640.0,
                "emitted_examples": 640.0,
                "train_loss": 2.1338603496551514,
                "eval_accuracy": 0.24,
                "eval_loss": 1.9797959899902344,
                "priority_measured_fraction": 0.5830000042915344,
                "priority_positive_fraction": 0.32899999618530273,
                "priority_mean_staleness": 10.185248374938965,
                "priority_log_priority_spread": 1.7372475862503052,
            },
        ],
    },
    "async_assm": {
        # Re-recorded when the async trainer moved onto pipelines.make_datasets (issue 12, one
        # data path): the same arrays in the pipeline's order (shuffle, then repeat) instead of
        # async_data's (repeat, then shuffle). Counts unchanged; losses and accuracy moved.
        "mode": "assm",
        "num_workers": 1,
        "blocks": [[0, 6]],
        "start_step": 0,
        "completed_steps": 16,
        "steps_started": 16,
        "updates_applied": 16,
        "examples_seen": 256,
        "block_updates": [16],
        "block_staleness_max": [0],
        "retried_steps": 0,
        "duplicate_updates": 0,
        "final_accuracy": 0.18,
        "history": [
            {
                "step": 8,
                "mode": "assm",
                "learning_rate": 0.02,
                "loss": 2.3187222480773926,
                "accuracy": 0.17,
            },
            {
                "step": 16,
                "mode": "assm",
                "learning_rate": 0.00020000000000000004,
                "loss": 2.0778281688690186,
                "accuracy": 0.18,
            },
        ],
    },
}


if __name__ == "__main__":
    _train_async(*sys.argv[1:])
