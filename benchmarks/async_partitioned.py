"""Wall time to a target accuracy: synchronous SGD vs ASSM vs PASSM vs PASSM+ on a loopback cluster.

    python benchmarks/async_partitioned.py            # default run (~10 min on 2 idle cores)
    python benchmarks/async_partitioned.py --quick    # seconds-scale smoke run (tested)
    python benchmarks/async_partitioned.py --backend=shared_memory [--quick]
        # the shared-memory backend (the paper's regime) vs tuned synchronous baselines:
        # benchmarks/async_shared_memory.py, results/async_shared_memory.json

Writes ``benchmarks/results/async_partitioned.json`` and ``.png`` (``*_quick.*`` for --quick) and
prints a markdown table. What runs, side by side in one invocation:

- Synchronous SGD with momentum (`SynchronousTrainer`, default strategy, one process using the
  machine's cores): the paper's sequential minibatch-SGD baseline.
- ASSM, PASSM and PASSM+ (`AsyncPartitionedTrainer`) with c = 2 and c = 4 workers and one
  parameter server, all servers in one child process on 127.0.0.1.

Every method gets the same model (MNIST-1D CNN), data, batch size, number of updates, learning
rate, momentum and decays. Each configuration runs in its own child process (a
ParameterServerStrategy cannot be disconnected from its cluster). The target accuracy of a seed is
synchronous SGD's final accuracy minus 0.5 points; time to target is the training time (evaluation
excluded) at the first evaluation reaching it. Several seeds (model init and data order) because
asynchronous runs are nondeterministic (thread scheduling decides the update order) and one run
cannot separate a method's effect from that noise; the table reports medians.

It also counts the FLOPs of one training step with the full gradient and with each PASSM block's
restricted gradient (TF's graph profiler on the `tf.function` graph; the unused part of backprop
is never built), which does not depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import harness

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ASYNC_MODES = ("assm", "passm", "passm_plus")


def _settings(quick: bool) -> dict:
    if quick:
        return {
            "model": "mnist1d_mlp",
            "num_train": 400,
            "num_eval": 200,
            "batch_size": 16,
            "num_steps": 20,
            "eval_every": 10,
            "steps_per_closure": 10,
            "learning_rate": 0.02,
            "decay_fractions": [0.75],
            "worker_counts": [2],
            "seeds": [0],
        }
    return {
        "model": "mnist1d_cnn",
        "num_train": 4000,
        "num_eval": 1000,
        "batch_size": 32,
        "num_steps": 1500,
        "eval_every": 100,
        "steps_per_closure": 10,
        "learning_rate": 0.02,
        "decay_fractions": [0.5, 0.75],
        "worker_counts": [2, 4],
        "seeds": [0, 1],
    }


def _config(settings: dict, seed: int, mode: str, num_workers: int, strategy: str):
    import ml_collections

    config = ml_collections.ConfigDict()
    config.strategy = strategy
    config.cluster_spec = ""
    config.mode = mode
    config.num_workers = num_workers
    config.dataset = "mnist1d"
    config.model = settings["model"]
    config.num_train = settings["num_train"]
    config.num_eval = settings["num_eval"]
    config.data_seed = 0
    config.seed = seed
    config.batch_size = settings["batch_size"]
    config.num_steps = settings["num_steps"]
    config.learning_rate = settings["learning_rate"]
    config.momentum = 0.9
    config.decay_fractions = tuple(settings["decay_fractions"])
    config.decay_factor = 0.1
    config.assm_warmup_fraction = 0.25
    config.assm_window_fraction = 0.1
    config.eval_every = settings["eval_every"]
    config.steps_per_closure = settings["steps_per_closure"]
    config.target_accuracy = None
    return config


def _child(jobs: list[dict]) -> None:
    """Runs configurations (sync, or every async mode on one cluster) in turn; prints JSON lines.

    At most one of them may be a cluster's, and it must come last: a ParameterServerStrategy
    cannot be disconnected from its cluster.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from absl import logging

    from trainers import local_cluster
    from trainers.passm import experiment as async_experiment

    logging.set_verbosity(logging.WARNING)
    import tensorflow as tf

    if any(job["num_workers"] for job in jobs[:-1]):
        raise ValueError(f"only the last configuration of a child may use a cluster: {jobs}")
    for job in jobs:
        settings, seed, workers = job["settings"], job["seed"], job["num_workers"]
        if workers == 0:
            runs = [("sync", tf.distribute.get_strategy(), "default")]
        else:
            cluster = local_cluster.start_in_process(workers)
            strategy = tf.distribute.experimental.ParameterServerStrategy(cluster.resolver)
            runs = [(mode, strategy, "parameter_server") for mode in ASYNC_MODES]
        for mode, strategy, strategy_name in runs:
            config = _config(settings, seed, mode, max(workers, 1), strategy_name)
            result = async_experiment.train_and_evaluate(config, None, strategy)
            result.update(seed=seed, num_workers=workers, method=mode)
            print("RESULT " + json.dumps(result), flush=True)


