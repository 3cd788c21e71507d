r"""A cost model for PASSM+ speed-ups, from what ``async_shared_memory`` measured.

    python benchmarks/async_cost_model.py benchmarks/results/async_shared_memory.json

Adds a ``"cost_model"`` section to each workload of the results file and prints it. The model
splits a speed-up over synchronous SGD (per-worker batch, wall time to a target) into the three
sources the paper names, each from a measured figure:

    speed-up(c) = c · e(c) · r · η(c)

- ``r``, restricted backprop: a worker's update rate alone over a synchronous step's rate
  (``t_full / t_block`` for PASSM from the timed block steps, 1 for ASSM);
- ``e(c)``, concurrency: the update rate of c workers over c times one worker's, measured at
  each c run here (1 when c workers have c idle cores' worth of device between them; on this
  2-core CPU, where one step already keeps both cores busy, it falls as ~1/c);
- ``η(c)``, statistical efficiency: synchronous steps to the target over asynchronous updates to
  it (staleness costs updates), fitted as ``1 / (1 + κ (c - 1))`` to the measured points.

Predictions for c = 8 and 16 take ``e = 1`` (one worker per idle core or stream: the paper's
setting of c processes on one accelerator that one small step leaves idle) and ``η`` from the
fit. ``updates_per_second_ratio`` is the hardware side alone (``c · e · r`` over sync's rate);
``predicted_speedup`` multiplies in ``η`` and is null where no run reached the target (nothing
to fit the statistical cost on). The model leaves out memory bandwidth and the ASSM lock, which
bound it from above.
"""

from __future__ import annotations

import argparse
import json
import statistics

PREDICTED_WORKERS = (8, 16)


def steps_to_target(run: dict, target: float) -> int | None:
    reached = [h["step"] for h in run["history"] if h["accuracy"] >= target]
    return reached[0] if reached else None


def statistical_efficiency(runs: list[dict], method: str, c: int) -> float | None:
    """Median over seeds of sync's steps to target over the method's updates to it."""
    sync = {r["seed"]: r for r in runs if r["method"] == "sync"}
    ratios = []
    for run in runs:
        if (run["method"], run["num_workers"]) != (method, c):
            continue
        baseline = sync[run["seed"]]
        target = baseline["final_accuracy"] - 0.005
        ours, theirs = steps_to_target(run, target), steps_to_target(baseline, target)
        if ours is None or theirs is None:
            return None  # a seed that never reached the target: no efficiency to speak of
        ratios.append(theirs / ours)
    return statistics.median(ratios) if ratios else None


def fit_staleness_cost(points: dict[int, float]) -> float:
    """κ of ``η(c) = 1 / (1 + κ (c - 1))``, least squares on ``1/η - 1 = κ (c - 1)``."""
    pairs = [(c - 1, 1 / eta - 1) for c, eta in points.items() if c > 1 and eta]
    if not pairs:
        return 0.0
    return max(0.0, sum(x * y for x, y in pairs) / sum(x * x for x, _ in pairs))


def cost_model(workload: dict) -> dict:
    """The model's terms per async method and its predicted speed-ups (see module doc)."""
    rows = {(r["method"], r["num_workers"]): r for r in workload["summary"]}
    times = workload["step_times"]
    block = statistics.mean(times["block_step_seconds"])
    sync_rate = rows[("sync", 1)]["median_updates_per_second"]
    alone = rows[("assm", 1)]["median_updates_per_second"]  # one worker, full steps
    model = {"restricted_speedup": times["full_step_seconds"] / block}
    for method in ("assm", "passm", "passm_plus"):
        # PASSM+ spends most steps in PASSM; its r is PASSM's (an upper bound).
        r = 1.0 if method == "assm" else model["restricted_speedup"]
        measured = sorted(c for m, c in rows if m == method and c > 1)
        efficiency = {c: statistical_efficiency(workload["runs"], method, c) for c in measured}
        fitted = any(eta is not None for eta in efficiency.values())
        kappa = fit_staleness_cost(efficiency) if fitted else None
        concurrency = {
            c: rows[(method, c)]["median_updates_per_second"] / (c * alone * r) for c in measured
        }
        # The hardware side alone: updates/s over sync's steps/s (measured, then e = 1).
        rates = {c: c * concurrency[c] * r * alone / sync_rate for c in measured}
        rates.update({c: c * r * alone / sync_rate for c in PREDICTED_WORKERS})
        # Wall time to target needs the statistical side too: null where no run reached it.
        predicted = {c: None for c in (*measured, *PREDICTED_WORKERS)}
        for c in measured:
            if efficiency[c] is not None:
                predicted[c] = rates[c] * efficiency[c]
        if fitted:
            for c in PREDICTED_WORKERS:
                predicted[c] = rates[c] / (1 + kappa * (c - 1))
        model[method] = {
            "concurrency_efficiency": concurrency,
            "updates_per_second_ratio": rates,
            "statistical_efficiency": efficiency,
            "staleness_cost_kappa": kappa,
            "predicted_speedup": predicted,
            "measured_speedup": {
                c: rows[(method, c)]["median_speedup_vs_best_sync"] for c in measured
            },
        }
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", help="an async_shared_memory JSON; updated in place")
    args = parser.parse_args(argv)
    with open(args.results) as file:
        result = json.load(file)
    for name, workload in result["workloads"].items():
        workload["cost_model"] = cost_model(workload)
        print(name, json.dumps(workload["cost_model"], indent=1))
    with open(args.results, "w") as file:
        json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
