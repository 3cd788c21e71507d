"""Does loss-table pruning pay in every path users take? Step cost, wall time and decodes.

    python benchmarks/prune_overhead.py               # ~25 min on 2 cores
    python benchmarks/prune_overhead.py --quick       # seconds: the CI smoke run

MNIST-1D (40k train / 10k test), the 1-D CNN, AdamW on a cosine schedule indexed by epoch (so
fewer steps per epoch is the saving), batch 128, InfoBatch's r = 0.5 and δ = 12.5%, 12 epochs.
Every path trains once on the full data and once pruned, per seed, in the same run:

* ``hand``: InfoBatch written by hand in plain Keras, a user's own loop: a numpy table of
  last-seen losses, each epoch's kept ids drawn in numpy, numpy batches into a ``tf.function``
  step that returns the per-example losses. The reference: what the library must match.
* ``loop``: a user's own loop over the library: ``echoing.LossTable``, ``loss_prune(...).read(
  arrays, batch_size)`` (decides on ids, reads only the kept rows) and ``table.update`` inside the
  ``tf.function`` step. Full data: ``from_tensor_slices(...).shuffle(N).batch(128)``.
* ``loop_stream``: the same loop with the stage on a stream of examples (``ds.shuffle(N).apply(
  stage).batch(128)``): what the README showed before pruning by id, kept as the ablation.
* ``fit``: ``model.fit`` over ``echoing.keras.LossFeedback`` (observers=[table.update]) and
  ``read``; full data: plain ``fit`` on ``from_tensor_slices((x, y))``.
* ``trainer``: ``trainers.experiment.run`` (what ``python -m trainers.train`` runs) with
  ``configs/mnist1d.py`` against ``configs/mnist1d.py:prune=1``, ``num_steps`` = 12 epochs.
* ``image``: the trainer on the embedded JPEG image folder, full against ``prune=1``: how many
  images the pipeline read (and so decoded) per epoch, against the fraction pruning kept.

Step time is a run's training seconds over its optimizer steps; wall speed-up is the full run's
training seconds over the pruned run's. Both are paired by seed (geometric mean, and the range).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import harness
import keras
import numpy as np
import tensorflow as tf

import echoing
from pipelines.sources import mnist1d
from trainers import experiment, models

PATHS = ("hand", "loop", "loop_stream", "fit", "trainer")
ROOT = harness.ROOT


def load_data(num_train: int, num_eval: int, data_dir: str) -> dict:
    """MNIST-1D as arrays, row i = example id i."""
    source = mnist1d.load(num_train, num_eval, data_dir)
    data = {}
    for name, split, size in (("train", source.train, num_train), ("eval", source.eval, num_eval)):
        batch = next(iter(split.dataset.map(split.decode).batch(size)))
        order = np.argsort(batch["id"].numpy())
        data[name] = {
            "inputs": batch["inputs"].numpy()[order],
            "label": batch["label"].numpy()[order],
        }
    return data


def cosine(epoch: int, args) -> float:
    """The learning rate of ``epoch``: cosine from ``--learning-rate`` to 0 over the epochs."""
    return 0.5 * args.learning_rate * (1.0 + math.cos(math.pi * epoch / args.epochs))


def build(seed: int, args) -> tuple[keras.Model, keras.optimizers.Optimizer]:
    keras.utils.set_random_seed(seed)
    net = models.mnist1d_cnn((40, 1), 10)
    return net, keras.optimizers.AdamW(args.learning_rate, weight_decay=1e-4)


def per_example_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


def accuracy(net: keras.Model, data: dict) -> float:
    logits = net.predict(data["eval"]["inputs"], batch_size=1000, verbose=0)
    return float(np.mean(np.argmax(logits, -1) == data["eval"]["label"]))


def pruning(num_examples: int, seed: int, args) -> tuple[echoing.LossTable, echoing.LossPruning]:
    """The library's pruning as a user sets it up: a loss table and its ``loss_prune`` stage."""
    table = echoing.LossTable(num_examples)
    stage = echoing.loss_prune(
        table,
        num_epochs=args.epochs,
        prune_ratio=args.prune_ratio,
        anneal_fraction=args.anneal,
        seed=seed,
    )
    return table, stage


