"""Where pruning's and the Assistants' extra time per Boss step goes, and how it scales.

Run::

    python benchmarks/selection_profile.py           # Boss widths 1, 2 and 4: ~5 min
    python benchmarks/selection_profile.py --quick   # seconds; what tests/benchmarks runs

Writes ``benchmarks/results/selection_profile.json``. For each Boss width and method (``full``,
``prune``, and the four Assistants of ``selection_assist.py``), per kept batch of 128: the mean over
``--steps`` batches of the filtered pipeline alone, a Boss step alone on a cached batch, the
learner alone per batch it trains on (``--train-every`` feedbacks, all but one skipped, then
wait until it is idle: its share of a step is this / ``--train-every``), and the median over
rounds of all of it together as ``selection.py`` runs it (seed 0, MNIST-1D 40k, learning rate
0.05, the learners on every 4th batch). "Together" is timed in ``--rounds`` interleaved rounds
(each method's share of ``--steps`` in turn, the learner's backlog waited for), so each round's
ratio to ``full`` compares runs seconds apart.

Width 1 is ``selection.py``'s 1-D CNN (``trainers.models.mnist1d_cnn``). Width w multiplies the
filters of every convolution after the first, and the hidden units, by w. The first
convolution, which the Boss-feature Assistant shares, stays as it is, so the Assistants' own
work is the same at every width while the Boss step grows. That separates the Assistants' cost
from the Boss's: an overhead that is a fixed cost per step falls as 1 / (Boss step time).

Headline (floats): ``{method}_overhead`` (the median over rounds of the time per step together
over ``full``'s in the same round, minus 1) at width 1 and ``{method}_overhead_width{w}`` at the
widest, and ``{method}_extra_ms`` at width 1, the milliseconds per step the method adds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import harness
import keras
import numpy as np
import selection  # a sibling script
import tensorflow as tf
from selection_assist import ASSIST_METHODS, AssistMethod

import echoing
from trainers.models import mnist1d_cnn

METHODS = ("full", "prune", *ASSIST_METHODS)
# selection.py's settings (run length, pruning's r and δ, the filter's γ, train_every): one source.
SELECTION = selection.parse_args([])


def milliseconds_per_call(function, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return 1e3 * (time.perf_counter() - start) / repeats


class Profiled:
    """One method at one Boss width, set up as ``selection.py`` runs it (seed 0, lr 0.05)."""

    def __init__(
        self, data: dict, method: str, width: int, train_every: int, autotune: bool = True
    ):
        n = len(data["y"])
        keras.utils.set_random_seed(0)
        model = mnist1d_cnn(data["x"].shape[1:], 10, width=width)
        self.run = selection.Run(data, 0, 0.05, model=model)
        source = (
            tf.data.Dataset.from_tensor_slices(
                {"inputs": data["x"], "label": data["y"], "id": np.arange(n, dtype=np.int64)}
            )
            .shuffle(n, seed=0)
            .repeat()
        )
        self.assist, self.stage = None, None  # the filtering stage, if any
        if method == "prune":
            self.run.table = echoing.LossTable(n)  # as selection.py runs it: the step updates it
            self.stage = echoing.loss_prune(
                self.run.table,
                num_epochs=SELECTION.epochs,
                prune_ratio=SELECTION.prune_ratio,
                anneal_fraction=SELECTION.anneal,
                seed=0,
            )
            source = source.apply(self.stage)
        elif method != "full":
            self.assist = AssistMethod(
                method, self.run.model, data, 0, SELECTION.assist_base_prob, train_every
            )
            self.run.table = self.assist.table  # the oracle's
            self.run.boss_features = self.assist.tap
            self.stage = self.assist.stage
            source = source.apply(self.stage)
        if self.run.table is not None:
            # Filled with losses first, so the profile times the filter as it runs once every
            # example has been seen, not the first epoch, which keeps every unseen example.
            rng = np.random.default_rng(0)
            self.run.table.update(np.arange(n), rng.exponential(size=n).astype(np.float32))
        batches = source.batch(128, drop_remainder=True).prefetch(2)
        if not autotune:
            # Deleting an autotuned iterator can wait for the autotuner's next pass, seconds
            # after a life this short (iterator_teardown.py): --quick turns it off.
            options = tf.data.Options()
            options.autotune.enabled = False
            batches = batches.with_options(options)
        self.iterator = iter(batches)
        self.batch = next(self.iterator)
        self.out = self.run.step(self.batch)  # traces the step

    def parts(self, steps: int) -> dict:
        """Each part alone, in ms per kept batch."""
        timings = {
            "pipeline_ms": milliseconds_per_call(lambda: next(self.iterator), steps),
            "boss_step_ms": milliseconds_per_call(lambda: self.run.step(self.batch), steps),
            "learner_ms": None,
        }
        learner = self.assist.learner if self.assist is not None else None
        if learner is not None:

            def learn():
                for _ in range(learner.train_every):  # one trained batch, the rest skipped
                    self.assist.after_step(self.batch, self.out, step=1)
                learner.wait_until_idle()

            learn()  # traces the learner's step
            timings["learner_ms"] = milliseconds_per_call(learn, steps)
        return timings

    def together(self, steps: int) -> float:
        """ms per kept batch with everything running; the learner's backlog is charged here."""
        start = time.perf_counter()
        for _ in range(steps):
            batch = next(self.iterator)
            out = self.run.step(batch)
            self.run.steps += 1
            if self.assist is not None:
                self.assist.after_step(batch, out, self.run.steps)
        float(out["losses"][0])  # waits for the last step
        if self.assist is not None and self.assist.learner is not None:
            self.assist.learner.wait_until_idle()
        return 1e3 * (time.perf_counter() - start) / steps

    def close(self) -> None:
        if self.assist is not None:
            self.assist.close()


