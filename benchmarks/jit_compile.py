"""XLA-compiled vs uncompiled train steps of the custom loop, side by side in one process.

Example::

    python benchmarks/jit_compile.py            # writes benchmarks/results/jit_compile.{json,png}
    python benchmarks/jit_compile.py --quick --output /tmp/jit.json   # seconds, for tests

For each model (the MNIST-1D CNN, the small ResNet) and step variant (plain; ``pgd``, priority
sampling's step, which adds a forward-mode JVP for the priorities) a ``trainers.loop.Trainer`` with
``jit_compile=False`` and one with ``jit_compile=True`` train from the same weights on one cached
batch (no input cost), ``--steps`` steps per measurement after warm-up (which includes the XLA
compilation). The two alternate ``--repeats`` times and the median seconds per step of each is
reported, with ``speedup = uncompiled / compiled``. CPU only here: GPUs/TPUs are where XLA is
expected to matter most, so these figures are a floor for what compilation buys, not a forecast.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import harness
import keras
import tensorflow as tf

import echoing
from echoing import techniques
from trainers import loop, models, timing

RESULTS = str(harness.RESULTS / "jit_compile.json")
# (model, input shape, batch size) on this 2-core CPU: a few ms to tens of ms per step.
MODELS = (("mnist1d_cnn", (40, 1), 128), ("resnet_small", (32, 32, 3), 32))
VARIANTS = ("plain", "pgd")


def _trainer(model_name, input_shape, batch_size, variant, jit_compile, weights, autotune=True):
    model = models.build_model(model_name, input_shape, 10)
    model.set_weights(weights)
    batch = {
        "inputs": tf.random.stateless_uniform([batch_size, *input_shape], seed=[1, 2]),
        "label": tf.range(batch_size, dtype=tf.int64) % 10,
        "id": tf.range(batch_size, dtype=tf.int64),
    }
    cached = timing.cached_batch(tf.data.Dataset.from_tensors(batch))
    if not autotune:
        # --quick (run inside the tests' process): deleting an autotuned iterator, when the
        # garbage collector gets to the trainer, can wait up to a minute for the autotuner's
        # next pass (iterator_teardown.py).
        options = tf.data.Options()
        options.autotune.enabled = False
        cached = cached.with_options(options)
    priority_meter = None
    if variant == "pgd":
        priority_meter = echoing.PriorityMeter(
            echoing.PriorityTable(batch_size), model.trainable_variables
        )
    return loop.Trainer(
        model=model,
        optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
        train_dataset_fn=loop.per_replica_batches(lambda: cached, global_batch_size=batch_size),
        techniques=[techniques.PriorityGradients(priority_meter)] if priority_meter else (),
        jit_compile=jit_compile,
    )


def measure(model_name, input_shape, batch_size, variant, *, steps, repeats, autotune=True) -> dict:
    keras.utils.set_random_seed(0)
    weights = models.build_model(model_name, input_shape, 10).get_weights()
    trainers = {
        jit: _trainer(model_name, input_shape, batch_size, variant, jit, weights, autotune)
        for jit in (False, True)
    }
    seconds = {False: [], True: []}
    for _ in range(repeats):
        for jit, trainer in trainers.items():
            seconds[jit].append(timing.seconds_per_step(trainer.train, num_steps=steps))
    uncompiled, compiled = (statistics.median(seconds[jit]) for jit in (False, True))
    return {
        "model": model_name,
        "variant": variant,
        "batch_size": batch_size,
        "steps_per_measurement": steps,
        "repeats": repeats,
        "uncompiled_seconds_per_step": uncompiled,
        "compiled_seconds_per_step": compiled,
        "uncompiled_all": seconds[False],
        "compiled_all": seconds[True],
        "speedup": uncompiled / compiled,
    }


def plot(rows, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['model']}\n{r['variant']}" for r in rows]
    figure, axis = plt.subplots(figsize=(1.8 * len(rows) + 2, 3.5))
    axis.bar(labels, [r["speedup"] for r in rows], color="tab:blue")
    axis.axhline(1.0, color="gray", linewidth=1)
    for index, row in enumerate(rows):
        axis.annotate(
            f"{1e3 * row['uncompiled_seconds_per_step']:.1f} → "
            f"{1e3 * row['compiled_seconds_per_step']:.1f} ms",
            (index, row["speedup"]),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    axis.set_ylabel("speedup (uncompiled / XLA-compiled)")
    axis.set_title("Train step with jit_compile=True (CPU)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def headline(rows: list[dict]) -> dict[str, float]:
    """``{model}_{variant}_speedup``: uncompiled over XLA-compiled seconds per step, per row.

    >>> headline([{"model": "mlp", "variant": "pgd", "speedup": 1.5}])
    {'mlp_pgd_speedup': 1.5}
    """
    return {f"{row['model']}_{row['variant']}_speedup": float(row["speedup"]) for row in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=RESULTS, help="JSON path; the PNG goes beside it.")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="the MLP, few steps (tests)")
    args = parser.parse_args(argv)
    selected = (("mnist1d_mlp", (40,), 32),) if args.quick else MODELS
    steps, repeats = (3, 1) if args.quick else (args.steps, args.repeats)
    rows = [
        measure(name, shape, batch, variant, steps=steps, repeats=repeats, autotune=not args.quick)
        for name, shape, batch in selected
        for variant in VARIANTS
    ]
    for row in rows:
        print(
            f"{row['model']:>13} {row['variant']:>5}: "
            f"{1e3 * row['uncompiled_seconds_per_step']:7.2f} ms -> "
            f"{1e3 * row['compiled_seconds_per_step']:7.2f} ms (x{row['speedup']:.2f})",
            file=sys.stderr,
        )
    harness.write_results(
        args.output,
        headline=headline(rows),
        command="python benchmarks/jit_compile.py" + (" --quick" if args.quick else ""),
        # Other work shares this machine: the 1-minute load when the measurement ended.
        load_average_1min=os.getloadavg()[0],
        rows=rows,
    )
    plot(rows, os.path.splitext(args.output)[0] + ".png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
