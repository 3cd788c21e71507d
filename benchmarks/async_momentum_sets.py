r"""Why asynchronous workers lose accuracy here: per-worker momentum, with no concurrency at all.

    python benchmarks/async_momentum_sets.py          # ~3 min: results/async_momentum_sets.json
    python benchmarks/async_momentum_sets.py --quick  # seconds (tested)

The shared-memory study (``async_shared_memory``) finds ASSM at c = 2 about 10 points under
synchronous SGD with a mean staleness below 1. This ablation takes concurrency out: c workers'
compiled steps (`trainers.passm.steps.WorkerSteps`, exactly the backend's) run one after the
other, round-robin, one step each, so every step reads the latest model (staleness 0). What is
left of the async design is that each worker keeps its own momentum buffer (the paper's
processes do). ``shared`` runs the same schedule with one momentum buffer for every worker.
Each variant trains the MNIST-1D CNN of ``configs/passm.py`` for the same updates at each
learning rate of the grid, on the seeds given; the headline is the accuracy gap in points.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
FULL = {"num_steps": 1600, "rates": [0.02, 0.05], "seeds": [0, 1], "workers": 2}
QUICK = {"num_steps": 40, "rates": [0.05], "seeds": [0], "workers": 2}


def train(setup: dict, *, workers: int, own_momentum: bool, rate: float, seed: int) -> float:
    """Final eval accuracy after ``num_steps`` round-robin ASSM steps of ``workers`` workers."""
    import importlib.util

    import keras
    import tensorflow as tf

    from trainers import models
    from trainers.passm import UpdateMeter
    from trainers.passm import blocks as block_partition
    from trainers.passm import experiment as async_experiment
    from trainers.passm.state import TrainingState
    from trainers.passm.steps import WorkerSteps

    spec = importlib.util.spec_from_file_location("passm_config", f"{ROOT}/configs/passm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from trainers.passm.config import flat_view

    config = flat_view(module.get_config(""))  # the flat names it sets and reads
    config.seed = seed
    data = async_experiment.data_config(config)
    keras.utils.set_random_seed(seed)
    model = models.build_model(config.model, data.train_arrays.inputs.shape[1:], data.num_classes)
    sizes = [int(v.shape.num_elements()) for v in model.trainable_variables]
    blocks = block_partition.partition_blocks(sizes, workers)  # ASSM steps write every block
    state = TrainingState(model, blocks, config.momentum, num_momentum_sets=workers)
    if not own_momentum:  # every worker's set is the same variables: one shared buffer
        state.momentum_sets = [state.momentum_sets[0]] * workers
    meter, lock = UpdateMeter(workers), tf.CriticalSection()
    steps = [WorkerSteps(model, state, meter, worker=w, lock=lock) for w in range(workers)]
    functions = [s.function("assm") for s in steps]
    dataset_fn = async_experiment.train_dataset_fn(data, seed=seed, num_workers=workers)
    iterators = [iter(dataset_fn(tf.constant(w, tf.int64))) for w in range(workers)]
    one = tf.constant(1)
    for step in range(setup["num_steps"]):
        decays = sum(step >= f * setup["num_steps"] for f in config.decay_fractions)
        current = tf.constant(rate * config.decay_factor**decays)
        worker = step % workers
        functions[worker](iterators[worker], current, one)
    accuracy = async_experiment.make_evaluate(data, seed=seed)(model)
    keras.backend.clear_session()
    return accuracy


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", help="JSON path (default: results/async_momentum_sets.json)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    setup = QUICK if args.quick else FULL
    variants = {"one_worker": (1, True), "own_momentum": (setup["workers"], True),
                "shared_momentum": (setup["workers"], False)}  # fmt: skip
    runs = []
    for name, (workers, own) in variants.items():
        for rate in setup["rates"]:
            for seed in setup["seeds"]:
                accuracy = train(setup, workers=workers, own_momentum=own, rate=rate, seed=seed)
                runs.append({"variant": name, "rate": rate, "seed": seed, "accuracy": accuracy})
                print(f"{name} lr {rate} seed {seed}: {accuracy:.4f}", flush=True)

    def best(name: str) -> float:  # mean over seeds at the variant's best rate
        return max(
            statistics.mean(r["accuracy"] for r in runs if (r["variant"], r["rate"]) == (name, x))
            for x in setup["rates"]
        )

    headline = {
        "own_momentum_gap_points_c2": 100 * (best("own_momentum") - best("one_worker")),
        "shared_momentum_gap_points_c2": 100 * (best("shared_momentum") - best("one_worker")),
    }
    stem = "async_momentum_sets" + ("_quick" if args.quick else "")
    path = args.output or os.path.join(RESULTS, stem + ".json")
    harness.write_results(
        path,
        headline=headline,
        command="python benchmarks/async_momentum_sets.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        settings=setup,
        runs=runs,
    )
    print(json.dumps(headline, indent=1), f"\nwrote {path}")


if __name__ == "__main__":
    main()
