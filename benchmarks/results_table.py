"""Generates RESULTS.md, the table a user reads to pick a technique, from the results files.

Example::

    python benchmarks/results_table.py           # rewrites RESULTS.md at the repository root
    python benchmarks/results_table.py --check   # exits 1, in one line, if RESULTS.md is stale

Every figure in the table is read from a ``benchmarks/results/*.json`` file; none is typed here.
``ROWS`` is the data: for each technique and situation, the results file that is current for its
study (its write-up in ``docs/studies/`` says which run supersedes which), the figures it reads
(paths into that file, mostly ``("headline", key)``), where the spread across seeds comes from,
and the text around the figures. ``COMMANDS`` names the command that wrote each file, as the
write-up gives it. A path that no longer resolves (a renamed headline key, a moved file, a
renamed write-up or heading) stops the script with a ``RowError`` naming the file and the key;
``tests/benchmarks/test_results_table.py`` checks every row and that RESULTS.md is current.
"""

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STUDIES = ROOT / "docs" / "studies"
OUTPUT = ROOT / "RESULTS.md"


class RowError(LookupError):
    """A row reads a figure its results file does not hold, or links a write-up that is gone."""


@dataclasses.dataclass(frozen=True)
class Paired:
    """The spread of a speed-up: ``base``'s value over ``method``'s, seed by seed.

    ``runs`` is the path to a list of per-seed runs; ``base`` and ``method`` pick runs by their
    fields. A run's value is its ``value`` field or, with ``target`` (the path to an accuracy),
    the ``seconds`` of the first point of its ``curve`` at or above that accuracy.
    """

    runs: tuple
    base: Mapping
    method: Mapping
    value: str = "seconds_to_target"
    target: tuple | None = None


