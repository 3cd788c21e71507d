r"""The main job before and after a code change, side by side in one run: wall time and accuracy.

Run (about 5 minutes on 2 cores)::

    python benchmarks/refactor_parity.py --before=5a91aec   # writes results/refactor_parity.json
    python benchmarks/refactor_parity.py --before=HEAD~3 --seeds=1 --config-arg=smoke  # seconds

``--before`` names a git revision of this repository; it is exported with ``git archive`` into a
temporary folder. "after" is this working tree. Both run the README's first command (the
training binary on ``configs/mnist1d.py``; ``--config-arg`` appends ``:ARG``) with the same
seeds, in child processes, alternating before/after so background load hits both alike, and
share the MNIST-1D cache. Per run it records the process's wall time and ``summary.json``
(train seconds, final accuracy, fresh examples). The headline ratio is before / after of the
wall time, seed by seed, averaged geometrically (above 1: the change is faster; its range is in
``headline_spread``, the ratio of the medians in ``headline_ratio_of_medians``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import harness

ROOT = harness.ROOT
RESULTS = harness.RESULTS
SIDES = ("before", "after")


def export_revision(revision: str, folder: Path) -> Path:
    """``revision`` of this repository as files under ``folder`` (no git worktree)."""
    archive = folder / "before.tar"
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), revision],
        check=True,
    )
    tree = folder / "before"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def run_main_job(tree: Path, workdir: Path, seed: int, config_arg: str) -> dict:
    """The training binary from ``tree`` on its own ``configs/mnist1d.py``; its summary."""
    config = str(tree / "configs" / "mnist1d.py") + (f":{config_arg}" if config_arg else "")
    command = [
        sys.executable,
        "-m",
        "trainers.train",
        f"--config={config}",
        f"--workdir={workdir}",
        f"--config.seed={seed}",
        "--config.progress_bar=False",
    ]
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if completed.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{completed.stderr[-3000:]}")
    summary = json.loads((workdir / "summary.json").read_text())
    return {
        "seed": seed,
        "wall_seconds": wall,
        "train_seconds": summary["train_seconds"],
        "eval_accuracy": summary["eval_accuracy"],
        "fresh_examples": summary["fresh_examples"],
        "step": summary["step"],
    }


def prepare_data(config_arg: str) -> None:
    """Generates the config's data into the shared cache first: a run that generates it draws
    from the global random generators (which code before f2b6bd2 let change its model)."""
    command = [
        sys.executable,
        "-c",
        "import importlib.util, sys; import pipelines; from pipelines import sources; "
        "spec = importlib.util.spec_from_file_location('c', 'configs/mnist1d.py'); "
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
        "config = module.get_config(sys.argv[1] or None); "
        "sources.load(pipelines.resolve_data_config(config.data))",
        config_arg,
    ]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)


def compare(before_tree: Path, seeds: list[int], config_arg: str, scratch: Path) -> list[dict]:
    prepare_data(config_arg)
    rows = []
    for seed in seeds:
        for side, tree in (("before", before_tree), ("after", ROOT)):
            workdir = scratch / f"{side}_{seed}"
            row = {"side": side, **run_main_job(tree, workdir, seed, config_arg)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def medians(rows: list[dict]) -> dict:
    """Before / after of the median seconds over seeds, and each side's median accuracy."""

    def median(side: str, key: str) -> float:
        return statistics.median(row[key] for row in rows if row["side"] == side)

    return {
        "wall_speedup_after_vs_before": median("before", "wall_seconds")
        / median("after", "wall_seconds"),
        "train_seconds_speedup_after_vs_before": median("before", "train_seconds")
        / median("after", "train_seconds"),
        "accuracy_before": median("before", "eval_accuracy"),
        "accuracy_after": median("after", "eval_accuracy"),
    }


def paired(rows: list[dict]) -> dict:
    """Before's seconds over after's, seed by seed (``harness.paired``): > 1 when after is
    faster."""
    by_seed = {side: {row["seed"]: row for row in rows if row["side"] == side} for side in SIDES}
    return {
        f"{key}_speedup_after_vs_before": harness.paired(
            by_seed["before"],
            by_seed["after"],
            lambda before, after, key=key: before[key] / after[key],
        )
        for key in ("wall_seconds", "train_seconds")
    }


def headline_sections(rows: list[dict]) -> dict:
    """The headline (speed-ups paired by seed, geometric mean; accuracies the medians), the
    speed-ups' spread over seeds and the ratios of medians, as the JSON stores them."""
    by_median, by_seed = medians(rows), paired(rows)
    speedups = {
        "wall_speedup_after_vs_before": by_seed["wall_seconds_speedup_after_vs_before"],
        "train_seconds_speedup_after_vs_before": by_seed["train_seconds_speedup_after_vs_before"],
    }
    accuracies = {key: by_median[key] for key in ("accuracy_before", "accuracy_after")}
    headline_figures, spread = harness.paired_headline({**speedups, **accuracies})
    return {
        "headline": headline_figures,
        "headline_spread": spread,
        "headline_ratio_of_medians": {key: by_median[key] for key in speedups},
        "paired": by_seed,
    }


def headline(rows: list[dict]) -> dict:
    """``headline_sections``' headline: the figures RESULTS.md and BENCHMARKS.md read."""
    return headline_sections(rows)["headline"]


def recompute(stored: dict) -> dict:
    """A stored results file's headline, re-derived from its per-seed ``runs``."""
    return headline_sections(stored["runs"])


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (times, accuracies) = plt.subplots(1, 2, figsize=(9, 3.5))
    for offset, side in enumerate(SIDES):
        mine = [row for row in rows if row["side"] == side]
        times.scatter([offset] * len(mine), [row["wall_seconds"] for row in mine], label=side)
        accuracies.scatter([offset] * len(mine), [row["eval_accuracy"] for row in mine])
    for axis, label in ((times, "wall seconds per run"), (accuracies, "final eval accuracy")):
        axis.set_xticks([0, 1], ["before", "after"])
        axis.set_ylabel(label)
    figure.suptitle("configs/mnist1d.py before and after, same seeds")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="git revision to compare against")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--config-arg", default="", help="configs/mnist1d.py:ARG, e.g. smoke")
    parser.add_argument("--output", default=str(RESULTS / "refactor_parity.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        before_tree = export_revision(args.before, scratch)
        rows = compare(before_tree, list(range(args.seeds)), args.config_arg, scratch)
    sections = headline_sections(rows)
    result = harness.write_results(
        args.output,
        headline=sections.pop("headline"),
        command="python benchmarks/refactor_parity.py " + " ".join(sys.argv[1:]),
        settings={
            "before": args.before,
            "after": f"{harness.git_commit()} + working tree",
            "config": "configs/mnist1d.py" + (f":{args.config_arg}" if args.config_arg else ""),
            "seeds": args.seeds,
        },
        **sections,
        runs=rows,
    )
    output = Path(args.output)
    plot(rows, output.with_suffix(".png"))
    print(json.dumps(result["headline"], indent=1))


if __name__ == "__main__":
    main()
