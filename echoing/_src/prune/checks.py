"""Argument checks of ``loss_prune`` and ``LossPruning``'s by-id methods."""

from __future__ import annotations

from echoing._src.core.checks import in_interval, is_positive_int, is_real, require


def check_batch_size(method: str, batch_size) -> None:
    if not is_positive_int(batch_size):
        raise ValueError(f"LossPruning.{method}(batch_size={batch_size!r}): expected an int >= 1.")


def check_number(arg, value, low, high, interval, *, upper_open) -> None:
    require(
        is_real(value) and in_interval(value, low, high, high_open=upper_open),
        f"loss_prune({arg}={value!r}): expected a number in {interval}. prune_ratio is the "
        "probability of dropping a below-mean example (1 would drop them all); "
        "anneal_fraction the share of epochs, at the end, on the full data.",
    )
