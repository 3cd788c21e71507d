"""Host-side counters of the examples that flow through a pipeline stage.

Every echoing benchmark reports *fresh* examples (read from upstream) next to the examples the
trainer saw after echo. Counters are int64 ``tf.Variable``s on the host CPU, incremented inside
the tf.data graph, so they work with any strategy and are saved with a ``tf.train.Checkpoint``.

Example::

    import tensorflow as tf
    from echoing import echo, meters

    counts = meters.EchoMeters()
    ds = (
        tf.data.Dataset.range(10)
        .apply(counts.fresh.count())
        .apply(echo(2))
        .apply(counts.emitted.count())
    )
    for _ in ds:
        pass
    assert counts.result() == {"fresh_examples": 10, "emitted_examples": 20, "echo_ratio": 2.0}

Overhead: one ``map`` with a variable ``assign_add`` per element it counts (measured in
``benchmarks/echo_throughput.py``: tens of µs per counted element on a 2-core CPU). Count after
``batch()`` with ``rows=True`` to pay it once per batch instead, or let the echo stage count its
own inputs and outputs, ``echo(e, meters=counts)``, once per internal group of elements.
"""

from echoing._src.core.meters import EchoMeters, ElementCounter

__all__ = ["EchoMeters", "ElementCounter"]
