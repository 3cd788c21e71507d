"""Selection side by side: loss-table pruning against the full data at its best, same workload.

A user's own loop: each method trains in a loop written here over the public library API
(``echoing.loss_prune``, ``echoing.select_rows``, the Assistants), as a user's training code
would, not through the training binary.

Run::

    python benchmarks/selection.py           # MNIST-1D 40k/10k, 1-D CNN, 4 sweeps, 3 seeds: ~30 min
    python benchmarks/selection.py --quick   # seconds; what tests/benchmarks runs
    python benchmarks/selection.py --resummarize benchmarks/results/selection.json  # no training

Writes ``benchmarks/results/selection.json`` and ``selection.png``, prints a markdown table.

Methods, with the same model (``trainers.models`` ``mnist1d_cnn``), SGD with Nesterov momentum,
batch size, seeds and a learning rate indexed by the fraction of the run's *epochs* done (so a
method that takes fewer steps per epoch decays on the same curve, InfoBatch's set-up): a linear
warm-up over ``--warmup-epochs``, then cosine decay to 0. Without the warm-up, the peak rate
from step 0 sent some seeds of every method to 30-60% accuracy after the first epoch, and the
baseline's seeds then differed 2.7x in time to the target.

* ``full``: every example every epoch, ``--epochs`` epochs.
* ``prune``: ``echoing.loss_prune`` (r = 0.5, δ = 0.125) on an ``echoing.LossTable`` that the
  train step itself updates with the per-example losses it computes; ``--epochs`` epochs.
* ``short``: the fair comparison: the full data with its schedule shortened to the steps the
  pruned run of the same seed took (the baseline given pruning's budget, tuned the same).
* ``select``: in-batch selection (the trainer's ``echoing.techniques.InBatchSelection``):
  batches of ``--select-pool`` x the batch size are scored by an inference-mode forward pass
  and the step trains on the batch size's worth of rows with the highest loss; ``--epochs``
  epochs (so half the steps at pool 2).
* ``sample``: the same pool and forward pass, but the rows are drawn with probability rising
  with their loss and weighted by 1/p (``mode="sample"``, an unbiased gradient).
* ``assist``, ``assist_boss``, ``assist_boss_forward``, ``assist_oracle``: AutoAssist's filter
  with the raw-feature, the Boss-feature (its learner computing the features, or taking them
  from the Boss's forward pass) and the last-seen-loss Assistant (``selection_assist.py``);
  ``--epochs`` epochs, the last ``--assist-anneal`` of them (default 0, as in the paper) on
  every example, as pruning's last δ.

The learning rate is tuned for ``full`` (seed 0, over ``--lrs``, best final accuracy) and used
by ``short`` and the Assistants; ``--tune-methods`` (``prune``, ``select``, ``sample``) are tuned
the same way on their own, because each trains on a larger gradient than a uniform batch's
(pruning's 1/(1-r) weights, top-k rows, 1/p weights) and at the baseline's best rate, 0.1 with
the warm-up, a seed ended at 10% (prune, sample) or 30% (select). Test accuracy is measured
after every epoch, outside the timed training.

Headline (``selection.json``, floats, null where not reached):

* ``prune_speedup_equal_epochs``: ``full``'s train seconds to the target / ``prune``'s, seed by
  seed, averaged geometrically (``harness.paired``; the range is in ``headline_spread``, the
  ratio of mean seconds in ``headline_ratio_of_means``; null unless every seed reached it), where
  the target is the baseline's final accuracy: the lowest over ``full``'s seeds, so that every
  baseline seed reaches it (accuracy is measured after every epoch);
* ``prune_speedup_vs_short_schedule``: the same, ``short`` over ``prune`` (null if ``short``
  never reaches the target: then pruning buys accuracy the short schedule cannot);
* ``prune_accuracy_delta``: ``prune``'s mean final accuracy minus ``full``'s, in points;
  ``prune_vs_short_accuracy_delta``: minus ``short``'s (the same steps);
* ``prune_step_fraction``: ``prune``'s steps / ``full``'s steps;
* ``select_batch_speedup``: ``full``'s train seconds to the target / ``select``'s;
  ``sample_batch_speedup``: the same for ``sample``;
* ``assist_steps_saved`` (the Boss-feature Assistant: ``assist_boss_forward`` if it ran, else
  ``assist_boss``), ``assist_oracle_steps_saved``,
  ``assist_raw_steps_saved``, ``assist_boss_forward_steps_saved``: 1 - the method's Boss steps
  to the target / ``full``'s; and each Assistant's ``*_overhead``: its time per Boss step over
  ``full``'s, minus 1 (``benchmarks/selection_profile.py`` says where that time goes);
* PGD's (``pgd_steps_speedup_clean``, ``pgd_wall_speedup_clean``) are null here because PGD
  runs on its own clean sets, in ``benchmarks/pgd_clean.py`` (``pgd_clean.json``).
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
from selection_assist import ASSIST_METHODS, AssistMethod  # a sibling script

import echoing
from echoing.techniques import InBatchSelection
from trainers.models import build_model

RESULTS = harness.RESULTS
METHODS = ("full", "prune", "short", "select", "sample", *ASSIST_METHODS)
NOT_BUILT = ("pgd_steps_speedup_clean", "pgd_wall_speedup_clean")


def load_mnist1d(num_samples: int, cache: Path) -> dict:
    """MNIST-1D with ``num_samples`` (80% train), standardised; cached as .npz."""
    path = cache / f"mnist1d_{num_samples}.npz"
    if not path.exists():
        from mnist1d.data import get_dataset_args, make_dataset

        args = get_dataset_args()
        args.num_samples = num_samples
        data = make_dataset(args)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, x=data["x"], y=data["y"], x_test=data["x_test"], y_test=data["y_test"])
    data = np.load(path)
    mean, std = data["x"].mean(0), data["x"].std(0) + 1e-6
    return {
        "x": ((data["x"] - mean) / std).astype(np.float32),
        "y": data["y"].astype(np.int64),
        "x_test": ((data["x_test"] - mean) / std).astype(np.float32),
        "y_test": data["y_test"].astype(np.int64),
    }


class Run:
    """One model, optimizer and train step; ``table`` is updated by the step when given.

    ``step(batch)`` returns ``{"losses": [B]}``, and ``"features"`` (the Assistant's, from
    this forward pass) when ``boss_features`` (an ``echoing.BossFeatures``) is set.
    """

    def __init__(
        self,
        data,
        seed,
        learning_rate,
        table=None,
        selection=None,
        model=None,
        *,
        warmup=0.0,
    ):
        keras.utils.set_random_seed(seed)
        if model is None:
            model = build_model("mnist1d_cnn", data["x"].shape[1:], 10)
        self.model = model
        self.peak = learning_rate
        self.warmup = warmup  # the fraction of the run over which the rate ramps up from 0
        self.optimizer = keras.optimizers.SGD(learning_rate, momentum=0.9, nesterov=True)
        self.table = table
        self.selection = selection  # an echoing InBatchSelection: the rows each step trains on
        self.boss_features = None  # set before the first step, for assist_boss_forward
        self.steps = 0
        self.step = tf.function(self._step, jit_compile=False)

    def set_progress(self, fraction: float) -> None:
        """Linear warm-up, then cosine decay to 0 over the run's epochs, by the fraction done."""
        cosine = 0.5 * (1 + math.cos(math.pi * min(fraction, 1.0)))
        ramp = min(1.0, fraction / self.warmup) if self.warmup > 0 else 1.0
        self.optimizer.learning_rate.assign(self.peak * cosine * ramp)

    def _step(self, batch):
        if self.selection is not None:
            batch = self.selection.select(batch, self._inference_losses, self.optimizer.iterations)
        with tf.GradientTape() as tape:
            if self.boss_features is None:
                logits = self.model(batch["inputs"], training=True)
            else:
                logits, feature_map = self.boss_features.tap(batch["inputs"], training=True)
            losses = keras.losses.sparse_categorical_crossentropy(
                batch["label"], logits, from_logits=True
            )
            loss = tf.reduce_mean(losses * batch.get("sample_weight", 1.0))
        variables = self.model.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        if self.table is not None:
            self.table.update(batch["id"], losses)
        if self.boss_features is None:
            return {"losses": losses}
        return {"losses": losses, "features": self.boss_features.pool(feature_map)}

    def _inference_losses(self, batch):
        logits = self.model(batch["inputs"], training=False)
        return keras.losses.sparse_categorical_crossentropy(
            batch["label"], logits, from_logits=True
        )

    def accuracy(self, data: dict) -> float:
        logits = self.model.predict(data["x_test"], batch_size=1000, verbose=0)
        return float(np.mean(np.argmax(logits, 1) == data["y_test"]))


