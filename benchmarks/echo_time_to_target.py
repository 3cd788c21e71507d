r"""Wall time and fresh examples to a target accuracy, with and without data echoing.

Run (as root for the network namespace; about an hour on 2 cores)::

    python benchmarks/echo_time_to_target.py                       # every scenario
    python benchmarks/echo_time_to_target.py --scenarios network   # one scenario (merged into
                                                                   # the existing JSON)
    python benchmarks/echo_time_to_target.py --quick               # seconds-long smoke run

Writes ``benchmarks/results/echo_time_to_target.json`` and ``.png``.

Scenarios (MNIST-1D, the 1-D CNN, batch 128, AdamW; ``trainers.experiment.run`` does the
training, so this is the training binary's own code path):

* ``network``: the train split as TFRecord shards in a ``gcp-storage-emulator`` bucket, read from
  ``gs://`` through gcsfs by the same reader users point at real GCS, over a bandwidth-capped link
  (``network_bucket.ThrottledBucket``: a network namespace behind ``tc tbf``, or an in-process
  limiter where namespaces are not allowed; the JSON records which ran). The eval split is local,
  as a small eval set would be cached in practice. The cap is chosen so that R ≈ 5.
* ``cpu``: the train split in memory, with a costly augmentation (``--cpu-rounds`` identity
  convolutions per example, real FLOPs that leave the data unchanged, so accuracy is comparable)
  ahead of the MNIST-1D augmentation. Upstream and training share the same 2 cores here.
* ``idle``: in memory, no augmentation: not input-bound. Only baseline vs AutoEcho, for the
  "no slower when not input-bound" target.

Variants: the baseline (e = 1), example echoing before augmentation, after augmentation and batch
echoing after batching, e in ``--factors``, each without and with a shuffle buffer after echo
(``--buffer`` examples; ``--buffer // batch_size`` batches for batch echoing), and
``echo=auto`` (``echoing.AutoEcho`` at ``--auto-insert``, max factor ``--max-echo``). Every run
stops at the first evaluation reaching ``--target``, except the "final accuracy" runs (baseline
and each insertion point at ``--final-factor`` without shuffle), which continue to
``--final-fresh`` fresh examples so their final accuracy can be compared. Evaluations happen
every ``--eval-every`` fresh batches (every ``eval_every * e`` steps), so all fixed variants are
judged at the same fresh-data granularity; AutoEcho evaluates after the inner loop
(``eval_every // 4`` steps) in which the fresh examples it consumed (batch / factor per step)
cross each multiple of ``eval_every`` batches.

R is measured by the trainer itself (t_up: the input pipeline alone, t_down: a train step on a
cached batch) in the baseline runs. Seeds: ``--seeds`` (3 by default, the fewest that give a
spread; each seed changes the model initialisation, the shuffle order and the echo/augment
draws, not the data set).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import harness
import tensorflow as tf
from network_bucket import ThrottledBucket  # a sibling script, not a package

from pipelines.sources import mnist1d
from trainers import experiment, metrics_writer

REPOSITORY = harness.ROOT
RESULTS = harness.RESULTS
INSERTIONS = ("before_augment", "after_augment", "after_batch")
SCENARIOS = ("network", "cpu", "idle")


def _base_config(args, seed: int):
    spec = importlib.util.spec_from_file_location(
        "mnist1d_config", REPOSITORY / "configs/mnist1d.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config(None)
    config.seed = seed
    config.progress_bar = False
    config.data.data_dir = args.data_dir
    config.data.num_train, config.data.num_eval = args.num_train, args.num_eval
    config.data.batch_size, config.data.eval_batch_size = args.batch_size, 1_000
    config.data.shuffle_buffer = args.shuffle_buffer
    config.target_accuracy = args.target
    config.warmup_steps = args.warmup_steps
    config.steps_per_loop = args.eval_every
    config.checkpoint_every_steps = 10**9
    config.checkpoint_iterator = False
    config.timing_steps = 0
    # --quick: seconds-long runs, whose autotuned iterators' teardown waits would only add
    # time (data config autotune, iterator_teardown.py), as in the smoke configs.
    config.data.autotune = not args.quick
    return config


def costly_augmentation(rounds: int):
    """``rounds`` identity 1-D convolutions per example: CPU work that leaves the data as it is.

    A kernel [0, 1, 0] returns its input exactly (x·1 + 0 + 0), but the runtime cannot know that,
    so the cost is real, like a costly augmentation's, while accuracy stays comparable.
    """
    kernel = tf.reshape(tf.constant([0.0, 1.0, 0.0]), [3, 1, 1])

    def convolve(element):
        signal = element["inputs"][tf.newaxis]  # [1, length, 1]
        for _ in range(rounds):
            signal = tf.nn.conv1d(signal, kernel, stride=1, padding="SAME")
        return {**element, "inputs": signal[0]}

    return lambda dataset: dataset.map(convolve, num_parallel_calls=tf.data.AUTOTUNE)


class Scenario:
    """Data set-up of one scenario: a context to enter, then configs and insertions per run."""

    def __init__(self, name: str, args):
        self.name, self.args = name, args
        self.details: dict[str, object] = {"scenario": name}
        self.files: dict[str, str] = {}

    @contextlib.contextmanager
    def active(self):
        args = self.args
        if self.name != "network":
            yield self
            return
        local = tempfile.mkdtemp(prefix="echo_time_to_target_")
        local_files = mnist1d.export_tfrecords(
            local, num_train=args.num_train, num_eval=args.num_eval, data_dir=args.data_dir
        )
        with ThrottledBucket(args.megabits, limiter=args.limiter) as bucket:
            from pipelines.sources import tfrecord

            tfrecord.gcs_filesystem().mkdir("echoing-benchmark")
            remote = mnist1d.export_tfrecords(
                "gs://echoing-benchmark/mnist1d",
                num_train=args.num_train,
                num_eval=args.num_eval,
                data_dir=args.data_dir,
                num_shards=args.num_shards,
            )
            self.files = {
                "train_files": remote["train_files"],
                "eval_files": local_files["eval_files"],
            }
            self.details.update(
                limiter=bucket.limiter,
                limiter_fallback_reason=bucket.fallback_reason,
                megabits_per_second=bucket.megabits_per_second,
            )
            yield self

    def config(self, seed: int):
        config = _base_config(self.args, seed)
        if self.name == "network":
            config.data.source, config.data.num_classes = "tfrecord", 10
            config.data.train_files = self.files["train_files"]
            config.data.eval_files = self.files["eval_files"]
        if self.name == "idle":
            config.data.augment = "none"
        return config

    def insertions(self):
        if self.name == "cpu":
            return [
                ("before_augment", "costly_augmentation", costly_augmentation(self.args.cpu_rounds))
            ]
        return []


def _variants(args, scenario: str) -> list[dict]:
    """Every run of a scenario (seed aside), in a fixed order."""
    variants = [{"variant": "baseline", "factor": 1, "shuffle": False, "final": True}]
    if scenario != "idle":
        for insert in args.insertions:
            for factor in args.factors:
                for shuffle in args.shuffle:
                    if shuffle and factor not in args.shuffle_factors:
                        continue
                    variants.append(
                        {
                            "variant": insert,
                            "factor": factor,
                            "shuffle": shuffle,
                            "final": factor == args.final_factor and not shuffle,
                        }
                    )
    if args.auto:
        variants.append({"variant": "auto", "factor": None, "shuffle": False, "final": False})
    return variants


def run_one(scenario: Scenario, variant: dict, seed: int, args) -> dict:
    config = scenario.config(seed)
    factor = variant["factor"]
    if variant["variant"] == "auto":
        config.auto_echo_max_factor = float(args.max_echo)
        config.echo_insert = args.auto_insert
        # The factor changes as it runs: evaluate by fresh examples consumed (every eval_every
        # fresh batches, as the fixed variants), after the inner loop that crosses each multiple.
        config.eval_every_fresh_examples = args.eval_every * args.batch_size
    else:
        config.echo = float(factor)
        if variant["variant"] != "baseline":
            config.echo_insert = variant["variant"]
        if variant["shuffle"]:
            batch_level = variant["variant"] == "after_batch"
            config.echo_buffer_size = (
                max(2, args.buffer // args.batch_size) if batch_level else args.buffer
            )
        config.eval_every_steps = args.eval_every * factor
        if variant["variant"] == "baseline":
            config.timing_steps = args.timing_steps  # R, measured after training
    config.steps_per_loop = config.eval_every_steps
    if variant["variant"] == "auto":
        # AutoEcho observes once per inner loop (the first, which traces, is not observed):
        # short loops let it settle early in a run, and evaluations land close to each mark.
        config.steps_per_loop = max(1, args.eval_every // 4)
    # Every run of a variant has the same schedule horizon (the --final-fresh budget, in steps),
    # so the learning-rate schedule per fresh example is the same whether a run stops at the
    # target or goes on to measure the final accuracy.
    config.num_steps = args.final_fresh * (factor or args.final_factor) // args.batch_size
    config.num_steps -= config.num_steps % config.steps_per_loop
    if variant["variant"] == "auto":
        config.eval_every_steps = config.num_steps  # by fresh examples, see above
    config.stop_at_target = not variant["final"]
    workdir = tempfile.mkdtemp(prefix="run_")
    # Earlier runs' input iterators, left in reference cycles, are freed here, not inside this
    # run's timed training: freeing one can wait up to a minute (iterator_teardown.py).
    gc.collect()
    start = time.perf_counter()
    summary = experiment.run(config, workdir, insertions=scenario.insertions())
    row = {
        **variant,
        "scenario": scenario.name,
        "seed": seed,
        "reached": summary["steps_to_target"] is not None,
        "seconds_to_target": summary["seconds_to_target"],
        "fresh_examples_to_target": summary["fresh_examples_to_target"],
        "steps_to_target": summary["steps_to_target"],
        "final_accuracy": summary["eval_accuracy"] if variant["final"] else None,
        "final_fresh_examples": summary["fresh_examples"] if variant["final"] else None,
        "steps": summary["step"],
        "train_seconds": summary["train_seconds"],
        "upstream_seconds_per_step": summary["upstream_seconds_per_step"],
        "downstream_seconds_per_step": summary["downstream_seconds_per_step"],
        "R": summary["upstream_downstream_ratio"],
        "process_seconds": time.perf_counter() - start,
    }
    if variant["variant"] == "auto":
        records = metrics_writer.read_metrics(workdir)
        row["factor_trace"] = [
            [record["train_seconds"], record["echo_factor"], record.get("input_wait_fraction")]
            for record in records
        ]
        row["factor"] = records[-1]["echo_factor"] if records else None
        row["auto_insert"] = config.echo_insert
    return row


def summarise(rows: list[dict]) -> list[dict]:
    """Mean/min/max over seeds per (scenario, variant, factor, shuffle), and speedups.

    ``speedup`` is the baseline's mean seconds to target over the entry's mean (a ratio of
    means, kept as ``headline_ratio_of_means``); ``paired_speedup`` is the same ratio seed by
    seed (``harness.paired``: geometric mean and range over the seeds both reached the target),
    which the headline reads.
    """
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (
            row["scenario"],
            row["variant"],
            row["factor"] if row["variant"] != "auto" else "auto",
            row["shuffle"],
        )
        groups.setdefault(key, []).append(row)
    baseline = {
        scenario: statistics.mean(r["seconds_to_target"] for r in group if r["reached"])
        for (scenario, variant, _, _), group in groups.items()
        if variant == "baseline" and any(r["reached"] for r in group)
    }
    baseline_runs = {
        scenario: {r["seed"]: r for r in group if r["reached"]}
        for (scenario, variant, _, _), group in groups.items()
        if variant == "baseline"
    }
    table = []
    for (scenario, variant, factor, shuffle), group in groups.items():
        reached = [r for r in group if r["reached"]]
        entry = {"scenario": scenario, "variant": variant, "factor": factor, "shuffle": shuffle}
        entry["runs"], entry["reached"] = len(group), len(reached)
        for key in ("seconds_to_target", "fresh_examples_to_target", "steps_to_target"):
            values = [r[key] for r in reached]
            entry[key] = spread(values)
        finals = [r["final_accuracy"] for r in group if r["final_accuracy"] is not None]
        entry["final_accuracy"] = spread(finals)
        ratios = [r["R"] for r in group if r["R"] is not None]
        entry["R"] = spread(ratios)
        if variant == "auto":
            entry["final_factor"] = spread([r["factor"] for r in group if r["factor"] is not None])
        if scenario in baseline and reached:
            entry["speedup"] = baseline[scenario] / entry["seconds_to_target"]["mean"]
            entry["paired_speedup"] = harness.paired(
                baseline_runs[scenario],
                {r["seed"]: r for r in reached},
                lambda base, run: base["seconds_to_target"] / run["seconds_to_target"],
            )
        table.append(entry)
    return table


def figures(table: list[dict], by: str = "paired") -> dict:
    """The issue's figures per scenario, from ``summarise``'s table; None where not reached.

    ``{s}_R``: the baseline's mean input-bound ratio; ``{s}_best_e{f}_speedup``: the best
    wall-time speed-up to the target of the fixed variants at factor f (target at e = 4: 2.5,
    and 0.7·min(e, R) at every e <= R); ``{s}_best_fixed_speedup``: over every fixed factor;
    ``{s}_auto_speedup`` and ``{s}_auto_vs_best_fixed`` (target 0.9; in the idle scenario
    ``auto_speedup`` >= 0.95 is the target); ``final_accuracy_delta_worst_points``: the lowest
    final accuracy of a variant minus its scenario's baseline (target >= -0.5).

    ``by="paired"`` (the headline): each speed-up is an entry's ``paired_speedup`` (the
    ``harness.paired`` result: geometric mean over seeds, range), the best variant the one with
    the highest geometric mean, and ``auto_vs_best_fixed`` is paired seed by seed too.
    ``by="means"``: the ratios of mean seconds (``speedup``), as floats.
    """
    paired = by == "paired"

    def value(entry):
        figure = entry.get("paired_speedup" if paired else "speedup")
        return figure if paired or figure is None else float(figure)

    def best(entries):
        found = [value(e) for e in entries if value(e) is not None]
        return max(found, key=_mean, default=None)

    result: dict = {}
    baselines = {e["scenario"]: e for e in table if e["variant"] == "baseline"}
    deltas = []
    for scenario in sorted({entry["scenario"] for entry in table}):
        entries = [e for e in table if e["scenario"] == scenario and e["variant"] != "baseline"]
        fixed = [e for e in entries if e["variant"] != "auto"]
        baseline = baselines.get(scenario)
        if baseline is not None and baseline["R"] is not None:
            result[f"{scenario}_R"] = float(baseline["R"]["mean"])
        for factor in sorted({e["factor"] for e in fixed}):
            result[f"{scenario}_best_e{factor}_speedup"] = best(
                [e for e in fixed if e["factor"] == factor]
            )
        best_fixed = best(fixed)
        if fixed:
            result[f"{scenario}_best_fixed_speedup"] = best_fixed
        for auto in (e for e in entries if e["variant"] == "auto"):
            speedup = value(auto)
            result[f"{scenario}_auto_speedup"] = speedup
            if fixed:
                result[f"{scenario}_auto_vs_best_fixed"] = _versus(speedup, best_fixed)
        if baseline is not None and baseline["final_accuracy"] is not None:
            deltas += [
                100.0 * (e["final_accuracy"]["mean"] - baseline["final_accuracy"]["mean"])
                for e in entries
                if e["final_accuracy"] is not None
            ]
    result["final_accuracy_delta_worst_points"] = min(deltas, default=None)
    return result


def _mean(figure) -> float:
    return figure["mean"] if isinstance(figure, dict) else figure


def _versus(method, other):
    """``method``'s speed-up over ``other``'s: seed by seed for paired figures."""
    if method is None or other is None:
        return None
    if isinstance(method, dict):
        by_seed = harness.paired(harness.per_seed(other), harness.per_seed(method), _over)
        return by_seed
    return method / other


def _over(base: float, new: float) -> float:
    return new / base


def headline(table: list[dict]) -> dict[str, float | None]:
    """``figures``' paired geometric means: the figures the issue and RESULTS.md read."""
    return harness.paired_headline(figures(table))[0]