@dataclasses.dataclass(frozen=True)
class Span:
    """A stored range: ``path`` holds ``[low, high]`` or ``{"min", "max", "per_seed"}``;
    ``seeds`` is the path to its number of seeds when the range does not list them."""

    path: tuple
    seeds: tuple | None = None


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: text with ``{name}`` fields, and where each name's value is read.

    ``figure`` is the headline key of the row's speed-up. When it is a number the speed-up cell
    is ``reached``; when it is null the cell is "not reached; " and then ``unreached``.
    ``values`` maps every other field to a path into ``source`` (a path whose first element ends
    in ``.json`` reads that results file instead), a ``Paired`` or a ``Span``. ``study`` is the
    row's write-up in ``docs/studies/``, optionally ``#`` and a fragment of the heading in it
    that the row links to.
    """

    source: str
    study: str
    situation: str
    technique: str
    figure: str
    reached: str
    unreached: str
    accuracy: str
    limits: str
    values: Mapping = dataclasses.field(default_factory=dict)


def _echo_seeds(scenario: str, **method) -> Paired:
    """Seed-by-seed speed-ups in an ``echo_time_to_target.py`` results file."""
    base = {"scenario": scenario, "variant": "baseline"}
    return Paired(("rows",), base, {"scenario": scenario, **method})


def _workload_seeds(workload: str, **method) -> Paired:
    """Seed-by-seed speed-ups in a ``workloads.py`` or ``workloads_gcs.py`` results file."""
    base = {"workload": workload, "variant": "baseline"}
    return Paired(("runs",), base, {"workload": workload, **method})


def _selection(method: str, field: str) -> tuple:
    return ("summary", "methods", method, field)


def _paired_range(method: str) -> Span:
    return Span(_selection(method, "paired_speedup_range"), _selection(method, "paired_seeds"))


_IMAGE_E2 = {"workload": "image", "variant": "after_augment", "factor": 2.0}
_IMAGE_BASE = {"workload": "image", "variant": "baseline"}
_PASSM_PLUS = (
    "workloads", "mnist1d_cnn", "summary", {"method": "passm_plus", "num_workers": 2}
)  # fmt: skip
_BY_SEED = "{figure:.2f}× (paired by seed; per seed {seeds:.2f}×, {seeds.n} seeds)"
_PRUNED = "{figure:.2f}× wall time for the same epochs (per seed {seeds:.2f}×, {seeds.n} seeds)"
_PAIRED = "{paired:.2f}× paired ({range:.2f}×) on those"
_PRIORITY_DIGITS_EARLY = (
    "datasets", "digits", "summary", "0.1", "methods", "pgd", "paired_steps_speedup", "mean"
)  # fmt: skip

ROWS: tuple[Row, ...] = (
    Row(
        source="echo_time_to_target.json",
        study="echo_time_to_target.md",
        situation="Input-bound: augmentation on the training CPU (MNIST-1D, R = {R:.1f})",
        technique="Batch echo, fixed factor: `ds.batch(b).apply(echoing.echo(4))`; "
        "`--config=configs/mnist1d.py:echo=4,insert=after_batch`",
        figure="cpu_best_e4_speedup",
        reached=_BY_SEED,
        unreached="",
        accuracy="{accuracy:+.1f} points or more at the same fresh examples (e = 4 variants)",
        limits="echo before the costly augmentation: {before:.2f}× (repeats it); "
        "R ≤ 1: nothing to hide",
        values={
            "R": ("headline", "cpu_R"),
            "seeds": _echo_seeds("cpu", variant="after_batch", factor=4, shuffle=False),
            "accuracy": ("headline", "final_accuracy_delta_worst_points"),
            "before": (
                "table",
                {"scenario": "cpu", "variant": "before_augment", "factor": 4, "shuffle": False},
                "speedup",
            ),
        },
    ),
    Row(
        source="echo_auto.json",
        study="echo_time_to_target.md#AutoEcho against the baseline and the best fixed factor",
        situation="Input-bound by reads over a slow link (gs:// at {megabits:g} Mbit/s, "
        "R = {R:.0f}), or R unknown or drifting",
        technique="AutoEcho: `auto = echoing.AutoEcho(max_factor=8)`, `ds.apply(auto.echo())`; "
        "`--config=configs/mnist1d.py:echo=auto,insert=after_batch`",
        figure="network_auto_speedup",
        reached=_BY_SEED + "; {vs_fixed:.2f}× the best fixed factor's",
        unreached="",
        accuracy="reaches the same target accuracy (final accuracy not measured)",
        limits="CPU-bound: {cpu:.2f}× against a fixed e = 4's {cpu_fixed:.2f}× (it climbs to "
        "`max_factor`: lower it); not input-bound (R = {idle_R:.2f}): {idle:.2f}×, no loss",
        values={
            "megabits": ("scenarios", "network", "megabits_per_second"),
            "R": ("headline", "network_R"),
            "seeds": _echo_seeds("network", variant="auto"),
            "vs_fixed": ("headline", "network_auto_vs_best_fixed"),
            "cpu": ("headline", "cpu_auto_speedup"),
            "cpu_fixed": ("headline", "cpu_best_e4_speedup"),
            "idle_R": ("headline", "idle_R"),
            "idle": ("headline", "idle_auto_speedup"),
        },
    ),
    Row(
        source="keras_fit.json",
        study="keras_fit.md",
        situation="Keras `model.fit` on a slow input pipeline (R = {R:.1f} by `echoing.diagnose`)",
        technique="`echoing.keras.AutoEchoCallback(echoing.AutoEcho(max_factor=8))`, example "
        "echo with a shuffle after it (README, Keras section)",
        figure="autoecho_fit_speedup",
        reached=_BY_SEED + "; {start:.2f}× starting at diagnose's factor",
        unreached="",
        accuracy="ends at {echoed:.1%} against the baseline's {baseline:.1%}",
        limits="whole batches echoed: {batch:.2f}×; no augmentation after the echo stage: "
        "a copy is the same example again",
        values={
            "R": ("diagnosis", "diagnose", "ratio"),
            "seeds": Paired(
                ("runs",),
                {"method": "baseline"},
                {"method": "auto"},
                target=("summary", "target_accuracy"),
            ),
            "start": ("headline", "autoecho_from_diagnosis_fit_speedup"),
            "echoed": ("summary", "methods", "auto", "final_accuracy"),
            "baseline": ("summary", "methods", "baseline", "final_accuracy"),
            "batch": ("headline", "autoecho_batch_fit_speedup"),
        },
    ),
    Row(
        source="workloads_gcs.json",
        study="workloads_gcs.md",
        situation="Input-bound by reads: JPEG records in a bucket behind a "
        "{megabits:.0f} Mbit/s link (R = {R:.1f})",
        technique="Example echo after augmentation: `--config=configs/image_folder.py:echo=2` "
        "with `--config.data.train_files=gs://…`",
        figure="image_gcs_echo_speedup_e2",
        reached=_BY_SEED + "; AutoEcho {auto:.2f}× the best fixed factor's",
        unreached="",
        accuracy="reaches the same target; the echoed runs stop there (final accuracy not "
        "measured)",
        limits="e = 4 adds little ({e4:.2f}×): at e = 2 the model and decoding set the pace",
        values={
            "megabits": ("headline", "megabits_per_second"),
            "R": ("headline", "image_gcs_R"),
            "seeds": _workload_seeds("image_gcs", variant="after_augment", factor=2.0),
            "auto": ("headline", "image_gcs_autoecho_vs_best_fixed"),
            "e4": ("headline", "image_gcs_echo_speedup_e4"),
        },
    ),
    Row(
        source="workloads.json",
        study="workloads.md",
        situation="JPEG decoding on the same CPU cores as training (R = {R:.1f})",
        technique="Example echo after augmentation: `--config=configs/image_folder.py:echo=2`",
        figure="image_echo_speedup_e2",
        reached=_BY_SEED,
        unreached="",
        accuracy="reaches the same {target:.0%} test accuracy; the echoed runs stop there "
        "(final accuracy not measured)",
        limits="decoding shares the cores with the step, and repeated crops teach less "
        "({steps:.0f} steps to target against {base_steps:.0f}); text (a Transformer LM on "
        "the CPU): R = {text_R:.2f}, {text:.2f}×",
        values={
            "R": ("headline", "image_R"),
            "seeds": _workload_seeds("image", variant="after_augment", factor=2.0),
            "target": ("workloads", "image", "target"),
            "steps": ("table", _IMAGE_E2, "steps_to_target", "mean"),
            "base_steps": ("table", _IMAGE_BASE, "steps_to_target", "mean"),
            "text_R": ("headline", "text_R"),
            "text": ("headline", "text_echo_speedup_e2"),
        },
    ),
    Row(
        source="prune_overhead.json",
        study="pruning.md",
        situation="Many epochs over examples the model already fits; your own training loop "
        "(MNIST-1D, {epochs} epochs)",
        technique="Loss-table pruning (InfoBatch): `echoing.loss_prune(table, num_epochs=E)"
        ".read(arrays, batch_size=B)`, `table.update(ids, losses)` in the step",
        figure="prune_wall_speedup_loop",
        reached=_PRUNED + ", {steps:.2f}× the steps",
        unreached="",
        accuracy="{accuracy:+.2f} points",
        limits="{vs_hand:.2f}× the speed of the same pruning hand-written over numpy "
        "(a `tf.data` iterator per small CPU step)",
        values={
            "epochs": ("config", "epochs"),
            "seeds": Span(("summary", "loop", "wall_speedup")),
            "steps": ("summary", "loop", "step_fraction", "mean"),
            "accuracy": ("headline", "prune_accuracy_delta_loop"),
            "vs_hand": ("headline", "prune_vs_hand_speed"),
        },
    ),
    Row(
        source="prune_overhead.json",
        study="pruning.md",
        situation="The same, in Keras `model.fit`",
        technique="`echoing.keras.LossFeedback(model, per_example_loss=…, "
        "observers=[table.update])` over `loss_prune(…).read(…)`",
        figure="prune_wall_speedup_fit",
        reached=_PRUNED + ", {steps:.2f}× the steps",
        unreached="",
        accuracy="{accuracy:+.2f} points",
        limits="input-bound `fit`: it drops examples after the slow read, {slow:.2f}×",
        values={
            "seeds": Span(("summary", "fit", "wall_speedup")),
            "steps": ("summary", "fit", "step_fraction", "mean"),
            "accuracy": ("headline", "prune_accuracy_delta_fit"),
            "slow": ("keras_fit.json", "headline", "pruning_fit_speedup"),
        },
    ),
    Row(
        source="prune_overhead.json",
        study="pruning.md",
        situation="The same, with the training binary",
        technique="`--config=configs/mnist1d.py:prune=1` (also `configs/image_folder.py`)",
        figure="prune_wall_speedup_trainer",
        reached=_PRUNED + "; a JPEG folder decodes {decoded:.2f}× the images",
        unreached="",
        accuracy="{accuracy:+.2f} points",
        limits="judged by time to the full data's accuracy rather than equal epochs: next row",
        values={
            "seeds": Span(("summary", "trainer", "wall_speedup")),
            "decoded": ("headline", "prune_decoded_fraction_image"),
            "accuracy": ("headline", "prune_accuracy_delta_trainer"),
        },
    ),
    Row(
        source="selection_warmup_prune.json",
        study="selection.md",
        situation="The same, judged by time to the full data's final accuracy (MNIST-1D, "
        "learning-rate warm-up, {seeds} seeds)",
        technique="`echoing.loss_prune`, at its own tuned learning rate",
        figure="prune_speedup_equal_epochs",
        reached="{figure:.2f}× paired by seed ({range:.2f}×)",
        unreached="{reached}/{seeds} seeds reach the worst full-data seed's accuracy; " + _PAIRED,
        accuracy="{accuracy:+.2f} points, in {steps:.2f}× the steps",
        limits="the full data's schedule cut to the same steps does as well "
        "(pruning {vs_short:+.2f} points against it)",
        values={
            "seeds": ("config", "seeds"),
            "reached": _selection("prune", "seeds_reaching_target"),
            "paired": _selection("prune", "paired_speedup"),
            "range": _paired_range("prune"),
            "accuracy": ("headline", "prune_accuracy_delta"),
            "steps": ("headline", "prune_step_fraction"),
            "vs_short": ("headline", "prune_vs_short_accuracy_delta"),
        },
    ),
    Row(
        source="selection_warmup.json",
        study="selection.md",
        situation="Hard examples among easy ones, no per-example table: score each batch "
        "and train on its hardest rows",
        technique="In-batch selection: `echoing.select_rows(batch, losses, k)` on a batch twice "
        "the size; `--config.select_ratio=0.5`",
        figure="select_batch_speedup",
        reached="{figure:.2f}× paired by seed ({range:.2f}×)",
        unreached="{reached}/{seeds} seeds reach the worst full-data seed's accuracy; " + _PAIRED,
        accuracy="ends at {selected:.2%} against the full data's {full:.2%}",
        limits="the scoring forward pass: {ms:.1f} ms per step against {full_ms:.1f}; "
        "its accuracy dips mid-run",
        values={
            "seeds": ("config", "seeds"),
            "reached": _selection("select", "seeds_reaching_target"),
            "paired": _selection("select", "paired_speedup"),
            "range": _paired_range("select"),
            "selected": _selection("select", "final_accuracy"),
            "full": _selection("full", "final_accuracy"),
            "ms": _selection("select", "ms_per_step"),
            "full_ms": _selection("full", "ms_per_step"),
        },
    ),
    Row(
        source="selection_warmup.json",
        study="selection.md",
        situation="Many epochs, and a small learned model can tell easy examples from hard "
        "(MNIST-1D CNN, {seeds} seeds)",
        technique="AutoAssist: `echoing.assistant_filter(assistant)` with an "
        "`echoing.AssistantLearner` fed `echoing.BossFeatures.tap`'s features",
        figure="assist_steps_saved",
        reached="{figure:.0%} fewer steps to the target (ratio of means); "
        "{paired:.2f}× paired ({range:.2f}×)",
        unreached="{reached}/{seeds} seeds reach the worst full-data seed's accuracy; " + _PAIRED,
        accuracy="ends at {assisted:.2%} against the full data's {full:.2%}, in {steps:.0f} "
        "steps against {full_steps:.0f}",
        limits="its learner adds {overhead:.0%} per step on a CPU that also trains; "
        "it stops short of the target on some seeds",
        values={
            "seeds": ("config", "seeds"),
            "reached": _selection("assist_boss_forward", "seeds_reaching_target"),
            "paired": _selection("assist_boss_forward", "paired_speedup"),
            "range": _paired_range("assist_boss_forward"),
            "assisted": _selection("assist_boss_forward", "final_accuracy"),
            "full": _selection("full", "final_accuracy"),
            "steps": _selection("assist_boss_forward", "steps"),
            "full_steps": _selection("full", "steps"),
            "overhead": ("headline", "assist_overhead"),
        },
    ),
    Row(
        source="autoassist.json",
        study="autoassist.md",
        situation="A small model that fits its data in a few epochs (MNIST-1D and digits, MLP)",
        technique="AutoAssist: `--config=configs/mnist1d.py:assist=1` "
        "(`echoing.assistant_filter` and an `AssistantLearner` thread)",
        figure="assistant_steps_vs_shuffle",
        reached="{figure:.2f}× the optimizer steps of plain shuffling (paired by seed); "
        "digits {digits:.2f}×",
        unreached="MNIST-1D: {reached}/{seeds} seeds reach the target; digits: {digits:.2f}× "
        "the optimizer steps of plain shuffling (paired by seed)",
        accuracy="ends at {assisted:.1%} against shuffling's {shuffled:.1%} (MNIST-1D)",
        limits="the learner thread costs {overhead:.0%} of throughput when no core is free",
        values={
            "digits": ("headline", "digits_assistant_steps_vs_shuffle"),
            "reached": ("summary", "mnist1d", "methods", "assistant", "seeds_reaching_target"),
            "seeds": ("summary", "mnist1d", "methods", "assistant", "seeds"),
            "assisted": ("summary", "mnist1d", "methods", "assistant", "final_accuracy"),
            "shuffled": ("summary", "mnist1d", "methods", "shuffle", "final_accuracy"),
            "overhead": ("throughput", "assistant_async", "overhead"),
        },
    ),
    Row(
        source="pgd_clean.json",
        study="pgd.md#Priority sampling on clean data",
        situation="Clean data, plain SGD at its tuned learning rate (digits, {digits:,} examples; "
        "a synthetic set of {synthetic:,})",
        technique="Priority sampling: `echoing.PrioritySampler`, "
        "`echoing.keras.PriorityModel`; `--config=configs/mnist1d.py:priority=1`",
        figure="pgd_steps_speedup_clean",
        reached="{figure:.2f}× the steps to SGD's final training loss (paired by seed)",
        unreached="never reaches SGD's final training loss; to its loss at a tenth of the run, "
        "{early:.2f}× the steps (digits, paired by seed)",
        accuracy="not measured (training loss)",
        limits="even exact priorities do not win at tuned rates: top-k takes a longer step, "
        "not a better direction",
        values={
            "digits": ("datasets", "digits", "num_examples"),
            "synthetic": ("datasets", "classification", "num_examples"),
            "early": _PRIORITY_DIGITS_EARLY,
        },
    ),
    Row(
        source="async_shared_memory_prediction.json",
        study="async_partitioned.md#Timed: weight prediction and sync's update count per worker",
        situation="Small steps that leave a device's cores idle (MNIST-1D CNN; worker threads "
        "over one model in shared memory, on {cpus} CPU cores)",
        technique="Asynchronous partitioned SGD (PASSM+): "
        "`python -m trainers.train --config=configs/passm.py`, weight prediction on, c× sync's "
        "steps",
        figure="passm_plus_shared_speedup_c2",
        reached="{figure:.2f}× (median paired time to target, c = 2; {reached}/{seeds} seeds "
        "reach it)",
        unreached="{reached}/{seeds} seeds reach synchronous SGD's accuracy less half a point; "
        "{rate:.2f}× its updates per second, {saving:.0%} of a step saved by restricted backprop",
        accuracy="{gap:+.1f} points against synchronous SGD (c = 2)",
        limits="the 1.2× target is missed: one step already keeps both cores busy, so 2 workers "
        "make {rate:.2f}× sync's updates per second (concurrency efficiency {efficiency:.2f}); "
        "without weight prediction and c× the steps: {before:+.1f} points against sync",
        values={
            "cpus": ("machine", "cpu_count"),
            "reached": (*_PASSM_PLUS, "reached_target"),
            "seeds": (*_PASSM_PLUS, "seeds"),
            "rate": ("headline", "updates_per_second_ratio_c2"),
            "saving": ("headline", "restricted_backward_time_saving_c2"),
            "gap": ("headline", "passm_plus_shared_accuracy_gap_points_c2"),
            "efficiency": (
                "workloads",
                "mnist1d_cnn",
                "cost_model",
                "passm_plus",
                "concurrency_efficiency",
                "2",
            ),
            "before": (
                "async_shared_memory.json",
                "headline",
                "passm_plus_shared_accuracy_gap_points_c2",
            ),
        },
    ),
)

# The commands that wrote each results file, as its write-up gives them, in the order run.
COMMANDS: Mapping[str, tuple[str, ...]] = {
    "echo_time_to_target.json": (
        "python benchmarks/echo_time_to_target.py --scenarios network --seeds 3 "
        "--shuffle-factors 2,4 --final-fresh 38400",
        "python benchmarks/echo_time_to_target.py --scenarios cpu,idle --seeds 3 --factors 2,4 "
        "--shuffle 0 --final-fresh 38400",
    ),
    "echo_auto.json": (
        "python benchmarks/echo_time_to_target.py --scenarios idle,network,cpu --seeds 3 "
        "--factors 4 --insertions after_batch --shuffle 0 --final-fresh 38400 "
        "--output benchmarks/results/echo_auto.json",
        "python benchmarks/echo_time_to_target.py --scenarios cpu --first-seed 3 --seeds 2 "
        "--factors 4 --insertions after_batch --shuffle 0 --final-fresh 38400 "
        "--output benchmarks/results/echo_auto.json",
    ),
    "keras_fit.json": ("python benchmarks/keras_fit.py",),
    "workloads_gcs.json": ("python benchmarks/workloads_gcs.py",),
    "workloads.json": ("python benchmarks/workloads.py",),
    "prune_overhead.json": ("python benchmarks/prune_overhead.py --seeds 2",),
    "selection_warmup_prune.json": (
        "python benchmarks/selection.py --seeds 8 --methods full,prune,short "
        "--fixed-lrs full=0.1,prune=0.05 --output benchmarks/results/selection_warmup_prune.json",
    ),
    "selection_warmup.json": (
        "python benchmarks/selection.py --seeds 8 --methods "
        "full,prune,short,select,sample,assist_oracle,assist_boss_forward "
        "--output benchmarks/results/selection_warmup.json",
    ),
    "autoassist.json": ("python benchmarks/autoassist.py",),
    "pgd_clean.json": ("python benchmarks/pgd_clean.py",),
    "async_shared_memory_prediction.json": (
        "python benchmarks/async_shared_memory.py --workloads=mnist1d_cnn --weight-prediction "
        "--async-updates-factor=c --seeds=0,1,2,3 "
        "--output=benchmarks/results/async_shared_memory_prediction.json",
        "python benchmarks/async_cost_model.py "
        "benchmarks/results/async_shared_memory_prediction.json",
    ),
    "async_shared_memory.json": (
        "python benchmarks/async_partitioned.py --backend=shared_memory --workloads=mnist1d_cnn",
        "python benchmarks/async_cost_model.py benchmarks/results/async_shared_memory.json",
    ),
    "async_momentum_sets.json": ("python benchmarks/async_momentum_sets.py",),
    "async_staleness_ablation.json": ("python benchmarks/async_staleness_ablation.py",),
}

HEADER = """\
# Results: what each technique measured, and when it does not pay

