"""Keras ``model.fit`` on a throttled pipeline: no echo vs AutoEcho vs a fixed factor; diagnose's R.

Run::

    python benchmarks/keras_fit.py           # ~4 min: 3 seeds x 7 methods
    python benchmarks/keras_fit.py --quick   # seconds; what tests/benchmarks runs

Writes ``benchmarks/results/keras_fit.json`` and ``keras_fit.png``, prints a markdown table.

Workload: scikit-learn's digits (8x8 images, 1437 train / 360 test) and a small CNN trained with
plain ``model.fit`` (SGD with momentum, batch 32), fed by a pipeline whose every fresh batch
sleeps ``--delay`` seconds (a slow disk or network standing in). The model augments its
training inputs with random 1-pixel shifts (``--no-augment``: none), so every echoed copy is
a new view. Methods, same model and seeds:

* ``baseline``: no echo;
* ``auto``: ``echoing.AutoEcho`` driven by ``echoing.keras.AutoEchoCallback``, echoing examples:
  the slow batches are unbatched, echoed, shuffled (a buffer of ``--shuffle-buffer``) and
  batched again, so that an example's copies land in different batches (the paper's example
  echoing with shuffling after echo);
* ``auto_start``: the same, starting from the factor ``echoing.diagnose`` recommends instead
  of 1 (``AutoEcho(initial_factor=...)``);
* ``fixed``: the same pipeline with ``echoing.echo(e)``, e = the factor ``echoing.diagnose``
  recommends for this pipeline and model;
* ``auto_batch`` and ``fixed_batch``: the same two with batch echoing (``echo`` after ``batch()``,
  every copy of a batch in a row), an ablation;
* ``pruned``: no echo; ``echoing.loss_prune`` (InfoBatch, prune ratio 0.5) drops examples
  after the slow read, fed by ``echoing.keras.LossFeedback`` (each step's own losses).

The baseline and pruning train ``--epochs`` x ``--steps-per-epoch`` steps, the echoing methods
``--echo-steps-scale`` (2) times as many (echoed examples are worth less than fresh ones, so at
equal steps echo ends below the baseline: time to target is what is compared), each with SGD +
momentum on a cosine schedule to 0 over its own steps (the peak rate tuned per method over
``--lrs`` by seed 0's final accuracy, so each method, the baseline included, runs at its best);
test accuracy is measured after every epoch of ``--steps-per-epoch`` steps, outside the timed
training. Target: the worst baseline seed's final accuracy (every baseline seed reaches it); the
JSON also has the speedups to 99% of it (``early_target_speedups``), which the baseline reaches
in its first few epochs.

Headline (``keras_fit.json``): ``autoecho_fit_speedup`` = the baseline's train seconds to the
target / ``auto``'s, seed by seed, averaged geometrically (``harness.paired``; its range is in
``headline_spread``, the ratio of mean seconds in ``headline_ratio_of_means``; null unless every
seed of both reached it); ``fixed_echo_fit_speedup``,
``autoecho_from_diagnosis_fit_speedup``, ``autoecho_batch_fit_speedup``,
``fixed_batch_echo_fit_speedup`` and ``pruning_fit_speedup`` likewise; ``diagnose_R_error`` =
|R from ``echoing.diagnose`` - R from timing the pipeline and a cached-batch step apart| / the
latter.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import harness
import keras
import numpy as np
import tensorflow as tf

import echoing

RESULTS = harness.RESULTS
METHODS = ("baseline", "auto", "auto_start", "fixed", "auto_batch", "fixed_batch", "pruned")


def load_digits() -> dict:
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    digits = sklearn_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.2, random_state=0, stratify=digits.target
    )
    return {"x": x_train, "y": y_train, "x_test": x_test, "y_test": y_test}


def throttled_batches(
    data: dict, seed: int, batch_size: int, delay: float, with_ids: bool = False
) -> tf.data.Dataset:
    """Shuffled, repeated ``(x, y[, id])`` batches; each sleeps ``delay`` s (a slow upstream)."""

    def slow(x):
        time.sleep(delay)
        return x

    def throttle(x, *rest):
        return (tf.ensure_shape(tf.py_function(slow, [x], tf.float32), x.shape), *rest)

    n = len(data["y"])
    columns = (data["x"], data["y"]) + ((np.arange(n),) if with_ids else ())
    return (
        tf.data.Dataset.from_tensor_slices(columns)
        .shuffle(n, seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(batch_size, drop_remainder=True)
        .map(throttle)
    )


def build_model(seed: int, args, epochs: int | None = None) -> keras.Model:
    """The CNN, compiled with SGD + momentum on a cosine schedule to 0 over the run's steps (so
    that every run ends at a settled accuracy, not on a noisy plateau)."""
    keras.utils.set_random_seed(seed)
    # Random 1-pixel shifts, in the model (on the accelerator, as Keras users augment): every
    # copy an echo stage makes is augmented apart, the paper's echoing before augmentation.
    augment = (
        [keras.layers.RandomTranslation(0.125, 0.125, fill_mode="constant", seed=seed)]
        if args.augment
        else []
    )
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            *augment,
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        keras.optimizers.SGD(
            keras.optimizers.schedules.CosineDecay(
                args.learning_rate,
                decay_steps=(epochs or args.epochs) * args.steps_per_epoch,
            ),
            momentum=0.9,
        ),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


class Curve(keras.callbacks.Callback):
    """Test accuracy after every epoch, against train seconds (evaluation not timed)."""

    def __init__(self, data: dict, net: keras.Model):
        super().__init__()
        self.data, self.net, self.points, self.seconds = data, net, [], 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds += time.perf_counter() - self._start
        logits = self.net.predict(self.data["x_test"], batch_size=360, verbose=0)
        accuracy = float(np.mean(np.argmax(logits, 1) == self.data["y_test"]))
        factor = (logs or {}).get("echo_factor")
        self.points.append(
            {
                "epoch": epoch + 1,
                "seconds": self.seconds,
                "test_accuracy": accuracy,
                "echo_factor": factor,
            }
        )


def echoed(batches: tf.data.Dataset, stage, by_example: bool, seed: int, args) -> tf.data.Dataset:
    """``batches`` through an echo stage: after ``batch()``, or on examples with a shuffle after."""
    if not by_example:
        return batches.apply(stage)
    examples = batches.unbatch().apply(stage).shuffle(args.shuffle_buffer, seed=seed)
    return examples.batch(args.batch_size, drop_remainder=True)


def pruned(data: dict, seed: int, args) -> tuple[tf.data.Dataset, keras.Model, keras.Model]:
    """InfoBatch-style pruning after the slow read; the model reporting its losses by id, and
    the network it trains."""
    n = len(data["y"])
    table = echoing.LossTable(n)
    steps = args.epochs * args.steps_per_epoch
    stage = echoing.loss_prune(
        table, num_epochs=math.ceil(steps * args.batch_size / n), prune_ratio=0.5, seed=seed
    )
    examples = throttled_batches(data, seed, args.batch_size, args.delay, with_ids=True).unbatch()
    examples = examples.map(lambda x, y, i: {"inputs": x, "label": y, "id": i}).apply(stage)
    batches = examples.batch(args.batch_size, drop_remainder=True)
    net = build_model(seed, args)
    model = echoing.keras.LossFeedback(
        net,
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None
        ),
        observers=[table.update],
    )
    model.compile(net.optimizer, net.loss, metrics=["accuracy"])
    return batches.map(echoing.keras.fit_inputs).prefetch(2), model, net


def echo_pipeline(method: str, data: dict, seed: int, args, factor: float) -> tuple:
    """The throttled batches for ``method`` (no echo, AutoEcho or a fixed factor), and callbacks."""
    batches = throttled_batches(data, seed, args.batch_size, args.delay)
    by_example = not method.endswith("_batch")
    if method.startswith("auto"):
        start = min(max(factor, 1.0), args.max_echo) if method == "auto_start" else 1.0
        auto = echoing.AutoEcho(max_factor=args.max_echo, initial_factor=start)
        stamp = echoing.keras.AutoEchoCallback(auto)
        train_set = echoed(batches, auto.echo(), by_example, seed, args)
        return train_set.prefetch(2).apply(stamp.stamp), [stamp]
    if method.startswith("fixed"):
        return echoed(batches, echoing.echo(factor), by_example, seed, args).prefetch(2), []
    return batches.prefetch(2), []


def run_epochs(method: str, args) -> int:
    """Epochs of ``--steps-per-epoch`` steps: echoing methods get ``--echo-steps-scale`` times
    the baseline's, since an echoed example is worth less than a fresh one (the paper compares
    time to target, letting echo take more, cheaper steps)."""
    if method in ("baseline", "pruned"):
        return args.epochs
    return max(1, round(args.epochs * args.echo_steps_scale))


def train(data: dict, method: str, seed: int, args, factor: float) -> dict:
    callbacks = []
    if method == "pruned":
        train_set, model, net = pruned(data, seed, args)
    else:
        model = net = build_model(seed, args, run_epochs(method, args))
        train_set, callbacks = echo_pipeline(method, data, seed, args, factor)
    curve = Curve(data, net)
    model.fit(
        train_set,
        steps_per_epoch=args.steps_per_epoch,
        epochs=run_epochs(method, args),
        callbacks=[*callbacks, curve],  # AutoEcho's first: the epoch logs carry its factor
        verbose=0,
    )
    return {"method": method, "seed": seed, "curve": curve.points}


def tune_learning_rate(data: dict, args, method: str, factor: float) -> tuple[float, list[dict]]:
    """``method``'s best peak learning rate over ``args.lrs`` (seed 0, final accuracy): each
    method, the baseline included, is compared at its best. One rate given: no sweep."""
    if len(args.lrs) == 1:
        return args.lrs[0], []
    sweep = []
    for learning_rate in args.lrs:
        trial = argparse.Namespace(**{**vars(args), "learning_rate": learning_rate})
        curve = train(data, method, 0, trial, factor)["curve"]
        sweep.append({"learning_rate": learning_rate, "final": curve[-1]["test_accuracy"]})
    best = max(sweep, key=lambda trial: trial["final"])
    return best["learning_rate"], sweep


def measure_r(data: dict, args) -> dict:
    """R from ``echoing.diagnose``, and from timing the two sides apart by hand."""
    model = build_model(0, args)
    batches = throttled_batches(data, 0, args.batch_size, args.delay)
    report = echoing.diagnose(batches, model, num_steps=args.timing_steps)
    iterator = iter(batches)
    next(iterator)
    start = time.perf_counter()
    for _ in range(args.timing_steps):
        next(iterator)
    upstream = (time.perf_counter() - start) / args.timing_steps
    x, y = next(iterator)
    model.train_on_batch(x, y)  # traces
    start = time.perf_counter()
    for _ in range(args.timing_steps):
        model.train_on_batch(x, y)
    downstream = (time.perf_counter() - start) / args.timing_steps
    reference = upstream / downstream
    return {
        "diagnose": report,
        "apart": {
            "upstream_seconds": upstream,
            "downstream_seconds": downstream,
            "ratio": reference,
        },
        "relative_error": abs(report["ratio"] - reference) / reference,
    }


def summarize(runs: list[dict], fraction: float = 1.0) -> dict:
    """Per method, seconds to ``fraction`` x the worst baseline seed's final accuracy.

    ``seconds_to_target`` is the mean over seeds when every seed reached the target (ratios of
    these means are ``headline_ratio_of_means``); ``paired_speedup`` is the baseline's seconds
    over the method's seed by seed (``harness.paired``), which the headline reads.
    """
    baseline = [r for r in runs if r["method"] == "baseline"]
    target = fraction * min(r["curve"][-1]["test_accuracy"] for r in baseline)
    summary = {"target_accuracy": target, "methods": {}}

    def seconds_to_target(run: dict) -> float | None:
        curve = [(p["seconds"], p["test_accuracy"]) for p in run["curve"]]
        return harness.first_reaching(curve, target)

    baseline_seconds = {r["seed"]: seconds_to_target(r) for r in baseline}
    for method in METHODS:
        chosen = [r for r in runs if r["method"] == method]
        hits = [seconds_to_target(r) for r in chosen]
        reached = [h for h in hits if h is not None]
        complete = bool(chosen) and len(reached) == len(chosen)
        summary["methods"][method] = {
            "seeds": len(chosen),
            "seeds_reaching_target": len(reached),
            "seconds_to_target": float(np.mean(reached)) if complete else None,
            "seconds_to_target_std": float(np.std(reached)) if complete else None,
            "paired_speedup": harness.paired(
                {s: v for s, v in baseline_seconds.items() if v is not None},
                {r["seed"]: h for r, h in zip(chosen, hits, strict=True) if h is not None},
                lambda base, mine: base / mine,
            ),
            "final_accuracy": float(np.mean([r["curve"][-1]["test_accuracy"] for r in chosen])),
            "train_seconds": float(np.mean([r["curve"][-1]["seconds"] for r in chosen])),
            "final_echo_factor": (
                float(np.mean([r["curve"][-1]["echo_factor"] for r in chosen]))
                if method.startswith("auto")
                else None
            ),
        }
    return summary


SPEEDUPS = {
    "autoecho_fit_speedup": "auto",
    "autoecho_from_diagnosis_fit_speedup": "auto_start",
    "fixed_echo_fit_speedup": "fixed",
    "autoecho_batch_fit_speedup": "auto_batch",
    "fixed_batch_echo_fit_speedup": "fixed_batch",
    "pruning_fit_speedup": "pruned",
}


def figures(summary: dict, r_measurement: dict, by: str = "paired") -> dict:
    """The headline's figures: per method its ``paired_speedup`` (``by="paired"``, the
    ``harness.paired`` result) or the ratio of mean seconds (``by="means"``); None unless every
    seed of both the baseline and the method reached the target."""
    methods = summary["methods"]

    def speedup(method):
        slow, fast = methods["baseline"]["seconds_to_target"], methods[method]["seconds_to_target"]
        if not (slow and fast):
            return None
        return methods[method]["paired_speedup"] if by == "paired" else slow / fast

    result = {key: speedup(method) for key, method in SPEEDUPS.items()}
    result["diagnose_R_error"] = float(r_measurement["relative_error"])
    return result


def headline(summary: dict, r_measurement: dict) -> dict:
    """``figures``' paired geometric means: the figures the issue and RESULTS.md read."""
    return harness.paired_headline(figures(summary, r_measurement))[0]


