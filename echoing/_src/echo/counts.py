"""How many copies each element gets, and the meters that count them: echo's shared parts.

``_counts`` turns a uniform draw into ``floor(e)`` or ``floor(e) + 1`` copies (a Bernoulli of
the fractional part); ``_read_factor`` reads a live factor (a ``tf.Variable``), checks its range
and runs the hook the variable may carry (``READ_HOOK_ATTRIBUTE``); ``_counted`` and
``_counted_group`` add an element's (or a group's) fresh inputs and emitted copies to
``EchoMeters``.

Example::

    import tensorflow as tf
    from echoing._src.echo.counts import _counts

    _counts(tf.constant([0, 2**31], tf.int64), 1.5)  # [2, 1]: 1 + (draw / 2**32 < 0.5)
"""

from __future__ import annotations

import tensorflow as tf

from echoing._src.core.meters import EchoMeters, _rows

# The largest echo factor accepted, static or live. The papers find echo useful up to e≈4-16
# (beyond R = t_upstream / t_downstream more echoes cannot speed training up: the accelerator is
# already busy, and an echo is worth less than a fresh example), so 1000 leaves a 60x margin for
# experiments while refusing typos such as echo(1e9): the vectorised path materialises each
# internal group (~256 KiB of input) e times, which measured +0.7 GiB and 1 s before the first
# batch at e=1000, and +5.5 GiB and 14 s at e=1e4 (32 KiB elements, 2-core CPU).
MAX_FACTOR = 1000.0

# The attribute a live factor may carry: a function of the number of inputs one read covers
# (an int64 tensor) that returns an op to run with the read. AutoEcho sets it on its factor to
# tell when nothing drives it (auto_echo.UnobservedCheck). An attribute of the variable, because
# every live read passes through _read_factor, however deep in echo's paths.
READ_HOOK_ATTRIBUTE = "_echoing_on_read"

# Dataset.random yields uniform integers in [0, 2**32) (as int64); Bernoulli draws scale them.
_RANDOM_RANGE = float(1 << 32)


def _counted_group(repeated, group, meters: EchoMeters | None, echoes, rows: bool = False):
    """``repeated``, after counting ``group`` (a batch of inputs) as fresh and ``echoes`` (a
    static factor, or one count per input) as the outputs emitted from it; ``rows``: each input
    is itself a batch (batch echoing), whose rows are counted."""
    if meters is None:
        return repeated
    shape = tf.shape(tf.nest.flatten(group)[0], out_type=tf.int64)
    inputs = shape[0]
    emitted = inputs * echoes if isinstance(echoes, int) else tf.reduce_sum(echoes)
    per_input = shape[1] if rows else tf.constant(1, tf.int64)  # fixed-shape batches, all alike
    increments = [
        meters.fresh.variable.assign_add(inputs * per_input),
        meters.emitted.variable.assign_add(tf.cast(emitted, tf.int64) * per_input),
    ]
    with tf.control_dependencies(increments):
        return tf.nest.map_structure(tf.identity, repeated)


def _counted(element, meters: EchoMeters | None, echoes, rows: bool = False):
    """``element``, after counting it as one fresh input and ``echoes`` emitted outputs; with
    ``rows`` (the element is a batch), as many as it has rows."""
    if meters is None:
        return element
    amount = _rows(tf.nest.flatten(element)[0]) if rows else tf.constant(1, tf.int64)
    increments = [
        meters.fresh.variable.assign_add(amount),
        meters.emitted.variable.assign_add(tf.cast(echoes, tf.int64) * amount),
    ]
    with tf.control_dependencies(increments):
        return tf.nest.map_structure(tf.identity, element)


def _count_groups(draws: tf.data.Dataset, factor, group: int, name: str | None):
    """Batches of ``group`` echo counts, one per element, from the seeded ``draws``.

    The factor is read in this map of its own, once per group. A live read is a stateful op
    (and so is its range check): in the vectorised path's copying map it kept tf.data from
    parallelising that map, as it does for static factors, and in the per-element flat_map it
    cost a read and a check per element. Both measured slower than this separate map.

    Example::

        counts = _count_groups(tf.data.Dataset.random(seed=0), 1.5, 4, None)
        next(iter(counts))  # 4 counts, each 1 or 2
    """
    return draws.batch(group, name=_child(name, "draws_batch")).map(
        lambda draw: _counts(draw, factor), name=_child(name, "counts")
    )


def _counts(draw: tf.Tensor, factor) -> tf.Tensor:
    """floor(factor) plus a Bernoulli(frac(factor)) draw from uniform int64 ``draw``."""
    factor = _read_factor(factor, inputs=tf.size(draw, out_type=tf.int64))
    whole = tf.floor(factor)
    uniform = tf.cast(draw, tf.float64) / _RANDOM_RANGE
    return tf.cast(whole, tf.int64) + tf.cast(uniform < (factor - whole), tf.int64)


def _read_factor(factor, inputs: tf.Tensor) -> tf.Tensor:
    """``factor`` as float64; a live tf.Variable is read here, once per call, and range-checked.

    ``inputs`` (an int64 scalar) is how many inputs the read decides copies for; a live factor's
    ``READ_HOOK_ATTRIBUTE`` hook, if it has one, is called with it.

    Whoever assigns the variable can write anything, and out of range it fails silently: <= 0 or
    NaN empties the stream, 1e30 overflows the int64 count (one element repeated for ever). The
    check is a few scalar ops per call, and ``_count_groups`` calls it once per group of counts.

    Example::

        factor = tf.Variable(2.0)
        ds = tf.data.Dataset.range(3).apply(echo(factor))
        factor.assign(-1.0)
        list(ds)  # InvalidArgumentError: assertion failed: [the live echo factor (a
                  # tf.Variable) must be in (0, 1000], got] [-1] [; assign a value in ...]
    """
    if not isinstance(factor, tf.Variable):
        return tf.cast(factor, tf.float64)  # checked by the factory
    read = factor.value()
    value = tf.cast(read, tf.float64)
    in_range = tf.logical_and(value > 0.0, value <= MAX_FACTOR)  # False for NaN
    # Raw data, not a formatted string: Assert formats its data only on failure, so a passing
    # check costs a few scalar ops.
    check = tf.debugging.Assert(
        in_range,
        [
            f"the live echo factor (a tf.Variable) must be in (0, {MAX_FACTOR:g}], got",
            read,
            "; assign a value in that range, e.g. factor.assign(2.0) (AutoEcho keeps its factor "
            "in [1, max_factor]).",
        ],
        name="check_factor",
    )
    hook = getattr(factor, READ_HOOK_ATTRIBUTE, None)
    checks = [check] if hook is None else [check, hook(inputs)]
    with tf.control_dependencies(checks):
        return tf.identity(value)


def _child(name: str | None, suffix: str) -> str | None:
    return f"{name}_{suffix}" if name else None
