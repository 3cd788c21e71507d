"""Priority sampling where it can win: clean data, the paper's MLP, and what loses the gain.

A user's own loop over the public library API (``echoing.PrioritySampler``,
``echoing.PriorityMeter``, ``echoing.PriorityTable``), as the paper's algorithm is written.

Example::

    python benchmarks/pgd_clean.py            # two data sets x 8 methods x 3 seeds (~35 min)
    python benchmarks/pgd_clean.py --quick    # seconds: a smoke run (used by the tests)

Issue 13, item 5. Two data sets with no label noise: scikit-learn's digits (1,797 x 64) and
``make_classification`` (60,000 x 100, 10 classes, ``flip_y=0``); ``--datasets imbalanced`` is
that set with class k drawn in proportion to 0.6^k (the rarest 1% of the largest). The paper's
model, one hidden layer of 300 ReLU units, trains with plain SGD on batches of 2% of N:
k = r = 1% of N (``top_ratio = renew_ratio = 0.5``). Methods, each from the same initial weights:

* ``sgd``: reshuffled epochs;
* ``pgd``: the shipped estimator: ``echoing.PrioritySampler`` (top-k of the log-linear
  extrapolated table, plus round-robin renewal) with priorities ``ḡ·g_i`` from
  ``echoing.PriorityMeter``, ``ḡ`` by Eq. 9 from every batch;
* ``pgd_renewal_gbar`` (ablation): ``ḡ`` by Eq. 9 from the renewal half only, which is a uniform
  sweep of the data, so ``ḡ`` does not lean towards past top-k picks;
* ``pgd_exact_gbar`` (ablation): ``ḡ`` is the full-data gradient at every step; the table is the
  shipped one (each priority measured when its example was last in a batch, then extrapolated);
* ``oracle``: the exact priority ``∇L·∇l_i`` of all N examples at every step (exact ``ḡ``, no
  staleness), the same batch composition: top-k of those plus the renewal ids;
* ``pgd_no_extrapolation`` (ablation): the shipped estimator with every slope kept at 0, so a
  priority is its last measurement, never extrapolated;
* ``pgd_post_step`` (candidate fix): priorities of the batch measured after its update, at the
  new parameters and ``ḡ``, since the step changes exactly those priorities most;
* ``pgd_fresh_pool`` (candidate fix): no table; each step scores a random pool of 4k examples
  by one forward-mode JVP with the shipped ``ḡ`` and takes its top k, plus the renewal ids, so
  no priority is older than the step;
* ``oracle_normalized`` (ablation): the oracle's batches with each step divided by its batch's
  alignment (below) when that is over 1, so the step goes as far along the full gradient as a
  uniform batch's: does top-k give a better direction, or only a longer step?

The learning rate is tuned per method on seed 0 (the grid's lowest mean log training loss over
the run, so early and late progress both count), then every method runs ``--seeds`` seeds at
its rate. Each run also records ``G·∇L/‖∇L‖²`` (``G`` the batch's mean gradient, ``∇L`` the full
one) at every evaluation: how far along the full gradient a step goes, 1 in expectation for a
uniform batch. Targets are the worst SGD seed's full training loss at 10, 25, 50 and 100% of
its step budget (so SGD reaches each in every seed); a method's speed-up at a target is SGD's
steps (or training seconds) to it over the method's, seed by seed, averaged geometrically
(``harness.paired``), when every seed reaches it. Wall time
is the training steps alone (evaluation excluded) and is meaningful for the methods without
full-data work; the exact-ḡ ablation and the oracle compute full-data gradients every step on
purpose, so only their steps count.

Writes ``benchmarks/results/pgd_clean.json`` (``"headline"``: every method's step speed-up at
SGD's full-budget loss on each set, ``<method>_steps_speedup_<set>``, the wall speed-ups of
``pgd`` and ``pgd_fresh_pool``, and the issue's ``pgd_steps_speedup_clean`` /
``pgd_wall_speedup_clean`` / ``oracle_steps_speedup_clean``, which are digits', the MNIST-sized
set) and ``pgd_clean.png``, and prints a markdown table. ``--methods m --merge`` runs one more
method and keeps the other methods' runs from the existing JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import harness
import keras
import numpy as np
import tensorflow as tf

from echoing import PriorityMeter, PrioritySampler, PriorityTable

RESULTS = harness.RESULTS
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
METHODS = (
    "sgd",
    "pgd",
    "pgd_renewal_gbar",
    "pgd_exact_gbar",
    "pgd_no_extrapolation",
    "oracle",
    "pgd_post_step",
    "pgd_fresh_pool",
    "oracle_normalized",
)
# pgd_fresh_pool scores a random pool of this many times k examples per step.
POOL_FACTOR = 4
TARGET_FRACTIONS = (0.1, 0.25, 0.5, 1.0)


def load(name: str, quick: bool) -> dict[str, np.ndarray]:
    """Standardised features and labels of a clean data set (the whole set trains)."""
    from sklearn import datasets

    if name == "digits":
        x, y = datasets.load_digits(return_X_y=True)
    else:
        # "imbalanced": the same set with class k drawn in proportion to 0.6^k, so the rarest
        # class is 1% of the largest: a few examples carry much of the loss for long, the
        # regime where top-k selection could beat uniform batches.
        weights = list(0.6 ** np.arange(10) / np.sum(0.6 ** np.arange(10)))
        x, y = datasets.make_classification(
            weights=weights if name == "imbalanced" else None,
            n_samples=6_000 if quick else 60_000,
            n_features=100,
            n_informative=40,
            n_redundant=20,
            n_classes=10,
            n_clusters_per_class=2,
            flip_y=0.0,
            class_sep=1.0,
            random_state=0,
        )
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    return {"x": x.astype(np.float32), "y": y.astype(np.int64)}


def mlp(num_features: int, num_classes: int) -> keras.Model:
    inputs = keras.Input((num_features,))
    hidden = keras.layers.Dense(300, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(hidden))


class Run:
    """One method's model, table and step function on one data set."""

    def __init__(self, data: dict, method: str, learning_rate: float, seed: int):
        self.method = method
        self.x, self.y = tf.constant(data["x"]), tf.constant(data["y"])
        self.num_examples = len(data["y"])
        self.batch_size = max(2, round(0.02 * self.num_examples))
        keras.utils.set_random_seed(seed)
        self.model = mlp(data["x"].shape[1], int(data["y"].max()) + 1)
        self.variables = self.model.trainable_variables
        self.rate = learning_rate
        # decay ~0 keeps every slope at 0: the last measurement, never extrapolated.
        decay = 1e-6 if method == "pgd_no_extrapolation" else 0.8
        self.table = PriorityTable(self.num_examples, decay=decay)
        self.sampler = PrioritySampler(
            self.table, batch_size=self.batch_size, top_ratio=0.5, renew_ratio=0.5, seed=seed
        )
        self.meter = PriorityMeter(self.table, self.variables)
        self.seed = seed
        rng = np.random.default_rng(seed)
        self._epochs = [rng.permutation(self.num_examples)]
        self._rng = rng
        self.step = tf.function(self._step)
        self.alignment = tf.function(self._alignment)
        self.train_loss = tf.function(self._train_loss)

    def _train_loss(self) -> tf.Tensor:
        return tf.reduce_mean(LOSS(self.y, self.model(self.x)))

    def sgd_ids(self, step: int) -> np.ndarray:
        start = step * self.batch_size
        while len(self._epochs) * self.num_examples < start + self.batch_size:
            self._epochs.append(self._rng.permutation(self.num_examples))
        epoch, offset = divmod(start, self.num_examples)
        order = np.concatenate(self._epochs[epoch : epoch + 2])
        return order[offset : offset + self.batch_size]

    def _full_gradient(self) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(LOSS(self.y, self.model(self.x, training=True)))
        return tape.gradient(loss, self.variables)

    def _oracle_ids(self, step: tf.Tensor) -> tf.Tensor:
        """Top-k of the exact priorities ∇L·∇l_i of every example, plus the renewal ids."""
        gradient = self._full_gradient()
        with tf.autodiff.ForwardAccumulator(self.meter.variables_, gradient) as accumulator:
            losses = LOSS(self.y, self.model(self.x, training=True))
        priorities = accumulator.jvp(losses)
        renew = self.sampler.renewal_ids(step)
        masked = tf.tensor_scatter_nd_update(
            priorities, renew[:, None], tf.fill(tf.shape(renew), -np.inf)
        )
        top = tf.math.top_k(masked, self.sampler.num_top).indices
        return tf.concat([tf.cast(top, tf.int64), renew], axis=0)

    def _pool_ids(self, step: tf.Tensor) -> tf.Tensor:
        """Top-k of fresh priorities ``ḡ·g_i`` (the shipped Eq. 9 ``ḡ``) over a random pool of
        ``POOL_FACTOR * k`` examples, plus the renewal ids: no table, so nothing is stale."""
        seed = tf.stack([tf.constant(self.seed, tf.int64), step])
        order = tf.random.experimental.stateless_shuffle(tf.range(self.num_examples), seed)
        pool = order[: POOL_FACTOR * self.sampler.num_top]
        priorities = self._priorities(tf.gather(self.x, pool), tf.gather(self.y, pool))
        top = tf.gather(pool, tf.math.top_k(priorities, self.sampler.num_top).indices)
        return tf.concat([tf.cast(top, tf.int64), self.sampler.renewal_ids(step)], axis=0)

    def _ids(self, step: tf.Tensor, sgd_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor | None]:
        """The batch's ids for ``step`` and, from the sampler, which of them are renewals."""
        if self.method == "sgd":
            return sgd_ids, None
        if self.method in ("oracle", "oracle_normalized"):
            return self._oracle_ids(step), None
        if self.method == "pgd_fresh_pool":
            return self._pool_ids(step), None
        selection = self.sampler.select(step)
        return selection["id"], selection["renewed"]

    def _alignment(self, step: tf.Tensor, sgd_ids: tf.Tensor) -> tf.Tensor:
        """``G·∇L / ‖∇L‖²`` for the batch ``step`` would train on (``G`` its mean gradient,
        ``∇L`` the full one): how far along the full gradient the step goes, 1 in expectation
        for a uniform batch. Top-k by ``ḡ·g_i`` raises it, like a larger learning rate."""
        ids, _ = self._ids(step, sgd_ids)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(
                LOSS(tf.gather(self.y, ids), self.model(tf.gather(self.x, ids), training=True))
            )
        return self._alignment_of(tape.gradient(loss, self.variables))

    def _alignment_of(self, batch: list[tf.Tensor]) -> tf.Tensor:
        """``G·∇L / ‖∇L‖²`` of the batch gradient ``G``, at the current parameters."""
        full = self._full_gradient()
        dot = tf.add_n([tf.reduce_sum(b * f) for b, f in zip(batch, full, strict=True)])
        return dot / tf.add_n([tf.reduce_sum(f * f) for f in full])

    def _step(self, step: tf.Tensor, sgd_ids: tf.Tensor) -> tf.Tensor:
        ids, renewed = self._ids(step, sgd_ids)
        x, y = tf.gather(self.x, ids), tf.gather(self.y, ids)
        if self.method == "pgd_exact_gbar":
            for aggregate, gradient in zip(
                self.meter.aggregated_gradient, self._full_gradient(), strict=True
            ):
                aggregate.assign(gradient)
            self.meter.has_aggregate.assign(True)
        losses, gradients, priorities = self.meter.losses_gradients_priorities(
            lambda: LOSS(y, self.model(x, training=True))
        )
        if self.method == "pgd_renewal_gbar":
            # G of Eq. 9 from the renewal rows alone: a second pass, only for this ablation.
            with tf.GradientTape() as tape:
                renewal_loss = tf.reduce_mean(
                    LOSS(tf.boolean_mask(y, renewed), self.model(tf.boolean_mask(x, renewed)))
                )
            renewal_gradients = tape.gradient(renewal_loss, self.variables)
        rate = self.rate
        if self.method == "oracle_normalized":
            rate /= tf.maximum(self._alignment_of(gradients), 1.0)
        for variable, gradient in zip(self.variables, gradients, strict=True):
            variable.assign_sub(rate * gradient)
        if self.method in ("pgd", "pgd_fresh_pool", "pgd_no_extrapolation"):
            self.meter.update(ids, priorities, gradients, step)
        elif self.method == "pgd_exact_gbar":
            self.table.update(ids, priorities, step)
        elif self.method == "pgd_renewal_gbar":
            tf.cond(
                self.meter.has_aggregate,
                lambda: self.table.update(ids, priorities, step),
                lambda: tf.constant(0, tf.int64),
            )
            self._update_aggregate(renewal_gradients, self.sampler.num_renew)
        elif self.method == "pgd_post_step":
            self._update_aggregate(gradients, self.batch_size)
            self.table.update(ids, self._priorities(x, y), step + 1)
        return tf.reduce_mean(losses)

    def _update_aggregate(self, gradients, examples: int) -> None:
        """Eq. 9, ``ḡ <- (1 - n/N)·ḡ + G``, without writing the table."""
        keep = 1.0 - examples / self.num_examples
        for aggregate, gradient in zip(self.meter.aggregated_gradient, gradients, strict=True):
            aggregate.assign(keep * aggregate + gradient)
        self.meter.has_aggregate.assign(True)

    def _priorities(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """``ḡ·g_i`` of rows ``x, y`` at the current parameters (one forward-mode JVP)."""
        tangents = [tf.convert_to_tensor(g) for g in self.meter.aggregated_gradient]
        with tf.autodiff.ForwardAccumulator(self.meter.variables_, tangents) as accumulator:
            losses = LOSS(y, self.model(x))
        return accumulator.jvp(losses, unconnected_gradients="zero")


def train(data: dict, method: str, learning_rate: float, seed: int, steps: int, every: int):
    """Trains one run; returns its curve: full training loss, training seconds and the step's
    alignment with the full gradient, at every ``every`` steps."""
    run = Run(data, method, learning_rate, seed)
    curve = {"step": [], "seconds": [], "train_loss": [], "alignment": []}
    elapsed = 0.0
    for step in range(steps + 1):
        sgd_ids = tf.constant(run.sgd_ids(step) if method == "sgd" else np.zeros([0], np.int64))
        step_tensor = tf.constant(step, tf.int64)
        if step % every == 0:
            curve["step"].append(step)
            curve["seconds"].append(elapsed)
            curve["train_loss"].append(float(run.train_loss()))
            curve["alignment"].append(float(run.alignment(step_tensor, sgd_ids)))
        if step == steps:
            break
        start = time.perf_counter()
        float(run.step(step_tensor, sgd_ids))
        if step > 0:  # step 0 traces: compile time is not training time
            elapsed += time.perf_counter() - start
    return curve


SETTINGS = {  # steps budget, evaluation interval, learning-rate grid
    "digits": {"steps": 1000, "every": 20, "rates": (0.1, 0.3, 1.0)},
    "classification": {"steps": 500, "every": 10, "rates": (0.3, 1.0, 3.0)},
    "imbalanced": {"steps": 500, "every": 10, "rates": (0.3, 1.0, 3.0)},
}
QUICK = {"steps": 30, "every": 10, "rates": (0.3,)}


def score(curve: dict) -> float:
    """The tuning criterion: the mean log training loss over the run (early and late speed
    alike); a diverged run scores inf."""
    losses = np.asarray(curve["train_loss"])
    return float(np.mean(np.log(losses))) if np.all(np.isfinite(losses)) else math.inf


def run_dataset(name: str, seeds: int, quick: bool, methods=METHODS) -> dict:
    """Tunes each method's rate on seed 0, then runs the other seeds at it."""
    data = load(name, quick)
    settings = QUICK if quick else SETTINGS[name]
    runs = {}
    for method in methods:
        tuning = {}
        for rate in settings["rates"]:
            tuning[rate] = train(data, method, rate, 0, settings["steps"], settings["every"])
            print(f"{name} {method} lr={rate}: score {score(tuning[rate]):.3f}", flush=True)
        best = min(tuning, key=lambda rate: score(tuning[rate]))
        curves = [tuning[best]] + [
            train(data, method, best, seed, settings["steps"], settings["every"])
            for seed in range(1, seeds)
        ]
        runs[method] = {
            "learning_rate": best,
            "tuning_scores": {str(rate): score(curve) for rate, curve in tuning.items()},
            "curves": curves,
        }
    return {"num_examples": len(data["y"]), **settings, "runs": runs}


def first_reaching(curve: dict, target: float) -> dict | None:
    """Step and training seconds of the first evaluation at or below ``target``, else None."""
    # A loss reaches its target from above: negated, it is an accuracy-like rising curve.
    index = harness.first_reaching(
        [(i, -loss) for i, loss in enumerate(curve["train_loss"])], -target
    )
    if index is None:
        return None
    return {"step": curve["step"][index], "seconds": curve["seconds"][index]}


def summarize(result: dict) -> dict:
    """Targets (the worst SGD seed's loss at each fraction of the budget, so SGD reaches every
    one in every seed) and each method's steps and seconds to them, over its seeds.

    ``steps_speedup`` and ``wall_speedup`` are SGD's mean over the method's mean (ratios of
    means, kept as ``headline_ratio_of_means``); ``paired_steps_speedup`` and
    ``paired_wall_speedup`` are the same ratios seed by seed (``harness.paired``, over the seeds
    both reached the target), which the headline reads.
    """
    runs, steps, every = result["runs"], result["steps"], result["every"]
    sgd = runs["sgd"]["curves"]
    summary = {}
    for fraction in TARGET_FRACTIONS:
        index = max(1, round(fraction * steps / every))
        target = max(curve["train_loss"][index] for curve in sgd)
        rows, hits_by_seed = {}, {}
        for method, run in runs.items():
            reached = [first_reaching(curve, target) for curve in run["curves"]]
            hits_by_seed[method] = dict(enumerate(reached))  # curve i is seed i
            hits = [hit for hit in reached if hit is not None]
            rows[method] = {
                "reached": len(hits),
                "seeds": len(reached),
                "mean_steps": statistics.fmean(h["step"] for h in hits) if hits else None,
                "mean_seconds": statistics.fmean(h["seconds"] for h in hits) if hits else None,
            }
        base = rows["sgd"]
        for method, row in rows.items():
            for key, unit in (("paired_steps_speedup", "step"), ("paired_wall_speedup", "seconds")):
                row[key] = harness.paired(
                    hits_by_seed["sgd"],
                    hits_by_seed[method],
                    lambda sgd, mine, unit=unit: (
                        sgd[unit] / mine[unit]
                        if sgd and mine and sgd[unit] and mine[unit]
                        else None
                    ),
                )

            complete = row["reached"] == row["seeds"] and row["mean_steps"]
            row["steps_speedup"] = base["mean_steps"] / row["mean_steps"] if complete else None
            row["wall_speedup"] = (
                base["mean_seconds"] / row["mean_seconds"]
                if complete and row["mean_seconds"]
                else None
            )
        summary[str(fraction)] = {"target_loss": target, "methods": rows}
    return summary


def alignment_summary(result: dict) -> dict[str, float]:
    """Each method's mean alignment ``G·∇L/‖∇L‖²`` over its evaluations after the first."""
    return {
        method: statistics.fmean(
            value for curve in run["curves"] for value in curve["alignment"][1:]
        )
        for method, run in result["runs"].items()
    }


def figures(results: dict, by: str = "paired") -> dict:
    """At SGD's full-budget loss: step (and, for the shipped PGD, wall) speed-ups on each set.

    ``by="paired"`` (the headline): each a ``harness.paired`` result (``paired_steps_speedup``,
    ``paired_wall_speedup``); ``by="means"``: the ratio of means (``steps_speedup``,
    ``wall_speedup``). Either is None unless every seed reached the target.
    """

    def speedup(row: dict, kind: str):
        if row[f"{kind}_speedup"] is None:
            return None
        return row[f"paired_{kind}_speedup"] if by == "paired" else row[f"{kind}_speedup"]

    result = {}
    for name, data in results.items():
        rows = data["summary"]["1.0"]["methods"]
        for method in (m for m in METHODS[1:] if m in rows):
            result[f"{method}_steps_speedup_{name}"] = speedup(rows[method], "steps")
        for method in ("pgd", "pgd_fresh_pool"):
            if method in rows:
                result[f"{method}_wall_speedup_{name}"] = speedup(rows[method], "wall")
    if "digits" in results:
        # The keys: the shipped estimator on the paper-like set (digits, MNIST-sized).
        result["pgd_steps_speedup_clean"] = result.get("pgd_steps_speedup_digits")
        result["pgd_wall_speedup_clean"] = result.get("pgd_wall_speedup_digits")
        result["oracle_steps_speedup_clean"] = result.get("oracle_steps_speedup_digits")
    return result


def headline(results: dict) -> dict[str, float | None]:
    """``figures``' paired geometric means: the figures the issue and RESULTS.md read."""
    return harness.paired_headline(figures(results))[0]


def headline_sections(results: dict) -> dict:
    """The headline, its spread over seeds and the ratios of means, as the JSON stores them."""
    return harness.headline_sections(figures(results), figures(results, by="means"))


def recompute(stored: dict) -> dict:
    """A stored results file's summaries and headline, re-derived from its runs' curves."""
    results = {}
    for name, result in stored["datasets"].items():
        results[name] = {**result, "summary": summarize(result)}
    return {**headline_sections(results), "datasets": results}


def markdown(results: dict) -> str:
    lines = []
    for name, result in results.items():
        lines += [
            f"\n**{name}** (N = {result['num_examples']}, {result['steps']} steps of "
            f"{max(2, round(0.02 * result['num_examples']))}):\n",
            "| method | lr | alignment | "
            + " | ".join(f"steps to SGD@{round(100 * f)}% (x)" for f in TARGET_FRACTIONS)
            + " |",
            "|---" * (3 + len(TARGET_FRACTIONS)) + "|",
        ]
        for method, run in result["runs"].items():
            cells = []
            for fraction in TARGET_FRACTIONS:
                row = result["summary"][str(fraction)]["methods"][method]
                if row["steps_speedup"] is None:
                    cells.append(f"{row['reached']}/{row['seeds']} seeds")
                else:
                    cells.append(f"{row['mean_steps']:.0f} ({row['steps_speedup']:.2f}x)")
            lines.append(
                f"| {method} | {run['learning_rate']} | {result['alignment'][method]:.2f} | "
                + " | ".join(cells)
                + " |"
            )
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.2), squeeze=False)
    for axis, (name, result) in zip(axes[0], results.items(), strict=True):
        for method, run in result["runs"].items():
            losses = np.array([curve["train_loss"] for curve in run["curves"]])
            steps = run["curves"][0]["step"]
            label = f"{method} (lr {run['learning_rate']})"
            axis.plot(steps, np.exp(np.log(losses).mean(0)), label=label)
            axis.fill_between(steps, losses.min(0), losses.max(0), alpha=0.15)
        axis.set(yscale="log", xlabel="step", ylabel="full training loss", title=name)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a seconds-scale smoke run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--datasets", default="digits,classification", help=f"of {', '.join(SETTINGS)}"
    )
    parser.add_argument("--methods", default=",".join(METHODS), help="sgd among them")
    parser.add_argument("--output", default=None, help="results JSON path")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the other methods' runs from the existing output (one more method, say)",
    )
    args = parser.parse_args(argv)
    for option, names, known in (
        ("--datasets", args.datasets, SETTINGS),
        ("--methods", args.methods, METHODS),
    ):
        unknown = [name for name in names.split(",") if name not in known]
        if unknown:
            parser.error(f"{option}: unknown {unknown}; choose from {', '.join(known)}")
    if "sgd" not in args.methods.split(",") and not args.merge:
        parser.error(f"--methods={args.methods}: add sgd (its runs set the targets) or --merge")
    seeds = 1 if args.quick else args.seeds
    output = (
        Path(args.output)
        if args.output
        else RESULTS / ("pgd_clean_quick.json" if args.quick else "pgd_clean.json")
    )
    earlier = json.loads(output.read_text())["datasets"] if args.merge else {}
    results = {}
    for name in args.datasets.split(","):
        result = run_dataset(name, seeds, args.quick, args.methods.split(","))
        runs = {**earlier.get(name, {}).get("runs", {}), **result["runs"]}
        result["runs"] = {method: runs[method] for method in METHODS if method in runs}
        result["summary"] = summarize(result)
        result["alignment"] = alignment_summary(result)
        results[name] = result
    sections = headline_sections(results)
    report = harness.write_results(
        output,
        headline=sections.pop("headline"),
        headline_spread=sections["headline_spread"],
        headline_ratio_of_means=sections["headline_ratio_of_means"],
        command=" ".join(["python benchmarks/pgd_clean.py", *(argv or sys.argv[1:])]),
        seeds=seeds,
        merged=args.merge,
        datasets=results,
    )
    plot(results, output.with_suffix(".png"))
    print(markdown(results))
    print(json.dumps(report["headline"], indent=1))
    return report


if __name__ == "__main__":
    main()
