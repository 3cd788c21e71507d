"""AutoAssist side by side: Boss steps, epochs and wall time to a target accuracy; throughput.

A user's own loop: the Boss trains in a loop written here over the public library API
(``echoing.assistant_filter``, ``echoing.AssistantLearner``), as the paper's training code does.

Run::

    python benchmarks/autoassist.py           # default: 2 tasks x 4 methods x 3 seeds, 4-10 min
    python benchmarks/autoassist.py --quick   # seconds; what tests/benchmarks runs

Writes ``benchmarks/results/autoassist.json`` and ``autoassist.png`` and prints a markdown table.

Methods, all with the same Boss, optimizer (Adam), batch size and seeds:

* ``shuffle``: plain shuffling, every example every epoch;
* ``assistant``: ``echoing.assistant_filter`` (γ = 0.3) fed by an asynchronous
  ``echoing.AssistantLearner`` (the paper's AutoAssist);
* ``assistant_reweight``: the same with ``reweight=True`` (loss weighted by 1/keep_prob);
* ``shrinking``: the paper's section-3 baseline without a learned Assistant: the Boss computes
  every example's loss and trains on those above the running-mean threshold, plus the rest with
  probability γ (forward pass on everything, so it saves no compute per example read).

Four counts are reported to the target, because filtering makes them differ:

* **optimizer steps** (the headline): ``apply_gradients`` calls of the Boss. Every step runs the
  Boss forward and backward over a full batch, so steps × batch = **examples computed** (examples
  whose loss and gradient the Boss computed) is the Boss's compute to the target;
* **Boss epochs**: examples the Boss trained on with a nonzero weight / N (the paper's "epochs");
* **data passes**: examples read from the source / N.

Why steps are the headline: they are the one unit that charges every method for what it
computes. For ``shuffle`` and the Assistant methods (the filter drops examples *before* the
batch, so every batch row is trained on) steps = Boss epochs × N / batch, and the two units
agree. ``shrinking`` drops examples *inside* the step: the Boss computes the loss and the
backward pass of the whole batch and zeroes ~half of the rows' weights, then takes one step per
batch. Counted in Boss epochs (kept examples only) it looks cheaper than it is — it takes about
twice the steps per "epoch" — so its epochs are not comparable with the others' and only steps
(or examples computed) are. Steps do not charge the Assistant methods for the Assistant's own
forward pass on every example read and its training (a linear model, far cheaper than the
Boss); the throughput section measures that overhead. Wall time is training time only
(evaluation excluded).

``autoassist.json`` has a top-level ``headline``: for every method, ``<method>_steps_vs_shuffle``,
``<method>_epochs_vs_shuffle`` and ``<method>_passes_vs_shuffle`` = that method's count to
target / plain shuffling's, seed by seed, averaged geometrically (< 1 = fewer; the range is in
``headline_spread``, the ratio of means in ``headline_ratio_of_means``), for the main task
``mnist1d`` (or the only task run); other tasks' keys are prefixed with the task name
(``digits_shrinking_steps_vs_shuffle``).
A ratio is null unless every seed of the method reached the target.

Target accuracy: 99% of the plain-shuffling baseline's best test accuracy, taking the worst of
its seeds, so every baseline seed reaches it; the same target is used for every method.

Throughput: Boss examples trained per second (the 1-D CNN Boss, heavier per step than the MLP,
as the paper's Boss is much heavier than its Assistant) with the plain pipeline, with the filter
alone (untrained Assistant, no learner), with the Assistant trained synchronously inside the
step (the paper's "sequential", 61% overhead) and asynchronously in the learner thread (paper:
5%). The three modes run interleaved in rounds and
the median per mode is kept, because other processes share this machine's 2 cores; examples per
CPU-second of this process (all its threads) is reported too, as it is far less sensitive to
other processes' load (it measures cost, not latency).

Why 3 seeds: the smallest number that gives a spread (mean ± std, worst case) for epochs to
target; 5+ would push the default run past its 10-minute budget on 2 shared CPU cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import harness
import keras
import numpy as np
import tensorflow as tf

from echoing import Assistant, AssistantLearner, assistant_filter

RESULTS = harness.RESULTS
METHODS = ("shuffle", "assistant", "assistant_reweight", "shrinking")
BASE_PROB = 0.3
THRESHOLD_DECAY = 0.75  # the paper code's running-mean decay, used by shrinking and the learner


def load_task(name: str, quick: bool) -> dict:
    """Returns standardized float32 train/test arrays for ``mnist1d`` or ``digits``."""
    if name == "mnist1d":
        from mnist1d.data import get_dataset_args, make_dataset

        args = get_dataset_args()
        args.num_samples = 1_000 if quick else 5_000
        data = make_dataset(args)
        x_train, y_train, x_test, y_test = data["x"], data["y"], data["x_test"], data["y_test"]
    elif name == "digits":
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        x_train, x_test, y_train, y_test = train_test_split(
            digits.data, digits.target, test_size=0.25, random_state=0, stratify=digits.target
        )
    else:
        raise ValueError(f"unknown task {name!r}; expected 'mnist1d' or 'digits'.")
    mean, std = x_train.mean(0), x_train.std(0) + 1e-6
    return {
        "name": name,
        "x_train": ((x_train - mean) / std).astype(np.float32),
        "y_train": np.asarray(y_train, np.int64),
        "x_test": ((x_test - mean) / std).astype(np.float32),
        "y_test": np.asarray(y_test, np.int64),
        "num_classes": int(np.max(y_train)) + 1,
    }


def build_boss(model_name: str, input_dim: int, num_classes: int) -> keras.Model:
    """The trainers' model if that package is importable, else the same MLP built here."""
    try:
        from trainers.models import build_model

        return build_model(model_name, (input_dim,), num_classes)
    except ImportError:
        inputs = keras.Input((input_dim,))
        x = keras.layers.Dense(256, activation="relu")(inputs)
        x = keras.layers.Dense(256, activation="relu")(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes)(x))


