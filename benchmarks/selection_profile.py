"""Where the Assistant methods' extra time per Boss step goes, and how it scales with the Boss.

Run::

    python benchmarks/selection_profile.py           # Boss widths 1, 2 and 4: ~10 min
    python benchmarks/selection_profile.py --quick   # seconds; what tests/benchmarks runs

Writes ``benchmarks/results/selection_profile.json``. For each Boss width and method (``full``,
and the three Assistants of ``selection_assist.py``), per kept batch of 128, the mean over
``--steps`` batches of: the filtered pipeline alone, a Boss step alone on a cached batch, the
learner alone (feedback, then wait until it is idle), and all of it together as
``selection.py`` runs it (seed 0, MNIST-1D 40k, learning rate 0.05).

Width 1 is ``selection.py``'s 1-D CNN (``trainers.models.mnist1d_cnn``). Width w multiplies the
filters of every convolution after the first, and the hidden units, by w. The first
convolution, which the Boss-feature Assistant shares, stays as it is, so the Assistants' own
work is the same at every width while the Boss step grows. That separates the Assistants' cost
from the Boss's: an overhead that is a fixed cost per step falls as 1 / (Boss step time).

Headline (floats): ``{method}_overhead`` (time per step together over ``full``'s, minus 1) at
width 1 and ``{method}_overhead_width{w}`` at the widest, and ``{method}_extra_ms`` at width 1,
the milliseconds per step the method adds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import selection  # a sibling script
from selection_assist import ASSIST_METHODS, AssistMethod

from trainers.models import mnist1d_cnn

METHODS = ("full", *ASSIST_METHODS)


def milliseconds_per_call(function, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return 1e3 * (time.perf_counter() - start) / repeats


def profile(data: dict, method: str, width: int, steps: int) -> dict:
    """The four timings of one method at one Boss width, in ms per kept batch."""
    n = len(data["y"])
    keras.utils.set_random_seed(0)
    run = selection.Run(data, 0, 0.05, model=mnist1d_cnn(data["x"].shape[1:], 10, width=width))
    source = (
        tf.data.Dataset.from_tensor_slices(
            {"inputs": data["x"], "label": data["y"], "id": np.arange(n, dtype=np.int64)}
        )
        .shuffle(n, seed=0)
        .repeat()
    )
    assist = None
    if method != "full":
        assist = AssistMethod(method, run.model, data, 0, 0.3)
        run.table = assist.table
        source = source.apply(assist.stage)
    iterator = iter(source.batch(128, drop_remainder=True).prefetch(2))
    batch = next(iterator)
    losses = run.step(batch)  # traces the step
    timings = {
        "pipeline_ms": milliseconds_per_call(lambda: next(iterator), steps),
        "boss_step_ms": milliseconds_per_call(lambda: run.step(batch), steps),
        "learner_ms": None,
    }
    if assist is not None and assist.learner is not None:
        learner = assist.learner

        def learn():
            learner.feedback_ids(batch["id"], losses)
            learner.wait_until_idle()

        learn()  # traces the learner's step
        timings["learner_ms"] = milliseconds_per_call(learn, steps)

    def together():
        step_batch = next(iterator)
        step_losses = run.step(step_batch)
        run.steps += 1
        if assist is not None:
            assist.after_step(step_batch, step_losses, run.steps)
        return step_losses

    start = time.perf_counter()
    for _ in range(steps):
        last = together()
    float(last[0])  # waits for the last step
    timings["together_ms"] = 1e3 * (time.perf_counter() - start) / steps
    if assist is not None:
        assist.close()
    return timings


def headline(results: dict, widths: list[int]) -> dict:
    def overhead(method: str, width: int) -> float:
        at = results[str(width)]
        return at[method]["together_ms"] / at["full"]["together_ms"] - 1

    first, widest = widths[0], widths[-1]
    out = {}
    for method in ASSIST_METHODS:
        out[f"{method}_overhead"] = overhead(method, first)
        out[f"{method}_overhead_width{widest}"] = overhead(method, widest)
        at = results[str(first)]
        out[f"{method}_extra_ms"] = at[method]["together_ms"] - at["full"]["together_ms"]
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="1,2,4", help="Boss widths, comma-separated")
    parser.add_argument("--steps", type=int, default=200, help="batches timed per measurement")
    parser.add_argument("--num-samples", type=int, default=50_000, help="MNIST-1D, 80% train")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "echoing")
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds")
    parser.add_argument("--output", type=Path, default=selection.RESULTS / "selection_profile.json")
    args = parser.parse_args(argv)
    args.widths = sorted(int(width) for width in args.widths.split(","))
    if args.widths[0] < 1:
        parser.error(f"--widths must be integers >= 1, got {args.widths}")
    if args.quick:
        args.widths, args.steps, args.num_samples = [1, 2], 5, 2_000
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    data = selection.load_mnist1d(args.num_samples, args.cache)
    results = {}
    for width in args.widths:
        results[str(width)] = {}
        for method in METHODS:
            timings = profile(data, method, width, args.steps)
            results[str(width)][method] = timings
            shown = {key: None if v is None else round(v, 2) for key, v in timings.items()}
            print(f"width {width} {method}: {shown}", flush=True)
    result = {
        "headline": headline(results, args.widths),
        "config": {key: str(v) if isinstance(v, Path) else v for key, v in vars(args).items()},
        "milliseconds": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["headline"], indent=1), "->", args.output)
    return result


if __name__ == "__main__":
    main()
