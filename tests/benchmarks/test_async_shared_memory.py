"""benchmarks/async_partitioned.py --backend=shared_memory: the quick run's JSON, and its sums."""

from __future__ import annotations

import json

import pytest

HEADLINE = {
    "passm_plus_shared_speedup_c2", "passm_plus_shared_speedup_c4",
    "passm_plus_shared_accuracy_gap_points_c2", "assm_shared_speedup_c2",
    "passm_shared_speedup_c2", "updates_per_second_ratio_c2",
    "restricted_backward_time_saving_c2",
}  # fmt: skip


@pytest.fixture(scope="module")
def quick(run_quick_benchmark):
    path = run_quick_benchmark("async_partitioned", "--backend=shared_memory")
    return path, json.loads(path.read_text())


def test_quick_run_writes_the_headline_first_with_every_key(quick):
    path, result = quick
    assert next(iter(result)) == "headline" and set(result["headline"]) == HEADLINE
    assert result["command"].startswith("python benchmarks/async_shared_memory.py --quick")
    assert result["commit"]
    assert all(v is None or type(v) is float for v in result["headline"].values())
    # Quick runs c = 1, 2 only: the c = 4 figure has no run behind it.
    assert result["headline"]["passm_plus_shared_speedup_c4"] is None
    assert type(result["headline"]["restricted_backward_time_saving_c2"]) is float
    assert path.with_suffix(".png").stat().st_size > 0


def test_quick_run_trains_every_method_on_the_same_examples(quick):
    _, result = quick
    (workload,) = result["workloads"].values()
    methods = {(r["method"], r["num_workers"]) for r in workload["runs"]}
    assert methods == {("sync", 1), ("assm", 1), ("sync_large", 2), ("assm", 2), ("passm", 2),
                       ("passm_plus", 2)}  # fmt: skip
    for run in workload["runs"]:
        # 40 updates of 16 examples; the large batch takes 20 steps of 32.
        assert run["history"][-1]["step"] == (20 if run["method"] == "sync_large" else 40)
    by = {(r["method"], r["num_workers"]): r for r in workload["runs"]}
    assert by[("assm", 1)]["staleness_max"] == 0  # one worker: nothing lands in between
    assert sum(by[("passm", 2)]["block_updates"]) == 40  # one block per PASSM update
    # PASSM+: 10 ASSM steps (both blocks), 2 + 2 in the window around the decay at 30.
    assert sum(by[("passm_plus", 2)]["block_updates"]) == 14 * 2 + 26
    step_times = workload["step_times"]
    assert len(step_times["block_step_seconds"]) == 2 and step_times["full_step_seconds"] > 0
    # All threads' CPU seconds per wall second: above 0, at most the machine's cores (+ slack
    # for the clocks' granularity).
    assert 0 < step_times["full_step_cores_busy"] <= step_times["cpu_count"] + 0.25


def _run(method, c, seed, accuracies, seconds):
    history = [{"step": 10 * (i + 1), "train_seconds": s, "accuracy": a}
               for i, (a, s) in enumerate(zip(accuracies, seconds, strict=True))]  # fmt: skip
    return {"method": method, "num_workers": c, "seed": seed, "learning_rate": 0.1,
            "history": history, "final_accuracy": accuracies[-1], "updates_per_second": 10.0,
            "staleness_mean": 0.5, "staleness_max": 2}  # fmt: skip


