"""Where does a pruned step of the library's own loop lose to InfoBatch written by hand?

    python benchmarks/prune_loop_ablation.py            # ~3 min on 2 cores
    python benchmarks/prune_loop_ablation.py --quick    # seconds: the CI smoke run

``prune_overhead.py`` finds the library's pruned run at 0.89x the hand-written one's speed in a
user's own loop and 0.76x under ``fit``, with its full-data runs as much slower. This study times
the same train step (the MNIST-1D CNN, AdamW, batch 128) fed each way, on a loss table that
prunes (~0.62 kept), for a fixed number of steps per round, the ways interleaved round by round so
that drift on a shared machine falls on each alike:

* ``hand``: numpy batches of a numpy id order, the per-example losses read back per step (the
  reference, as ``prune_overhead.py``'s ``hand``);
* ``tf_data``: plain ``from_tensor_slices(...).shuffle(N).batch(128)`` in a Python loop, no
  library at all: what iterating any tf.data pipeline from Python costs;
* ``loop``: ``loss_prune(...).read(...)`` and ``table.update`` in the step, a Python loop (the
  library's pattern in ``prune_overhead.py``);
* ``loop_in_graph``: the same dataset and step, ``steps_per_call`` steps per ``tf.function`` call
  over the iterator (what ``fit``'s ``steps_per_execution`` does): no Python per step;
* ``fit`` and ``fit_steps_per_execution``: ``echoing.keras.LossFeedback`` over ``read``, with
  ``steps_per_execution`` 1 and ``steps_per_call``.

Speed against ``hand`` is hand's seconds per step over the way's, paired by round.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import harness
import keras
import numpy as np
import tensorflow as tf
from prune_overhead import build, load_data, make_step, per_example_loss

import echoing

WAYS = ("hand", "tf_data", "loop", "loop_in_graph", "fit", "fit_steps_per_execution")


def pruning_table(n: int, seed: int) -> tuple[echoing.LossTable, echoing.LossPruning]:
    """A table every id has a loss in, and a stage that prunes it (never annealed)."""
    table = echoing.LossTable(n)
    rng = np.random.default_rng(seed)
    table.update(np.arange(n), rng.exponential(size=n).astype(np.float32))
    stage = echoing.loss_prune(table, num_epochs=1 << 20, prune_ratio=0.5, seed=seed)
    return table, stage


def hand_way(data, args):
    """InfoBatch's inner loop by hand: numpy batches; returns ``run(steps)``."""
    x, y = data["train"]["inputs"], data["train"]["label"]
    n, rng = len(y), np.random.default_rng(0)
    losses, weights = np.zeros(n, np.float32), np.ones(n, np.float32)
    step = make_step(*build(0, args))
    order = iter(())

    def run(steps):
        nonlocal order
        for _ in range(steps):
            batch = next(order, None)
            if batch is None:  # a new epoch: the kept ids (~0.62) in a new order
                ids = rng.permutation(np.flatnonzero(rng.random(n) < 0.62))
                order = iter(np.array_split(ids, len(ids) // args.batch_size))
                batch = next(order)
            batch = batch[: args.batch_size]
            losses[batch] = step(x[batch], y[batch], weights[batch]).numpy()

    return run


def dataset_ways(data, args) -> dict:
    """``tf_data``, ``loop`` and ``loop_in_graph``: each ``run(steps)`` over a repeated dataset."""
    train = {"inputs": data["train"]["inputs"], "label": data["train"]["label"]}
    n = len(train["label"])
    ways = {}
    plain = tf.data.Dataset.from_tensor_slices(train).shuffle(n, seed=0).repeat()
    plain = iter(plain.batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE))
    step = make_step(*build(0, args))
    weight = tf.ones([args.batch_size])

    def tf_data(steps):
        for _ in range(steps):
            batch = next(plain)
            step(batch["inputs"], batch["label"], weight)

    ways["tf_data"] = tf_data
    for name in ("loop", "loop_in_graph"):
        table, stage = pruning_table(n, seed=0)
        batches = stage.read(train, batch_size=args.batch_size, drop_remainder=True)
        ways[name] = library_loop(
            iter(batches.repeat().prefetch(tf.data.AUTOTUNE)),
            make_step(*build(0, args)),
            table,
            args.steps_per_call if name == "loop_in_graph" else 1,
        )
    return ways


def library_loop(iterator, step, table, steps_per_call: int):
    """A user's loop over ``read``: ``table.update`` in the step, ``steps_per_call`` a call."""

    @tf.function
    def train(iterator):
        for _ in tf.range(steps_per_call):
            batch = next(iterator)
            losses = step(batch["inputs"], batch["label"], batch["sample_weight"])
            table.update(batch["id"], losses)

    def run(steps):
        for _ in range(steps // steps_per_call):
            train(iterator)

    return run


def fit_way(data, args, steps_per_execution: int):
    """``LossFeedback.fit`` over ``read``; ``run(steps)`` is one fit of ``steps`` steps."""
    train = {"inputs": data["train"]["inputs"], "label": data["train"]["label"]}
    table, stage = pruning_table(len(train["label"]), seed=0)
    batches = stage.read(train, batch_size=args.batch_size, drop_remainder=True).repeat()
    batches = batches.map(echoing.keras.fit_inputs).prefetch(tf.data.AUTOTUNE)
    net, optimizer = build(0, args)
    model = echoing.keras.LossFeedback(
        net, per_example_loss=per_example_loss(), observers=[table.update]
    )
    model.compile(optimizer, steps_per_execution=steps_per_execution)

    def run(steps):
        model.fit(batches, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0)

    return run


def measure(ways: dict, args) -> dict:
    """Seconds per step of each way, ``--rounds`` interleaved rounds after one untimed."""
    seconds = {name: [] for name in ways}
    for round_index in range(args.rounds + 1):
        for name, run in ways.items():
            start = time.perf_counter()
            run(args.steps)
            if round_index:  # round 0 traces and fills caches
                seconds[name].append((time.perf_counter() - start) / args.steps)
    return seconds


def summarize(seconds: dict) -> dict:
    """Each way's median ms per step, and its speed against ``hand`` paired by round."""
    hand = dict(enumerate(seconds["hand"]))
    return {
        name: {
            "ms_per_step": float(np.median(values) * 1e3),
            # The rounds play the part of seeds: each pairs runs made side by side.
            "speed_vs_hand": harness.paired(hand, dict(enumerate(values)), lambda h, w: h / w),
        }
        for name, values in seconds.items()
    }


def headline(summary: dict) -> dict:
    return {
        f"{name}_speed_vs_hand": summary[name]["speed_vs_hand"]["mean"]
        for name in WAYS
        if name != "hand"
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=320, help="steps per way per round")
    parser.add_argument("--rounds", type=int, default=8, help="timed rounds (one more untimed)")
    parser.add_argument("--steps-per-call", type=int, default=16)
    parser.add_argument("--data-dir", default=str(Path.home() / ".cache" / "echoing"))
    parser.add_argument("--quick", action="store_true", help="a few steps: the CI smoke run")
    parser.add_argument("--output", default=str(harness.RESULTS / "prune_loop_ablation.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.rounds, args.steps_per_call = 8, 1, 4
    if args.steps % args.steps_per_call:
        parser.error(
            f"--steps {args.steps} is not a multiple of --steps-per-call {args.steps_per_call}; "
            "pick steps that the in-graph loop divides into whole calls."
        )
    # prune_overhead's build() reads these; the cosine schedule is not used here.
    args.learning_rate, args.batch_size = 3e-3, 128
    return args


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    data = load_data(40_000 if not args.quick else 1_280, 1_000, args.data_dir)
    ways = {"hand": hand_way(data, args), **dataset_ways(data, args)}
    ways["fit"] = fit_way(data, args, steps_per_execution=1)
    ways["fit_steps_per_execution"] = fit_way(data, args, args.steps_per_call)
    summary = summarize(measure(ways, args))
    result = harness.write_results(
        args.output,
        headline=headline(summary),
        command=" ".join(["python benchmarks/prune_loop_ablation.py", *argv]),
        config={key: value for key, value in vars(args).items() if key != "output"},
        summary=summary,
    )
    for name, row in summary.items():
        print(f"{name:24s} {row['ms_per_step']:6.2f} ms/step  {row['speed_vs_hand']['mean']:.3f}")
    return result


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    main()