def _source(task: dict, seed: int) -> tf.data.Dataset:
    n = len(task["y_train"])
    return (
        tf.data.Dataset.from_tensor_slices(
            {
                "inputs": task["x_train"],
                "label": task["y_train"],
                "id": np.arange(n, dtype=np.int64),
            }
        )
        .shuffle(n, seed=seed, reshuffle_each_iteration=True)
        .repeat()
    )


class _Run:
    """One Boss, its optimizer and the pipeline + feedback of one method."""

    def __init__(self, task, method, seed, config, *, learner_mode="async"):
        keras.utils.set_random_seed(seed)
        self.task, self.method, self.config = task, method, config
        self.learner_mode = learner_mode
        self.boss = build_boss(config["model"], task["x_train"].shape[1], task["num_classes"])
        self.optimizer = keras.optimizers.Adam(config["learning_rate"])
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        self.learner = None
        self.stage = None
        dataset = _source(task, seed)
        if method.startswith("assistant"):
            assistant = Assistant(task["num_classes"], input_shape=task["x_train"].shape[1:])
            self.stage = assistant_filter(
                assistant,
                base_prob=BASE_PROB,
                reweight=method == "assistant_reweight",
                seed=seed,
            )
            dataset = dataset.apply(self.stage)
            self.learner = AssistantLearner(
                assistant,
                threshold_decay=THRESHOLD_DECAY,
                queue_size=64,
                asynchronous=learner_mode == "async",
            )
        self.iterator = iter(dataset.batch(config["batch_size"]).prefetch(2))
        self.threshold_sum = tf.Variable(0.0)
        self.threshold_count = tf.Variable(0.0)
        self.shrink_seed = tf.Variable(seed * 1_000_003, dtype=tf.int64)
        self.step_fn = tf.function(self._step)
        self.test_inputs = tf.constant(task["x_test"])
        self.test_labels = tf.constant(task["y_test"])
        self.accuracy_fn = tf.function(self._accuracy)
        self.batch_examples = 0  # rows of every batch the Boss computed (= examples computed)
        self.steps = 0  # optimizer steps (apply_gradients calls)

    def _step(self, batch):
        with tf.GradientTape() as tape:
            logits = self.boss(batch["inputs"], training=True)
            losses = self.loss_fn(batch["label"], logits)
            weights = batch.get("sample_weight", tf.ones_like(losses))
            if self.method == "shrinking":
                decay = THRESHOLD_DECAY
                self.threshold_sum.assign(
                    decay * self.threshold_sum + (1 - decay) * tf.reduce_sum(losses)
                )
                self.threshold_count.assign(
                    decay * self.threshold_count
                    + (1 - decay) * tf.cast(tf.size(losses), tf.float32)
                )
                threshold = self.threshold_sum / self.threshold_count
                self.shrink_seed.assign_add(1)
                coin = tf.random.stateless_uniform(
                    tf.shape(losses), seed=tf.stack([self.shrink_seed, tf.constant(7, tf.int64)])
                )
                weights = tf.cast(
                    (tf.stop_gradient(losses) > threshold) | (coin < BASE_PROB), tf.float32
                )
            loss = tf.reduce_sum(losses * weights) / tf.cast(tf.size(losses), tf.float32)
        variables = self.boss.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        trained = tf.reduce_sum(tf.cast(weights > 0, tf.int64))
        return losses, trained

    def _accuracy(self):
        logits = self.boss(self.test_inputs, training=False)
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int64)
        return tf.reduce_mean(tf.cast(predictions == self.test_labels, tf.float32))

    def step(self) -> int:
        batch = next(self.iterator)
        losses, trained = self.step_fn(batch)
        self.batch_examples += int(tf.shape(losses)[0])
        self.steps += 1
        if self.learner is not None and self.learner_mode != "none":
            self.learner.feedback(batch, losses)
        return int(trained)

    def examples_read(self) -> int:
        """Examples taken from the source: before the filter, or every batch row otherwise."""
        if self.stage is not None:
            return self.stage.seen.value()
        return self.batch_examples

    def close(self):
        if self.learner is not None:
            self.learner.close()