def _run_children(settings: dict, *, one_child: bool = False) -> list[dict]:
    """Each configuration in a child process of its own; with ``one_child`` (--quick: one seed,
    one cluster), all of them in one child, synchronous SGD first, so that the quick run starts
    Python and TensorFlow once."""
    results = []
    jobs = [
        {"settings": settings, "seed": seed, "num_workers": workers}
        for seed in settings["seeds"]
        for workers in [0, *settings["worker_counts"]]
    ]
    for group in [jobs] if one_child else [[job] for job in jobs]:
        began = time.perf_counter()
        completed = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", json.dumps(group)],
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        found = [
            json.loads(line[len("RESULT ") :])
            for line in completed.stdout.splitlines()
            if line.startswith("RESULT ")
        ]
        if completed.returncode != 0 or not found:
            raise RuntimeError(f"benchmark child {group} failed:\n{completed.stderr[-4000:]}")
        results += found
        configurations = ", ".join(f"seed {j['seed']} workers {j['num_workers']}" for j in group)
        print(
            f"{configurations}: {len(found)} runs in {time.perf_counter() - began:.0f} s",
            flush=True,
        )
    return results


def measure_flops(model_name: str, batch_size: int, worker_counts: list[int]) -> dict:
    """FLOPs of one forward + backward step: full gradient vs each PASSM block's gradient."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf
    from tensorflow.python.profiler import model_analyzer, option_builder

    from trainers import models
    from trainers.passm.blocks import partition_blocks

    keras.utils.set_random_seed(0)
    model = models.build_model(model_name, (40,), 10)
    variables = [v.value for v in model.trainable_variables]
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    features = tf.zeros([batch_size, 40])
    labels = tf.zeros([batch_size], tf.int32)

    def count(indices: list[int] | None) -> int:
        @tf.autograph.experimental.do_not_convert
        def step(features, labels):
            watched = [variables[i] for i in indices or []]
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(watched)
                loss = loss_fn(labels, model(features, training=True))
            return tape.gradient(loss, watched) if indices else loss

        graph = tf.function(step).get_concrete_function(features, labels).graph
        options = option_builder.ProfileOptionBuilder.float_operation()
        options["output"] = "none"
        return int(model_analyzer.profile(graph, options=options).total_float_ops)

    forward = count(None)
    full = count(list(range(len(variables))))
    result = {
        "model": model_name,
        "batch_size": batch_size,
        "forward_flops": forward,
        "full_step_flops": full,
        "full_backward_flops": full - forward,
        "per_worker_count": {},
    }
    sizes = [int(v.shape.num_elements()) for v in variables]
    for workers in worker_counts:
        blocks = partition_blocks(sizes, workers)
        block_steps = [count(list(block)) for block in blocks]
        backward = [flops - forward for flops in block_steps]
        mean_backward = statistics.mean(backward)
        result["per_worker_count"][str(workers)] = {
            "blocks": [[b.start, b.stop] for b in blocks],
            "block_step_flops": block_steps,
            "block_backward_flops": backward,
            "backward_saving_fraction": 1 - mean_backward / (full - forward),
            "step_saving_fraction": 1 - statistics.mean(block_steps) / full,
            # The paper's estimate with layers spread evenly: (c − 1)/(2c) of backprop.
            "paper_backward_saving_fraction": (workers - 1) / (2 * workers),
        }
    return result


def summarise(runs: list[dict], settings: dict) -> list[dict]:
    """Median time to target and accuracy per method, with speed-up over synchronous SGD."""
    targets = {}
    for run in runs:
        if run["method"] == "sync":
            targets[run["seed"]] = run["final_accuracy"] - 0.005
    for run in runs:
        target = targets[run["seed"]]
        run["target_accuracy"] = target
        reached = [h for h in run["history"] if h["accuracy"] >= target]
        run["seconds_to_target"] = reached[0]["train_seconds"] if reached else None

    rows = []
    keys = [("sync", 0)] + [
        (mode, workers) for workers in settings["worker_counts"] for mode in ASYNC_MODES
    ]
    sync_runs = {r["seed"]: r for r in runs if r["method"] == "sync"}
    for mode, workers in keys:
        group = [r for r in runs if r["method"] == mode and r["num_workers"] == workers]
        times = [r["seconds_to_target"] for r in group]
        speedups = [
            sync_runs[r["seed"]]["seconds_to_target"] / r["seconds_to_target"]
            for r in group
            if r["seconds_to_target"]
        ]
        rows.append(
            {
                "method": mode,
                "num_workers": workers,
                "seeds": len(group),
                "reached_target": sum(t is not None for t in times),
                "median_seconds_to_target": (
                    statistics.median([t for t in times if t is not None])
                    if any(t is not None for t in times)
                    else None
                ),
                "median_speedup_vs_sync": statistics.median(speedups) if speedups else None,
                "median_total_train_seconds": statistics.median(r["train_seconds"] for r in group),
                "median_steps_per_second": statistics.median(
                    r["completed_steps"] / r["train_seconds"] for r in group
                ),
                # After the first evaluation: tracing and cluster warm-up excluded.
                "median_steady_steps_per_second": statistics.median(
                    (r["history"][-1]["step"] - r["history"][0]["step"])
                    / (r["history"][-1]["train_seconds"] - r["history"][0]["train_seconds"])
                    for r in group
                ),
                "mean_final_accuracy": statistics.mean(r["final_accuracy"] for r in group),
                "mean_accuracy_gap_vs_sync": statistics.mean(
                    r["final_accuracy"] - sync_runs[r["seed"]]["final_accuracy"] for r in group
                ),
                "mean_staleness": statistics.mean(
                    statistics.mean(r["block_staleness_mean"]) for r in group
                ),
            }
        )
    return rows


def _format(value, digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "| method | c | reached target | median s to target | speed-up vs sync | steps/s "
        "| steady steps/s | final acc | acc − sync (pts) | mean staleness |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['method']} | {row['num_workers'] or '1 (sync)'} "
            f"| {row['reached_target']}/{row['seeds']} "
            f"| {_format(row['median_seconds_to_target'], 1)} "
            f"| {_format(row['median_speedup_vs_sync'])} "
            f"| {_format(row['median_steps_per_second'], 0)} "
            f"| {_format(row['median_steady_steps_per_second'], 0)} "
            f"| {_format(row['mean_final_accuracy'], 3)} "
            f"| {_format(100 * row['mean_accuracy_gap_vs_sync'], 1)} "
            f"| {_format(row['mean_staleness'])} |"
        )
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, flops) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = {"sync": "black", "assm": "tab:blue", "passm": "tab:orange", "passm_plus": "tab:green"}
    styles = {0: "-", 2: "-", 4: "--"}
    seed = result["settings"]["seeds"][0]
    for run in result["runs"]:
        if run["seed"] != seed:
            continue
        label = run["method"] + (f" c={run['num_workers']}" if run["num_workers"] else "")
        curves.plot(
            [h["train_seconds"] for h in run["history"]],
            [h["accuracy"] for h in run["history"]],
            styles[run["num_workers"]],
            color=colors[run["method"]],
            label=label,
        )
    curves.set_xlabel("training seconds (evaluation excluded)")
    curves.set_ylabel("eval accuracy")
    curves.set_title(f"MNIST-1D {result['settings']['model']}, seed {seed}")
    curves.legend(fontsize=8)
    counts = result["flops"]["per_worker_count"]
    labels = [f"c={c}" for c in counts]
    curves.grid(alpha=0.3)
    flops.bar(
        labels,
        [100 * counts[c]["backward_saving_fraction"] for c in counts],
        label="measured (block-restricted backprop)",
        alpha=0.8,
    )
    flops.scatter(
        labels,
        [100 * counts[c]["paper_backward_saving_fraction"] for c in counts],
        color="red",
        zorder=3,
        label="paper estimate (c−1)/(2c)",
    )
    flops.set_ylabel("backward FLOPs saved per step (%)")
    flops.set_title("PASSM backward-pass FLOP savings")
    flops.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def headline(summary: list[dict], flops: dict) -> dict[str, float | None]:
    """The issue's figures per worker count c, null where a method never reached the target.

    ``{method}_speedup_c{c}``: median wall-time speed-up to the target over synchronous SGD
    (target 1.2 for PASSM+); ``{method}_accuracy_gap_points_c{c}``: mean final accuracy minus
    synchronous SGD's, in points (target within 0.5); ``backward_flop_saving_c{c}`` and
    ``step_flop_saving_c{c}``: the fraction of backward-pass and whole-step FLOPs that
    block-restricted backprop saves.

    >>> headline([{"method": "passm_plus", "num_workers": 2, "median_speedup_vs_sync": None,
    ...            "mean_accuracy_gap_vs_sync": -0.25}], {"per_worker_count": {}})
    {'passm_plus_speedup_c2': None, 'passm_plus_accuracy_gap_points_c2': -25.0}
    """
    figures: dict[str, float | None] = {}
    for row in summary:
        if row["method"] == "sync":
            continue
        name, speedup = f"{row['method']}_%s_c{row['num_workers']}", row["median_speedup_vs_sync"]
        figures[name % "speedup"] = None if speedup is None else float(speedup)
        figures[name % "accuracy_gap_points"] = float(100 * row["mean_accuracy_gap_vs_sync"])
    for workers, saving in flops["per_worker_count"].items():
        figures[f"backward_flop_saving_c{workers}"] = float(saving["backward_saving_fraction"])
        figures[f"step_flop_saving_c{workers}"] = float(saving["step_saving_fraction"])
    return figures


def _shared_memory_study():
    """``benchmarks/async_shared_memory.py`` as a module (benchmarks/ is not a package)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "async_shared_memory.py")
    spec = importlib.util.spec_from_file_location("async_shared_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    # No abbreviations: --output (the shared-memory study's) must not pass for --output_dir.
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--quick", action="store_true", help="seconds-scale run for tests")
    parser.add_argument("--output_dir", default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--backend",
        choices=("parameter_server", "shared_memory"),
        default="parameter_server",
        help="parameter_server: this study on a loopback cluster; shared_memory: "
        "benchmarks/async_shared_memory.py (takes --quick and --output FILE.json)",
    )
    args, rest = parser.parse_known_args(argv)
    if args.backend == "shared_memory":
        _shared_memory_study().main((["--quick"] if args.quick else []) + rest)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.child:
        _child(json.loads(args.child))
        return
    settings = _settings(args.quick)
    began = time.perf_counter()
    flops = measure_flops(settings["model"], settings["batch_size"], settings["worker_counts"])
    runs = _run_children(settings, one_child=args.quick)
    rows = summarise(runs, settings)
    stem = os.path.join(args.output_dir, "async_partitioned" + ("_quick" if args.quick else ""))
    result = harness.write_results(
        stem + ".json",
        headline=headline(rows, flops),
        command="python benchmarks/async_partitioned.py " + " ".join(sys.argv[1:]),
        settings=settings,
        # The load at the end, beside the cores: what the timings ran against.
        machine={
            "cpu_count": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        flops=flops,
        summary=rows,
        runs=runs,
        benchmark_seconds=time.perf_counter() - began,
    )
    plot(result, stem + ".png")
    print(markdown_table(rows))
    for workers, saving in flops["per_worker_count"].items():
        print(
            f"c={workers}: block-restricted backprop saves "
            f"{100 * saving['backward_saving_fraction']:.0f}% of backward FLOPs "
            f"({100 * saving['step_saving_fraction']:.0f}% of the whole step); paper estimate "
            f"{100 * saving['paper_backward_saving_fraction']:.0f}%"
        )
    print(f"wrote {stem}.json and {stem}.png in {result['benchmark_seconds']:.0f} s")


if __name__ == "__main__":
    main()
