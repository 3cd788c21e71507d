"""Tests of PASSM's block partition and the ASSM/PASSM/PASSM+ schedule (pure Python)."""

from __future__ import annotations

import itertools

import pytest

from trainers.passm.blocks import partition_blocks
from trainers.passm.schedule import Phase, make_schedule


def _brute_force_largest_block(sizes, num_blocks):
    best = None
    for cuts in itertools.combinations(range(1, len(sizes)), num_blocks - 1):
        bounds = (0, *cuts, len(sizes))
        largest = max(sum(sizes[a:b]) for a, b in itertools.pairwise(bounds))
        best = largest if best is None else min(best, largest)
    return best


@pytest.mark.parametrize(
    "sizes, num_blocks",
    [
        ([1280, 32, 320, 10], 2),  # MLP kernel/bias list
        ([5, 5, 5, 5], 4),
        ([1, 100, 1], 2),
        ([3, 1, 1, 1, 3, 1], 3),
        ([160, 32, 6144, 64, 12288, 64, 24576, 128, 131072, 128, 1280, 10], 2),  # MNIST-1D CNN
        ([160, 32, 6144, 64, 12288, 64, 24576, 128, 131072, 128, 1280, 10], 4),
        ([7, 0, 0, 7, 1, 9, 2, 2], 3),
        ([4], 1),
    ],
)
def test_blocks_are_contiguous_cover_everything_and_are_optimally_balanced(sizes, num_blocks):
    blocks = partition_blocks(sizes, num_blocks)
    assert len(blocks) == num_blocks
    assert [i for block in blocks for i in block] == list(range(len(sizes)))
    assert all(len(block) >= 1 for block in blocks)
    largest = max(sum(sizes[i] for i in block) for block in blocks)
    assert largest == _brute_force_largest_block(sizes, num_blocks)


@pytest.mark.parametrize(
    "sizes, num_blocks, error, match",
    [
        ([1, 2], 3, ValueError, "between 1 and the number of variables \\(2\\), got 3"),
        ([1, 2], 0, ValueError, "got 0"),
        ([1, 2], 2.0, TypeError, "num_blocks must be an int .*got 2.0"),
        ([1, -2], 1, ValueError, "sizes\\[1\\] must be >= 0, got -2"),
        ([1, 2.5], 1, TypeError, "sizes\\[1\\] must be an int element count, got 2.5"),
    ],
)
def test_partition_rejects_bad_input(sizes, num_blocks, error, match):
    with pytest.raises(error, match=match):
        partition_blocks(sizes, num_blocks)


@pytest.mark.parametrize(
    "mode, kwargs, expected",
    [
        ("sync", {}, [Phase(0, 20, "sync", 0.1)]),
        (
            "assm",
            {"decay_fractions": (0.5,)},
            [Phase(0, 10, "assm", 0.1), Phase(10, 20, "assm", 0.1 * 0.1)],
        ),
        ("passm", {}, [Phase(0, 20, "passm", 0.1)]),
        # c = 4: PASSM after the 25% warm-up at 0.1 × (1 − 1/4).
        ("passm_plus", {}, [Phase(0, 5, "assm", 0.1), Phase(5, 20, "passm", 0.1 * 0.75)]),
        (
            "passm_plus",
            {"decay_fractions": (0.5,), "assm_window_fraction": 0.2},
            [
                Phase(0, 5, "assm", 0.1),
                Phase(5, 8, "passm", 0.1 * 0.75),
                Phase(8, 10, "assm", 0.1),  # window of 4 steps centred on the decay at 10
                Phase(10, 12, "assm", 0.1 * 0.1),
                Phase(12, 20, "passm", 0.1 * 0.1 * 0.75),
            ],
        ),
        ("passm_plus", {"assm_warmup_fraction": 0.0}, [Phase(0, 20, "passm", 0.1 * 0.75)]),
    ],
)
def test_schedule_golden_phases(mode, kwargs, expected):
    phases = make_schedule(mode, num_steps=20, num_workers=4, learning_rate=0.1, **kwargs)
    assert [(p.start, p.stop, p.mode) for p in phases] == [
        (p.start, p.stop, p.mode) for p in expected
    ]
    for phase, want in zip(phases, expected, strict=True):
        assert phase.learning_rate == pytest.approx(want.learning_rate, rel=1e-12)


@pytest.mark.parametrize("num_steps", [1, 7, 100, 1001])
@pytest.mark.parametrize("num_workers", [2, 3, 4])
def test_passm_plus_covers_every_step_once_with_about_a_quarter_assm_first(num_steps, num_workers):
    phases = make_schedule(
        "passm_plus",
        num_steps=num_steps,
        num_workers=num_workers,
        learning_rate=1.0,
        decay_fractions=(0.5, 0.75),
    )
    assert phases[0].start == 0 and phases[-1].stop == num_steps
    assert all(a.stop == b.start for a, b in itertools.pairwise(phases))
    assert all(p.num_steps > 0 for p in phases)
    warmup = round(0.25 * num_steps)
    if warmup:
        assert phases[0].mode == "assm" and phases[0].num_steps >= warmup
        assert all(p.mode == "assm" for p in phases if p.start < warmup)
    for phase in phases:
        decays = sum(phase.start >= round(f * num_steps) for f in (0.5, 0.75))
        expected = 0.1**decays * ((1 - 1 / num_workers) if phase.mode == "passm" else 1)
        assert phase.learning_rate == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "hogwild"}, "mode must be one of .*got 'hogwild'"),
        ({"num_steps": 0}, "num_steps must be a positive int, got 0"),
        ({"num_workers": 1, "mode": "passm_plus"}, "needs c >= 2 workers, got num_workers=1"),
        ({"learning_rate": 0.0}, "learning_rate must be > 0, got 0.0"),
        ({"decay_fractions": (0.75, 0.5)}, "strictly increasing fractions in \\(0, 1\\)"),
        ({"decay_fractions": (1.5,)}, "strictly increasing fractions in \\(0, 1\\)"),
        ({"decay_factor": 0.0}, "decay_factor must be in \\(0, 1\\], got 0.0"),
        ({"assm_warmup_fraction": 1.5}, "assm_warmup_fraction must be in \\[0, 1\\], got 1.5"),
    ],
)
def test_schedule_rejects_bad_input(kwargs, match):
    arguments = {"mode": "passm_plus", "num_steps": 10, "num_workers": 2, "learning_rate": 0.1}
    arguments.update(kwargs)
    mode = arguments.pop("mode")
    with pytest.raises(ValueError, match=match):
        make_schedule(mode, **arguments)