def quick_options(dataset: tf.data.Dataset, args) -> tf.data.Dataset:
    """``dataset``; in a --quick run, without tf.data's autotuner, whose teardown can wait for
    its next pass each time an epoch's iterator is deleted (iterator_teardown.py)."""
    if not args.quick:
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def train(data: dict, method: str, seed: int, args, learning_rate: float, budget=None) -> dict:
    """One run; ``budget`` (steps) is the short schedule's length. Returns its curve."""
    n = len(data["y"])
    source = tf.data.Dataset.from_tensor_slices(
        {"inputs": data["x"], "label": data["y"], "id": np.arange(n, dtype=np.int64)}
    ).shuffle(n, seed=seed, reshuffle_each_iteration=True)
    table = echoing.LossTable(n) if method == "prune" else None
    selecting = method in ("select", "sample")
    selection = None
    if selecting:  # a batch of pool x batch_size rows, trained on batch_size of them
        mode = "sample" if method == "sample" else "top"
        selection = InBatchSelection(1 / args.select_pool, mode=mode, seed=seed)
    warmup = args.warmup_epochs / args.epochs
    run = Run(data, seed, learning_rate, table, selection, warmup=warmup)
    assist, unfiltered = None, source
    if method in ASSIST_METHODS:
        assist = AssistMethod(
            method, run.model, data, seed, args.assist_base_prob, args.assist_train_every
        )
        run.table = assist.table  # the oracle's, updated by the step; None for the others
        run.boss_features = assist.tap
        source = source.apply(assist.stage)
    if method == "prune":
        stage = echoing.loss_prune(
            table,
            num_epochs=args.epochs,
            prune_ratio=args.prune_ratio,
            anneal_fraction=args.anneal,
            seed=seed,
        )
        source = source.apply(stage)
    batch_size = args.batch_size * (args.select_pool if selecting else 1)
    dataset = quick_options(source.batch(batch_size, drop_remainder=True).prefetch(2), args)
    steps_per_epoch = n // batch_size
    epochs = args.epochs if budget is None else math.ceil(budget / steps_per_epoch)
    total_steps = budget or epochs * steps_per_epoch
    # The Assistants' anneal: the last --assist-anneal of the epochs train on every example,
    # as pruning's last δ does (the filter's learner still gets every batch's losses).
    annealed_from = round(args.epochs * (1 - args.assist_anneal)) if assist else epochs
    curve, seconds = [], 0.0
    for epoch in range(epochs):
        start, epoch_steps = time.perf_counter(), 0
        if epoch == annealed_from:
            dataset = unfiltered.batch(batch_size, drop_remainder=True).prefetch(2)
            dataset = quick_options(dataset, args)
        iterator = iter(dataset)  # deleted after the clock stops: see iterator_teardown.py
        for batch in iterator:
            if budget is not None and run.steps >= budget:
                break
            if method == "prune":
                done = stage.seen_inputs.value() / (args.epochs * n)
            elif epoch >= annealed_from:
                done = (epoch + epoch_steps / steps_per_epoch) / args.epochs
            elif assist is not None:
                done = assist.stage.seen.value() / (args.epochs * n)
            else:
                done = run.steps / total_steps
            run.set_progress(done)
            out = run.step(batch)
            run.steps, epoch_steps = run.steps + 1, epoch_steps + 1
            if assist is not None:
                assist.after_step(batch, out, run.steps)
        seconds += time.perf_counter() - start
        del iterator
        point = {"epoch": epoch + 1, "steps": run.steps, "seconds": seconds}
        curve.append({**point, "test_accuracy": run.accuracy(data)})
    result = {"method": method, "seed": seed, "learning_rate": learning_rate, "curve": curve}
    if assist is not None:
        result["assistant"] = assist.stats()
        assist.close()
    return result


