"""Contiguous blocks of a parameter list, balanced by element count (PASSM's partition).

Example::

    from trainers.passm.blocks import partition_blocks

    # Sizes of a small MLP's kernel/bias list, split between two workers.
    blocks = partition_blocks([40 * 32, 32, 32 * 10, 10], num_blocks=2)
    assert blocks == [range(0, 1), range(1, 4)]

The authors' PyTorch code assigns each process a contiguous range of the parameter list with
roughly equal numbers of weights. "Roughly" is made exact here: the ranges minimise the largest
block's element count (the classic linear-partition problem, solved by dynamic programming in
O(num_blocks * n^2), trivial for the tens of variables a model has). The largest block bounds how
much gradient work the busiest worker does, so it is the quantity worth minimising.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def partition_blocks(sizes: Sequence[int], num_blocks: int) -> list[range]:
    """Splits ``range(len(sizes))`` into ``num_blocks`` contiguous, non-empty ranges.

    Args:
      sizes: element count of each variable, in the model's variable order (input layer first).
      num_blocks: number of blocks, one per worker.

    Returns:
      ``num_blocks`` ranges covering every index once, in order, such that the largest block's
      total size is as small as possible. Ties are broken towards earlier cuts.

    Raises:
      TypeError: if ``num_blocks`` is not an int or a size is not an int.
      ValueError: if ``num_blocks`` < 1, exceeds ``len(sizes)``, or a size is negative.
    """
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int):
        raise TypeError(
            f"num_blocks must be an int (one block per worker), got {num_blocks!r} of type "
            f"{type(num_blocks).__name__}."
        )
    sizes = list(sizes)
    for index, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(
                f"sizes[{index}] must be an int element count, got {size!r}; pass "
                "[int(v.shape.num_elements()) for v in variables]."
            )
        if size < 0:
            raise ValueError(f"sizes[{index}] must be >= 0, got {size}.")
    if num_blocks < 1 or num_blocks > len(sizes):
        raise ValueError(
            f"num_blocks must be between 1 and the number of variables ({len(sizes)}), got "
            f"{num_blocks}; use fewer workers for PASSM or a model with more variables."
        )

    n = len(sizes)
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    infinity = float("inf")
    # best[k][i]: smallest achievable largest-block size for the first i variables in k blocks.
    best = [[infinity] * (n + 1) for _ in range(num_blocks + 1)]
    cut = [[0] * (n + 1) for _ in range(num_blocks + 1)]
    best[0][0] = 0
    for k in range(1, num_blocks + 1):
        for i in range(k, n - (num_blocks - k) + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i] = cost
                    cut[k][i] = j
    bounds = [n]
    for k in range(num_blocks, 0, -1):
        bounds.append(cut[k][bounds[-1]])
    bounds.reverse()
    return [range(start, stop) for start, stop in itertools.pairwise(bounds)]
