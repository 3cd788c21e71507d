"""Echo's vectorised path: a group of small elements batched, each repeated with ``tf.repeat``
along the batch axis, and unbatched again (no per-element ``flat_map``).

Example::

    import tensorflow as tf
    from echoing._src.echo.vectorized import _repeat_vectorized

    repeated = _repeat_vectorized(tf.data.Dataset.range(3), None, 2, 8, None)
    list(repeated.as_numpy_iterator())  # [0, 0, 1, 1, 2, 2]
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from echoing._src.core.types import as_element
from echoing._src.echo.counts import _child, _count_groups, _counted_group, _counts

# Elements whose dense components together are at most this many bytes take the vectorised path.
# Measured crossover on a 2-core CPU (benchmarks/echo_throughput.py): the vectorised path copies
# each echo, ~2 extra copies per output, and beats flat_map's fixed ~15 µs per input up to tens of
# KiB per element; 224x224x3 uint8 images (147 KiB) are faster through flat_map.
VECTORIZED_MAX_ELEMENT_BYTES = 32 * 1024

# The vectorised path groups this many bytes of input per internal batch (bounded below and above
# in elements). Bigger groups amortise per-batch overhead; smaller ones add less latency when the
# upstream is slow, which is exactly when echo is used.
_VECTORIZED_GROUP_BYTES = 256 * 1024
_VECTORIZED_GROUP_MIN, _VECTORIZED_GROUP_MAX = 8, 256


def _repeat_vectorized(dataset, draws, factor, element_bytes, name, meters=None, rows=False):
    """batch(k) -> tf.repeat along the batch axis -> unbatch, with k sized to the element;
    ``rows``: the meters count each element's rows (its elements are batches)."""
    group = int(
        np.clip(
            _VECTORIZED_GROUP_BYTES // max(element_bytes, 1),
            _VECTORIZED_GROUP_MIN,
            _VECTORIZED_GROUP_MAX,
        )
    )
    batched = dataset.batch(group, name=_child(name, "batch"))
    # Counting happens in the copying map itself, once per group. Its stateful increments would
    # keep tf.data's map_parallelization from running the map in parallel, so a counted map asks
    # for the parallelism itself (deterministic: the output order does not change). A separate
    # counting map measured 6-12% of echo's throughput on small elements; this one is within
    # the benchmark's noise, at most 4% (benchmarks/echo_throughput.py).
    parallel = {}
    if meters is not None:
        parallel = dict(num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if draws is None:

        def repeat(*x):
            x = as_element(x, batched.element_spec)
            repeated = tf.nest.map_structure(lambda t: tf.repeat(t, factor, axis=0), x)
            return _counted_group(repeated, x, meters, factor, rows)

        return batched.map(repeat, name=_child(name, "repeat"), **parallel).unbatch(
            name=_child(name, "unbatch")
        )
    live = isinstance(factor, tf.Variable)
    # Live counts come from a map of their own (see _count_groups); static ones are cheaper
    # computed inline, the copying map being stateless either way.
    counts = (
        _count_groups(draws, factor, group, name)
        if live
        else draws.batch(group, name=_child(name, "draws_batch"))
    )
    # zip stops at the shorter input; counts is infinite, so every element is kept.
    zipped = tf.data.Dataset.zip((batched, counts), name=_child(name, "zip"))

    def repeat_counted(x, counts):
        if not live:
            counts = _counts(counts, factor)  # the batch of draws, turned into counts
        # The last batch may be short; take as many counts as it has elements.
        counts = counts[: tf.shape(tf.nest.flatten(x)[0], out_type=tf.int64)[0]]
        repeated = tf.nest.map_structure(lambda t: tf.repeat(t, counts, axis=0), x)
        return _counted_group(repeated, x, meters, counts, rows)

    repeated = zipped.map(repeat_counted, name=_child(name, "repeat"), **parallel)
    return repeated.unbatch(name=_child(name, "unbatch"))


def _vectorized_element_bytes(element_spec, implementation: str) -> int | None:
    """Bytes per element if the vectorised path should run, else None (per-element path)."""
    if implementation == "per_element":
        return None
    total = 0
    for spec in tf.nest.flatten(element_spec):
        fixed = isinstance(spec, tf.TensorSpec) and spec.shape.is_fully_defined()
        # Strings and variants have no fixed size (and strings copy their payload anyway).
        if not fixed or spec.dtype in (tf.string, tf.variant, tf.resource):
            if implementation == "vectorized":
                raise ValueError(
                    f'implementation="vectorized" needs fixed-shape dense numeric elements, got '
                    f'{element_spec}; use the default implementation="auto".'
                )
            return None
        total += spec.shape.num_elements() * spec.dtype.size
    if implementation == "vectorized" or total <= VECTORIZED_MAX_ELEMENT_BYTES:
        return total
    return None