def first_reaching(curve: list[dict], target: float) -> dict | None:
    """The first point of ``curve`` at or above ``target`` test accuracy, else None."""
    return harness.first_reaching([(point, point["test_accuracy"]) for point in curve], target)


def summarize(runs: list[dict]) -> dict:
    """Per method: final accuracy, steps, seconds to the target (mean and std over seeds)."""
    methods = [method for method in METHODS if any(r["method"] == method for r in runs)]
    final = {
        method: [r["curve"][-1]["test_accuracy"] for r in runs if r["method"] == method]
        for method in methods
    }
    target = float(np.min(final["full"]))  # every baseline seed reaches it
    summary = {"target_accuracy": target, "methods": {}}
    for method in methods:
        chosen = [r for r in runs if r["method"] == method]
        hits = [first_reaching(r["curve"], target) for r in chosen]
        reached = [hit["seconds"] for hit in hits if hit is not None]
        complete = len(reached) == len(chosen)
        summary["methods"][method] = {
            "seeds": len(chosen),
            "seeds_reaching_target": len(reached),
            "final_accuracy": float(np.mean(final[method])),
            "final_accuracy_std": float(np.std(final[method])),
            "steps": float(np.mean([r["curve"][-1]["steps"] for r in chosen])),
            "train_seconds": float(np.mean([r["curve"][-1]["seconds"] for r in chosen])),
            "train_seconds_std": float(np.std([r["curve"][-1]["seconds"] for r in chosen])),
            "seconds_to_target": float(np.mean(reached)) if complete else None,
            "seconds_to_target_std": float(np.std(reached)) if complete else None,
            "steps_to_target": (
                float(np.mean([hit["steps"] for hit in hits])) if complete else None
            ),
            "ms_per_step": 1000
            * float(np.mean([r["curve"][-1]["seconds"] / r["curve"][-1]["steps"] for r in chosen])),
            **paired_speedup(runs, method, target),
        }
    if "short" in methods:
        # Pruning against the full data's schedule cut to the same steps, seed by seed.
        summary["prune_vs_short_paired"] = harness.paired(
            seconds_by_seed(runs, "short", target),
            seconds_by_seed(runs, "prune", target),
            lambda short, prune: short / prune,
        )
    return summary


