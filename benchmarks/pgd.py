"""Prioritized gradient descent vs mini-batch SGD on MNIST-1D, side by side in one run.

A user's own loop over the public library API (``echoing.priority_sample``,
``echoing.PriorityStep``); ``--gather`` alone times internal parts of the sampler (a Python
decode against the graph's), an ablation of the implementation, not a user path.

Example::

    python benchmarks/pgd.py              # 3 models x 4 methods x 3 seeds, ~10 minutes on 2 cores
    python benchmarks/pgd.py --quick      # seconds: a smoke run (used by the tests)
    python benchmarks/pgd.py --gather     # ms per step: batches from a TFDS data source vs memory

Every method trains the same model from the same initial weights on the same examples per step
(``--batch_size``, 2% of the 4,000 MNIST-1D training examples as in the paper):

* ``sgd``: mini-batch SGD on a reshuffled epoch order (``Dataset.shuffle(N).repeat().batch``);
* ``pgd_paper``: ``echoing.priority_sample`` top-k with ``k = r`` (the paper's MNIST setting,
  1% + 1% of N), priorities by ``PriorityStep`` (one JVP per step, every gradient used);
* ``pgd_tuned``: top-k with ``k < r`` (the paper's advice), the ratio picked by a pilot grid
  (see ``METHODS``);
* ``pgd_proportional``: ``mode="proportional"`` (∝ p̂, importance weights β = 0.5), same
  ``k + r``.

Targets are derived from the SGD runs, so SGD reaches them in every seed by construction: the
training-loss target is the worst (highest) of SGD's per-seed best full-training-set losses, the
accuracy target the worst of SGD's per-seed best test accuracies. Time is the summed wall time of
the training steps only (input pipeline + step; evaluation excluded), in one process with the
methods interleaved per seed so machine load affects them alike. The run also measures the cost
of one selection and one table update at N = 10^6.

Writes ``benchmarks/results/pgd.json`` and ``pgd.png`` and prints a markdown table.

``--gather`` measures only the input side of a PGD step: ``priority_sample`` batches gathered from
in-memory arrays (``tf.gather`` in the graph) vs from a TFDS data source (MNIST-1D prepared as
ArrayRecord; one ``tf.numpy_function`` per batch reading the serialized records, parsed in the
graph), vs the same source decoded per record by TFDS in Python, at several batch sizes,
interleaved round by round so machine load hits all alike; also the bare TFDS ``__getitems__``
call (read + per-record Python decode, no TensorFlow). Writes ``pgd_gather.json`` and
``pgd_gather.png``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

import harness
import keras
import numpy as np
import tensorflow as tf

from echoing import PriorityStep, PriorityTable
from echoing._src.core.sources import DataSourceSource
from echoing._src.priority.sampling import PrioritySampler, priority_sample, sampled_batches
from pipelines.sources import mnist1d

RESULTS = harness.RESULTS
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

METHODS = {
    "sgd": None,
    "pgd_paper": {"top_ratio": 0.5, "renew_ratio": 0.5, "mode": "top_k"},
    # Best of a pilot grid on the MLP, seed 0, 800 steps, lr 0.1 and 0.2 (top_ratio 0.1 / 0.25;
    # proportional alpha 0.5, beta 0 / alpha 1, beta 0.5): the least prioritization won.
    "pgd_tuned": {"top_ratio": 0.1, "renew_ratio": 0.9, "mode": "top_k"},
    "pgd_proportional": {
        "top_ratio": 0.5,
        "renew_ratio": 0.5,
        "mode": "proportional",
        "alpha": 1.0,
        "importance_exponent": 0.5,
    },
}

# Learning rates for plain SGD (no momentum), the same for every method of a model.
LEARNING_RATES = {"logistic": 0.5, "mlp": 0.2, "cnn": 0.05}


def build_model(name: str, length: int, num_classes: int = 10) -> keras.Model:
    """Logistic regression, the paper's MLP (one hidden layer of 300) and a paper-sized 1-D CNN."""
    inputs = keras.Input((length,))
    if name == "logistic":
        outputs = keras.layers.Dense(num_classes)(inputs)
    elif name == "mlp":
        hidden = keras.layers.Dense(300, activation="relu")(inputs)
        outputs = keras.layers.Dense(num_classes)(hidden)
    elif name == "cnn":  # two 5-wide convolutions (10, 20 kernels), max-pooling, a linear layer
        x = keras.layers.Reshape((length, 1))(inputs)
        x = keras.layers.Conv1D(10, 5, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling1D(2)(x)
        x = keras.layers.Conv1D(20, 5, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling1D(2)(x)
        outputs = keras.layers.Dense(num_classes)(keras.layers.Flatten()(x))
    else:
        raise ValueError(f"unknown model {name!r}; expected logistic, mlp or cnn.")
    return keras.Model(inputs, outputs, name=name)


def load_mnist1d(num_samples: int) -> dict[str, np.ndarray]:
    """MNIST-1D generated locally by the ``mnist1d`` package (seed 42, 80/20 split)."""
    from mnist1d.data import get_dataset_args, make_dataset

    arguments = get_dataset_args()
    arguments.num_samples = num_samples
    data = make_dataset(arguments)
    return {
        "x": data["x"].astype(np.float32),
        "y": data["y"].astype(np.int64),
        "x_test": data["x_test"].astype(np.float32),
        "y_test": data["y_test"].astype(np.int64),
    }


def train(
    model_name: str,
    method: str,
    seed: int,
    data: dict,
    *,
    steps: int,
    batch_size: int,
    eval_every: int,
) -> dict:
    """Trains one (model, method, seed); returns its evaluation curve."""
    num_examples, length = data["x"].shape
    keras.utils.set_random_seed(seed)
    model = build_model(model_name, length)
    optimizer = keras.optimizers.SGD(LEARNING_RATES[model_name])
    x_train, y_train = tf.constant(data["x"]), tf.constant(data["y"])
    x_test, y_test = tf.constant(data["x_test"]), tf.constant(data["y_test"])

    @tf.function
    def evaluate():
        train_loss = tf.reduce_mean(LOSS(y_train, model(x_train)))
        predictions = tf.argmax(model(x_test), axis=-1)
        accuracy = tf.reduce_mean(tf.cast(predictions == y_test, tf.float32))
        return train_loss, accuracy

    settings = METHODS[method]
    if settings is None:
        dataset = (
            tf.data.Dataset.from_tensor_slices({"x": data["x"], "y": data["y"]})
            .shuffle(num_examples, seed=seed, reshuffle_each_iteration=True)
            .repeat()
            .batch(batch_size, drop_remainder=True)
        )

        @tf.function
        def sgd_step(batch, step):
            del step
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(LOSS(batch["y"], model(batch["x"], training=True)))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            return {"loss": loss}

        step_fn = sgd_step
        table = None
    else:
        table = PriorityTable(num_examples)
        dataset = priority_sample(
            table, {"x": data["x"], "y": data["y"]}, batch_size=batch_size, seed=seed, **settings
        )
        step_fn = PriorityStep(model, LOSS, optimizer, table)

    curve = {"step": [], "seconds": [], "train_loss": [], "test_accuracy": []}
    iterator = iter(dataset)
    elapsed = 0.0
    for step in range(steps + 1):
        if step % eval_every == 0:
            train_loss, accuracy = evaluate()
            curve["step"].append(step)
            curve["seconds"].append(elapsed)
            curve["train_loss"].append(float(train_loss))
            curve["test_accuracy"].append(float(accuracy))
        if step == steps:
            break
        start = time.perf_counter()
        batch = next(iterator)
        metrics = step_fn(batch, tf.constant(step, tf.int64))
        float(metrics["loss"])  # wait for the step to finish before reading the clock
        if step > 0:  # step 0 traces the tf.functions: compile time is not training time
            elapsed += time.perf_counter() - start
    if table is not None:
        curve["table"] = {key: float(v) for key, v in table.statistics(steps).items()}
    return curve


def first_reaching(curve: dict, key: str, target: float, lower_is_better: bool) -> dict | None:
    """Step and seconds of the first evaluation at the target, or None if never reached."""
    sign = -1.0 if lower_is_better else 1.0  # a loss reaches its target from above
    points = [(index, sign * value) for index, value in enumerate(curve[key])]
    index = harness.first_reaching(points, sign * target)
    if index is None:
        return None
    return {"step": curve["step"][index], "seconds": curve["seconds"][index]}


def summarize(curves: dict) -> dict:
    """Targets from SGD, then per method: steps/time to target, speed-ups, final accuracy.

    ``{loss,accuracy}_speedup_{steps,seconds}`` are SGD's mean over the method's mean (ratios of
    means, the headline's ``headline_ratio_of_means``); ``..._paired_speedup_...`` are the same
    ratios seed by seed (``harness.paired``, over the seeds both reached the target), which the
    headline reads.
    """
    summary = {}
    for model_name, by_method in curves.items():
        sgd = by_method["sgd"]
        loss_target = max(min(curve["train_loss"]) for curve in sgd)
        accuracy_target = min(max(curve["test_accuracy"]) for curve in sgd)
        rows, hits_by_seed = {}, {}
        for method, runs in by_method.items():
            row = {}
            for name, key, target, lower in (
                ("loss", "train_loss", loss_target, True),
                ("accuracy", "test_accuracy", accuracy_target, False),
            ):
                reached = [first_reaching(curve, key, target, lower) for curve in runs]
                hits_by_seed[method, name] = dict(enumerate(reached))  # seeds run 0, 1, ...
                hits = [r for r in reached if r is not None]
                row[f"{name}_reached"] = f"{len(hits)}/{len(runs)}"
                row[f"{name}_all_reached"] = len(hits) == len(runs)
                row[f"{name}_steps"] = statistics.mean(r["step"] for r in hits) if hits else None
                row[f"{name}_seconds"] = (
                    statistics.mean(r["seconds"] for r in hits) if hits else None
                )
            row["final_test_accuracy"] = statistics.mean(c["test_accuracy"][-1] for c in runs)
            row["final_test_accuracy_std"] = (
                statistics.stdev(c["test_accuracy"][-1] for c in runs) if len(runs) > 1 else 0.0
            )
            row["final_train_loss"] = statistics.mean(c["train_loss"][-1] for c in runs)
            row["seconds_per_step"] = statistics.mean(
                c["seconds"][-1] / max(c["step"][-1], 1) for c in runs
            )
            rows[method] = row
        for row in rows.values():
            for name in ("loss", "accuracy"):
                # A speed-up only when every seed reached the target (no survivor bias).
                for unit in ("steps", "seconds"):
                    value = row[f"{name}_{unit}"]
                    row[f"{name}_speedup_{unit}"] = (
                        rows["sgd"][f"{name}_{unit}"] / value
                        if value and row[f"{name}_all_reached"]
                        else None
                    )
        for method, row in rows.items():
            for name in ("loss", "accuracy"):
                for unit, field in (("steps", "step"), ("seconds", "seconds")):
                    row[f"{name}_paired_speedup_{unit}"] = harness.paired(
                        hits_by_seed["sgd", name],
                        hits_by_seed[method, name],
                        lambda sgd, mine, field=field: (
                            sgd[field] / mine[field]
                            if sgd and mine and sgd[field] and mine[field]
                            else None
                        ),
                    )
        summary[model_name] = {
            "loss_target": loss_target,
            "accuracy_target": accuracy_target,
            "methods": rows,
        }
    return summary


def selection_cost(num_examples: int, batch_size: int, repeats: int) -> dict:
    """Milliseconds per selection (top-k and proportional) and per table update at this N."""
    table = PriorityTable(num_examples)
    rng = np.random.default_rng(0)
    table.update(
        tf.range(num_examples), tf.constant(rng.exponential(size=num_examples), tf.float32), 0
    )
    table.update(
        tf.range(num_examples), tf.constant(rng.exponential(size=num_examples), tf.float32), 1
    )
    ids = tf.constant(rng.choice(num_examples, batch_size, replace=False), tf.int64)
    priorities = tf.constant(rng.exponential(size=batch_size), tf.float32)
    update = tf.function(table.update)
    results = {"num_examples": num_examples, "batch_size": batch_size}
    candidates = {
        "top_k": tf.function(
            PrioritySampler(table, batch_size=batch_size, top_ratio=0.5, renew_ratio=0.5).select
        ),
        "proportional": tf.function(
            PrioritySampler(
                table, batch_size=batch_size, top_ratio=0.5, renew_ratio=0.5, mode="proportional"
            ).select
        ),
        "update": lambda step: update(ids, priorities, step),
    }
    for name, function in candidates.items():
        function(tf.constant(2, tf.int64))  # trace
        timings = []
        for step in range(repeats):
            start = time.perf_counter()
            output = function(tf.constant(step + 3, tf.int64))
            tf.nest.map_structure(lambda t: t.numpy(), output)
            timings.append(time.perf_counter() - start)
        results[f"{name}_ms"] = 1000 * statistics.median(timings)
    return results


def gather_cost(num_examples: int, batch_sizes: list[int], repeats: int, data_dir: str) -> dict:
    """Median ms per ``next(iterator)`` of priority_sample from memory vs a TFDS data source."""
    data_source = mnist1d.data_source(num_examples, 100, data_dir)
    keys = ("inputs", "label")
    records = data_source.__getitems__(list(range(num_examples)))
    arrays = {key: np.stack([record[key] for record in records]) for key in keys}
    table = PriorityTable(num_examples)
    rng = np.random.default_rng(0)
    table.update(tf.range(num_examples), rng.exponential(size=num_examples).astype("float32"), 0)
    rows = []
    for batch_size in batch_sizes:
        arguments = dict(batch_size=batch_size, top_ratio=0.5, renew_ratio=0.5, seed=0)
        python_decode = DataSourceSource(data_source, keys, parse_in_graph=False)
        iterators = {
            "in_memory": iter(priority_sample(table, arrays, **arguments)),
            "data_source": iter(priority_sample(table, data_source, keys=keys, **arguments)),
            "data_source_python_decode": iter(
                sampled_batches(PrioritySampler(table, **arguments), python_decode, start_step=0)
            ),
        }
        ids = rng.choice(num_examples, batch_size, replace=False).tolist()
        candidates = {
            **{name: (lambda it=it: next(it)) for name, it in iterators.items()},
            "getitems_only": lambda ids=ids: data_source.__getitems__(ids),
        }
        timings = {name: [] for name in candidates}
        for function in candidates.values():
            function()  # warm up (tracing, opening the files)
        for _ in range(repeats):  # interleaved: load changes affect every candidate alike
            for name, function in candidates.items():
                start = time.perf_counter()
                function()
                timings[name].append(time.perf_counter() - start)
        row = {"batch_size": batch_size}
        row.update({f"{name}_ms": 1000 * statistics.median(t) for name, t in timings.items()})
        row["data_source_us_per_example"] = 1000 * row["data_source_ms"] / batch_size
        row["ratio"] = row["data_source_ms"] / row["in_memory_ms"]
        row["python_decode_ratio"] = row["data_source_python_decode_ms"] / row["in_memory_ms"]
        rows.append(row)
    return {"num_examples": num_examples, "repeats": repeats, "rows": rows}


def gather_markdown(cost: dict) -> str:
    lines = [
        f"priority_sample batch gather, N={cost['num_examples']:,} MNIST-1D examples, median "
        f"of {cost['repeats']} steps:",
        "",
        "| batch | in memory (ms/step) | TFDS data source, graph parse (ms/step) | ratio "
        "| µs/example | data source, TFDS Python decode (ms/step) | ratio "
        "| bare TFDS __getitems__ (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in cost["rows"]:
        lines.append(
            f"| {row['batch_size']} | {row['in_memory_ms']:.3f} | {row['data_source_ms']:.3f} | "
            f"{row['ratio']:.1f}× | {row['data_source_us_per_example']:.1f} | "
            f"{row['data_source_python_decode_ms']:.3f} | {row['python_decode_ratio']:.1f}× | "
            f"{row['getitems_only_ms']:.3f} |"
        )
    return "\n".join(lines)


def plot_gather(cost: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    sizes = [row["batch_size"] for row in cost["rows"]]
    positions = np.arange(len(sizes))
    for offset, (key, label) in enumerate(
        [
            ("in_memory_ms", "in memory (tf.gather)"),
            ("data_source_ms", "TFDS data source, graph parse"),
            ("data_source_python_decode_ms", "TFDS data source, Python decode"),
            ("getitems_only_ms", "bare TFDS __getitems__ (Python decode)"),
        ]
    ):
        axis.bar(positions + 0.2 * (offset - 1.5), [row[key] for row in cost["rows"]], 0.2,
                 label=label)  # fmt: skip
    axis.set(
        xticks=positions,
        xticklabels=[str(size) for size in sizes],
        xlabel="batch size",
        ylabel="ms per step (median)",
        yscale="log",
        title=f"priority_sample gather, N={cost['num_examples']:,}",
    )
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def oracle_diagnostic(data: dict, *, seeds: int, steps: int, batch_size: int) -> dict:
    """Top-k with EXACT priorities: ḡ = the full-data gradient at the current weights and
    ``ḡ·g_i`` for all N examples every step (no estimation, no staleness), against SGD.

    If exact selection is no faster per step than SGD, estimated selection cannot be either:
    this separates the method from the implementation. MLP only; steps, not time (the exact
    priorities cost a full pass per step).
    """
    num_examples, length = data["x"].shape
    x, y = tf.constant(data["x"]), tf.constant(data["y"])
    variants = ("sgd", "exact_top_k_half_renewal", "exact_top_k")
    results = {variant: [] for variant in variants}
    eval_every = max(steps // 10, 1)
    for seed in range(seeds):
        for variant in variants:
            keras.utils.set_random_seed(seed)
            model = build_model("mlp", length)
            optimizer = keras.optimizers.SGD(LEARNING_RATES["mlp"])
            variables = [v.value for v in model.trainable_variables]

            @tf.function
            def exact_priorities(model=model, variables=variables):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(LOSS(y, model(x)))
                full_gradient = tape.gradient(loss, variables)
                with tf.autodiff.ForwardAccumulator(variables, full_gradient) as accumulator:
                    losses = LOSS(y, model(x))
                return accumulator.jvp(losses)

            @tf.function
            def step(ids, model=model, optimizer=optimizer):
                with tf.GradientTape() as tape:
                    batch_x, batch_y = tf.gather(x, ids), tf.gather(y, ids)
                    loss = tf.reduce_mean(LOSS(batch_y, model(batch_x, training=True)))
                gradients = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))

            order = np.random.default_rng(seed).permutation(num_examples)
            curve = {"step": [], "train_loss": []}
            half = batch_size // 2
            for t in range(steps + 1):
                if t % eval_every == 0:
                    curve["step"].append(t)
                    curve["train_loss"].append(float(tf.reduce_mean(LOSS(y, model(x)))))
                if t == steps:
                    break
                if variant == "sgd":
                    start = (t * batch_size) % num_examples
                    ids = np.take(order, np.arange(start, start + batch_size), mode="wrap")
                else:
                    priorities = exact_priorities().numpy()
                    if variant == "exact_top_k":
                        ids = np.argsort(-priorities)[:batch_size]
                    else:
                        renew = np.arange(t * half, (t + 1) * half) % num_examples
                        priorities[renew] = -np.inf
                        ids = np.concatenate([np.argsort(-priorities)[: batch_size - half], renew])
                step(tf.constant(ids, tf.int64))
            results[variant].append(curve)
    return results


def markdown(summary: dict, cost: dict) -> str:
    def number(value, pattern):
        return "not reached" if value is None else pattern.format(value)

    lines = [
        "| model | method | loss target reached | steps to loss | s to loss | speed-up (s) "
        "| speed-up (steps) | acc target reached | steps to acc | speed-up acc (s) "
        "| final test acc | s/step (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model_name, block in summary.items():
        for method, row in block["methods"].items():
            lines.append(
                f"| {model_name} (loss≤{block['loss_target']:.3f}, acc≥"
                f"{block['accuracy_target']:.3f}) | {method} | {row['loss_reached']} | "
                f"{number(row['loss_steps'], '{:.0f}')} | "
                f"{number(row['loss_seconds'], '{:.2f}')} | "
                f"{number(row['loss_speedup_seconds'], '{:.2f}×')} | "
                f"{number(row['loss_speedup_steps'], '{:.2f}×')} | {row['accuracy_reached']} | "
                f"{number(row['accuracy_steps'], '{:.0f}')} | "
                f"{number(row['accuracy_speedup_seconds'], '{:.2f}×')} | "
                f"{row['final_test_accuracy']:.3f} ± {row['final_test_accuracy_std']:.3f} | "
                f"{1000 * row['seconds_per_step']:.2f} |"
            )
    lines.append("")
    lines.append(
        f"Selection at N={cost['num_examples']:,}, batch {cost['batch_size']}: top-k "
        f"{cost['top_k_ms']:.2f} ms, proportional {cost['proportional_ms']:.2f} ms, "
        f"table update {cost['update_ms']:.2f} ms (median)."
    )
    return "\n".join(lines)


def plot(curves: dict, summary: dict, cost: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(curves)
    figure, axes = plt.subplots(2, len(models), figsize=(5 * len(models), 8), squeeze=False)
    for column, model_name in enumerate(models):
        for method, runs in curves[model_name].items():
            seconds = np.mean([c["seconds"] for c in runs], axis=0)
            loss = np.mean([c["train_loss"] for c in runs], axis=0)
            accuracy = np.mean([c["test_accuracy"] for c in runs], axis=0)
            axes[0, column].plot(seconds, loss, label=method)
            axes[1, column].plot(runs[0]["step"], accuracy, label=method)
        axes[0, column].axhline(summary[model_name]["loss_target"], color="gray", ls="--")
        axes[1, column].axhline(summary[model_name]["accuracy_target"], color="gray", ls="--")
        axes[0, column].set(title=f"{model_name}: training loss", xlabel="train seconds")
        axes[0, column].set_yscale("log")
        axes[1, column].set(title=f"{model_name}: test accuracy", xlabel="step")
        axes[0, column].legend()
    figure.suptitle(
        f"PGD vs SGD on MNIST-1D (mean over seeds); selection at N=10^6: top-k "
        f"{cost['top_k_ms']:.1f} ms"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def figures(summary: dict, cost: dict, by: str = "paired") -> dict:
    """The issue's figures: the best PGD variant per model, and the selection cost at large N.

    ``{model}_best_loss_speedup_steps`` / ``_seconds``: the largest speed-up to SGD's loss target
    over the PGD variants that reached it on every seed (target 1.6; null if none did): with
    ``by="paired"`` (the headline) a ``harness.paired`` result, the variant with the highest
    geometric mean of the seed-by-seed ratios; with ``by="means"`` the ratio of mean steps or
    seconds; ``{model}_best_test_accuracy_delta_points``: that variant's (by seconds) final test
    accuracy minus SGD's, in percentage points (target >= 0); ``top_k_ms``, ``proportional_ms``,
    ``update_ms``: per-step selection and table update at ``cost["num_examples"]`` examples.
    A speed-up ``summarize`` left null (target already met at step 0) counts as not reached.
    """
    paired = by == "paired"

    def speedup(method: dict, unit: str):
        if method[f"loss_speedup_{unit}"] is None:
            return None
        return method[f"loss_paired_speedup_{unit}"] if paired else method[f"loss_speedup_{unit}"]

    def size(figure) -> float:
        return figure["mean"] if paired else figure

    result: dict = {}
    for model, results in summary.items():
        methods = results["methods"]
        reached = [m for n, m in methods.items() if n != "sgd" and m["loss_all_reached"]]
        for unit in ("steps", "seconds"):
            speedups = [speedup(m, unit) for m in reached]
            best = max((s for s in speedups if s is not None), key=size, default=None)
            result[f"{model}_best_loss_speedup_{unit}"] = best
        timed = [m for m in reached if speedup(m, "seconds") is not None]
        fastest = max(timed, key=lambda m: size(speedup(m, "seconds")), default=None)
        result[f"{model}_best_test_accuracy_delta_points"] = (
            None
            if fastest is None
            else 100.0
            * (float(fastest["final_test_accuracy"]) - float(methods["sgd"]["final_test_accuracy"]))
        )
    for name in ("top_k_ms", "proportional_ms", "update_ms"):
        result[name] = float(cost[name])
    return result


def headline(summary: dict, cost: dict) -> dict[str, float | None]:
    """``figures``' paired geometric means: the figures the issue and RESULTS.md read."""
    return harness.paired_headline(figures(summary, cost))[0]


def headline_sections(summary: dict, cost: dict) -> dict:
    """The headline, its spread over seeds (``headline_spread``) and the ratios of means
    (``headline_ratio_of_means``; with its own best variant and accuracy delta)."""
    by_means = figures(summary, cost, by="means")
    return harness.headline_sections(
        figures(summary, cost), {k: v for k, v in by_means.items() if "_best_" in k}
    )


def recompute(stored: dict) -> dict:
    """A stored ``pgd.json``'s summary and headline, re-derived from its ``curves``."""
    summary = summarize(stored["curves"])
    return {
        **headline_sections(summary, stored["selection_cost"]),
        "summary": summary,
        "markdown": markdown(summary, stored["selection_cost"]),
    }


def gather_headline(gather: dict) -> dict[str, float]:
    """Per batch size, the data source's gather time over the in-memory one (graph parse, and
    TFDS's Python decoding).

    >>> gather_headline({"rows": [{"batch_size": 16, "ratio": 3.0, "python_decode_ratio": 5.0}]})
    {'data_source_vs_memory_b16': 3.0, 'data_source_python_decode_vs_memory_b16': 5.0}
    """
    figures = {}
    for row in gather["rows"]:
        batch = row["batch_size"]
        figures[f"data_source_vs_memory_b{batch}"] = float(row["ratio"])
        figures[f"data_source_python_decode_vs_memory_b{batch}"] = float(row["python_decode_ratio"])
    return figures


def oracle_headline(oracle: dict) -> dict[str, float | None]:
    """Mean final training loss per variant, and exact top-k with renewal's over SGD's.

    >>> oracle_headline({"sgd": [{"train_loss": [2.0, 1.0]}],
    ...                  "exact_top_k_half_renewal": [{"train_loss": [2.0, 1.5]}]})
    {'sgd_final_train_loss': 1.0, 'exact_top_k_half_renewal_final_train_loss': 1.5, \
'exact_top_k_half_renewal_vs_sgd_final_loss': 1.5}
    """
    figures: dict[str, float | None] = {
        f"{variant}_final_train_loss": float(np.mean([run["train_loss"][-1] for run in runs]))
        for variant, runs in oracle.items()
    }
    renewal = figures.get("exact_top_k_half_renewal_final_train_loss")
    sgd = figures.get("sgd_final_train_loss")
    figures["exact_top_k_half_renewal_vs_sgd_final_loss"] = (
        None if renewal is None or sgd is None else renewal / sgd
    )
    return figures


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch_size", type=int, default=80)
    parser.add_argument("--models", default="logistic,mlp,cnn")
    parser.add_argument("--output", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--selection_examples", type=int, default=1_000_000)
    parser.add_argument(
        "--gather",
        action="store_true",
        help="only measure batch gathering from a TFDS data source vs memory (pgd_gather.json)",
    )
    parser.add_argument(
        "--data_dir",
        default=os.path.expanduser("~/.cache/echoing"),
        help="TFDS directory for the ArrayRecord MNIST-1D copy used by --gather",
    )
    parser.add_argument(
        "--oracle",
        action="store_true",
        help="only run the exact-priority diagnostic (MLP), writing pgd_oracle.json",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.models = 1, "logistic"
        args.batch_size, args.selection_examples = 16, 10_000
    args.output.mkdir(parents=True, exist_ok=True)
    if args.gather:
        return {"gather": run_gather(args)}
    data = load_mnist1d(1000 if args.quick else 5000)
    if args.oracle:
        return {"oracle": run_oracle(args, data)}
    return run_comparison(args, data)


def _command(*flags: str, quick: bool) -> str:
    return " ".join(["python benchmarks/pgd.py", *flags, *(["--quick"] if quick else [])])


def run_gather(args) -> dict:
    """``--gather``: the batch gather cost, into ``pgd_gather.json`` and ``.png``."""
    gather = gather_cost(
        1000 if args.quick else 4000,
        [16, 128] if args.quick else [16, 80, 256, 1024],
        repeats=5 if args.quick else 200,
        data_dir=args.data_dir,
    )
    text = gather_markdown(gather)
    print(text)
    stem = "pgd_gather_quick" if args.quick else "pgd_gather"
    harness.write_results(
        args.output / f"{stem}.json",
        headline=gather_headline(gather),
        command=_command("--gather", quick=args.quick),
        gather_cost=gather,
        markdown=text,
    )
    plot_gather(gather, args.output / f"{stem}.png")
    return gather


def run_oracle(args, data: dict) -> dict:
    """``--oracle``: the exact-priority diagnostic's curves, into ``pgd_oracle.json``."""
    steps = args.steps or (10 if args.quick else 600)
    oracle = oracle_diagnostic(data, seeds=args.seeds, steps=steps, batch_size=args.batch_size)
    lines = ["| variant | mean training loss at steps " + str(oracle["sgd"][0]["step"]) + " |"]
    lines.append("|---|---|")
    for variant, runs in oracle.items():
        mean = np.mean([run["train_loss"] for run in runs], axis=0)
        lines.append(f"| {variant} | " + ", ".join(f"{v:.3f}" for v in mean) + " |")
    print("\n".join(lines))
    stem = "pgd_oracle_quick" if args.quick else "pgd_oracle"
    harness.write_results(
        args.output / f"{stem}.json",
        headline=oracle_headline(oracle),
        command=_command("--oracle", quick=args.quick),
        curves=oracle,
        markdown="\n".join(lines),
    )
    return oracle


def run_comparison(args, data: dict) -> dict:
    """SGD against every PGD method, per model and seed, into ``pgd.json`` and ``.png``."""
    default_steps, eval_every, repeats = (20, 5, 3) if args.quick else (1500, 25, 30)
    steps = args.steps or default_steps
    models = args.models.split(",")
    curves: dict = {model: {method: [] for method in METHODS} for model in models}
    for model_name in models:
        for seed in range(args.seeds):
            for method in METHODS:
                start = time.perf_counter()
                run = train(
                    model_name,
                    method,
                    seed,
                    data,
                    steps=steps,
                    batch_size=args.batch_size,
                    eval_every=eval_every,
                )
                curves[model_name][method].append(run)
                print(
                    f"{model_name:8s} {method:17s} seed {seed}: final loss "
                    f"{run['train_loss'][-1]:.4f} acc {run['test_accuracy'][-1]:.3f} "
                    f"({time.perf_counter() - start:.1f} s)",
                    file=sys.stderr,
                )
    cost = selection_cost(args.selection_examples, batch_size=128, repeats=repeats)
    summary = summarize(curves)
    table = markdown(summary, cost)
    print(table)
    stem = "pgd_quick" if args.quick else "pgd"
    sections = headline_sections(summary, cost)
    result = harness.write_results(
        args.output / f"{stem}.json",
        headline=sections.pop("headline"),
        command=_command(quick=args.quick),
        **sections,
        settings={
            "num_train_examples": int(data["x"].shape[0]),
            "num_test_examples": int(data["x_test"].shape[0]),
            "steps": steps,
            "eval_every": eval_every,
            "batch_size": args.batch_size,
            "seeds": args.seeds,
            "learning_rates": LEARNING_RATES,
            "methods": METHODS,
        },
        selection_cost=cost,
        summary=summary,
        curves=curves,
        markdown=table,
    )
    plot(curves, summary, cost, args.output / f"{stem}.png")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
