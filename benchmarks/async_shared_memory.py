r"""PASSM+ where the paper runs it: shared-memory workers vs tuned synchronous SGD, time to target.

    python benchmarks/async_partitioned.py --backend=shared_memory          # the full study
    python benchmarks/async_partitioned.py --backend=shared_memory --quick  # ~30 s, tested
    python benchmarks/async_shared_memory.py [--quick]                      # the same
    python benchmarks/async_partitioned.py --backend=shared_memory --workloads=resnet_small
    python benchmarks/async_shared_memory.py --worker-counts=1,2 --async-momentum=0.5  # ablation
    python benchmarks/async_shared_memory.py --async-momentum=0 --async-learning-rates=0.1,0.2,0.5
    python benchmarks/async_shared_memory.py --weight-prediction --async-updates-factor=c \
        --seeds=0,1,2,3 --output=benchmarks/results/async_shared_memory_prediction.json

Writes ``benchmarks/results/async_shared_memory.json`` and ``.png`` (``*_quick.*`` for --quick,
or ``--output FILE.json``) and prints a markdown table. For each workload (the MNIST-1D CNN; the
deeper ``resnet_small`` on the generated 32×32 images), side by side in one process:

- ``sync``: synchronous SGD with momentum at the per-worker batch b (`SynchronousTrainer`);
- ``sync_large`` at c = 2, 4: synchronous SGD at batch c·b, c times fewer steps, its learning
  rate warmed up linearly from 1/c of its peak over the first ``warmup_fraction`` of the steps;
- ``assm`` (c = 1, 2, 4), ``passm`` and ``passm_plus`` (c = 2, 4) on the shared-memory backend
  (`trainers.passm`, through ``trainers.passm.experiment`` as the binary runs it), batch b per
  worker. Every method sees the same number of examples, unless ``--async-updates-factor`` gives
  the asynchronous methods at c > 1 that many times sync's updates in all (``c``: each worker
  makes as many as sync, so each block gets sync's count of updates).

Each method (and c) gets its own best learning rate: every rate of ``learning_rates`` is run on
``tuning_seed`` (held out) and the best final accuracy wins; then ``seeds`` are run at it, paired
by seed. The target of a seed is ``sync``'s final accuracy − 0.5 points; time to target is the
training time (evaluation and tracing excluded) at the first evaluation reaching it. The best
synchronous baseline at c is the faster of ``sync`` and ``sync_large`` at c.

``--weight-prediction`` sets ``config.passm.weight_prediction`` for the asynchronous methods
(each worker takes its gradient at its read less its own momentum's next step).

``--async-momentum`` and ``--async-learning-rates`` give the asynchronous methods their own grid
(momentum m, rates), e.g. m = 0 at 10× the rates (the same effective step η/(1 − m)). The
synchronous baselines then tune over the union of both grids, (config momentum, ``learning_rates``)
and (m, the async rates), so the baseline stays at its best over everything the async methods
were offered.

Step times: one worker's block-restricted PASSM step and a full (ASSM) step, timed alone, show
what restricted backprop saves on this machine, apart from concurrency.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
ASYNC_METHODS = ("assm", "passm", "passm_plus")

# Workload name -> (configs/passm.py variant, overrides). The configs are the users'.
FULL = {
    "workloads": {
        "mnist1d_cnn": ("", {"num_steps": 1600, "eval_every": 40}),
        "resnet_small": ("resnet", {"num_steps": 600, "eval_every": 40}),
    },
    "worker_counts": [1, 2, 4],
    "learning_rates": [0.01, 0.02, 0.05],
    "tuning_seed": 100,  # held out: learning rates are chosen on it, reported on "seeds"
    "seeds": [0, 1],
    "decay_fractions": [0.5, 0.75],
    "warmup_fraction": 0.1,
    "steps_per_call": 10,
    "timing_steps": 20,
    "timing_repeats": 5,
}
QUICK = {
    **FULL,
    "workloads": {
        "mnist1d_mlp": (
            "smoke",
            {"num_train": 400, "num_eval": 200, "num_steps": 40, "eval_every": 10},
        ),
    },
    "worker_counts": [1, 2],
    "learning_rates": [0.05],  # one rate: no tuning runs
    "seeds": [0],
    "decay_fractions": [0.75],
    "steps_per_call": 5,
    "timing_steps": 10,
    "timing_repeats": 3,
}


def methods(worker_counts: list[int]) -> list[tuple[str, int]]:
    """(method, c) pairs run per workload; ``sync`` (c = 1) is the reference."""
    pairs = [("sync", 1)]
    for c in worker_counts:
        pairs += [("assm", 1)] if c == 1 else [("sync_large", c)]
        pairs += [(m, c) for m in ASYNC_METHODS if c > 1]
    return pairs


def tuning_grid(setup: dict, method: str) -> list[tuple[float | None, float]]:
    """(momentum, learning rate) candidates of ``method``; momentum None is the config's.

    The async methods take (``async_momentum``, ``async_learning_rates``) when given; the
    synchronous baselines take the union of their own grid and the async one, so that giving
    the async methods another grid never leaves the baseline below its best."""
    own = [(None, rate) for rate in setup["learning_rates"]]
    async_rates = setup.get("async_learning_rates") or setup["learning_rates"]
    other = [(setup.get("async_momentum"), rate) for rate in async_rates]
    if not method.startswith("sync"):
        return other
    return list(dict.fromkeys(own + other))


def _config(
    workload: tuple,
    setup: dict,
    method: str,
    c: int,
    rate: float,
    seed: int,
    momentum: float | None = None,
):
    import importlib.util

    spec = importlib.util.spec_from_file_location("passm_config", f"{ROOT}/configs/passm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    variant, overrides = workload
    from trainers.passm.config import flat_view

    config = flat_view(module.get_config(variant))  # the flat names it sets and reads
    config.update(overrides)
    synchronous = method.startswith("sync")
    config.update(
        strategy="default" if synchronous else "parameter_server",
        backend="auto" if synchronous else "shared_memory",
        mode="sync" if synchronous else method,
        num_workers=c,
        seed=seed,
        learning_rate=rate,
        decay_fractions=tuple(setup["decay_fractions"]),
        steps_per_closure=setup["steps_per_call"],
    )
    if momentum is not None:
        config.momentum = momentum
    elif not synchronous and setup.get("async_momentum") is not None:
        config.momentum = setup["async_momentum"]  # the ablation: async momentum on its own
    # Set either way: the config's default (on) is not what --weight-prediction left out.
    config.weight_prediction = not synchronous and bool(setup.get("weight_prediction", False))
    if not synchronous and c > 1:
        factor = setup.get("async_updates_factor") or 1
        config.num_steps = round(config.num_steps * (c if factor == "c" else float(factor)))
    if method == "sync_large":
        config.batch_size *= c
        config.num_steps //= c
        config.eval_every = max(1, config.eval_every // c)
    return config


def warmed_up_phases(config, c: int, warmup_fraction: float, pieces: int = 5) -> list:
    """The synchronous schedule with its first ``warmup_fraction`` ramped from rate/c to rate
    in ``pieces`` constant steps (Goyal et al.'s linear warm-up, piecewise)."""
    from trainers.passm.schedule import Phase, make_schedule

    base = make_schedule(
        "sync",
        num_steps=config.num_steps,
        num_workers=1,
        learning_rate=config.learning_rate,
        decay_factor=config.decay_factor,
        decay_fractions=config.decay_fractions,
    )
    warmup = min(round(warmup_fraction * config.num_steps), base[0].stop)
    bounds = sorted({round(warmup * k / pieces) for k in range(pieces + 1)})
    ramp = [
        Phase(a, b, "sync", config.learning_rate * (1 / c + (1 - 1 / c) * i / len(bounds[1:])))
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
        if b > a
    ]
    rest = [Phase(max(p.start, warmup), p.stop, p.mode, p.learning_rate) for p in base]
    return ramp + [p for p in rest if p.stop > p.start]


def run_one(
    workload: tuple,
    setup: dict,
    method: str,
    c: int,
    rate: float,
    seed: int,
    momentum: float | None = None,
) -> dict:
    """One training run; its result dict (``async_experiment`` / ``PhasedTrainer.run``)."""
    import keras
    import tensorflow as tf

    from trainers import models
    from trainers.passm import experiment as async_experiment
    from trainers.passm import parameter_server as async_partitioned

    config = _config(workload, setup, method, c, rate, seed, momentum)
    if method != "sync_large":
        result = async_experiment.train_and_evaluate(config, None)
    else:
        data = async_experiment.data_config(config)

        def model_fn():
            keras.utils.set_random_seed(seed)
            shape = data.train_arrays.inputs.shape[1:]
            return models.build_model(config.model, shape, data.num_classes)

        trainer = async_partitioned.SynchronousTrainer(
            tf.distribute.get_strategy(), model_fn, momentum=config.momentum
        )
        result = trainer.run(
            async_experiment.train_dataset_fn(data, seed=seed, num_workers=1),
            warmed_up_phases(config, c, setup["warmup_fraction"]),
            eval_every=config.eval_every,
            evaluate=async_experiment.make_evaluate(data, seed=seed),
        )
    keras.backend.clear_session()
    history = result["history"]
    steady = history[-1]["train_seconds"] - history[0]["train_seconds"]
    kept = ("final_accuracy", "train_seconds", "block_updates", "staleness_mean", "staleness_max")
    return {
        "method": method, "num_workers": c, "learning_rate": rate,
        "momentum": float(config.momentum), "seed": seed,
        **{key: result.get(key, 0) for key in kept},
        "history": [{k: h[k] for k in ("step", "train_seconds", "accuracy")} for h in history],
        # After the first evaluation: the pipeline's start-up excluded.
        "updates_per_second": steady and (history[-1]["step"] - history[0]["step"]) / steady,
    }  # fmt: skip


def tune_and_run(
    name: str, workload: tuple, setup: dict
) -> tuple[dict, dict, list[dict], list[dict]]:
    """Best (momentum, learning rate) per (method, c) on the tuning seed (``tuning_grid``), then
    the seeds at it. Returns the best rates, the best momenta, the runs and the tuning trials."""
    best, best_momenta, runs, tuning = {}, {}, [], []
    for method, c in methods(setup["worker_counts"]):
        key = f"{method}_c{c}"
        grid = tuning_grid(setup, method)
        if len(grid) > 1:
            trials = [
                run_one(workload, setup, method, c, r, setup["tuning_seed"], m) for m, r in grid
            ]
            kept = ("method", "num_workers", "momentum", "learning_rate", "final_accuracy")
            tuning += [{k: t[k] for k in kept} for t in trials]
            won = max(trials, key=lambda t: t["final_accuracy"])
            momentum, rate = won["momentum"], won["learning_rate"]
            print(f"{name} {key}: tuned lr {rate} momentum {momentum}", flush=True)
        else:
            ((momentum, rate),) = grid
        best[key], best_momenta[key] = rate, momentum
        for seed in setup["seeds"]:
            runs.append(run_one(workload, setup, method, c, rate, seed, momentum))
            print(
                f"{name} {key} seed {seed}: {runs[-1]['final_accuracy']:.3f} in "
                f"{runs[-1]['train_seconds']:.1f} s",
                flush=True,
            )
    return best, best_momenta, runs, tuning


def measure_step_times(workload: tuple, setup: dict, c: int = 2) -> dict:
    """Seconds per step of a full (ASSM) step and of each worker's PASSM block step, timed one
    worker at a time (no concurrency): what restricted backprop saves on this machine."""
    import tensorflow as tf

    from trainers import models
    from trainers.passm import UpdateMeter
    from trainers.passm import blocks as block_partition
    from trainers.passm import experiment as async_experiment
    from trainers.passm.state import TrainingState
    from trainers.passm.steps import WorkerSteps

    config = _config(workload, setup, "passm", c, 0.01, 0)
    data = async_experiment.data_config(config)
    model = models.build_model(config.model, data.train_arrays.inputs.shape[1:], data.num_classes)
    sizes = [int(v.shape.num_elements()) for v in model.trainable_variables]
    blocks = block_partition.partition_blocks(sizes, c)
    state = TrainingState(model, blocks, 0.9, num_momentum_sets=c)
    meter, lock = UpdateMeter(c), tf.CriticalSection()
    workers = [WorkerSteps(model, state, meter, worker=w, lock=lock) for w in range(c)]
    dataset_fn = async_experiment.train_dataset_fn(data, seed=0, num_workers=c)
    iterators = [iter(dataset_fn(tf.constant(w, tf.int64))) for w in range(c)]
    steps, rate = tf.constant(setup["timing_steps"]), tf.constant(0.01)

    def seconds_per_step(mode: str, worker: int) -> tuple[float, float]:
        """Median seconds per step, and the CPU seconds the process spent per wall second."""
        function, iterator = workers[worker].function(mode), iterators[worker]
        function(iterator, rate, steps)  # traces; the pipeline's buffers fill
        times, busy = [], []
        for _ in range(setup["timing_repeats"]):
            began, cpu_began = time.perf_counter(), time.process_time()
            function(iterator, rate, steps)
            wall = time.perf_counter() - began
            times.append(wall / setup["timing_steps"])
            busy.append((time.process_time() - cpu_began) / wall)
        return statistics.median(times), statistics.median(busy)

    full, cores_busy = seconds_per_step("assm", 0)
    block_steps = [seconds_per_step("passm", w)[0] for w in range(c)]
    ratio = statistics.mean(block_steps) / full
    return {
        "num_workers": c,
        # One worker alone: the cores its steps keep busy (all threads' CPU time over wall
        # time). Near the machine's count, c concurrent workers have no idle cores to fill.
        "full_step_cores_busy": cores_busy,
        "cpu_count": os.cpu_count(),
        "full_step_seconds": full,
        "block_step_seconds": block_steps,
        "restricted_step_time_ratio": ratio,
        "restricted_time_saving": 1 - ratio,
        "blocks": [[b.start, b.stop] for b in blocks],
    }


def _seconds_to_target(run: dict, target: float) -> float | None:
    reached = [h for h in run["history"] if h["accuracy"] >= target]
    return reached[0]["train_seconds"] if reached else None


def summarise(runs: list[dict]) -> list[dict]:
    """Per (method, c): reached target, median time, speed-up over the best sync baseline at c
    (paired by seed), accuracy gap to ``sync`` in points, updates/s, staleness."""
    sync = {r["seed"]: r for r in runs if r["method"] == "sync"}
    for run in runs:
        run["seconds_to_target"] = _seconds_to_target(
            run, sync[run["seed"]]["final_accuracy"] - 0.005
        )

    def best_sync(seed: int, c: int) -> float | None:
        baselines = [("sync", 1), ("sync_large", c)]
        times = [
            r["seconds_to_target"]
            for r in runs
            if r["seed"] == seed and (r["method"], r["num_workers"]) in baselines
        ]
        times = [t for t in times if t is not None]
        return min(times) if times else None

    rows = []
    for method, c in dict.fromkeys((r["method"], r["num_workers"]) for r in runs):
        group = [r for r in runs if r["method"] == method and r["num_workers"] == c]
        reached = [r for r in group if r["seconds_to_target"] is not None]
        speedups = [
            best_sync(r["seed"], c) / r["seconds_to_target"]
            for r in reached
            if best_sync(r["seed"], c) is not None
        ]
        rates = [r["updates_per_second"] for r in group if r["updates_per_second"]]
        rows.append(
            {
                "method": method,
                "num_workers": c,
                "learning_rate": group[0]["learning_rate"],
                "momentum": group[0].get("momentum"),
                "seeds": len(group),
                "reached_target": len(reached),
                "median_seconds_to_target": (
                    statistics.median(r["seconds_to_target"] for r in reached) if reached else None
                ),
                # Null unless every seed reached the target: a speed-up of the lucky seeds misleads.
                "median_speedup_vs_best_sync": (
                    statistics.median(speedups)
                    if speedups and len(speedups) == len(group)
                    else None
                ),
                "mean_accuracy_gap_points": statistics.mean(
                    100 * (r["final_accuracy"] - sync[r["seed"]]["final_accuracy"]) for r in group
                ),
                "median_updates_per_second": statistics.median(rates) if rates else None,
                "mean_staleness": statistics.mean(r["staleness_mean"] for r in group),
                "max_staleness": max(r["staleness_max"] for r in group),
            }
        )
    return rows


def headline(rows: list[dict], step_times: dict, prefix: str = "") -> dict[str, float | None]:
    """The issue's figures for one workload (``prefix`` names any but the first)."""
    by = {(r["method"], r["num_workers"]): r for r in rows}

    def value(method: str, c: int, key: str) -> float | None:
        row = by.get((method, c))
        return None if row is None or row[key] is None else float(row[key])

    sync_rate, passm_plus_rate = (
        value("sync", 1, "median_updates_per_second"),
        value("passm_plus", 2, "median_updates_per_second"),
    )
    figures = {
        "passm_plus_shared_speedup_c2": value("passm_plus", 2, "median_speedup_vs_best_sync"),
        "passm_plus_shared_speedup_c4": value("passm_plus", 4, "median_speedup_vs_best_sync"),
        "passm_plus_shared_accuracy_gap_points_c2": value(
            "passm_plus", 2, "mean_accuracy_gap_points"
        ),
        "assm_shared_speedup_c2": value("assm", 2, "median_speedup_vs_best_sync"),
        "passm_shared_speedup_c2": value("passm", 2, "median_speedup_vs_best_sync"),
        "updates_per_second_ratio_c2": (
            passm_plus_rate / sync_rate if passm_plus_rate and sync_rate else None
        ),
        "restricted_backward_time_saving_c2": float(step_times["restricted_time_saving"]),
    }
    return {prefix + key: value for key, value in figures.items()}


def markdown_table(name: str, rows: list[dict]) -> str:
    def show(value, digits=2):
        return "—" if value is None else f"{value:.{digits}f}"

    lines = [
        f"**{name}**",
        "",
        "| method | c | lr / momentum | reached | median s to target | speed-up vs best sync "
        "| acc − sync (pts) | updates/s | staleness mean / max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['num_workers']} | {r['learning_rate']} / {r.get('momentum')} "
            f"| {r['reached_target']}/{r['seeds']} | {show(r['median_seconds_to_target'], 1)} "
            f"| {show(r['median_speedup_vs_best_sync'])} "
            f"| {show(r['mean_accuracy_gap_points'], 1)} "
            f"| {show(r['median_updates_per_second'], 0)} "
            f"| {show(r['mean_staleness'])} / {r['max_staleness']} |"
        )
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["workloads"])
    figure, axes = plt.subplots(1, len(names), figsize=(6.5 * len(names), 4.5), squeeze=False)
    seed = result["settings"]["seeds"][0]
    for axis, name in zip(axes[0], names, strict=True):
        for run in result["workloads"][name]["runs"]:
            if run["seed"] == seed:
                axis.plot(
                    [h["train_seconds"] for h in run["history"]],
                    [h["accuracy"] for h in run["history"]],
                    "--" if run["method"].startswith("sync") else "-",
                    label=f"{run['method']} c={run['num_workers']}",
                )
        axis.set(
            xlabel="training seconds (evaluation excluded)",
            ylabel="eval accuracy",
            title=f"{name}, seed {seed}",
        )
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="~30 s smoke run (tested)")
    parser.add_argument("--output", help="JSON path (PNG beside it); default results/")
    parser.add_argument("--workloads", help="comma-separated subset, e.g. resnet_small")
    parser.add_argument("--worker-counts", help="comma-separated c, e.g. 1,2 (default 1,2,4)")
    parser.add_argument(
        "--async-momentum", type=float, help="momentum of the async methods only (default: sync's)"
    )
    parser.add_argument(
        "--async-learning-rates",
        help="comma-separated rates of the async methods' grid (default: learning_rates); the "
        "sync baselines then tune over both grids",
    )
    parser.add_argument(
        "--weight-prediction",
        action="store_true",
        help="the async methods predict the weights they write (config.passm.weight_prediction)",
    )
    parser.add_argument(
        "--async-updates-factor",
        help="the async methods at c > 1 make this many times sync's updates in all; 'c' gives "
        "each worker sync's count (default 1: the same examples as sync)",
    )
    parser.add_argument("--seeds", help="comma-separated evaluation seeds (default 0,1)")
    parser.add_argument(
        "--step-times-only",
        action="store_true",
        help="only the step profile: full and block step times, the cores one step keeps busy",
    )
    return parser