def paired_speedup(runs: list[dict], method: str, target: float) -> dict:
    """``full``'s seconds to the target over ``method``'s, seed by seed (both must reach it).

    The ratio of means over seeds is carried by the slowest baseline seed when seeds differ by
    2-3x in time to the target (they do here: the target is reached a few epochs in, where
    seeds differ most); pairing each seed with the baseline of the same seed, and taking the
    geometric mean of the ratios, is not.
    """
    seconds = {
        name: {
            r["seed"]: hit["seconds"]
            for r in runs
            if r["method"] == name and (hit := first_reaching(r["curve"], target)) is not None
        }
        for name in ("full", method)
    }
    speedup = harness.paired(seconds["full"], seconds[method], lambda full, mine: full / mine)
    if speedup is None:
        return {
            "paired_seeds": 0,
            "paired_speedup": None,
            "paired_speedup_range": None,
            "paired": None,
        }
    return {
        "paired_seeds": len(speedup["seeds"]),
        "paired_speedup": speedup["mean"],
        "paired_speedup_range": [speedup["min"], speedup["max"]],
        "paired": speedup,
    }


def seconds_by_seed(runs: list[dict], method: str, target: float) -> dict[int, float]:
    """Each seed's train seconds to ``target`` for ``method``, over the seeds that reached it."""
    return {
        r["seed"]: hit["seconds"]
        for r in runs
        if r["method"] == method and (hit := first_reaching(r["curve"], target)) is not None
    }


SPEEDUPS = (
    "prune_speedup_equal_epochs",
    "prune_speedup_vs_short_schedule",
    "select_batch_speedup",
    "sample_batch_speedup",
)