def profile_width(
    data: dict, width: int, steps: int, rounds: int, train_every: int, autotune: bool = True
) -> dict:
    """Every method's parts, then their time together in interleaved rounds.

    The machine's speed drifts by tens of percent over minutes, more than the overheads measured;
    timing each method's ``steps / rounds`` batches in turn, round after round, lets each round's
    ratio to ``full`` compare runs taken seconds apart.
    """
    profiled = {method: Profiled(data, method, width, train_every, autotune) for method in METHODS}
    results = {method: one.parts(steps) for method, one in profiled.items()}
    per_round = {method: [] for method in METHODS}
    for _ in range(rounds):
        for method, one in profiled.items():
            per_round[method].append(one.together(max(1, steps // rounds)))
    for method, one in profiled.items():
        one.close()
        results[method]["together_ms"] = float(np.median(per_round[method]))
        # Examples kept per example read: 1 for full; prune's and each Assistant's filter rate.
        results[method]["keep_rate"] = one.stage.keep_rate() if one.stage is not None else 1.0
        ratios = np.array(per_round[method]) / np.array(per_round["full"]) - 1
        results[method]["overhead_per_round"] = [float(r) for r in ratios]
    return results


def headline(results: dict, widths: list[int]) -> dict:
    def overhead(method: str, width: int) -> float:
        return float(np.median(results[str(width)][method]["overhead_per_round"]))

    first, widest = widths[0], widths[-1]
    out = {}
    for method in ("prune", *ASSIST_METHODS):
        out[f"{method}_overhead"] = overhead(method, first)
        out[f"{method}_overhead_width{widest}"] = overhead(method, widest)
        at = results[str(first)]
        out[f"{method}_extra_ms"] = at[method]["together_ms"] - at["full"]["together_ms"]
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="1,2,4", help="Boss widths, comma-separated")
    parser.add_argument("--steps", type=int, default=200, help="batches timed per measurement")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds, together")
    parser.add_argument(
        "--train-every",
        type=int,
        default=SELECTION.assist_train_every,
        help="the learned Assistants train on every k-th Boss batch (selection.py's default)",
    )
    parser.add_argument("--num-samples", type=int, default=50_000, help="MNIST-1D, 80%% train")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "echoing")
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds")
    parser.add_argument("--output", type=Path, default=harness.RESULTS / "selection_profile.json")
    args = parser.parse_args(argv)
    args.widths = sorted(int(width) for width in args.widths.split(","))
    if args.widths[0] < 1:
        parser.error(f"--widths must be integers >= 1, got {args.widths}")
    if args.quick:
        args.widths, args.steps, args.rounds, args.num_samples = [1, 2], 6, 2, 2_000
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    data = selection.load_mnist1d(args.num_samples, args.cache)
    results = {}
    for width in args.widths:
        results[str(width)] = profile_width(
            data, width, args.steps, args.rounds, args.train_every, autotune=not args.quick
        )
        for method, timings in results[str(width)].items():
            shown = {
                key: v if v is None or isinstance(v, list) else round(v, 2)
                for key, v in timings.items()
            }
            print(f"width {width} {method}: {shown}", flush=True)
    result = harness.write_results(
        args.output,
        headline=headline(results, args.widths),
        command="python benchmarks/selection_profile.py " + " ".join(argv or sys.argv[1:]),
        config={key: str(v) if isinstance(v, Path) else v for key, v in vars(args).items()},
        milliseconds=results,
    )
    print(json.dumps(result["headline"], indent=1), "->", args.output)
    return result


if __name__ == "__main__":
    main()