def headline_sections(table: list[dict]) -> dict:
    """The headline, its spread over seeds and the ratios of means, as the JSON stores them."""
    paired, by_means = figures(table), figures(table, by="means")
    speedups = {key for key, value in paired.items() if isinstance(value, dict)}
    return harness.headline_sections(paired, {k: v for k, v in by_means.items() if k in speedups})


def recompute(stored: dict) -> dict:
    """A stored results file's table and headline, re-derived from the runs (``rows``) it holds."""
    table = summarise(stored["rows"])
    return {**headline_sections(table), "table": table, "markdown": markdown(table)}


def spread(values: list[float]) -> dict | None:
    if not values:
        return None
    return {
        "mean": statistics.mean(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def plot(table: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [
        s
        for s in SCENARIOS
        if any(
            e["scenario"] == s and e["variant"] != "baseline" and e["variant"] != "auto"
            for e in table
        )
    ]
    if not scenarios:
        return
    figure, axes = plt.subplots(
        len(scenarios), 2, figsize=(12, 4.2 * len(scenarios)), squeeze=False
    )
    for row, scenario in enumerate(scenarios):
        entries = [e for e in table if e["scenario"] == scenario]
        base = next(
            (e for e in entries if e["variant"] == "baseline" and e["seconds_to_target"]), None
        )
        for column, key, label in (
            (0, "fresh_examples_to_target", "fresh examples to target"),
            (1, "seconds_to_target", "wall time to target (s)"),
        ):
            axis = axes[row][column]
            for variant in INSERTIONS:
                for shuffle in (False, True):
                    points = sorted(
                        (e["factor"], e[key]["mean"], e[key]["min"], e[key]["max"])
                        for e in entries
                        if e["variant"] == variant and e["shuffle"] == shuffle and e[key]
                    )
                    if base:
                        first = (1, base[key]["mean"], base[key]["min"], base[key]["max"])
                        points = [first, *points]
                    if not points:
                        continue
                    xs, means, lows, highs = zip(*points, strict=True)
                    axis.errorbar(
                        xs,
                        means,
                        yerr=[  # clipped: a mean of equal values can round past them
                            [max(0.0, m - lo) for m, lo in zip(means, lows, strict=True)],
                            [max(0.0, h - m) for m, h in zip(means, highs, strict=True)],
                        ],
                        marker="o",
                        linestyle="-" if not shuffle else ":",
                        capsize=3,
                        label=f"{variant}{' + shuffle' if shuffle else ''}",
                    )
            if base:
                factors = sorted(
                    {e["factor"] for e in entries if isinstance(e["factor"], int)} | {1}
                )
                # The ideal: every echoed example as useful as a fresh one (fresh examples / e);
                # for wall time, / min(e, R) (echo cannot beat the downstream's own speed).
                ratio = base["R"]["mean"] if key == "seconds_to_target" and base["R"] else None
                ideal = [base[key]["mean"] / (min(f, ratio) if ratio else f) for f in factors]
                axis.plot(factors, ideal, "k--", label="ideal")
            axis.set_xlabel("echo factor e")
            axis.set_ylabel(label)
            axis.set_title(f"{scenario}: {label}")
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
        axes[row][0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_auto_echo(rows: list[dict], path: Path) -> None:
    """AutoEcho's factor and measured input wait over training time, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [row for row in rows if row["variant"] == "auto" and row.get("factor_trace")]
    if not runs:
        return
    figure, (factors, waits) = plt.subplots(1, 2, figsize=(12, 3.8))
    for run in runs:
        seconds, factor, wait = zip(*run["factor_trace"], strict=True)
        label = f"{run['scenario']} seed {run['seed']}"
        factors.plot(seconds, factor, marker=".", label=label)
        observed = [(t, w) for t, w in zip(seconds, wait, strict=True) if w is not None]
        if observed:
            waits.plot(*zip(*observed, strict=True), marker=".", label=label)
    factors.set(xlabel="training seconds", ylabel="echo factor", title="AutoEcho factor")
    waits.axhline(0.05, color="gray", linestyle="--")
    waits.axhline(0.20, color="gray", linestyle=":")
    waits.set(xlabel="training seconds", ylabel="input-wait fraction", title="input wait")
    factors.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="run seeds first..first+n-1")
    parser.add_argument("--factors", default="2,3,4,5")
    parser.add_argument("--insertions", default=",".join(INSERTIONS), help="'' = baseline only")
    parser.add_argument("--shuffle", default="0,1", help="0 = no buffer after echo, 1 = a buffer")
    parser.add_argument("--shuffle-factors", default=None, help="factors run with a buffer")
    parser.add_argument("--buffer", type=int, default=1_000, help="shuffle buffer after echo")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--final-factor", type=int, default=4)
    parser.add_argument("--final-fresh", type=int, default=76_800)
    parser.add_argument("--megabits", type=float, default=3.0, help="network cap (Mbit/s)")
    parser.add_argument("--limiter", default=None, choices=[None, "netns+tbf", "in-process"])
    parser.add_argument("--num-shards", type=int, default=16)
    parser.add_argument("--cpu-rounds", type=int, default=200)
    parser.add_argument("--max-echo", type=float, default=8.0)
    parser.add_argument("--no-auto", dest="auto", action="store_false")
    parser.add_argument("--auto-insert", default="after_batch", choices=INSERTIONS)
    parser.add_argument("--eval-every", type=int, default=25, help="fresh batches per eval")
    parser.add_argument("--warmup-steps", type=int, default=50)
    parser.add_argument("--timing-steps", type=int, default=30)
    parser.add_argument("--num-train", type=int, default=40_000)
    parser.add_argument("--num-eval", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--shuffle-buffer", type=int, default=1_000, help="upstream shuffle")
    parser.add_argument("--data-dir", default=os.path.expanduser("~/.cache/echoing"))
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--output", type=Path, default=RESULTS / "echo_time_to_target.json")
    args = parser.parse_args()
    # A plain SIGTERM would skip the clean-up of the network namespace and emulator.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    args.factors = [int(f) for f in args.factors.split(",")]
    args.insertions = [name for name in args.insertions.split(",") if name]
    args.shuffle = [bool(int(s)) for s in args.shuffle.split(",")]
    args.shuffle_factors = (
        [int(f) for f in args.shuffle_factors.split(",")] if args.shuffle_factors else args.factors
    )
    if args.quick:
        args.seeds, args.factors, args.shuffle = 1, [2], [False, True]
        args.shuffle_factors = [2]
        args.num_train, args.num_eval, args.batch_size = 1_000, 200, 32
        args.target, args.final_fresh, args.final_factor = 0.2, 640, 2
        args.eval_every, args.timing_steps, args.cpu_rounds = 5, 3, 5
        args.warmup_steps = 2
        args.megabits, args.num_shards, args.buffer, args.shuffle_buffer = 20.0, 2, 64, 100
        args.data_dir = tempfile.mkdtemp(prefix="echo_ttt_data_")
    rows = []
    previous = {}
    if args.output.exists() and not args.quick:
        previous = json.loads(args.output.read_text())
    names = args.scenarios.split(",")
    scenario_details = {}
    for name in names:
        scenario = Scenario(name, args)
        with scenario.active():
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for variant in _variants(args, name):
                    row = run_one(scenario, variant, seed, args)
                    rows.append(row)
                    print(
                        json.dumps({k: v for k, v in row.items() if k != "factor_trace"}),
                        flush=True,
                    )
            # Per scenario, since a JSON may merge runs of several invocations.
            scenario.details["command"] = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
            scenario.details["settings"] = {
                key: (str(value) if isinstance(value, Path) else value)
                for key, value in vars(args).items()
            }
            scenario_details[name] = scenario.details
    # Rows of scenarios and seeds not run this time are kept from the previous JSON.
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    kept = [
        r for r in previous.get("rows", []) if r["scenario"] not in names or r["seed"] not in seeds
    ]
    details = {**previous.get("scenarios", {}), **scenario_details}
    rows = kept + rows
    table = summarise(rows)
    sections = headline_sections(table)
    harness.write_results(
        args.output,
        headline=sections.pop("headline"),
        command="python benchmarks/echo_time_to_target.py " + " ".join(sys.argv[1:]),
        **sections,
        benchmark="echo_time_to_target",
        settings={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        scenarios=details,
        rows=rows,
        table=table,
        markdown=markdown(table),
    )
    plot(table, args.output.with_suffix(".png"))
    plot_auto_echo(rows, args.output.with_name(args.output.stem + "_auto_echo.png"))
    for entry in table:
        print(format_entry(entry))


def spread_text(values: dict | None, digits: int = 1) -> str:
    """``spread``'s result as "mean [min, max]", or "not reached"."""
    if not values:
        return "not reached"
    return f"{values['mean']:.{digits}f} [{values['min']:.{digits}f}, {values['max']:.{digits}f}]"


def markdown(table: list[dict]) -> str:
    """The summary as a Markdown table (BENCHMARKS.md), one row per scenario/variant/e/shuffle."""
    order = {name: index for index, name in enumerate(("baseline", *INSERTIONS, "auto"))}
    lines = [
        "| scenario | variant | e | shuffle | reached | wall s to target, mean [min, max] | "
        "fresh examples to target | speed-up | final accuracy | R |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in sorted(
        table,
        key=lambda e: (e["scenario"], order[e["variant"]], str(e["factor"]), e["shuffle"]),
    ):
        factor = entry["factor"]
        if entry["variant"] == "auto" and entry.get("final_factor"):
            factor = f"auto (ends {entry['final_factor']['mean']:.1f})"
        speedup = f"{entry['speedup']:.2f}x" if "speedup" in entry else ""
        lines.append(
            f"| {entry['scenario']} | {entry['variant']} | {factor} | "
            f"{'yes' if entry['shuffle'] else 'no'} | {entry['reached']}/{entry['runs']} | "
            f"{spread_text(entry['seconds_to_target'])} | "
            f"{spread_text(entry['fresh_examples_to_target'], 0)} | {speedup} | "
            f"{spread_text(entry['final_accuracy'], 4) if entry['final_accuracy'] else ''} | "
            f"{spread_text(entry['R'], 2) if entry['R'] else ''} |"
        )
    return "\n".join(lines)


def format_entry(entry: dict) -> str:
    fmt = spread_text
    return (
        f"{entry['scenario']:8s} {entry['variant']:15s} e={entry['factor']!s:5s} "
        f"shuffle={entry['shuffle']!s:5s} reached {entry['reached']}/{entry['runs']} "
        f"time {fmt(entry['seconds_to_target'])} s "
        f"fresh {fmt(entry['fresh_examples_to_target'], 0)} "
        f"speedup {entry.get('speedup', float('nan')):.2f} R {fmt(entry['R'], 2)}"
    )


if __name__ == "__main__":
    main()
    # Everything is written. Leave without interpreter teardown: once in CI the process hung
    # there after printing its table (main thread garbage-collecting, no Python frame), with
    # TensorFlow's and gcsfs's background threads alive; the cause is not found yet.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