def figures(summary: dict, by: str = "paired") -> dict:
    """The headline's figures (the module's docstring lists them); the speed-ups (``SPEEDUPS``)
    are ``harness.paired`` results with ``by="paired"`` (the headline: seed by seed, averaged
    geometrically) or ratios of mean seconds with ``by="means"``; either is null unless every
    seed of both methods reached the target."""
    methods = summary["methods"]

    def speedup(reference: str, method: str = "prune"):
        if reference not in methods or method not in methods:
            return None
        slow, fast = methods[reference]["seconds_to_target"], methods[method]["seconds_to_target"]
        if not (slow and fast):
            return None
        if by != "paired":
            return slow / fast
        if reference == "full":
            return methods[method]["paired"]
        return summary["prune_vs_short_paired"]

    def steps_saved(method: str) -> float | None:
        """1 - the method's Boss steps to the target / the full data's (null if not reached)."""
        if method not in methods or not methods[method]["steps_to_target"]:
            return None
        return 1 - methods[method]["steps_to_target"] / methods["full"]["steps_to_target"]

    def overhead(method: str) -> float | None:
        """Time per Boss step over the full data's, minus 1: the filter's and learner's cost."""
        if method not in methods:
            return None
        return methods[method]["ms_per_step"] / methods["full"]["ms_per_step"] - 1

    learned = "assist_boss_forward" if "assist_boss_forward" in methods else "assist_boss"
    return {
        "prune_speedup_equal_epochs": speedup("full"),
        "prune_speedup_vs_short_schedule": speedup("short"),
        "prune_accuracy_delta": 100
        * (methods["prune"]["final_accuracy"] - methods["full"]["final_accuracy"]),
        # At the same steps: what pruning buys over the short schedule when neither is faster.
        "prune_vs_short_accuracy_delta": (
            100 * (methods["prune"]["final_accuracy"] - methods["short"]["final_accuracy"])
            if "short" in methods
            else None
        ),
        "prune_step_fraction": methods["prune"]["steps"] / methods["full"]["steps"],
        "prune_train_time_fraction": (
            methods["prune"]["train_seconds"] / methods["full"]["train_seconds"]
        ),
        "select_batch_speedup": speedup("full", "select"),
        "sample_batch_speedup": speedup("full", "sample"),
        # The learned Assistant of the paper's section 5.2 (on the Boss's first layer), with its
        # features from the Boss's own forward pass when that was run (the shipped way).
        "assist_steps_saved": steps_saved(learned),
        "assist_oracle_steps_saved": steps_saved("assist_oracle"),
        "assist_raw_steps_saved": steps_saved("assist"),
        "assist_boss_forward_steps_saved": steps_saved("assist_boss_forward"),
        "assist_overhead": overhead(learned),
        "assist_oracle_overhead": overhead("assist_oracle"),
        "assist_raw_overhead": overhead("assist"),
        "assist_boss_forward_overhead": overhead("assist_boss_forward"),
        **dict.fromkeys(NOT_BUILT),
    }


def headline(summary: dict) -> dict:
    """``figures``' paired geometric means: the figures the issue and RESULTS.md read."""
    return harness.paired_headline(figures(summary))[0]


def headline_sections(summary: dict) -> dict:
    """The headline, its speed-ups' spread over seeds (``headline_spread``) and the same
    speed-ups as ratios of mean seconds (``headline_ratio_of_means``)."""
    headline_figures, spread = harness.paired_headline(figures(summary))
    by_means = figures(summary, by="means")
    return {
        "headline": headline_figures,
        "headline_spread": spread,
        "headline_ratio_of_means": {key: by_means[key] for key in SPEEDUPS},
    }


def recompute(stored: dict) -> dict:
    """A stored results file's summary and headline, re-derived from the ``runs`` it holds."""
    summary = summarize(stored["runs"])
    return {**headline_sections(summary), "summary": summary}


