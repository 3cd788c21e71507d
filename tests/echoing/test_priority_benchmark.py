"""benchmarks/pgd.py --quick runs, its summary agrees with its curves, the notebook draws it."""

import json

import pytest


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, load_benchmark):
    output = tmp_path_factory.mktemp("pgd")
    benchmark = load_benchmark("pgd")
    result = benchmark.main(["--quick", "--output", str(output)])
    result["oracle"] = benchmark.main(["--oracle", "--quick", "--output", str(output)])["oracle"]
    return output, result


def assert_floats_or_none(headline):
    assert headline
    for key, value in headline.items():
        assert value is None or type(value) is float, f"{key} = {value!r}"


def test_quick_run_writes_json_and_png(quick_run):
    output, result = quick_run
    assert (output / "pgd_quick.png").stat().st_size > 10_000
    written = json.loads((output / "pgd_quick.json").read_text())
    assert written["summary"] == json.loads(json.dumps(result["summary"]))
    methods = written["summary"]["logistic"]["methods"]
    assert set(methods) == {"sgd", "pgd_paper", "pgd_tuned", "pgd_proportional"}
    cost = written["selection_cost"]
    assert cost["num_examples"] == 10_000
    assert all(cost[key] > 0 for key in ("top_k_ms", "proportional_ms", "update_ms"))
    assert next(iter(written)) == "headline"
    assert_floats_or_none(written["headline"])
    assert written["headline"]["top_k_ms"] == cost["top_k_ms"]
    assert set(written["headline"]) >= {
        "logistic_best_loss_speedup_steps", "logistic_best_loss_speedup_seconds",
        "logistic_best_test_accuracy_delta_points",
    }  # fmt: skip


def test_headline_is_the_fastest_pgd_variant_that_reached_sgds_loss_on_every_seed(load_benchmark):
    headline = load_benchmark("pgd").headline

    def method(reached, steps=None, seconds=None, accuracy=0.5):
        def one_seed(value):
            return value and {"mean": value, "min": value, "max": value, "per_seed": [value],
                              "seeds": [0]}  # fmt: skip

        return {"loss_all_reached": reached, "loss_speedup_steps": steps,
                "loss_speedup_seconds": seconds, "final_test_accuracy": accuracy,
                "loss_paired_speedup_steps": one_seed(steps),
                "loss_paired_speedup_seconds": one_seed(seconds)}  # fmt: skip

    summary = {
        "mlp": {"methods": {
            "sgd": method(True, 1.0, 1.0, accuracy=0.60),
            "pgd_paper": method(True, 1.8, 1.1, accuracy=0.58),
            "pgd_tuned": method(True, 1.2, 1.3, accuracy=0.61),
            "pgd_proportional": method(False, 3.0, 3.0),  # faster on some seeds, not on all
        }},
        "cnn": {"methods": {"sgd": method(True, 1.0, 1.0), "pgd_paper": method(False)}},
        # SGD's best loss at step 0: every seed "reaches" it at once, summarize leaves no speed-up.
        "logistic": {"methods": {"sgd": method(True), "pgd_paper": method(True),
                                 "pgd_tuned": method(True)}},
    }  # fmt: skip
    cost = {"num_examples": 10, "top_k_ms": 2, "proportional_ms": 1.0, "update_ms": 0.5}
    figures = headline(summary, cost)
    assert figures == pytest.approx(
        {
            "mlp_best_loss_speedup_steps": 1.8,
            "mlp_best_loss_speedup_seconds": 1.3,
            "mlp_best_test_accuracy_delta_points": 1.0,  # pgd_tuned's, the fastest in seconds
            "cnn_best_loss_speedup_steps": None,
            "cnn_best_loss_speedup_seconds": None,
            "cnn_best_test_accuracy_delta_points": None,
            "logistic_best_loss_speedup_steps": None,
            "logistic_best_loss_speedup_seconds": None,
            "logistic_best_test_accuracy_delta_points": None,
            "top_k_ms": 2.0,
            "proportional_ms": 1.0,
            "update_ms": 0.5,
        }
    )
    assert_floats_or_none(figures)  # the int top_k_ms comes out a float