def headline_sections(summary: dict, r_measurement: dict) -> dict:
    """The headline, its spread over seeds and the ratios of means, as the JSON stores them."""
    by_means = figures(summary, r_measurement, by="means")
    return harness.headline_sections(
        figures(summary, r_measurement), {key: by_means[key] for key in SPEEDUPS}
    )


def recompute(stored: dict) -> dict:
    """A stored results file's summaries and headlines, re-derived from its ``runs``."""
    summary, early = summarize(stored["runs"]), summarize(stored["runs"], 0.99)
    return {
        **headline_sections(summary, stored["diagnosis"]),
        "early_target_speedups": headline(early, stored["diagnosis"]),
        "summary": summary,
        "early_target_summary": early,
    }


def markdown(summary: dict, factor: float) -> str:
    lines = [
        f"target {100 * summary['target_accuracy']:.1f}%; fixed factor {factor:.2f} (diagnose)",
        "",
        "| method | final acc | train s | s to target | reached | final factor |",
        "|---|---|---|---|---|---|",
    ]
    for method, e in summary["methods"].items():
        to_target, spread = e["seconds_to_target"], e["seconds_to_target_std"]
        final_factor = e["final_echo_factor"]
        reached = "–" if to_target is None else f"{to_target:.1f} ± {spread:.1f}"
        lines.append(
            f"| {method} | {100 * e['final_accuracy']:.1f}% | {e['train_seconds']:.1f} | "
            f"{reached} | {e['seeds_reaching_target']}/{e['seeds']} | "
            f"{'–' if final_factor is None else f'{final_factor:.2f}'} |"
        )
    return "\n".join(lines)


