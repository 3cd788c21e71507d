"""What every study shares: paired speed-ups by seed, time to target, machine, results file.

A study trains through the public API or the training binary, once per method and seed, and
hands its per-seed figures here::

    import harness

    baseline = {0: 42.8, 1: 41.9}  # seconds per seed
    method = {0: 27.6, 1: 25.9}
    speedup = harness.paired(baseline, method, lambda base, new: base / new)
    # {"mean": 1.58, "min": 1.55, "max": 1.62, "per_seed": [1.55, 1.62], "seeds": [0, 1]}
    harness.write_results(
        "benchmarks/results/mine.json",
        headline={"mine_speedup": speedup["mean"]},
        command="python benchmarks/mine.py",
        summary={"speedup": speedup},
    )

Ratios are paired by seed (the same seed's baseline and method, run back to back) and averaged
geometrically, with the range: on a shared machine the same run's time moves by 10-30% between
seeds, and a ratio of means would mix that drift into the comparison (``selection.py`` shows
how far). Every results file starts with its ``"headline"``: the figures its issue names,
floats, or None where a target was not reached.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def paired(
    baseline: Mapping[int, object],
    method: Mapping[int, object],
    ratio: Callable[[object, object], float],
) -> dict | None:
    """``ratio(baseline[seed], method[seed])`` over the seeds both have: geometric mean, range.

    Args:
      baseline: seed -> the baseline's figure (or run record) for that seed.
      method: seed -> the method's, likewise.
      ratio: ``(baseline_value, method_value) -> float``, e.g. ``lambda b, m: b / m`` for a
        speed-up from seconds. None values (a run that never reached a target) are left out.

    Returns:
      ``{"mean", "min", "max", "per_seed", "seeds"}``, or None when no seed has both.
    """
    seeds = sorted(set(baseline) & set(method))
    pairs = [(seed, ratio(baseline[seed], method[seed])) for seed in seeds]
    pairs = [(seed, float(value)) for seed, value in pairs if value is not None]
    if not pairs:
        return None
    values = [value for _, value in pairs]
    if min(values) <= 0:
        raise ValueError(f"paired ratios must be > 0 to average geometrically, got {values}.")
    return {
        "mean": math.exp(sum(math.log(value) for value in values) / len(values)),
        "min": min(values),
        "max": max(values),
        "per_seed": values,
        "seeds": [seed for seed, _ in pairs],
    }


def first_reaching(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """The first ``x`` of ``(x, accuracy)`` points whose accuracy is >= ``target``, else None.

    Example::

        first_reaching([(10, 0.5), (20, 0.91), (30, 0.95)], 0.9)  # 20
    """
    for x, accuracy in curve:
        if accuracy >= target:
            return x
    return None


def git_commit() -> str | None:
    """The short commit the study ran at (None outside a git checkout)."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        )
    except OSError:
        return None
    return result.stdout.strip() or None


def machine() -> dict:
    """The machine and library versions a result belongs to."""
    import keras
    import tensorflow as tf

    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
    }


def write_results(path, *, headline: Mapping[str, float | None], command: str, **sections) -> dict:
    """Writes a study's results JSON, ``"headline"`` first, then command, commit and machine.

    Raises:
      TypeError: a headline figure is neither a number nor None (the figures are read by
        ``results_table.py`` and by people: no strings, no nested objects).
    """
    for key, value in headline.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TypeError(f"headline {key!r} must be a float or None, got {value!r}.")
    figures = {key: None if value is None else float(value) for key, value in headline.items()}
    result = {
        "headline": figures,
        "command": command,
        "commit": git_commit(),
        "machine": machine(),
        **sections,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def per_seed(figure: Mapping | None) -> dict[int, float]:
    """A ``paired`` result as ``{seed: ratio}`` (empty for None), to pair it again.

    Two speed-ups over the same baseline give the method-over-method ratio seed by seed::

        auto, fixed = per_seed(auto_speedup), per_seed(fixed_speedup)
        paired(fixed, auto, lambda f, a: a / f)  # auto's speed-up over fixed, per seed
    """
    if not figure:
        return {}
    return dict(zip(figure["seeds"], figure["per_seed"], strict=True))


def paired_headline(figures: Mapping[str, dict | float | None]) -> tuple[dict, dict]:
    """Splits ``{key: paired(...) or a plain float or None}`` into headline and spread.

    Returns ``(headline, spread)``: the headline's figure for a paired entry is its geometric
    mean; ``spread[key]`` keeps the whole ``paired`` result (min, max, per seed, seeds), written
    next to the headline as ``"headline_spread"``. Plain figures (a ratio R, an accuracy) pass
    through to the headline with no spread.
    """
    headline, spread = {}, {}
    for key, figure in figures.items():
        if isinstance(figure, Mapping):
            headline[key], spread[key] = float(figure["mean"]), dict(figure)
        else:
            headline[key] = None if figure is None else float(figure)
    return headline, spread


def headline_sections(
    figures: Mapping[str, dict | float | None], ratio_of_means: Mapping[str, float | None]
) -> dict:
    """A study's ``"headline"``, ``"headline_spread"`` and ``"headline_ratio_of_means"``
    sections: ``figures`` as ``paired_headline`` splits them, and the ratios of means the paired
    speed-ups replaced, kept beside them (nothing is lost when a headline changes method)."""
    headline, spread = paired_headline(figures)
    return {
        "headline": headline,
        "headline_spread": spread,
        "headline_ratio_of_means": dict(ratio_of_means),
    }


def recompute(path, derive: Callable[[dict], Mapping]) -> dict:
    """Re-derives a stored results file's figures from the runs it stores; nothing is re-run.

    ``derive(stored)`` returns the sections to replace (``"headline"`` among them, e.g. also
    ``"headline_spread"``, ``"summary"``); every other section is kept as stored. The file gains
    ``"recomputed_from_stored_runs"``: the commit whose code re-derived it (the measurements stay
    those of the run that wrote the file).
    """
    path = Path(path)
    text = path.read_text()
    stored = json.loads(text)
    second_line = (text.splitlines()[1:] or [" "])[0]
    indent = len(second_line) - len(second_line.lstrip(" "))
    sections = dict(derive(stored))
    result = {"headline": sections.pop("headline", stored["headline"])}
    result.update((key, value) for key, value in stored.items() if key != "headline")
    result.update(sections)
    result["recomputed_from_stored_runs"] = git_commit()
    path.write_text(json.dumps(result, indent=max(indent, 1)) + "\n")  # as the file was
    return result
