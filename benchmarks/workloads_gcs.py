"""The image workload read over a capped network link: JPEG TFRecords in TFDS's ImageNet layout
in a gs:// bucket, with and without echo.

Run::

    python benchmarks/workloads_gcs.py           # 2 seeds x 4 runs at 600 Mbit/s: ~12 min
    python benchmarks/workloads_gcs.py --quick   # seconds; what tests/benchmarks runs

Writes ``benchmarks/results/workloads_gcs.json`` and ``workloads_gcs.png``, prints a table.

The image workload of ``workloads.py`` (``configs/image_folder.py``: the embedded photo set,
random-resized crops decoded from the JPEG bytes, ``resnet_imagenet_tiny``, target 90% test
accuracy), but its train split is read the way ImageNet is read from a bucket: the photo files,
in a shuffled order (as TFDS shuffles ImageNet when it prepares it), are written bytes unchanged
as TFDS-layout shards (``record_layouts.write_image_shards``), uploaded to a storage emulator
behind a link capped at ``--megabits`` (``network_bucket.ThrottledBucket``: the kernel's ``tbf``
in a network namespace, or an in-process limiter), and read through gcsfs. The eval split is
read from local shards (evaluation is not timed). Runs: the baseline (e = 1), echo after augment
at e = 2 and 4, and AutoEcho after augment, each seed.

Headline (floats, null where not reached): ``image_gcs_R`` (the baseline's t_up / t_down as the
trainer measures it), ``image_gcs_echo_speedup_e2`` and ``image_gcs_echo_speedup_e4`` (the
baseline's seconds to target / echo's seed by seed, averaged geometrically, only when every seed
reached it; range in ``headline_spread``, ratio of means in ``headline_ratio_of_means``),
``image_gcs_autoecho_vs_best_fixed`` (AutoEcho's speed-up / the best fixed factor's), and
``megabits_per_second`` (the cap).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import harness
import numpy as np
import tensorflow as tf
import workloads  # a sibling script
from network_bucket import ThrottledBucket

import pipelines
from pipelines import sources
from pipelines.sources import record_layouts, tfrecord

RESULTS = harness.RESULTS
BUCKET = "echoing-imagenet-layout"
WORKLOAD = workloads.Workload(
    "image_gcs",
    "image_folder",
    ("after_augment",),
    "after_augment",
    factors=(2.0, 4.0),
    steps=1500,
    eval_every=50,
    target=0.90,
)


def write_shards(args, directory: str) -> tuple[str, str, int]:
    """The photo set's splits as TFDS-layout shards under ``directory``: their globs, and the
    number of classes."""
    config = workloads.workload_config(WORKLOAD, args, 0)
    source = sources.load(pipelines.resolve_data_config(config.data))
    globs = []
    for name, split, shards in (("train", source.train, 8), ("validation", source.eval, 2)):
        files = [(e["path"].decode(), int(e["label"])) for e in split.dataset.as_numpy_iterator()]
        order = np.random.default_rng(0).permutation(len(files))
        shards = min(shards, len(files))
        prefix = os.path.join(directory, f"photos-{name}")
        globs.append(
            record_layouts.write_image_shards(prefix, [files[i] for i in order], num_shards=shards)
        )
    return globs[0], globs[1], source.num_classes


def upload(local_glob: str) -> str:
    """Copies the files of ``local_glob`` into the bucket; returns their gs:// glob."""
    filesystem = tfrecord.gcs_filesystem()
    if not filesystem.exists(BUCKET):
        filesystem.mkdir(BUCKET)
    for path in sorted(tf.io.gfile.glob(local_glob)):
        filesystem.put(path, f"gs://{BUCKET}/{os.path.basename(path)}")
    return f"gs://{BUCKET}/{os.path.basename(local_glob)}"


def figures(table: list[dict], megabits: float, by: str = "paired") -> dict:
    """The headline's figures: speed-ups as ``harness.paired`` results (``by="paired"``) or
    ratios of mean seconds (``by="means"``), as ``workloads.figures``."""
    entry = {(e["variant"], e["factor"]): e for e in table}
    fixed = [workloads.speedup(e, by) for e in table if e["variant"] == "after_augment"]
    auto = workloads.speedup(entry.get(("auto", None)), by)
    baseline_r = entry.get(("baseline", 1.0), {}).get("R")
    return {
        "image_gcs_R": baseline_r["mean"] if baseline_r else None,
        "image_gcs_echo_speedup_e2": workloads.speedup(entry.get(("after_augment", 2.0)), by),
        "image_gcs_echo_speedup_e4": workloads.speedup(entry.get(("after_augment", 4.0)), by),
        "image_gcs_autoecho_vs_best_fixed": workloads.versus_best(auto, fixed),
        "megabits_per_second": float(megabits),
    }


def headline(table: list[dict], megabits: float) -> dict:
    """``figures``' paired geometric means: the figures the issue and RESULTS.md read."""
    return harness.paired_headline(figures(table, megabits))[0]


def headline_sections(table: list[dict], megabits: float) -> dict:
    by_means = figures(table, megabits, by="means")
    return workloads.sections(figures(table, megabits), by_means)


def recompute(stored: dict) -> dict:
    """A stored results file's table and headline, re-derived from its ``runs``."""
    table = workloads.summarize(stored["runs"])
    megabits = stored["headline"]["megabits_per_second"]
    return {**headline_sections(table, megabits), "table": table}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke data, a few steps")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--megabits", type=float, default=600.0, help="the link's cap")
    parser.add_argument("--auto", type=int, default=1, help="1 = also run AutoEcho")
    parser.add_argument("--max-echo", type=float, default=8.0)
    parser.add_argument("--timing-steps", type=int, default=30)
    parser.add_argument("--rate-batches", type=int, default=30)
    parser.add_argument("--data-dir", default=os.path.expanduser("~/.cache/echoing"))
    parser.add_argument("--output", type=Path, default=RESULTS / "workloads_gcs.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.auto, args.timing_steps, args.rate_batches = 1, 0, 1, 1
    with tempfile.TemporaryDirectory() as directory:
        train_glob, eval_glob, num_classes = write_shards(args, directory)
        with ThrottledBucket(megabits_per_second=args.megabits) as bucket:
            args.data_overrides = {
                "source": "tfrecord",
                "train_files": upload(train_glob),
                "eval_files": eval_glob,
                "num_classes": num_classes,
            }
            config = workloads.workload_config(WORKLOAD, args, 0)
            rates = workloads.pipeline_rates(config, args.rate_batches)
            runs = [
                workloads.run_one(WORKLOAD, args, variant, seed)
                for seed in range(args.seeds)
                for variant in workloads.variants(WORKLOAD, args)
            ]
            limiter = bucket.limiter
    table = workloads.summarize(runs)
    figures_by = headline_sections(table, args.megabits)
    result = harness.write_results(
        args.output,
        headline=figures_by.pop("headline"),
        command="python benchmarks/workloads_gcs.py " + " ".join(argv or sys.argv[1:]),
        **figures_by,
        limiter=limiter,
        data=args.data_overrides,
        rates=rates,
        table=table,
        runs=runs,
        config={k: v for k, v in vars(args).items() if k not in ("output", "data_overrides")},
    )
    workloads.plot(table, args.output.with_suffix(".png"))
    print(workloads.markdown(table))
    print(
        json.dumps({"headline": result["headline"], "rates": rates, "limiter": limiter}, indent=2)
    )
    return result


if __name__ == "__main__":
    main()
