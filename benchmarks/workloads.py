r"""Real workloads: JPEG images decoded as for ImageNet, and a Transformer language model on
text, each with and without echo.

Run::

    python benchmarks/workloads.py                    # both, 3 + 2 seeds: ~50 min on 2 cores
    python benchmarks/workloads.py --workloads image  # one of them (the other's figures are
                                                      # kept from the existing JSON)
    python benchmarks/workloads.py --quick            # seconds; what tests/benchmarks runs

Writes ``benchmarks/results/workloads.json`` and ``workloads.png``, prints a markdown table.

Both workloads run as users run them, ``configs/<name>.py`` through ``trainers.experiment.run``;
upstream (decoding, tokenizing) and training share the machine's 2 cores, as JPEG decoding and
tokenization share a GPU host's CPU:

* ``image``: ``configs/image_folder.py``: the embedded photo set (2,000 train / 500 test JPEGs of
  400-500 px), random-resized crops decoded from the JPEG bytes to 64 px, flips,
  ``resnet_imagenet_tiny``, batch 64; target 90% test accuracy.
* ``text``: ``configs/text_lm.py``: the standard library's docstrings, WordPiece tokens in the
  pipeline, windows of 64 tokens bucketed by length, ``transformer_lm_small``, batch 32; target
  20% next-token accuracy on the test paragraphs.

Measured side by side in one run, per workload: the train pipeline's examples per second alone,
on one thread (per core) and on every core; the train step's examples per second on a cached
batch; R = t_up / t_down as the trainer measures it; wall time to the target for the baseline
(e = 1), echo at the points that make sense (image: after decode, after augment, after batch,
at e = 2 and 4; text: after decode, at e = 2), and AutoEcho. Every run of a workload has the
same schedule; evaluations (outside the timed training) every 50 (image) or 250 (text) steps;
the baseline runs to the end, for its final accuracy and perplexity. Text also reports the padding
fraction of bucketed batches against unbucketed ones, and the perplexity of a unigram model
(train token frequencies, add-one smoothing) on the test tokens, the baseline any language model
must beat.

Headline (floats, null where not reached): ``image_R``, ``image_echo_speedup_e2``,
``image_echo_speedup_e4`` (after augment; baseline seconds to target / echo's seed by seed,
averaged geometrically, only when every seed reached it; the range is in ``headline_spread``,
the ratio of mean seconds in ``headline_ratio_of_means``), ``image_final_accuracy``,
``image_autoecho_vs_best_fixed`` (AutoEcho's speed-up / the best fixed factor's), and
``text_R``, ``text_echo_speedup_e2``, ``text_echo_speedup_e4`` (after decode),
``text_autoecho_vs_best_fixed``, ``text_padding_fraction``, ``text_final_perplexity``,
``text_unigram_perplexity``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import itertools
import json
import os
import sys
import tempfile
import time
import typing
from pathlib import Path

import harness
import numpy as np
import tensorflow as tf
from echo_time_to_target import spread as spread_of  # a sibling script
from echo_time_to_target import spread_text

import pipelines
from pipelines import sources
from pipelines.sources import text
from trainers import experiment, timing

REPOSITORY = harness.ROOT
RESULTS = harness.RESULTS


class Workload(typing.NamedTuple):
    """One workload: its config file and how its runs are set up.

    Attributes:
      name: "image" or "text" (the headline keys' prefix).
      config_file: under ``configs/``, without ``.py``.
      insertions: the echo points that make sense for it.
      auto_insert: where AutoEcho goes.
      factors: the fixed echo factors tried at each point.
      steps, eval_every, target: every run's schedule, evaluation interval (steps) and
        target accuracy (next-token accuracy for text).
    """

    name: str
    config_file: str
    insertions: tuple[str, ...]
    auto_insert: str
    factors: tuple[float, ...]
    steps: int
    eval_every: int
    target: float


WORKLOADS = {
    "image": Workload(
        "image",
        "image_folder",
        ("after_decode", "after_augment", "after_batch"),
        "after_augment",
        factors=(2.0, 4.0),
        steps=1500,
        eval_every=50,  # in the steep part of the curve, where the first crossing is stable
        target=0.90,
    ),
    # Echo before decode repeats a raw line, tokenized again: it saves only the read. After
    # batch, whole padded batches repeat; on this CPU (R << 1) one point shows what echo costs.
    "text": Workload(
        "text",
        "text_lm",
        ("after_decode",),
        "after_decode",
        factors=(2.0, 4.0),  # R << 1 on this CPU: they show what echo costs there
        steps=2000,
        eval_every=250,
        target=0.20,
    ),
}
# The factor whose speed-up the headline names, per workload (the point the issue names).
HEADLINE_POINT = {"image": "after_augment", "text": "after_decode"}


def workload_config(workload: Workload, args, seed: int):
    """``configs/<workload>.py`` (``:smoke`` with ``--quick``) with this run's settings."""
    path = REPOSITORY / "configs" / f"{workload.config_file}.py"
    spec = importlib.util.spec_from_file_location(workload.config_file, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("smoke" if args.quick else None)
    config.seed, config.progress_bar = seed, False
    config.data.data_dir = args.data_dir
    if args.quick:
        config.num_steps, config.target_accuracy, config.eval_every_steps = 10, 0.0, 5
    else:
        config.num_steps, config.target_accuracy = workload.steps, workload.target
        config.eval_every_steps = workload.eval_every
    config.steps_per_loop = config.eval_every_steps
    config.checkpoint_every_steps, config.checkpoint_iterator = 10**9, False
    config.timing_steps = 0
    for key, value in getattr(args, "data_overrides", {}).items():  # e.g. workloads_gcs.py's
        config.data[key] = value
    return config


def pipeline_rates(config, batches: int) -> dict:
    """Examples per second of the train pipeline alone: on one thread, and on every core."""
    rates = {}
    for name, threads in (("per_core", 1), ("total", 0)):
        data = pipelines.resolve_data_config(config.data)
        data.num_parallel_calls = 1 if threads else tf.data.AUTOTUNE
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads  # 0 = the shared pool
        dataset = pipelines.make_datasets(data, seed=0).train.with_options(options)
        seconds = timing.seconds_per_batch(dataset, num_batches=batches)
        rates[f"examples_per_second_{name}"] = data.batch_size / seconds
    return rates


def text_statistics(config, batches: int) -> dict:
    """Padding with and without bucketing, and the unigram model's eval perplexity."""
    data = pipelines.resolve_data_config(config.data)
    datasets = pipelines.make_datasets(data, seed=0)
    bucketed = text.padding_fraction(itertools.islice(datasets.train, batches))
    source = sources.load(data)
    lengths, counts = [], np.ones(source.vocab_size)  # add-one smoothing
    for element in source.train.dataset.take(20_000).map(source.train.decode):
        label = element["label"].numpy()
        lengths.append(len(label))
        np.add.at(counts, label, 1)
    grouped = np.random.default_rng(0).permutation(lengths)
    grouped = grouped[: len(grouped) // data.batch_size * data.batch_size]
    grouped = grouped.reshape(-1, data.batch_size)
    log_probability = np.log(counts / counts.sum())
    eval_total = eval_tokens = 0.0
    for element in source.eval.dataset.map(source.eval.decode):
        label = element["label"].numpy()
        eval_total -= log_probability[label].sum()
        eval_tokens += len(label)
    return {
        "padding_fraction_bucketed": bucketed,
        "padding_fraction_unbucketed": float(
            1.0 - grouped.sum() / (grouped.max(axis=1) * data.batch_size).sum()
        ),
        "unigram_perplexity": float(np.exp(eval_total / eval_tokens)),
    }


def variants(workload: Workload, args) -> list[dict]:
    rows = [{"workload": workload.name, "variant": "baseline", "factor": 1.0}]
    if args.quick and workload.name == "text":
        return rows  # the quick run checks the text path once; echo's is the image's
    insertions = workload.insertions if not args.quick else workload.insertions[:1]
    for insert in insertions:
        factors = workload.factors[:1] if args.quick else workload.factors
        rows += [
            {"workload": workload.name, "variant": insert, "factor": factor} for factor in factors
        ]
    if args.auto:
        rows.append({"workload": workload.name, "variant": "auto", "factor": None})
    return rows


def run_one(workload: Workload, args, variant: dict, seed: int) -> dict:
    config = workload_config(workload, args, seed)
    baseline = variant["variant"] == "baseline"
    if variant["variant"] == "auto":
        config.auto_echo_max_factor = args.max_echo
        config.echo_insert = workload.auto_insert
    elif not baseline:
        config.echo, config.echo_insert = variant["factor"], variant["variant"]
    config.stop_at_target = not baseline and config.target_accuracy > 0
    if baseline:
        config.timing_steps = args.timing_steps  # R, measured by the trainer after training
    # Earlier runs' input iterators, left in reference cycles, are freed here, not inside this
    # run's timed training: freeing one can wait up to a minute (iterator_teardown.py).
    gc.collect()
    start = time.perf_counter()
    summary = experiment.run(config, tempfile.mkdtemp(prefix="workloads_"))
    return {
        **variant,
        "seed": seed,
        "seconds_to_target": summary["seconds_to_target"],
        "steps_to_target": summary["steps_to_target"],
        "fresh_examples_to_target": summary["fresh_examples_to_target"],
        "final_accuracy": summary["eval_accuracy"] if baseline else None,
        "final_perplexity": summary["eval_perplexity"] if baseline else None,
        "steps": summary["step"],
        "train_seconds": summary["train_seconds"],
        "echo_ratio": summary["echo_ratio"],
        "upstream_seconds_per_step": summary["upstream_seconds_per_step"],
        "downstream_seconds_per_step": summary["downstream_seconds_per_step"],
        "R": summary["upstream_downstream_ratio"],
        "process_seconds": time.perf_counter() - start,
    }


def spread(values: list[float | None]) -> dict | None:
    """Mean, min, max and n of the values that are not None; None when there are none."""
    return spread_of([value for value in values if value is not None]) or None


def summarize(runs: list[dict]) -> list[dict]:
    """Per workload and variant: seconds/steps to target over the seeds that reached it, and
    the speed-up over the workload's baseline.

    ``speedup`` is the baseline's mean seconds to target over the variant's (a ratio of means,
    kept as ``headline_ratio_of_means``); ``paired_speedup`` is the same ratio seed by seed
    (``harness.paired``, over the seeds both reached the target), which the headline reads.
    """
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["workload"], run["variant"], run["factor"]), []).append(run)
    table = []
    for (workload, name, factor), group in groups.items():
        base_runs = groups[(workload, "baseline", 1.0)]
        base = spread([r["seconds_to_target"] for r in base_runs])
        seconds = spread([r["seconds_to_target"] for r in group])
        reached_all = seconds is not None and seconds["n"] == len(group)
        table.append(
            {
                "workload": workload,
                "variant": name,
                "factor": factor,
                "runs": len(group),
                "reached": 0 if seconds is None else seconds["n"],
                "seconds_to_target": seconds,
                "steps_to_target": spread([r["steps_to_target"] for r in group]),
                "final_accuracy": spread([r["final_accuracy"] for r in group]),
                "final_perplexity": spread([r["final_perplexity"] for r in group]),
                "R": spread([r["R"] for r in group]),
                # Only when every seed reached the target: a mean over the lucky seeds flatters.
                "speedup": base["mean"] / seconds["mean"] if base and reached_all else None,
                "paired_speedup": harness.paired(
                    {r["seed"]: r["seconds_to_target"] for r in base_runs},
                    {r["seed"]: r["seconds_to_target"] for r in group},
                    lambda base, mine: base / mine if base and mine else None,
                ),
            }
        )
    return table


def speedup(entry: dict | None, by: str = "paired"):
    """An entry's speed-up: its ``paired_speedup`` (``by="paired"``) or ratio of mean seconds
    (``by="means"``); None when it is missing or a seed missed the target."""
    if not entry or not entry["speedup"]:
        return None
    return entry["paired_speedup"] if by == "paired" else entry["speedup"]


def versus_best(auto, fixed: list):
    """``auto``'s speed-up over the best of ``fixed`` (the highest geometric mean): seed by seed
    for paired figures, else a ratio of the two floats; None if either is missing."""
    fixed = [figure for figure in fixed if figure]
    if not auto or not fixed:
        return None
    if not isinstance(auto, dict):
        return auto / max(fixed)
    best = max(fixed, key=lambda figure: figure["mean"])
    by_seed = harness.per_seed(best), harness.per_seed(auto)
    return harness.paired(*by_seed, lambda best_value, auto_value: auto_value / best_value)


def figures(table: list[dict], text_stats: dict | None, by: str = "paired") -> dict:
    """The figures issue 14 names; None where a workload did not run or a target was missed.

    Speed-ups are ``harness.paired`` results (``by="paired"``) or ratios of mean seconds
    (``by="means"``); ``headline`` keeps the paired geometric means.
    """
    entry = {(e["workload"], e["variant"], e["factor"]): e for e in table}
    result = {}
    for name in WORKLOADS:
        point = HEADLINE_POINT[name]
        baseline = entry.get((name, "baseline", 1.0))
        fixed = [
            speedup(e, by)
            for e in table
            if e["workload"] == name and e["variant"] not in ("baseline", "auto")
        ]
        auto = speedup(entry.get((name, "auto", None)), by)
        result[f"{name}_R"] = _mean(baseline and baseline["R"])
        for factor in (2.0, 4.0):
            result[f"{name}_echo_speedup_e{factor:.0f}"] = speedup(
                entry.get((name, point, factor)), by
            )
        result[f"{name}_autoecho_vs_best_fixed"] = versus_best(auto, fixed)
    result["image_final_accuracy"] = _mean(
        entry.get(("image", "baseline", 1.0), {}).get("final_accuracy")
    )
    result["text_final_perplexity"] = _mean(
        entry.get(("text", "baseline", 1.0), {}).get("final_perplexity")
    )
    result["text_padding_fraction"] = (
        text_stats["padding_fraction_bucketed"] if text_stats else None
    )
    result["text_unigram_perplexity"] = text_stats["unigram_perplexity"] if text_stats else None
    return result


def sections(paired: dict, by_means: dict) -> dict:
    """The JSON's headline (paired geometric means), ``headline_spread`` (each paired figure's
    range and seeds) and ``headline_ratio_of_means`` (the same speed-ups as ratios of means)."""
    headline_figures, spread = harness.paired_headline(paired)
    speedups = [key for key in paired if "speedup" in key or "_vs_" in key]
    return {
        "headline": headline_figures,
        "headline_spread": spread,
        "headline_ratio_of_means": {key: by_means[key] for key in speedups},
    }


def headline(table: list[dict], text_stats: dict | None) -> dict:
    """``figures``' paired geometric means: the figures the issue and RESULTS.md read."""
    return harness.paired_headline(figures(table, text_stats))[0]


def headline_sections(table: list[dict], text_stats: dict | None) -> dict:
    return sections(figures(table, text_stats), figures(table, text_stats, by="means"))


def recompute(stored: dict) -> dict:
    """A stored results file's table and headline, re-derived from its ``runs``."""
    table = summarize(stored["runs"])
    return {**headline_sections(table, stored.get("text_statistics")), "table": table}


def _mean(values: dict | None) -> float | None:
    return values["mean"] if values else None


def markdown(table: list[dict]) -> str:
    lines = [
        "| workload | variant | e | reached | seconds to target, mean [min, max] "
        "| steps to target | speed-up |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [_row(e) for e in table]
    return "\n".join(lines)


def _row(e: dict) -> str:
    speedup = f"{e['speedup']:.2f}x" if e["speedup"] else "-"
    return (
        f"| {e['workload']} | {e['variant']} | {e['factor'] or 'auto'} | "
        f"{e['reached']}/{e['runs']} | {spread_text(e['seconds_to_target'])} | "
        f"{spread_text(e['steps_to_target'], 0)} | {speedup} |"
    )


def plot(table: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({e["workload"] for e in table})
    figure, axes = plt.subplots(1, len(names), figsize=(7 * len(names), 4), squeeze=False)
    for axis, name in zip(axes[0], names, strict=True):
        rows = [e for e in table if e["workload"] == name and e["seconds_to_target"]]
        means = [e["seconds_to_target"]["mean"] for e in rows]
        errors = [
            [m - e["seconds_to_target"]["min"] for m, e in zip(means, rows, strict=True)],
            [e["seconds_to_target"]["max"] - m for m, e in zip(means, rows, strict=True)],
        ]
        axis.bar(range(len(rows)), means, yerr=errors, capsize=4, color="tab:blue")
        labels = [f"{e['variant']}\ne={e['factor'] or 'auto'}" for e in rows]
        axis.set_xticks(range(len(rows)), labels, fontsize=8, rotation=30, ha="right")
        axis.set_ylabel("train seconds to target")
        axis.set_title(f"{name}: wall time to target (bars: min-max over seeds)")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def kept_from(path: Path, args) -> tuple[list[dict], dict, dict | None]:
    """The runs, rates and text statistics of the workloads this invocation does not run, from
    an earlier ``path``: ``--workloads text`` re-measures text and keeps the image figures."""
    if not path.exists():
        return [], {}, None
    previous = json.loads(path.read_text())
    runs = [run for run in previous["runs"] if run["workload"] not in args.workloads]
    rates = {k: v for k, v in previous.get("rates", {}).items() if k not in args.workloads}
    text_stats = None if "text" in args.workloads else previous.get("text_statistics")
    return runs, rates, text_stats


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke data, a few steps")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the image workload")
    parser.add_argument("--text-seeds", type=int, default=2, help="its runs take ~4x longer")
    parser.add_argument("--auto", type=int, default=1, help="1 = also run AutoEcho")
    parser.add_argument("--max-echo", type=float, default=8.0)
    parser.add_argument("--timing-steps", type=int, default=30)
    parser.add_argument("--rate-batches", type=int, default=30)
    parser.add_argument("--data-dir", default=os.path.expanduser("~/.cache/echoing"))
    parser.add_argument("--output", type=Path, default=RESULTS / "workloads.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.text_seeds, args.auto = 1, 1, 0
        args.timing_steps, args.rate_batches = 1, 1  # after 3 warm-up batches or steps
    runs, rates, text_stats = kept_from(args.output, args) if not args.quick else ([], {}, None)
    for name in args.workloads:
        workload = WORKLOADS[name]
        config = workload_config(workload, args, 0)
        rates[name] = pipeline_rates(config, args.rate_batches)
        if name == "text":
            text_stats = text_statistics(config, args.rate_batches)
        for seed in range(args.text_seeds if name == "text" else args.seeds):
            runs += [run_one(workload, args, v, seed) for v in variants(workload, args)]
        baseline = next(r for r in runs if r["workload"] == name and r["variant"] == "baseline")
        step = baseline["downstream_seconds_per_step"]
        rates[name]["train_examples_per_second"] = config.data.batch_size / step if step else None
    table = summarize(runs)
    figures_by = headline_sections(table, text_stats)
    result = harness.write_results(
        args.output,
        headline=figures_by.pop("headline"),
        command="python benchmarks/workloads.py " + " ".join(argv or sys.argv[1:]),
        **figures_by,
        rates=rates,
        text_statistics=text_stats,
        table=table,
        runs=runs,
        workloads={name: WORKLOADS[name]._asdict() for name in WORKLOADS},
        config={key: value for key, value in vars(args).items() if key != "output"},
    )
    plot(table, args.output.with_suffix(".png"))
    print(markdown(table))
    print(json.dumps({"headline": result["headline"], "rates": rates}, indent=2))
    return result


if __name__ == "__main__":
    main()