def test_headline_speedup_is_the_paired_geometric_mean_of_hand_built_runs(load_benchmark):
    benchmark = load_benchmark("pgd")

    def curve(loss_steps, seconds_per_step):
        # The training loss falls to 1.0 (SGD's best, the target) at ``loss_steps``.
        steps = [0, loss_steps, 2 * loss_steps]
        return {"step": steps, "seconds": [s * seconds_per_step for s in steps],
                "train_loss": [2.0, 1.0, 1.0], "test_accuracy": [0.1, 0.5, 0.5]}  # fmt: skip

    # Seed 1 is slow for both methods: paired, it counts as much as seed 0.
    curves = {"mlp": {
        "sgd": [curve(100, 0.01), curve(400, 0.09)],
        "pgd_paper": [curve(50, 0.01), curve(100, 0.09)],  # 2x and 4x the steps
        "pgd_tuned": [curve(100, 0.01), curve(400, 0.09)],  # 1x
    }}  # fmt: skip
    summary = benchmark.summarize(curves)
    cost = {"top_k_ms": 2.0, "proportional_ms": 1.0, "update_ms": 0.5}
    sections = benchmark.headline_sections(summary, cost)
    headline, spread = sections["headline"], sections["headline_spread"]
    assert headline["mlp_best_loss_speedup_steps"] == pytest.approx(8**0.5)
    assert headline["mlp_best_loss_speedup_seconds"] == pytest.approx(8**0.5)
    assert spread["mlp_best_loss_speedup_steps"]["per_seed"] == pytest.approx([2.0, 4.0])
    # SGD's mean steps (250) over PGD's (75): the ratio of means stays beside the headline.
    by_means = sections["headline_ratio_of_means"]
    assert by_means["mlp_best_loss_speedup_steps"] == pytest.approx(250 / 75)
    assert_floats_or_none(headline)


def test_gather_headline_is_each_rows_ratios(load_benchmark):
    gather_headline = load_benchmark("pgd").gather_headline
    rows = [
        {"batch_size": 16, "in_memory_ms": 1.0, "ratio": 3, "python_decode_ratio": 5.5},
        {"batch_size": 1024, "in_memory_ms": 2.0, "ratio": 6.25, "python_decode_ratio": 49.0},
    ]
    figures = gather_headline({"num_examples": 100, "repeats": 2, "rows": rows})
    assert figures == {
        "data_source_vs_memory_b16": 3.0,
        "data_source_python_decode_vs_memory_b16": 5.5,
        "data_source_vs_memory_b1024": 6.25,
        "data_source_python_decode_vs_memory_b1024": 49.0,
    }
    assert_floats_or_none(figures)


def test_oracle_headline_is_the_mean_final_loss_and_the_renewal_variants_ratio(load_benchmark):
    oracle_headline = load_benchmark("pgd").oracle_headline

    def runs(*finals):
        return [{"step": [0, 5], "train_loss": [2.3, final]} for final in finals]

    figures = oracle_headline(
        {"sgd": runs(1.0, 0.5), "exact_top_k_half_renewal": runs(1.2, 1.8), "exact_top_k": runs(3)}
    )
    assert figures == pytest.approx(
        {
            "sgd_final_train_loss": 0.75,  # the last evaluation's loss, averaged over seeds
            "exact_top_k_half_renewal_final_train_loss": 1.5,
            "exact_top_k_final_train_loss": 3.0,
            "exact_top_k_half_renewal_vs_sgd_final_loss": 2.0,
        }
    )
    assert_floats_or_none(figures)
    # A variant not run: its ratio is null, not an error.
    missing = oracle_headline({"sgd": runs(1.0)})
    assert missing == {
        "sgd_final_train_loss": 1.0,
        "exact_top_k_half_renewal_vs_sgd_final_loss": None,
    }
    assert (
        oracle_headline({"exact_top_k_half_renewal": runs(1.0)})[
            "exact_top_k_half_renewal_vs_sgd_final_loss"
        ]
        is None
    )