def quick_options(dataset: tf.data.Dataset, args) -> tf.data.Dataset:
    """``dataset``; in a --quick run, without tf.data's autotuner, whose teardown can wait for
    its next pass each time a seconds-old iterator is deleted (iterator_teardown.py)."""
    if not args.quick:
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def make_step(net, optimizer):
    """A user's ``tf.function`` step: the weighted mean loss; returns the per-example losses."""
    loss_fn = per_example_loss()

    @tf.function
    def step(inputs, label, weight):
        with tf.GradientTape() as tape:
            losses = loss_fn(label, net(inputs, training=True))
            loss = tf.reduce_mean(losses * weight)
        gradients = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(gradients, net.trainable_variables, strict=True))
        return losses

    return step


def run_hand(data, seed, args, prune: bool) -> dict:
    """InfoBatch by hand: numpy table and numpy batches (the reference)."""
    x, y = data["train"]["inputs"], data["train"]["label"]
    n, rng = len(y), np.random.default_rng(seed)
    net, optimizer = build(seed, args)
    step = make_step(net, optimizer)
    losses, seen = np.zeros(n, np.float32), np.zeros(n, bool)
    full_epoch = math.ceil((1 - args.anneal) * args.epochs - 1e-9)
    steps, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        optimizer.learning_rate.assign(cosine(epoch, args))
        weights = np.ones(n, np.float32)
        ids = np.arange(n)
        if prune and epoch < full_epoch and seen.any():
            easy = seen & (losses < losses[seen].mean())
            keep = ~easy | (rng.random(n) >= args.prune_ratio)
            weights[easy] = 1.0 / (1.0 - args.prune_ratio)
            ids = ids[keep]
        ids = rng.permutation(ids)
        for first in range(0, len(ids) - args.batch_size + 1, args.batch_size):
            batch = ids[first : first + args.batch_size]
            batch_losses = step(x[batch], y[batch], weights[batch])
            if prune:
                losses[batch], seen[batch] = batch_losses.numpy(), True
            steps += 1
    return {"seconds": time.perf_counter() - start, "steps": steps, "accuracy": accuracy(net, data)}


def run_loop(data, seed, args, prune: bool, stream: bool = False) -> dict:
    """The library in a user's own loop: ``LossTable``, ``loss_prune``, ``table.update``."""
    train = {**data["train"], "id": np.arange(len(data["train"]["label"]))}
    n = len(train["id"])
    net, optimizer = build(seed, args)
    table, stage = pruning(n, seed, args)
    step = make_step(net, optimizer)

    @tf.function
    def pruned_step(batch):
        losses = step(batch["inputs"], batch["label"], batch["sample_weight"])
        table.update(batch["id"], losses)

    if not prune:
        batches = tf.data.Dataset.from_tensor_slices(train).shuffle(n, seed=seed)
        batches = batches.batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    elif stream:
        examples = tf.data.Dataset.from_tensor_slices(train).shuffle(n, seed=seed).apply(stage)
        batches = examples.batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    else:
        batches = stage.read(
            {"inputs": train["inputs"], "label": train["label"]},
            batch_size=args.batch_size,
            drop_remainder=True,
        ).prefetch(tf.data.AUTOTUNE)
    batches = quick_options(batches, args)
    steps, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        optimizer.learning_rate.assign(cosine(epoch, args))
        for batch in batches:
            if prune:
                pruned_step(batch)
            else:
                step(batch["inputs"], batch["label"], tf.ones_like(batch["label"], tf.float32))
            steps += 1
    return {"seconds": time.perf_counter() - start, "steps": steps, "accuracy": accuracy(net, data)}


