"""Which update rule (ASSM or PASSM) and learning rate each step of an async run uses.

Example::

    from trainers.passm.schedule import make_schedule

    phases = make_schedule("passm_plus", num_steps=100, num_workers=4, learning_rate=0.1)
    assert phases[0].mode == "assm" and phases[0].stop == 25  # ~25% full-gradient steps first
    assert phases[1].mode == "passm" and phases[1].learning_rate == 0.1 * (1 - 1 / 4)

Modes (paper Section 4, authors' PASSM+ flags):

- ``"sync"`` and ``"assm"``: every step computes the full gradient.
- ``"passm"``: every step computes only the worker's block of the gradient.
- ``"passm_plus"``: ASSM for the first ``assm_warmup_fraction`` of the steps, then PASSM with the
  learning rate dampened by (1 − 1/c), and ASSM again in windows of ``assm_window_fraction`` of
  the steps centred on each learning-rate decay.

The learning rate is ``learning_rate * decay_factor ** (number of decays passed)`` everywhere;
PASSM+ multiplies its PASSM phases by (1 − 1/c) on top.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

MODES = ("sync", "assm", "passm", "passm_plus")


@dataclasses.dataclass(frozen=True)
class Phase:
    """Steps ``[start, stop)`` run with one update rule and one learning rate."""

    start: int
    stop: int
    mode: str  # "sync", "assm" or "passm": the update rule of each step in the phase.
    learning_rate: float

    @property
    def num_steps(self) -> int:
        return self.stop - self.start


def make_schedule(
    mode: str,
    *,
    num_steps: int,
    num_workers: int,
    learning_rate: float,
    decay_fractions: Sequence[float] = (),
    decay_factor: float = 0.1,
    assm_warmup_fraction: float = 0.25,
    assm_window_fraction: float = 0.1,
) -> list[Phase]:
    """Returns the run's phases, in order, covering ``range(num_steps)`` exactly once.

    Args:
      mode: one of ``MODES``.
      num_steps: total steps (updates) of the run.
      num_workers: c, the number of concurrent workers (PASSM+ dampens its LR by 1 − 1/c).
      learning_rate: initial learning rate.
      decay_fractions: fractions of ``num_steps`` at which the LR is multiplied by
        ``decay_factor`` (the paper's 50%/75% style schedule), increasing, each in (0, 1).
      decay_factor: LR multiplier at each decay, in (0, 1].
      assm_warmup_fraction: PASSM+ only: fraction of steps run as ASSM before PASSM starts.
      assm_window_fraction: PASSM+ only: total width (as a fraction of ``num_steps``) of the ASSM
        window centred on each decay.

    Raises:
      ValueError: on an unknown mode or an out-of-range number (the message names it).
    """
    _check_arguments(
        mode,
        num_steps,
        num_workers,
        learning_rate,
        list(decay_fractions),
        decay_factor,
        assm_warmup_fraction,
        assm_window_fraction,
    )
    return _phases(
        mode,
        num_steps,
        num_workers,
        learning_rate,
        [round(f * num_steps) for f in decay_fractions],
        decay_factor,
        assm_warmup_fraction,
        assm_window_fraction,
    )


def _check_arguments(
    mode,
    num_steps,
    num_workers,
    learning_rate,
    decay_fractions,
    decay_factor,
    assm_warmup_fraction,
    assm_window_fraction,
) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
    for name, value in (("num_steps", num_steps), ("num_workers", num_workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}.")
    if mode == "passm_plus" and num_workers < 2:
        raise ValueError(
            f"passm_plus dampens the PASSM learning rate by (1 - 1/c) and needs c >= 2 workers, "
            f"got num_workers={num_workers}; use mode='assm' or 'sync' for one worker."
        )
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}.")
    if any(not 0 < f < 1 for f in decay_fractions) or decay_fractions != sorted(
        set(decay_fractions)
    ):
        raise ValueError(
            f"decay_fractions must be strictly increasing fractions in (0, 1), got "
            f"{decay_fractions!r}; e.g. (0.5, 0.75) decays at half and three quarters of the run."
        )
    if not 0 < decay_factor <= 1:
        raise ValueError(f"decay_factor must be in (0, 1], got {decay_factor!r}.")
    for name, value in (
        ("assm_warmup_fraction", assm_warmup_fraction),
        ("assm_window_fraction", assm_window_fraction),
    ):
        if not 0 <= value <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {value!r}.")


def _phases(
    mode,
    num_steps,
    num_workers,
    learning_rate,
    decay_steps,
    decay_factor,
    assm_warmup_fraction,
    assm_window_fraction,
) -> list[Phase]:
    # Every point where the rule or the LR may change; phases are the gaps between them.
    cuts = {0, num_steps, *decay_steps}
    assm_ranges: list[tuple[int, int]] = []
    if mode == "passm_plus":
        warmup = round(assm_warmup_fraction * num_steps)
        assm_ranges.append((0, warmup))
        half_window = round(assm_window_fraction * num_steps / 2)
        assm_ranges += [(d - half_window, d + half_window) for d in decay_steps]
        cuts |= {min(max(c, 0), num_steps) for pair in assm_ranges for c in pair}
    points = sorted(cuts)

    phases: list[Phase] = []
    for start, stop in itertools.pairwise(points):
        decays_passed = sum(start >= d for d in decay_steps)
        rate = learning_rate * decay_factor**decays_passed
        if mode == "passm_plus":
            in_assm = any(lo <= start < hi for lo, hi in assm_ranges)
            step_mode = "assm" if in_assm else "passm"
            if not in_assm:
                rate *= 1 - 1 / num_workers
        else:
            step_mode = mode
        if phases and phases[-1].mode == step_mode and phases[-1].learning_rate == rate:
            phases[-1] = dataclasses.replace(phases[-1], stop=stop)
        else:
            phases.append(Phase(start, stop, step_mode, rate))
    return phases