def test_speedup_is_over_the_faster_sync_baseline_and_null_unless_every_seed_reaches(
    load_benchmark,
):
    bench = load_benchmark("async_shared_memory")
    runs = []
    for seed in (0, 1):
        runs += [
            _run("sync", 1, seed, [0.5, 0.7, 0.8], [1.0, 2.0, 4.0]),
            # Faster than sync to the target (0.8 − 0.005): the best baseline, 2.0 s.
            _run("sync_large", 2, seed, [0.6, 0.796, 0.8], [1.0, 2.0, 3.0]),
            _run("passm_plus", 2, seed, [0.6, 0.8, 0.81], [0.5, 1.0, 1.5]),
            # Reaches the target on seed 0 only.
            _run("passm", 2, seed, [0.6, 0.7, 0.8 if seed == 0 else 0.7], [0.5, 1.0, 1.5]),
        ]
    rows = {(r["method"], r["num_workers"]): r for r in bench.summarise(runs)}
    assert rows[("passm_plus", 2)]["median_speedup_vs_best_sync"] == pytest.approx(2.0)
    assert rows[("sync", 1)]["median_speedup_vs_best_sync"] == pytest.approx(1.0)
    assert rows[("passm", 2)]["reached_target"] == 1
    assert rows[("passm", 2)]["median_speedup_vs_best_sync"] is None
    assert rows[("passm", 2)]["mean_accuracy_gap_points"] == pytest.approx(-5.0)
    figures = bench.headline(list(rows.values()), {"restricted_time_saving": 0.25}, "resnet_")
    assert figures["resnet_passm_plus_shared_speedup_c2"] == pytest.approx(2.0)
    assert figures["resnet_passm_plus_shared_accuracy_gap_points_c2"] == pytest.approx(1.0)
    assert figures["resnet_updates_per_second_ratio_c2"] == pytest.approx(1.0)
    assert figures["resnet_assm_shared_speedup_c2"] is None  # not run


def test_large_batch_warm_up_ramps_from_rate_over_c_before_the_first_decay(load_benchmark):
    bench = load_benchmark("async_shared_memory")
    config = bench._config(bench.FULL["workloads"]["mnist1d_cnn"], bench.FULL, "sync_large",
                           4, 0.08, 0)  # fmt: skip
    assert (config.batch_size, config.num_steps, config.eval_every) == (128, 400, 10)
    phases = bench.warmed_up_phases(config, 4, 0.1)
    assert [(p.start, p.stop) for p in phases[:5]] == [(0, 8), (8, 16), (16, 24), (24, 32),
                                                       (32, 40)]  # fmt: skip
    assert [p.learning_rate for p in phases[:6]] == pytest.approx(
        [0.02, 0.032, 0.044, 0.056, 0.068, 0.08]
    )
    assert phases[-1].stop == 400 and phases[-1].learning_rate == pytest.approx(0.08 * 0.01)


def test_an_unknown_workload_is_named_with_the_choices(load_benchmark, capsys):
    with pytest.raises(SystemExit):
        load_benchmark("async_shared_memory").main(["--quick", "--workloads=cifar"])
    assert "--workloads: unknown ['cifar']; choose from ['mnist1d_mlp']" in capsys.readouterr().err


def test_the_cost_model_decomposes_the_quick_run(quick, load_benchmark, tmp_path):
    path, _ = quick
    copy = tmp_path / "result.json"
    copy.write_text(path.read_text())
    load_benchmark("async_cost_model").main([str(copy)])
    (workload,) = json.loads(copy.read_text())["workloads"].values()
    model = workload["cost_model"]
    times = workload["step_times"]
    mean_block = sum(times["block_step_seconds"]) / 2
    assert model["restricted_speedup"] == pytest.approx(times["full_step_seconds"] / mean_block)
    rows = {(r["method"], r["num_workers"]): r for r in workload["summary"]}
    for method in ("assm", "passm", "passm_plus"):
        terms = model[method]
        r = 1.0 if method == "assm" else model["restricted_speedup"]
        alone = rows[("assm", 1)]["median_updates_per_second"]
        # e(2) is the measured rate of two workers over twice one worker's (JSON keys are str).
        expected = rows[(method, 2)]["median_updates_per_second"] / (2 * alone * r)
        assert terms["concurrency_efficiency"]["2"] == pytest.approx(expected)
        rates = terms["updates_per_second_ratio"]
        sync_rate = rows[("sync", 1)]["median_updates_per_second"]
        measured = rows[(method, 2)]["median_updates_per_second"] / sync_rate
        assert rates["2"] == pytest.approx(measured)  # c · e · r · alone / sync: the rate
        assert rates["16"] == pytest.approx(2 * rates["8"])  # e = 1 beyond the measured c
        # Time to target: null without a run that reached it, else the rate times η.
        kappa, predicted = terms["staleness_cost_kappa"], terms["predicted_speedup"]
        assert (kappa is None) == all(v is None for v in terms["statistical_efficiency"].values())
        if kappa is None:
            assert predicted["16"] is None
        else:
            assert predicted["16"] == pytest.approx(rates["16"] / (1 + 15 * kappa))


