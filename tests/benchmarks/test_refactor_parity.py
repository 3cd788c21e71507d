"""benchmarks/refactor_parity.py: a revision exported whole, and the headline ratios."""

import pytest


def test_export_revision_gives_that_revisions_files(load_benchmark, tmp_path):
    parity = load_benchmark("refactor_parity")
    tree = parity.export_revision("HEAD", tmp_path)
    assert (tree / "configs" / "mnist1d.py").is_file()
    assert (tree / "trainers" / "train.py").is_file()
    assert not (tree / ".git").exists()


def _rows() -> list[dict]:
    # Seed 2 ran while the machine was busy: slow on both sides.
    return [
        {"side": "before", "seed": seed, "wall_seconds": w, "train_seconds": t, "eval_accuracy": a}
        for seed, (w, t, a) in enumerate(((10.0, 8.0, 0.9), (12.0, 9.0, 0.8), (30.0, 20.0, 0.7)))
    ] + [
        {"side": "after", "seed": seed, "wall_seconds": w, "train_seconds": t, "eval_accuracy": a}
        for seed, (w, t, a) in enumerate(((8.0, 6.0, 0.85), (6.0, 4.0, 0.9), (100.0, 90.0, 0.8)))
    ]


def test_ratio_of_medians_is_before_over_after_of_the_medians(load_benchmark):
    parity = load_benchmark("refactor_parity")
    sections = parity.headline_sections(_rows())
    by_median = sections["headline_ratio_of_medians"]
    assert by_median["wall_speedup_after_vs_before"] == pytest.approx(12.0 / 8.0)
    assert by_median["train_seconds_speedup_after_vs_before"] == pytest.approx(9.0 / 6.0)
    assert sections["headline"]["accuracy_before"] == pytest.approx(0.8)
    assert sections["headline"]["accuracy_after"] == pytest.approx(0.85)


def test_headline_speedup_is_the_paired_geometric_mean_of_hand_built_runs(load_benchmark):
    parity = load_benchmark("refactor_parity")
    sections = parity.headline_sections(_rows())
    walls = [10.0 / 8.0, 12.0 / 6.0, 30.0 / 100.0]
    assert sections["headline"]["wall_speedup_after_vs_before"] == pytest.approx(
        (walls[0] * walls[1] * walls[2]) ** (1 / 3)
    )
    spread = sections["headline_spread"]["wall_speedup_after_vs_before"]
    assert (spread["min"], spread["max"]) == pytest.approx((0.3, 2.0))
    assert spread["seeds"] == [0, 1, 2]
    assert parity.headline(_rows()) == sections["headline"]