Generated by `python benchmarks/results_table.py` from `benchmarks/results/*.json`: do not edit by
hand, rerun it (its `--check`, run by the tests, fails while this file is stale).

**How to read it.** Find your bottleneck in the first column; `echoing.diagnose(dataset, model)`
or the binary's `--diagnose` measures R, the time per batch of input over the time per train step
(echo pays only when R > 1). A speed-up is the baseline's wall time to a target accuracy over the
technique's, side by side on one CPU-only machine, seed by seed and averaged geometrically (paired
by seed), unless the cell says otherwise. *Per seed
a–b×* is the range of the seed-by-seed ratios; *paired*, their geometric mean over the seeds
where both runs reached the target. *Not reached*: the technique missed the target on a seed or
more, and the last columns say why. Each figure is read from the results file the row links
(to its write-up in `docs/studies/`), which the commands under the table wrote.
"""

COLUMNS = (
    "Bottleneck / situation",
    "Technique and how to turn it on",
    "Measured speed-up",
    "Accuracy effect",
    "When it does not pay",
    "Study",
)


class _Figure:
    """A figure read from a results file, formatted as "not reached" when it is null."""

    def __init__(self, value):
        self.value = value

    def __format__(self, spec: str) -> str:
        return "not reached" if self.value is None else format(self.value, spec)


@dataclasses.dataclass(frozen=True)
class _Spread:
    """A range over seeds: ``{spread:.2f}`` formats as "low–high", ``{spread.n}`` is n."""

    low: float | None
    high: float | None
    n: int

    def __format__(self, spec: str) -> str:
        if not self.n:
            return "no seed reached the target"
        low, high = format(self.low, spec), format(self.high, spec)
        return low if low == high else f"{low}–{high}"


class Results:
    """The results files of a directory, each parsed once: ``Results(dir).read(file, path)``."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self._files: dict[str, dict] = {}

    def load(self, source: str) -> dict:
        if source not in self._files:
            path = self.directory / source
            if not path.is_file():
                raise RowError(f"{path}: no such results file.")
            self._files[source] = json.loads(path.read_text())
        return self._files[source]

    def read(self, source: str, path: tuple):
        """The value at ``path`` in ``source`` (another file when ``path[0]`` names one)."""
        if path and str(path[0]).endswith(".json"):
            source, path = path[0], path[1:]
        node = self.load(source)
        for depth, key in enumerate(path):
            node = _step(node, key, f"{source}: {_describe(path[: depth + 1])}")
        return node


