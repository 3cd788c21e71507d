"""benchmarks/refactor_parity.py: a revision exported whole, and the headline ratios."""

import pytest


def test_export_revision_gives_that_revisions_files(load_benchmark, tmp_path):
    parity = load_benchmark("refactor_parity")
    tree = parity.export_revision("HEAD", tmp_path)
    assert (tree / "configs" / "mnist1d.py").is_file()
    assert (tree / "trainers" / "train.py").is_file()
    assert not (tree / ".git").exists()


def test_headline_is_before_over_after_of_the_medians(load_benchmark):
    parity = load_benchmark("refactor_parity")
    rows = [
        {"side": "before", "wall_seconds": w, "train_seconds": t, "eval_accuracy": a}
        for w, t, a in ((10.0, 8.0, 0.9), (12.0, 9.0, 0.8), (30.0, 20.0, 0.7))
    ] + [
        {"side": "after", "wall_seconds": w, "train_seconds": t, "eval_accuracy": a}
        for w, t, a in ((8.0, 6.0, 0.85), (6.0, 4.0, 0.9), (100.0, 90.0, 0.8))
    ]
    headline = parity.headline(rows)
    assert headline["wall_speedup_after_vs_before"] == pytest.approx(12.0 / 8.0)
    assert headline["train_seconds_speedup_after_vs_before"] == pytest.approx(9.0 / 6.0)
    assert headline["accuracy_before"] == pytest.approx(0.8)
    assert headline["accuracy_after"] == pytest.approx(0.85)