def run_fit(data, seed, args, prune: bool) -> dict:
    """``model.fit``: plain on ``(x, y)``, or ``LossFeedback`` over ``loss_prune(...).read``."""
    x, y = data["train"]["inputs"], data["train"]["label"]
    net, optimizer = build(seed, args)
    schedule = keras.callbacks.LearningRateScheduler(lambda epoch: cosine(epoch, args))
    counter = StepCounter()
    if prune:
        table, stage = pruning(len(y), seed, args)
        train = stage.read(
            {"inputs": x, "label": y}, batch_size=args.batch_size, drop_remainder=True
        )
        train = train.map(echoing.keras.fit_inputs).prefetch(tf.data.AUTOTUNE)
        model = echoing.keras.LossFeedback(
            net, per_example_loss=per_example_loss(), observers=[table.update]
        )
    else:
        train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y), seed=seed)
        train = train.batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        model = net
    train = quick_options(train, args)
    if prune:  # LossFeedback trains on per_example_loss's mean: no loss to compile
        model.compile(optimizer)
    else:
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = time.perf_counter()
    model.fit(train, epochs=args.epochs, callbacks=[schedule, counter], verbose=0)
    return {
        "seconds": time.perf_counter() - start,
        "steps": counter.steps,
        "accuracy": accuracy(net, data),
    }