def _describe(path: tuple) -> str:
    return ".".join(str(key) for key in path)


def _step(node, key, where: str):
    """``node[key]``, where a dict ``key`` picks the one list entry whose fields match it."""
    if isinstance(key, Mapping):
        matches = [e for e in node if all(e.get(k) == v for k, v in key.items())]
        if len(matches) != 1:
            raise RowError(f"{where}: {len(matches)} entries match, expected exactly one.")
        return matches[0]
    try:
        return node[key]
    except (KeyError, IndexError, TypeError):
        known = ", ".join(map(str, node)) if isinstance(node, dict) else type(node).__name__
        raise RowError(f"{where}: no such key (found: {known}).") from None


def _run_value(run: dict, spec: Paired, target: float | None):
    if target is None:
        return run.get(spec.value)
    return next((p["seconds"] for p in run["curve"] if p["test_accuracy"] >= target), None)


def _per_seed(runs: list, match: Mapping, spec: Paired, target, where: str) -> dict:
    chosen = [run for run in runs if all(run.get(k) == v for k, v in match.items())]
    if not chosen or len({run["seed"] for run in chosen}) != len(chosen):
        raise RowError(f"{where}: expected one run per seed matching {dict(match)}.")
    return {run["seed"]: _run_value(run, spec, target) for run in chosen}