def plot(runs: list[dict], summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    colors = {
        "baseline": "tab:blue",
        "auto": "tab:red",
        "auto_start": "tab:brown",
        "fixed": "tab:green",
        "auto_batch": "tab:orange",
        "fixed_batch": "tab:olive",
        "pruned": "tab:purple",
    }
    for run in runs:
        label = run["method"] if run["seed"] == 0 else None
        x = [p["seconds"] for p in run["curve"]]
        y = [100 * p["test_accuracy"] for p in run["curve"]]
        axis.plot(x, y, color=colors[run["method"]], label=label, alpha=0.8)
    axis.axhline(100 * summary["target_accuracy"], color="gray", linestyle=":")
    axis.set(
        xlabel="train seconds",
        ylabel="test accuracy (%)",
        title="model.fit on a throttled pipeline: echo, AutoEcho, pruning, none",
    )
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per fresh batch")
    parser.add_argument(
        "--lrs", default="0.02,0.05,0.1", help="peak learning rates tried for the baseline"
    )
    parser.add_argument(
        "--augment",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="random 1-pixel shifts in the model (training only)",
    )
    parser.add_argument("--max-echo", type=float, default=8.0)
    parser.add_argument(
        "--echo-steps-scale", type=float, default=2.0, help="echo runs' steps / baseline's"
    )
    parser.add_argument("--shuffle-buffer", type=int, default=256, help="after example echo")
    parser.add_argument("--timing-steps", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds")
    parser.add_argument("--output", type=Path, default=RESULTS / "keras_fit.json")
    args = parser.parse_args(argv)
    args.lrs = [float(lr) for lr in args.lrs.split(",")]
    if args.quick:
        args.seeds, args.epochs, args.steps_per_epoch, args.timing_steps = 1, 2, 10, 5
        args.lrs = args.lrs[:1]
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    data = load_digits()
    args.learning_rate = args.lrs[0]  # measure_r's model; each method's rate is tuned below
    r_measurement = measure_r(data, args)
    factor = r_measurement["diagnose"]["echo_factor"]
    print(echoing.format_diagnosis(r_measurement["diagnose"]), flush=True)
    method_args, sweeps = {}, {}
    for method in METHODS:
        learning_rate, sweeps[method] = tune_learning_rate(data, args, method, factor)
        method_args[method] = argparse.Namespace(**{**vars(args), "learning_rate": learning_rate})
        print(f"{method}: learning rate {learning_rate} (seed 0: {sweeps[method]})", flush=True)
    runs = []
    for seed in range(args.seeds):
        for method in METHODS:
            run = train(data, method, seed, method_args[method], factor)
            last = run["curve"][-1]
            print(
                f"seed {seed} {method:11s} {last['seconds']:6.1f} s "
                f"acc {100 * last['test_accuracy']:.1f}%",
                flush=True,
            )
            runs.append(run)
    summary = summarize(runs)
    # An early target too (99% of it), which the baseline reaches in its first epochs.
    early = summarize(runs, 0.99)
    sections = headline_sections(summary, r_measurement)
    result = harness.write_results(
        args.output,
        headline=sections.pop("headline"),
        command="python benchmarks/keras_fit.py " + " ".join(argv or sys.argv[1:]),
        **sections,
        early_target_speedups=headline(early, r_measurement),
        config={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        learning_rates={method: method_args[method].learning_rate for method in METHODS},
        learning_rate_sweeps=sweeps,
        diagnosis=r_measurement,
        summary=summary,
        early_target_summary=early,
        runs=runs,
    )
    plot(runs, summary, args.output.with_suffix(".png"))
    print(markdown(summary, factor))
    print(json.dumps(result["headline"], indent=1))
    return result


if __name__ == "__main__":
    main()