def test_the_staleness_fit_recovers_its_cost(load_benchmark):
    fit = load_benchmark("async_cost_model").fit_staleness_cost
    kappa = 0.3
    points = {c: 1 / (1 + kappa * (c - 1)) for c in (2, 4)}
    assert fit(points) == pytest.approx(kappa)
    assert fit({2: None}) == 0.0  # no point reached the target: no fit


def test_an_async_grid_of_its_own_leaves_the_sync_baselines_tuned_over_both(load_benchmark):
    bench = load_benchmark("async_shared_memory")
    setup = {**bench.FULL, "async_momentum": 0.0, "async_learning_rates": [0.1, 0.5]}
    assert bench.tuning_grid(setup, "passm_plus") == [(0.0, 0.1), (0.0, 0.5)]
    union = [(None, 0.01), (None, 0.02), (None, 0.05), (0.0, 0.1), (0.0, 0.5)]
    assert bench.tuning_grid(setup, "sync") == bench.tuning_grid(setup, "sync_large") == union
    # Without an async grid, every method tunes the config's momentum over the same rates.
    assert bench.tuning_grid(bench.FULL, "assm") == bench.tuning_grid(bench.FULL, "sync")
    workload = bench.FULL["workloads"]["mnist1d_cnn"]
    sync = bench._config(workload, setup, "sync", 1, 0.1, 0, momentum=0.0)
    default_sync = bench._config(workload, setup, "sync", 1, 0.05, 0)
    passm = bench._config(workload, setup, "passm", 2, 0.1, 0)  # the async momentum
    assert (sync.momentum, default_sync.momentum, passm.momentum) == (0.0, 0.9, 0.0)


def test_the_update_budget_and_weight_prediction_reach_only_the_async_methods(load_benchmark):
    bench = load_benchmark("async_shared_memory")
    workload = bench.FULL["workloads"]["mnist1d_cnn"]
    setup = {**bench.FULL, "weight_prediction": True, "async_updates_factor": "c"}
    passm_plus = bench._config(workload, setup, "passm_plus", 4, 0.05, 0)
    assm_alone = bench._config(workload, setup, "assm", 1, 0.05, 0)
    sync = bench._config(workload, setup, "sync", 1, 0.05, 0)
    sync_large = bench._config(workload, setup, "sync_large", 4, 0.05, 0)
    # c = 4 workers each make sync's 1600 updates; c = 1 and the sync baselines keep theirs.
    assert (passm_plus.num_steps, assm_alone.num_steps) == (6400, 1600)
    assert (sync.num_steps, sync_large.num_steps) == (1600, 400)
    assert passm_plus.weight_prediction and assm_alone.weight_prediction
    assert not sync.weight_prediction and not sync_large.weight_prediction
    halved = bench._config(workload, {**bench.FULL, "async_updates_factor": "1.5"}, "passm", 2,
                           0.05, 0)  # fmt: skip
    assert halved.num_steps == 2400 and not halved.weight_prediction


def test_a_bad_update_factor_is_named_with_what_to_give(load_benchmark, capsys):
    with pytest.raises(SystemExit):
        load_benchmark("async_shared_memory").main(["--quick", "--async-updates-factor=twice"])
    assert "--async-updates-factor: got 'twice'; give a positive number or 'c'" in (
        capsys.readouterr().err
    )


def test_step_times_only_profiles_without_training_a_study(load_benchmark, tmp_path):
    output = tmp_path / "profile.json"
    load_benchmark("async_shared_memory").main(
        ["--quick", "--step-times-only", f"--output={output}"]
    )
    result = json.loads(output.read_text())
    assert set(result["headline"]) == {
        "full_step_cores_busy", "restricted_backward_time_saving_c2"
    }  # fmt: skip
    (workload,) = result["workloads"].values()
    assert set(workload) == {"step_times"}  # no runs
    assert (
        result["headline"]["full_step_cores_busy"] == workload["step_times"]["full_step_cores_busy"]
    )
    assert not output.with_suffix(".png").exists()