def paired(results: Results, source: str, spec: Paired) -> _Spread:
    """The range of the seed-by-seed ratios base / method where both have a value."""
    runs = results.read(source, spec.runs)
    target = None if spec.target is None else results.read(source, spec.target)
    where = f"{source}: {_describe(spec.runs)}"
    base = _per_seed(runs, spec.base, spec, target, where)
    method = _per_seed(runs, spec.method, spec, target, where)
    ratios = [base[s] / method[s] for s in method if method[s] and base.get(s) is not None]
    return _Spread(min(ratios, default=None), max(ratios, default=None), len(ratios))


def span(results: Results, source: str, spec: Span) -> _Spread:
    """A stored range as a ``_Spread``; a null range is one with no seeds."""
    stored = results.read(source, spec.path)
    seeds = None if spec.seeds is None else results.read(source, spec.seeds)
    if stored is None:
        return _Spread(None, None, 0)
    if isinstance(stored, Mapping):
        low, high = stored["min"], stored["max"]
        seeds = len(stored["per_seed"]) if seeds is None else seeds
    else:
        low, high = stored
    return _Spread(low, high, seeds)


def values(results: Results, row: Row) -> dict:
    """Every field a row's text names, read from its results files."""
    read = {
        Paired: lambda spec: paired(results, row.source, spec),
        Span: lambda spec: span(results, row.source, spec),
    }
    fields = {"figure": _Figure(results.read(row.source, ("headline", row.figure)))}
    for name, spec in row.values.items():
        reader = read.get(type(spec))
        fields[name] = reader(spec) if reader else _Figure(results.read(row.source, spec))
    return fields