class StepCounter(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1


def run_trainer(seed, args, prune: bool, config_name="mnist1d", image=False) -> dict:
    """``trainers.experiment.run`` on ``configs/<config_name>.py`` (``:prune=1``)."""
    config = load_config(config_name, "prune=1" if prune else "")
    config.seed, config.progress_bar = seed, False
    config.data.data_dir = args.data_dir
    if image:
        config.num_steps = args.image_epochs * config.data.num_train // config.data.batch_size
        # The run stops at a loop's end once its epochs are read: short loops, so that a pruned
        # run of a few epochs stops near them.
        config.steps_per_loop = 10
    else:
        config.data.num_train, config.data.num_eval = args.num_train, args.num_eval
        config.num_steps = args.epochs * args.num_train // config.data.batch_size
    config.warmup_steps = min(config.warmup_steps, config.num_steps // 4)
    config.eval_every_steps = config.num_steps  # evaluated once, at the end
    if args.quick:
        # R (timed after training, on a second model it traces) is not what a quick run checks;
        # nor is the autotuner (see quick_options), off as in the smoke configs.
        config.timing_steps = 0
        config.data.autotune = False
    with tempfile.TemporaryDirectory() as workdir:
        summary = experiment.run(config, workdir)
        rows = [
            json.loads(line) for line in Path(workdir, "metrics.jsonl").read_text().splitlines()
        ]
    last = {key: value for row in rows for key, value in row.items()}
    return {
        "seconds": summary["train_seconds"],
        "steps": summary["step"],
        "accuracy": summary["eval_accuracy"],
        "fresh_examples": summary["fresh_examples"],
        "upstream_seconds_per_step": summary["upstream_seconds_per_step"],
        "prune_keep_rate": last.get("prune_keep_rate"),
        "prune_seen": last.get("prune_seen"),
        # The epochs a pruned run covers (techniques/pruning.py: whole epochs of num_steps).
        "prune_epochs": config.num_steps * config.data.batch_size // config.data.num_train,
        "num_train": config.data.num_train,
        "batch_size": config.data.batch_size,
    }


def profile_pipelines(data, args, repeats: int = 3) -> dict:
    """Seconds per batch of the user-loop pipelines alone (no train step), on a table whose
    losses make pruning keep ~1 - r/2: the work a kept batch costs the input pipeline."""
    train = {**data["train"], "id": np.arange(len(data["train"]["label"]))}
    n = len(train["id"])
    table, by_id = pruning(n, 0, args)
    _, stream = pruning(n, 0, args)
    table.update(train["id"], np.random.default_rng(0).exponential(size=n).astype(np.float32))
    for stage in (by_id, stream):  # past epoch 0 (all unseen) and never annealed
        stage.full_data_epoch = 1 << 30
    stream.table = table
    examples = tf.data.Dataset.from_tensor_slices(train).shuffle(n, seed=0)
    pipelines = {
        "full": examples.batch(args.batch_size, drop_remainder=True),
        "stream": examples.apply(stream).batch(args.batch_size, drop_remainder=True),
        "by_id": by_id.read(
            {"inputs": train["inputs"], "label": train["label"]},
            batch_size=args.batch_size,
            drop_remainder=True,
        ),
    }
    pipelines = {name: quick_options(pipeline, args) for name, pipeline in pipelines.items()}
    seconds = {name: [] for name in pipelines}
    for _ in range(repeats):  # interleaved, so that drift falls on every pipeline alike
        for name, pipeline in pipelines.items():
            start, batches = time.perf_counter(), 0
            for _ in pipeline.prefetch(tf.data.AUTOTUNE):
                batches += 1
            seconds[name].append((time.perf_counter() - start) / batches)
    return {name: float(np.median(values)) for name, values in seconds.items()}


def load_config(name: str, argument: str):
    """``configs/<name>.py``'s ``get_config(argument)``, as ``--config=configs/<name>.py:arg``."""
    spec = importlib.util.spec_from_file_location(f"{name}_config", ROOT / "configs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(argument)


def run_path(path: str, data, seed: int, args, prune: bool) -> dict:
    if path == "hand":
        return run_hand(data, seed, args, prune)
    if path in ("loop", "loop_stream"):
        return run_loop(data, seed, args, prune, stream=path == "loop_stream")
    if path == "fit":
        return run_fit(data, seed, args, prune)
    return run_trainer(seed, args, prune)


def step_seconds(run: dict) -> float:
    return run["seconds"] / run["steps"]


def by_seed(runs: list[dict], **match) -> dict[int, dict]:
    """Seed -> the run whose fields equal ``match`` (e.g. ``path="loop", prune=True``)."""
    return {
        run["seed"]: run
        for run in runs
        if all(run.get(key) == value for key, value in match.items())
    }


def summarize(runs: list[dict]) -> dict:
    """Per path: paired step-time ratio, wall speed-up, step fraction, accuracy delta."""
    summary = {}
    for path in sorted({run["path"] for run in runs}):
        full, pruned = by_seed(runs, path=path, prune=False), by_seed(runs, path=path, prune=True)
        if sorted(full) != sorted(pruned):
            continue
        seeds = sorted(full)
        summary[path] = {
            "step_time_ratio": harness.paired(
                full, pruned, lambda f, p: step_seconds(p) / step_seconds(f)
            ),
            "wall_speedup": harness.paired(full, pruned, lambda f, p: f["seconds"] / p["seconds"]),
            "step_fraction": harness.paired(full, pruned, lambda f, p: p["steps"] / f["steps"]),
            "accuracy_delta_points": float(
                100 * np.mean([pruned[s]["accuracy"] - full[s]["accuracy"] for s in seeds])
            ),
            "full_accuracy": [full[s]["accuracy"] for s in seeds],
            "pruned_accuracy": [pruned[s]["accuracy"] for s in seeds],
        }
    hand = by_seed(runs, path="hand", prune=True)
    for path in ("loop", "fit", "trainer"):
        mine = by_seed(runs, path=path, prune=True)
        if path in summary and hand and sorted(hand) == sorted(mine):
            # Hand-written seconds over the library's, paired: >= 1 when the library is faster.
            summary[path]["speed_vs_hand"] = harness.paired(
                hand, mine, lambda h, m: h["seconds"] / m["seconds"]
            )
    return summary


def image_summary(image_runs: list[dict]) -> dict | None:
    """Decoded images per epoch pruned over full, against the kept fraction, paired by seed."""
    full, pruned = by_seed(image_runs, prune=False), by_seed(image_runs, prune=True)
    if not full or sorted(full) != sorted(pruned):
        return None
    fractions, kept = [], []
    for f, p in ((full[seed], pruned[seed]) for seed in sorted(full)):
        # Images read (each decoded once) per epoch: the full run covers steps x batch / N
        # epochs; the pruned run ends after its prune_epochs, in fewer steps.
        full_per_epoch = f["fresh_examples"] / (f["steps"] * f["batch_size"] / f["num_train"])
        fractions.append((p["fresh_examples"] / p["prune_epochs"]) / full_per_epoch)
        kept.append(p["prune_keep_rate"])
    return {
        "decoded_fraction": float(np.mean(fractions)),
        "kept_fraction": float(np.mean(kept)),
        "per_seed_decoded_fraction": fractions,
        "per_seed_kept_fraction": kept,
        "wall_speedup": harness.paired(full, pruned, lambda f, p: f["seconds"] / p["seconds"]),
    }


def headline(summary: dict, image: dict | None) -> dict:
    """The figures issue 34 names (floats; None where a path did not run)."""

    def mean(path, key):
        entry = summary.get(path, {}).get(key)
        return None if entry is None else entry["mean"]

    figures = {}
    for path in ("loop", "trainer", "fit"):
        figures[f"prune_step_time_ratio_{path}"] = mean(path, "step_time_ratio")
        figures[f"prune_wall_speedup_{path}"] = mean(path, "wall_speedup")
    # The library in a user's own loop against the same loop written by hand; fit's adds
    # Keras's own per-step cost, which its full-data run pays too.
    figures["prune_vs_hand_speed"] = mean("loop", "speed_vs_hand")
    figures["prune_vs_hand_speed_fit"] = mean("fit", "speed_vs_hand")
    figures["prune_decoded_fraction_image"] = None if image is None else image["decoded_fraction"]
    for path in ("loop", "trainer", "fit"):
        entry = summary.get(path)
        figures[f"prune_accuracy_delta_{path}"] = (
            None if entry is None else entry["accuracy_delta_points"]
        )
    return figures


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for axis, key, title, target in (
        (axes[0], "step_time_ratio", "time per pruned step / full step", 1.05),
        (axes[1], "wall_speedup", "wall time, full / pruned", 1.45),
    ):
        means = [summary[n][key]["mean"] for n in names]
        # Clipped at 0: a mean of equal values can round a hair past them.
        low = [max(0.0, summary[n][key]["mean"] - summary[n][key]["min"]) for n in names]
        high = [max(0.0, summary[n][key]["max"] - summary[n][key]["mean"]) for n in names]
        axis.bar(names, means, yerr=[low, high], capsize=4, color="tab:blue")
        axis.axhline(target, color="tab:red", linestyle="--", label=f"target {target}")
        axis.set_title(title)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument(
        "--paths", default=",".join(PATHS), help="comma-separated: " + ",".join(PATHS)
    )
    parser.add_argument("--image", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the user-loop pipelines alone (full, stream, by id)",
    )
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--image-epochs", type=int, default=6)
    parser.add_argument("--num-train", type=int, default=40_000)
    parser.add_argument("--num-eval", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--prune-ratio", type=float, default=0.5)
    parser.add_argument("--anneal", type=float, default=0.125)
    parser.add_argument("--data-dir", default=os.path.expanduser("~/.cache/echoing"))
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    parser.add_argument("--output", default=str(harness.RESULTS / "prune_overhead.json"))
    args = parser.parse_args(argv)
    unknown = set(args.paths.split(",")) - set(PATHS)
    if unknown:
        parser.error(f"unknown --paths {sorted(unknown)}; choose from {list(PATHS)}")
    if args.seeds < 1 or args.epochs < 1:
        parser.error("--seeds and --epochs must be >= 1")
    if args.quick:
        args.seeds, args.epochs, args.image_epochs = 1, 2, 2
        args.num_train, args.num_eval, args.batch_size = 1_000, 200, 32
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    data = load_data(args.num_train, args.num_eval, args.data_dir)
    runs, image_runs = [], []
    # Seeds outermost and the full/pruned runs of a path back to back, so that whatever else
    # the machine does falls on both halves of a pair alike.
    for seed in range(args.seeds):
        for path in args.paths.split(","):
            for prune in (False, True):
                run = run_path(path, data, seed, args, prune)
                runs.append({"path": path, "seed": seed, "prune": prune, **run})
                print(json.dumps(runs[-1]), flush=True)
        if args.image:
            for prune in (False, True):
                run = run_trainer(seed, args, prune, config_name="image_folder", image=True)
                image_runs.append({"seed": seed, "prune": prune, **run})
                print(json.dumps(image_runs[-1]), flush=True)
    summary = summarize(runs)
    image = image_summary(image_runs)
    result = harness.write_results(
        args.output,
        headline=headline(summary, image),
        command="python benchmarks/prune_overhead.py " + " ".join(argv or sys.argv[1:]),
        pipeline_seconds_per_batch=(
            profile_pipelines(data, args, repeats=1 if args.quick else 3) if args.profile else None
        ),
        config={k: v for k, v in vars(args).items() if k != "output"},
        summary=summary,
        image=image,
        runs=runs,
        image_runs=image_runs,
    )
    if summary:
        plot(summary, Path(args.output).with_suffix(".png"))
    print(json.dumps(result["headline"], indent=1))
    return result


if __name__ == "__main__":
    main()