def markdown(summary: dict) -> str:
    lines = [
        f"target: {100 * summary['target_accuracy']:.2f}% (the worst full seed's final accuracy)",
        "",
        "| method | final acc (%) | steps | train s | ms/step | steps to target "
        "| s to target | reached | paired speed-up (range) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, entry in summary["methods"].items():
        to_target, steps_to = entry["seconds_to_target"], entry["steps_to_target"]
        lines.append(
            f"| {method} | {100 * entry['final_accuracy']:.2f} ± "
            f"{100 * entry['final_accuracy_std']:.2f} | {entry['steps']:.0f} | "
            f"{entry['train_seconds']:.1f} ± {entry['train_seconds_std']:.1f} | "
            f"{entry['ms_per_step']:.1f} | {'–' if steps_to is None else f'{steps_to:.0f}'} | "
            f"{'–' if to_target is None else f'{to_target:.1f}'} | "
            f"{entry['seeds_reaching_target']}/{entry['seeds']} | {_paired(entry)} |"
        )
    return "\n".join(lines)


def _paired(entry: dict) -> str:
    if entry["paired_speedup"] is None:
        return "–"
    low, high = entry["paired_speedup_range"]
    return f"{entry['paired_speedup']:.2f}x ({low:.2f}-{high:.2f}, {entry['paired_seeds']} seeds)"


def plot(runs: list[dict], summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {
        "full": "tab:blue",
        "prune": "tab:red",
        "short": "tab:green",
        "select": "tab:purple",
        "sample": "tab:pink",
        "assist": "tab:orange",
        "assist_boss": "tab:brown",
        "assist_boss_forward": "tab:olive",
        "assist_oracle": "tab:gray",
    }
    panels = list(zip(axes, ("seconds", "epoch"), ("train seconds", "epoch"), strict=True))
    for run in runs:
        label = run["method"] if run["seed"] == runs[0]["seed"] else None
        accuracy = [100 * p["test_accuracy"] for p in run["curve"]]
        for axis, key, _ in panels:
            x = [p[key] for p in run["curve"]]
            axis.plot(x, accuracy, color=colors[run["method"]], label=label, alpha=0.8)
    for axis, _, xlabel in panels:
        axis.axhline(100 * summary["target_accuracy"], color="gray", linestyle=":")
        axis.set_xlabel(xlabel)
        axis.set_ylabel("test accuracy (%)")
        axis.set_ylim(bottom=max(0, 100 * summary["target_accuracy"] - 15))
        axis.legend()
    figure.suptitle("MNIST-1D, 1-D CNN: pruning and in-batch selection vs the full data")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def tune_learning_rate(data: dict, args, method: str = "full") -> tuple[float, list[dict]]:
    """``method``'s best learning rate (seed 0, final accuracy) over ``--lrs``.

    Nothing is trained when ``--lrs`` holds one rate (``--quick``).
    """
    if len(args.lrs) == 1:
        return args.lrs[0], []
    trials = [train(data, method, 0, args, lr) for lr in args.lrs]
    best = max(trials, key=lambda r: r["curve"][-1]["test_accuracy"])
    sweep = [
        {
            "method": method,
            "learning_rate": r["learning_rate"],
            "final": r["curve"][-1]["test_accuracy"],
        }
        for r in trials
    ]
    return best["learning_rate"], sweep


def learning_rates(data: dict, args) -> tuple[dict, list[dict]]:
    """Every method's learning rate: ``--fixed-lrs``, else tuned (``--tune-methods``), else
    the full data's; and the sweeps run to find them."""
    rates, sweep = dict(args.fixed_lrs), []
    if "full" not in rates:
        rates["full"], sweep = tune_learning_rate(data, args)
    for method in args.methods:
        if method in rates:
            continue
        if method in args.tune_methods:
            rates[method], trials = tune_learning_rate(data, args, method)
            sweep += trials
        else:
            rates[method] = rates["full"]
    print(f"learning rates {rates} (sweeps {sweep})", flush=True)
    return rates, sweep


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--num-samples", type=int, default=50_000, help="MNIST-1D, 80%% train")
    parser.add_argument("--prune-ratio", type=float, default=0.5)
    parser.add_argument("--anneal", type=float, default=0.125)
    parser.add_argument("--select-pool", type=int, default=2, help="candidates per trained row")
    parser.add_argument(
        "--warmup-epochs",
        type=float,
        default=1.0,
        help="linear learning-rate warm-up before the cosine decay, in epochs of the run",
    )
    parser.add_argument(
        "--tune-methods",
        default="prune,select,sample",
        help="methods whose learning rate is tuned on their own (over --lrs, seed 0); the rest "
        "use the full data's",
    )
    parser.add_argument("--assist-base-prob", type=float, default=0.3, help="the filter's γ")
    parser.add_argument(
        "--assist-anneal",
        type=float,
        default=0.0,
        help="the Assistants train on every example for this last fraction of the epochs "
        "(pruning's δ); 0: filtered to the end, as in the paper",
    )
    parser.add_argument(
        "--assist-train-every",
        type=int,
        default=4,
        help="the learned Assistants train on every k-th Boss batch (1: every batch, as in the "
        "paper; 4 trains the learner a quarter as often, on a CPU the Boss shares)",
    )
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument(
        "--fixed-lrs",
        default="",
        metavar="METHOD=RATE,...",
        help="learning rates to use as given, not tuned (e.g. from an earlier run's sweep)",
    )
    parser.add_argument("--lrs", default="0.02,0.05,0.1")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "echoing")
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds")
    parser.add_argument("--output", type=Path, default=RESULTS / "selection.json")
    parser.add_argument(
        "--resummarize",
        type=Path,
        metavar="JSON",
        help="train nothing: recompute the summary, headline and plot of a results file from "
        "the runs it stores (after a change to how they are summarised), in place",
    )
    return _resolve(parser, parser.parse_args(argv))


def _resolve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Parses the list flags of ``args`` and checks them together (``parser.error`` if bad)."""
    args.lrs = [float(lr) for lr in args.lrs.split(",")]
    args.methods = args.methods.split(",")
    args.tune_methods = [method for method in args.tune_methods.split(",") if method]
    try:
        pairs = [pair.split("=") for pair in args.fixed_lrs.split(",") if pair]
        args.fixed_lrs = {method: float(rate) for method, rate in pairs}
    except ValueError:
        parser.error(f"--fixed-lrs {args.fixed_lrs!r}: expected METHOD=RATE pairs, e.g. prune=0.05")
    if not set(args.fixed_lrs) <= set(args.methods):
        parser.error(f"--fixed-lrs names methods not in --methods: {sorted(args.fixed_lrs)}")
    if not 0 <= args.assist_anneal <= 1:
        parser.error(f"--assist-anneal {args.assist_anneal}: expected a fraction in [0, 1]")
    if not 0 <= args.warmup_epochs <= args.epochs:
        parser.error(
            f"--warmup-epochs {args.warmup_epochs}: expected 0 to --epochs ({args.epochs})"
        )
    if not {"full", "prune"} <= set(args.methods) <= set(METHODS):
        parser.error(f"--methods must include full and prune, from {METHODS}")
    if args.quick:
        args.seeds, args.epochs, args.num_samples, args.lrs = 1, 3, 1_000, [0.05]
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    command = "python benchmarks/selection.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.resummarize is not None:
        # The file keeps the command, commit and machine of the run that measured it.
        result = harness.recompute(args.resummarize, recompute)
        plot(result["runs"], result["summary"], args.resummarize.with_suffix(".png"))
        print(markdown(result["summary"]))
        print(json.dumps(result["headline"], indent=1))
        return result
    data = load_mnist1d(args.num_samples, args.cache)
    rates, sweep = learning_rates(data, args)
    runs = []
    for seed in range(args.seeds):
        chosen = [train(data, "full", seed, args, rates["full"])]
        chosen.append(train(data, "prune", seed, args, rates["prune"]))
        if "short" in args.methods:
            budget = chosen[-1]["curve"][-1]["steps"]
            chosen.append(train(data, "short", seed, args, rates["short"], budget=budget))
        for method in ("select", "sample", *ASSIST_METHODS):
            if method in args.methods:
                chosen.append(train(data, method, seed, args, rates[method]))
        for run in chosen:
            last = run["curve"][-1]
            print(
                f"seed {seed} {run['method']:5s} steps {last['steps']:5d} "
                f"{last['seconds']:6.1f} s acc {100 * last['test_accuracy']:.2f}%",
                flush=True,
            )
            runs.append(run)
    config = {
        key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()
    }
    return report(runs, config, sweep, args.output, command)


def report(runs: list[dict], config: dict, sweep: list[dict], output: Path, command: str) -> dict:
    """Summarises ``runs`` into ``output`` (JSON, and the plot beside it) and prints the table."""
    summary = summarize(runs)
    sections = headline_sections(summary)
    result = harness.write_results(
        output,
        headline=sections.pop("headline"),
        command=command,
        **sections,
        config=config,
        learning_rate_sweep=sweep,
        summary=summary,
        runs=runs,
    )
    plot(runs, summary, output.with_suffix(".png"))
    print(markdown(summary))
    print(json.dumps(result["headline"], indent=1))
    return result


if __name__ == "__main__":
    main()