def reads(row: Row) -> list[tuple[str, tuple]]:
    """Every (results file, path) a row reads: what a test checks still resolves."""
    found = [(row.source, ("headline", row.figure))]
    for spec in row.values.values():
        if isinstance(spec, Paired):
            found += [(row.source, spec.runs)] + [(row.source, spec.target)] * bool(spec.target)
        elif isinstance(spec, Span):
            found += [(row.source, spec.path)] + [(row.source, spec.seeds)] * bool(spec.seeds)
        elif str(spec[0]).endswith(".json"):
            found.append((spec[0], spec[1:]))
        else:
            found.append((row.source, spec))
    return found


def heading_anchors(markdown: str) -> dict[str, str]:
    """A Markdown file's headings (outside code blocks) and their GitHub anchors, in order."""
    anchors: dict[str, str] = {}
    seen: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        in_code ^= line.startswith("```")
        heading = re.match(r"#{1,6} (.+)", line)
        if in_code or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors[heading[1]] = slug if count == 0 else f"{slug}-{count}"
    return anchors


def study_link(row: Row, studies: Path = STUDIES) -> str:
    """The row's link from RESULTS.md: its write-up, and the anchor of the heading it names."""
    name, _, fragment = row.study.partition("#")
    path = studies / name
    if not path.is_file():
        raise RowError(f"{row.source}: no study write-up {path}.")
    link = f"{STUDIES.relative_to(ROOT).as_posix()}/{name}"
    if not fragment:
        return link
    for heading, slug in heading_anchors(path.read_text()).items():
        if fragment in heading:
            return f"{link}#{slug}"
    raise RowError(f"{link} has no heading containing {fragment!r}.")