def train_curve(task: dict, method: str, seed: int, config: dict) -> dict:
    """Trains to ``config["boss_epochs"]`` Boss epochs, evaluating every half epoch."""
    n = len(task["y_train"])
    run = _Run(task, method, seed, config)
    # Trace outside the timed region. The tracing step trains the Boss too, so it is counted
    # (it was not before: every count but data passes missed one batch).
    boss_examples = run.step()
    curve = []
    seconds, next_eval = 0.0, n // 2
    budget = config["boss_epochs"] * n
    while boss_examples < budget:
        start = time.perf_counter()
        boss_examples += run.step()
        seconds += time.perf_counter() - start
        if boss_examples >= next_eval:
            curve.append(
                {
                    "boss_epochs": boss_examples / n,
                    "data_passes": run.examples_read() / n,
                    "optimizer_steps": run.steps,
                    "examples_computed": run.batch_examples,
                    "examples_trained": boss_examples,
                    "seconds": seconds,
                    "test_accuracy": float(run.accuracy_fn()),
                }
            )
            next_eval += n // 2
    stats = {}
    if run.learner is not None:
        run.learner.wait_until_idle()  # after timing: report what the learner finally did
        stats = {**run.learner.stats(), **run.stage.stats()}
    run.close()
    return {"task": task["name"], "method": method, "seed": seed, "curve": curve, "stats": stats}


def measure_throughput(task: dict, config: dict) -> dict:
    """Boss examples/s: plain vs Assistant trained in the step (sync) vs in the thread (async)."""
    modes = {
        "baseline": ("shuffle", "async"),
        "filter_only": ("assistant", "none"),
        "assistant_sync": ("assistant", "sync"),
        "assistant_async": ("assistant", "async"),
    }
    config = {**config, "model": config["throughput_model"]}
    runs = {
        mode: _Run(task, method, 0, config, learner_mode=lm) for mode, (method, lm) in modes.items()
    }
    for run in runs.values():
        for _ in range(5):  # trace and warm up
            run.step()
        if run.learner is not None:
            run.learner.wait_until_idle()
    rates = {mode: [] for mode in modes}
    cpu_rates = {mode: [] for mode in modes}
    for _ in range(config["throughput_rounds"]):
        for mode, run in runs.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            examples = sum(run.step() for _ in range(config["throughput_steps"]))
            if run.learner is not None and mode == "assistant_async":
                # The async mode's CPU cost includes the learner's backlog; its wall time does
                # not wait for it (the Boss never does).
                wall = time.perf_counter() - start
                run.learner.wait_until_idle()
            else:
                wall = time.perf_counter() - start
            rates[mode].append(examples / wall)
            cpu_rates[mode].append(examples / (time.process_time() - cpu_start))
    result = {}
    for mode, run in runs.items():
        result[mode] = {
            "examples_per_second": statistics.median(rates[mode]),
            "examples_per_cpu_second": statistics.median(cpu_rates[mode]),
            "rounds": rates[mode],
            "cpu_rounds": cpu_rates[mode],
        }
        if run.learner is not None:
            result[mode]["learner"] = run.learner.stats()
        run.close()
    base = result["baseline"]["examples_per_second"]
    cpu_base = result["baseline"]["examples_per_cpu_second"]
    for mode in ("filter_only", "assistant_sync", "assistant_async"):
        result[mode]["overhead"] = 1 - result[mode]["examples_per_second"] / base
        result[mode]["cpu_overhead"] = 1 - result[mode]["examples_per_cpu_second"] / cpu_base
    return result