def test_summary_agrees_with_the_curves(quick_run):
    _, result = quick_run
    block = result["summary"]["logistic"]
    curves = result["curves"]["logistic"]
    # Targets derive from SGD, so every SGD seed reaches both.
    assert block["loss_target"] == max(min(c["train_loss"]) for c in curves["sgd"])
    assert block["methods"]["sgd"]["loss_all_reached"]
    assert block["methods"]["sgd"]["loss_speedup_steps"] == pytest.approx(1.0)
    for method, row in block["methods"].items():
        curve = curves[method][0]  # --quick runs one seed
        reached = [s for s, v in zip(curve["step"], curve["train_loss"], strict=True)
                   if v <= block["loss_target"]]  # fmt: skip
        assert row["loss_steps"] == (reached[0] if reached else None), method
        assert row["final_test_accuracy"] == curve["test_accuracy"][-1]
        # Every step after the first (tracing) is timed, so time grows with steps.
        assert curve["seconds"][0] == 0.0 and curve["seconds"][-1] > 0.0
        assert curve["seconds"] == sorted(curve["seconds"])
        if method != "sgd":
            assert curve["table"]["measured_fraction"] > 0.0


def test_oracle_diagnostic_runs_every_variant(quick_run):
    output, result = quick_run
    written = json.loads((output / "pgd_oracle_quick.json").read_text())
    assert written["curves"] == json.loads(json.dumps(result["oracle"]))
    assert set(written["curves"]) == {"sgd", "exact_top_k_half_renewal", "exact_top_k"}
    assert next(iter(written)) == "headline"
    assert_floats_or_none(written["headline"])
    sgd_loss = written["curves"]["sgd"][0]["train_loss"][-1]  # --quick runs one seed
    assert written["headline"]["sgd_final_train_loss"] == pytest.approx(sgd_loss)
    assert written["headline"]["exact_top_k_half_renewal_vs_sgd_final_loss"] == pytest.approx(
        written["curves"]["exact_top_k_half_renewal"][0]["train_loss"][-1] / sgd_loss
    )
    for runs in written["curves"].values():
        assert runs[0]["step"] == list(range(11))  # --quick: 10 steps, evaluated every step
        assert runs[0]["train_loss"][0] == written["curves"]["sgd"][0]["train_loss"][0]
    # Selection differs from SGD's epoch order, so the curves differ after the first step.
    assert (
        written["curves"]["exact_top_k"][0]["train_loss"][1:]
        != (written["curves"]["sgd"][0]["train_loss"][1:])
    )


def test_notebook_executes_on_the_results(quick_run, execute_notebook):
    output, _ = quick_run
    outputs = execute_notebook("priority_sampling", PGD_RESULTS=output / "pgd_quick.json")
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) == 4  # loss curves, accuracy/speed-ups, selection cost, oracle
    printed = "".join(out.get("text", "") for out in outputs)
    assert "| logistic" in printed and "pgd_proportional" in printed


def test_gather_quick_writes_json_and_png(tmp_path, load_benchmark):
    benchmark = load_benchmark("pgd")
    result = benchmark.main(
        ["--gather", "--quick", "--output", str(tmp_path), "--data_dir", str(tmp_path / "tfds")]
    )
    assert (tmp_path / "pgd_gather_quick.png").stat().st_size > 10_000
    written = json.loads((tmp_path / "pgd_gather_quick.json").read_text())
    assert written["gather_cost"] == json.loads(json.dumps(result["gather"]))
    rows = written["gather_cost"]["rows"]
    assert [row["batch_size"] for row in rows] == [16, 128]
    for row in rows:
        for key in ("in_memory_ms", "data_source_ms", "data_source_python_decode_ms"):
            assert row[key] > 0, key
        assert row["ratio"] == pytest.approx(row["data_source_ms"] / row["in_memory_ms"])
    assert "| 128 |" in written["markdown"]
    assert next(iter(written)) == "headline"
    assert_floats_or_none(written["headline"])
    assert written["headline"]["data_source_vs_memory_b128"] == rows[1]["ratio"]