def _setup(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """The study's settings: ``FULL`` or ``QUICK`` with the command line's changes."""
    setup = dict(QUICK if args.quick else FULL)
    if args.workloads:
        names = args.workloads.split(",")
        unknown = sorted(set(names) - set(setup["workloads"]))
        if unknown:
            parser.error(f"--workloads: unknown {unknown}; choose from {list(setup['workloads'])}")
        setup["workloads"] = {name: setup["workloads"][name] for name in names}
    if args.worker_counts:
        setup["worker_counts"] = [int(c) for c in args.worker_counts.split(",")]
    setup["async_momentum"] = args.async_momentum
    setup["weight_prediction"] = args.weight_prediction
    if args.async_updates_factor not in (None, "c"):
        try:
            if float(args.async_updates_factor) <= 0:
                raise ValueError
        except ValueError:
            parser.error(
                f"--async-updates-factor: got {args.async_updates_factor!r}; give a positive "
                "number or 'c'"
            )
    setup["async_updates_factor"] = args.async_updates_factor
    if args.seeds:
        setup["seeds"] = [int(seed) for seed in args.seeds.split(",")]
    if args.async_learning_rates:
        setup["async_learning_rates"] = [float(r) for r in args.async_learning_rates.split(",")]
    return setup


def _study(setup: dict, step_times_only: bool) -> tuple[dict, dict]:
    """Per workload: the step profile, then (unless ``step_times_only``) the tuned runs and
    their summary. Returns the headline and the workloads' results."""
    figures, workloads = {}, {}
    for index, (name, workload) in enumerate(setup["workloads"].items()):
        prefix = "" if index == 0 else f"{name}_"
        step_times = measure_step_times(workload, setup)
        if step_times_only:
            workloads[name] = {"step_times": step_times}
            figures[prefix + "full_step_cores_busy"] = float(step_times["full_step_cores_busy"])
            figures[prefix + "restricted_backward_time_saving_c2"] = float(
                step_times["restricted_time_saving"]
            )
            print(name, json.dumps(step_times, indent=1), flush=True)
            continue
        best, best_momenta, runs, tuning = tune_and_run(name, workload, setup)
        rows = summarise(runs)
        figures.update(headline(rows, step_times, prefix))
        workloads[name] = {
            "best_learning_rates": best,
            "best_momenta": best_momenta,
            "step_times": step_times,
            "summary": rows,
            "runs": runs,
            "tuning_runs": tuning,
        }
        print(markdown_table(name, rows), flush=True)
    return figures, workloads


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)  # an unknown or misspelt option is an error, not ignored
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from absl import logging

    logging.set_verbosity(logging.WARNING)
    setup = _setup(args, parser)
    began = time.perf_counter()
    command = "python benchmarks/async_shared_memory.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    figures, workloads = _study(setup, args.step_times_only)
    machine = (os.cpu_count(), os.getloadavg(), platform.platform(), platform.python_version())
    stem = os.path.join(RESULTS, "async_shared_memory" + ("_quick" if args.quick else ""))
    stem = os.path.splitext(args.output)[0] if args.output else stem
    result = harness.write_results(
        stem + ".json",
        headline=figures,
        command=command,
        settings=setup,
        workloads=workloads,
        # The load at the end, beside the cores: what the updates/s figures ran against.
        machine=dict(
            zip(("cpu_count", "load_average_at_end", "platform", "python"), machine, strict=True)
        ),
        benchmark_seconds=time.perf_counter() - began,
    )
    if not args.step_times_only:
        plot(result, stem + ".png")
    print(json.dumps(result["headline"], indent=1))
    print(f"wrote {stem}.json in {result['benchmark_seconds']:.0f} s")


if __name__ == "__main__":
    main()