def cells(results: Results, row: Row, studies: Path = STUDIES) -> list[str]:
    """The row's six cells, its figures filled in."""
    fields = values(results, row)
    figure = fields["figure"].value
    speedup = row.reached if figure is not None else "not reached; " + row.unreached
    texts = (row.situation, row.technique, speedup, row.accuracy, row.limits)
    filled = [text.format(**fields) for text in texts]
    filled.append(f"[{row.source}]({study_link(row, studies)})")
    for cell in filled:
        if "|" in cell or "\n" in cell:
            raise RowError(f"{row.source}: a cell would break the table: {cell!r}")
    return filled


def render(rows=ROWS, results_dir: Path = RESULTS, studies: Path = STUDIES) -> str:
    """RESULTS.md's text: the header, the table and the commands that wrote its figures."""
    results = Results(results_dir)
    lines = [HEADER, "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(results, row, studies)) + " |" for row in rows]
    lines += ["", "The commands that wrote the results files:"]
    for source in dict.fromkeys(source for row in rows for source, _ in reads(row)):
        if source not in COMMANDS:
            raise RowError(f"COMMANDS has no command for {source}.")
        lines.append(f"- `{source}`: " + "; then ".join(f"`{c}`" for c in COMMANDS[source]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="default: RESULTS.md")
    args = parser.parse_args(argv)
    try:
        text = render()
    except RowError as error:
        print(f"results_table.py: {error}", file=sys.stderr)
        return 2
    if not args.check:
        args.output.write_text(text)
        return 0
    if args.output.is_file() and args.output.read_text() == text:
        return 0
    print(
        f"{args.output} is out of date with benchmarks/results/*.json: run "
        "`python benchmarks/results_table.py` and commit the result.",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