def first_reaching(curve: list[dict], target: float) -> dict | None:
    """The first point of ``curve`` at or above ``target`` test accuracy, else None."""
    return harness.first_reaching([(point, point["test_accuracy"]) for point in curve], target)


COUNTS = ("optimizer_steps", "examples_computed", "boss_epochs", "data_passes", "seconds")
HEADLINE_UNITS = {"steps": "optimizer_steps", "epochs": "boss_epochs", "passes": "data_passes"}


def summarize(runs: list[dict]) -> dict:
    """Per task and method: epochs/passes/seconds to target (mean, std, worst), final accuracy.

    ``<count>_saved_vs_shuffle`` compares means over seeds (ratios of means);
    ``<count>_paired_vs_shuffle`` is the method's count over shuffling's seed by seed
    (``harness.paired``, over the seeds both reached the target; < 1 = fewer), which the
    headline reads.
    """
    summary = {}
    for task in sorted({r["task"] for r in runs}):
        baseline = [r for r in runs if r["task"] == task and r["method"] == "shuffle"]
        target = 0.99 * min(max(p["test_accuracy"] for p in r["curve"]) for r in baseline)
        summary[task] = {"target_accuracy": target, "methods": {}}
        base_hits = {r["seed"]: first_reaching(r["curve"], target) for r in baseline}
        for method in METHODS:
            chosen = [r for r in runs if r["task"] == task and r["method"] == method]
            if not chosen:
                continue
            hits = [first_reaching(r["curve"], target) for r in chosen]
            reached = [h for h in hits if h is not None]
            entry = {
                "seeds_reaching_target": len(reached),
                "seeds": len(chosen),
                # Mean accuracy over the last quarter of the budget: "final accuracy".
                "final_accuracy": float(
                    np.mean(
                        [
                            np.mean(
                                [
                                    p["test_accuracy"]
                                    for p in r["curve"][-max(1, len(r["curve"]) // 4) :]
                                ]
                            )
                            for r in chosen
                        ]
                    )
                ),
            }
            for key in COUNTS:
                values = [h[key] for h in reached]
                entry[f"{key}_to_target"] = float(np.mean(values)) if values else None
                entry[f"{key}_to_target_std"] = float(np.std(values)) if values else None
                entry[f"{key}_paired_vs_shuffle"] = harness.paired(
                    base_hits,
                    {r["seed"]: hit for r, hit in zip(chosen, hits, strict=True)},
                    lambda base, mine, key=key: (
                        mine[key] / base[key] if base and mine and base[key] and mine[key] else None
                    ),
                )
            summary[task]["methods"][method] = entry
        base = summary[task]["methods"]["shuffle"]
        for entry in summary[task]["methods"].values():
            for key in COUNTS:
                value, reference = entry[f"{key}_to_target"], base[f"{key}_to_target"]
                entry[f"{key}_saved_vs_shuffle"] = (
                    None if value is None or not reference else 1 - value / reference
                )
    return summary


def figures(summary: dict, by: str = "paired") -> dict:
    """Ratios to plain shuffling (the method's count to target over shuffle's; < 1 = fewer).

    ``by="paired"`` (the headline): each a ``harness.paired`` result, the ratio seed by seed
    averaged geometrically (``<count>_paired_vs_shuffle``); ``by="means"``: mean to target over
    shuffle's mean. Keys of the main task (``mnist1d``, else the first) are bare
    (``shrinking_steps_vs_shuffle``), the others' are prefixed with the task
    (``digits_shrinking_steps_vs_shuffle``); null unless every seed reached the target.
    """
    main = "mnist1d" if "mnist1d" in summary else next(iter(summary))
    result = {}
    for task, block in summary.items():
        prefix = "" if task == main else f"{task}_"
        base = block["methods"]["shuffle"]
        for method, entry in block["methods"].items():
            if method == "shuffle":
                continue
            complete = entry["seeds_reaching_target"] == entry["seeds"] and (
                base["seeds_reaching_target"] == base["seeds"]
            )
            for unit, key in HEADLINE_UNITS.items():
                value, reference = entry[f"{key}_to_target"], base[f"{key}_to_target"]
                figure = None
                if complete and value is not None and reference:
                    paired = entry[f"{key}_paired_vs_shuffle"]
                    figure = paired if by == "paired" else value / reference
                result[f"{prefix}{method}_{unit}_vs_shuffle"] = figure
    return result


def headline(summary: dict) -> dict:
    """``figures``' paired geometric means: the figures the issue and RESULTS.md read."""
    return harness.paired_headline(figures(summary))[0]


def headline_sections(summary: dict) -> dict:
    """The headline, its spread over seeds and the ratios of means, as the JSON stores them."""
    return harness.headline_sections(figures(summary), figures(summary, by="means"))


def recompute(stored: dict) -> dict:
    """A stored results file's summary and headline, re-derived from its ``runs``."""
    summary = summarize(stored["runs"])
    return {**headline_sections(summary), "summary": summary}


def markdown(summary: dict, throughput: dict) -> str:
    def cell(value, std=None, digits=1):
        if value is None:
            return "not reached"
        return f"{value:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")

    def percent(value):
        return "–" if value is None else f"{100 * value:+.0f}%"

    lines = [
        "| task (target acc) | method | reached | optimizer steps to target | saved "
        "| Boss epochs to target | saved | data passes to target "
        "| saved | seconds to target | saved | final acc |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, block in summary.items():
        for method, e in block["methods"].items():
            lines.append(
                f"| {task} ({100 * block['target_accuracy']:.1f}%) | {method} "
                f"| {e['seeds_reaching_target']}/{e['seeds']} "
                f"| {cell(e['optimizer_steps_to_target'], e['optimizer_steps_to_target_std'], 0)} "
                f"| {percent(e['optimizer_steps_saved_vs_shuffle'])} "
                f"| {cell(e['boss_epochs_to_target'], e['boss_epochs_to_target_std'])} "
                f"| {percent(e['boss_epochs_saved_vs_shuffle'])} "
                f"| {cell(e['data_passes_to_target'], e['data_passes_to_target_std'])} "
                f"| {percent(e['data_passes_saved_vs_shuffle'])} "
                f"| {cell(e['seconds_to_target'], e['seconds_to_target_std'])} "
                f"| {percent(e['seconds_saved_vs_shuffle'])} "
                f"| {100 * e['final_accuracy']:.1f}% |"
            )
    lines += [
        "",
        "| throughput mode | Boss examples/s (median) | overhead vs baseline "
        "| Boss examples per CPU-second | CPU overhead |",
        "|---|---|---|---|---|",
    ]
    for mode, entry in throughput.items():
        lines.append(
            f"| {mode} | {entry['examples_per_second']:.0f} | {percent(entry.get('overhead'))} "
            f"| {entry['examples_per_cpu_second']:.0f} | {percent(entry.get('cpu_overhead'))} |"
        )
    return "\n".join(lines)


def plot(runs: list[dict], summary: dict, throughput: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(summary)
    figure, axes = plt.subplots(1, len(tasks) + 1, figsize=(5 * (len(tasks) + 1), 4))
    for axis, task in zip(axes, tasks, strict=False):
        for method in METHODS:
            chosen = [r for r in runs if r["task"] == task and r["method"] == method]
            if not chosen:
                continue
            length = min(len(r["curve"]) for r in chosen)
            x = np.mean([[p["optimizer_steps"] for p in r["curve"][:length]] for r in chosen], 0)
            y = np.mean([[p["test_accuracy"] for p in r["curve"][:length]] for r in chosen], 0)
            axis.plot(x, y, label=method)
        axis.axhline(summary[task]["target_accuracy"], color="gray", linestyle=":", label="target")
        axis.set(title=task, xlabel="Boss optimizer steps", ylabel="test accuracy (mean of seeds)")
        axis.legend()
    modes = list(throughput)
    axes[-1].bar(modes, [throughput[m]["examples_per_second"] for m in modes])
    axes[-1].set(title="Boss throughput", ylabel="examples/s")
    axes[-1].tick_params(axis="x", labelrotation=20)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


CONFIGS = {
    "default": {
        "tasks": ("mnist1d", "digits"),
        "seeds": (0, 1, 2),
        "model": "mnist1d_mlp",
        "batch_size": 32,
        "learning_rate": 1e-3,
        "boss_epochs": {"mnist1d": 24, "digits": 10},
        "throughput_model": "mnist1d_cnn",
        "throughput_steps": 60,
        "throughput_rounds": 8,
    },
    "quick": {
        "tasks": ("mnist1d",),
        "seeds": (0,),
        "model": "mnist1d_mlp",
        "batch_size": 32,
        "learning_rate": 1e-3,
        "boss_epochs": {"mnist1d": 1, "digits": 1},
        "throughput_model": "mnist1d_mlp",
        "throughput_steps": 5,
        "throughput_rounds": 1,
    },
}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny run (seconds), for tests")
    parser.add_argument("--output", type=Path, default=RESULTS, help="directory for JSON + PNG")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3)")
    parser.add_argument("--tasks", nargs="+", default=None, help="subset of mnist1d, digits")
    parser.add_argument("--methods", nargs="+", default=None, help=f"subset of {METHODS}")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args(argv)
    config = dict(CONFIGS["quick" if args.quick else "default"])
    if args.seeds:
        config["seeds"] = tuple(range(args.seeds))
    if args.tasks:
        config["tasks"] = tuple(args.tasks)
    methods = tuple(args.methods or METHODS)
    # 2 cores here; fewer inter-op threads than TF's default keep the timings steadier. If TF is
    # already initialised (called from a test process), keep its setting.
    with contextlib.suppress(RuntimeError):
        tf.config.threading.set_inter_op_parallelism_threads(2)
    started = time.perf_counter()
    runs = []
    for task_name in config["tasks"]:
        task = load_task(task_name, args.quick)
        for seed in config["seeds"]:
            for method in methods:
                cfg = {**config, "boss_epochs": config["boss_epochs"][task_name]}
                runs.append(train_curve(task, method, seed, cfg))
                last = runs[-1]["curve"][-1]
                print(
                    f"{task_name} {method} seed={seed}: acc {last['test_accuracy']:.3f} after "
                    f"{last['optimizer_steps']} steps, {last['boss_epochs']:.1f} Boss epochs, "
                    f"{last['data_passes']:.1f} passes, "
                    f"{last['seconds']:.1f}s",
                    file=sys.stderr,
                )
    throughput = (
        {} if args.skip_throughput else measure_throughput(load_task("mnist1d", args.quick), config)
    )
    summary = summarize(runs)
    sections = headline_sections(summary)
    result = harness.write_results(
        args.output / "autoassist.json",
        headline=sections.pop("headline"),
        command="python benchmarks/autoassist.py " + " ".join(argv or sys.argv[1:]),
        **sections,
        config={**config, "base_prob": BASE_PROB, "threshold_decay": THRESHOLD_DECAY},
        total_seconds=time.perf_counter() - started,
        summary=summary,
        throughput=throughput,
        runs=runs,
        # Learner threads still alive (0 when every run closed its learner). Not
        # threading.active_count(): TensorFlow's own threads that call back into Python register
        # as dummy threads, and how many do depends on scheduling.
        learner_threads_at_exit=sum(
            thread.name == "assistant_learner" for thread in threading.enumerate()
        ),
    )
    plot(runs, summary, throughput, args.output / "autoassist.png")
    print(markdown(summary, throughput))
    print(json.dumps(result["headline"], indent=1))
    return result


if __name__ == "__main__":
    main()
