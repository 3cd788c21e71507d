"""Data echoing: repeat upstream elements so an idle accelerator gets more steps.

Example::

    import tensorflow as tf
    import echoing

    ds = tf.data.Dataset.range(3).apply(echoing.echo(2))
    assert list(ds.as_numpy_iterator()) == [0, 0, 1, 1, 2, 2]

    # Non-integral factors repeat each element 1 or 2 times (mean 1.5), seeded.
    ds = tf.data.Dataset.range(1000).apply(echoing.echo(1.5, buffer_size=100, seed=0))

Where the stage is inserted decides what is echoed (Choi et al., 2019): before augmentation or
after augmentation (example echoing), or after ``batch()`` (batch echoing, whole batches repeat).

Two graph-level implementations exist and neither wins everywhere, so ``echo`` picks one from the
static element size:

* **vectorised** (``batch(k) -> tf.repeat -> unbatch``): well under 1 µs per input for small
  fixed-shape elements, but it copies every echo, which loses for large elements;
* **per-element** (the paper's ``flat_map(from_tensors(t).repeat(e))``): ~10-20 µs per input,
  copies nothing (the echoes share one buffer), and handles variable shapes, ragged and sparse.

``benchmarks/echo_throughput.py`` measures both against ``echo`` on this machine. The copies per
element and the meters are in ``counts.py``, the vectorised path in ``vectorized.py``.
"""

from __future__ import annotations

import math
import numbers
import warnings

import tensorflow as tf

from echoing._src.core import dataset_graph
from echoing._src.core.meters import EchoMeters, checkpointable
from echoing._src.core.types import DatasetTransformation, as_element
from echoing._src.echo.counts import (
    MAX_FACTOR,
    _child,
    _count_groups,
    _counted,
    _counts,
)
from echoing._src.echo.vectorized import (  # noqa: F401 (the size bound, read here before)
    VECTORIZED_MAX_ELEMENT_BYTES,
    _repeat_vectorized,
    _vectorized_element_bytes,
)

# The per-element path computes echo counts for this many examples at a time: one read (and
# range check) of a live factor per group instead of per element, and an update of the factor
# still takes effect within a batch or two. Batches read it one at a time (see _echo).
_PER_ELEMENT_COUNT_GROUP = 64

_IMPLEMENTATIONS = ("auto", "vectorized", "per_element")


def echo(
    factor: float | tf.Variable,
    *,
    buffer_size: int | None = None,
    seed: int | None = None,
    name: str | None = None,
    implementation: str = "auto",
    meters: EchoMeters | None = None,
) -> DatasetTransformation:
    """Returns a transformation that repeats each element ``factor`` times in expectation.

    Each element is emitted ``floor(factor)`` times, plus once more with probability
    ``factor - floor(factor)`` (a seeded Bernoulli draw per element), so the echoes of one element
    come out consecutively. The draws are new on every pass over the dataset (each iteration, each
    epoch of a ``.repeat()`` after it), so the doubled elements change from epoch to epoch.
    ``buffer_size`` then shuffles the echoed stream (reshuffled every pass), which the paper finds
    helps example echoing. The element spec is unchanged, and ``cardinality()`` stays known for
    integral factors where the input's is known (random for fractional factors, so unknown).

    Args:
      factor: the echo factor ``e >= 1`` is the usual setting (``e <= R``, the ratio of upstream
        to downstream time); ``0 < e < 1`` drops elements at random. ``1`` returns the input
        dataset unchanged. At most ``MAX_FACTOR`` (1000, in this module). A scalar float
        ``tf.Variable`` is read live, so a controller (``echoing.AutoEcho``) can move the factor
        while the dataset runs: for batches (elements out of ``batch()`` and its kin, or whose
        components share a leading dimension) once per element, so that a new factor applies
        from the next batch (training step) that echo puts out (a ``prefetch`` after echo still
        runs ahead by its buffer; echo turns off the one tf.data would inject, see
        ``inject_prefetch``); for examples once per internal group of up to 256 (64 on the
        per-element path), a parallel copying map computing a few groups ahead. A value outside
        ``(0, MAX_FACTOR]`` (or NaN) stops iteration with an error.
      buffer_size: if given, shuffle the echoed elements with a buffer of this many elements.
        Without it (or a ``shuffle`` of your own) an element's copies come out together, and a
        ``batch()`` right after puts them in the same batch; ``AutoEchoCallback.stamp`` and the
        trainer, which see the whole pipeline, warn about that.
      seed: seeds the Bernoulli draws and the shuffle; same seed, same output: a dataset built
        with a seed yields the same sequence of passes, each pass drawn anew. (An iterator
        checkpoint of ``echo(1.5, seed=s)`` followed by ``.repeat()`` restores the later passes
        with other draws, TensorFlow's ``Dataset.random`` restoring its pass count one ahead;
        ``.repeat()`` before echo restores exactly.) ``None`` draws from
        TensorFlow's global seed (``tf.random.set_seed``), or at random without one.
      name: optional name for the tf.data ops (shows up in the tf.data profiler).
      implementation: "auto" (the default) picks by static element size; "vectorized" or
        "per_element" force one path (benchmarks compare them; "vectorized" needs fixed-shape
        dense elements).
      meters: an ``echoing.meters.EchoMeters`` whose ``fresh`` counter counts the stage's input
        examples and ``emitted`` its output examples (for elements out of ``batch()``, batch
        echoing, the rows of each batch, its leading dimension: the outer one for batches of
        batches; else one per element), inside the stage: once per
        internal group of up to 256 elements on the vectorised path, and in the function the
        per-element path runs anyway.
        Counting stages of their own (``ElementCounter.count()``) map once per element, which
        costs more than a vectorised echo itself (``benchmarks/echo_throughput.py``).

    Returns:
      A function ``Dataset -> Dataset`` for ``Dataset.apply``.

    Raises:
      TypeError: ``factor`` is not a real number, ``buffer_size`` or ``seed`` not an integer,
        ``meters`` not an ``EchoMeters``.
      ValueError: ``factor`` is not finite and positive or above ``MAX_FACTOR``, ``buffer_size``
        is not positive.
      tf.errors.InvalidArgumentError: while iterating, when a live ``factor`` holds a value
        outside ``(0, MAX_FACTOR]`` or NaN (e.g. ``factor.assign(-1.0)``).

    Example::

        ds = tf.data.Dataset.range(4).batch(2).apply(echo(2))  # batch echoing
        # [0, 1], [0, 1], [2, 3], [2, 3]
    """
    factor = _validate_factor(factor)
    buffer_size = _validate_positive_int("buffer_size", buffer_size, "e.g. buffer_size=10_000")
    seed = _validate_seed(seed)
    _validate_meters(meters)
    if implementation not in _IMPLEMENTATIONS:
        raise ValueError(
            f"implementation must be one of {_IMPLEMENTATIONS}, got {implementation!r}; "
            'leave it at "auto" unless you are benchmarking.'
        )

    def apply(dataset: tf.data.Dataset) -> tf.data.Dataset:
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(
                f"echo(...) must be applied to a tf.data.Dataset, got {type(dataset).__name__}; "
                "use `dataset.apply(echo(factor))`."
            )
        with tf.name_scope(name or "echo"):
            echoed = _echo(dataset, factor, seed, name, implementation, meters)
            if buffer_size is not None:
                echoed = echoed.shuffle(buffer_size, seed=seed, name=_child(name, "shuffle"))
        if isinstance(factor, tf.Variable) or meters is not None:
            # The live factor and the meters are variables, external state to tf.data, which
            # would refuse to checkpoint the iterator ("ReadVariableOp is stateful"); they are
            # saved on their own (AutoEcho and EchoMeters are tf.Modules), so it may skip them.
            echoed = checkpointable(echoed)
        if isinstance(factor, tf.Variable) or factor > 1:
            # So that whoever receives the final dataset (AutoEchoCallback.stamp, the trainer)
            # can tell when the copies reach batch() with no shuffle between.
            dataset_graph.mark_echo(echoed, dataset, shuffled=buffer_size is not None)
        return echoed

    return apply


def _echo(dataset, factor, seed: int | None, name: str | None, implementation: str, meters):
    live = isinstance(factor, tf.Variable)
    if not live and factor == 1 and meters is None:
        return dataset
    vectorized = _vectorized_element_bytes(dataset.element_spec, implementation)
    if implementation == "auto" and _samples_by_priority(dataset):
        vectorized = None
    # A live factor read once per group of batches took effect 54-92 training steps late:
    # batches take the per-element path (which copies nothing) and read the factor for each
    # batch. On tiny synthetic batches (128 x 40 float32, e=4) that measured 0.5-1x the grouped
    # path's throughput, still over 10k batches a second, far from any training step's cost.
    per_batch = (
        live and implementation != "vectorized" and dataset_graph.elements_are_batches(dataset)
    )
    if per_batch:
        vectorized = None
    rows = meters is not None and _meter_rows(dataset)
    if not live and float(factor).is_integer():
        if vectorized is not None:
            echoed = _repeat_vectorized(dataset, None, int(factor), vectorized, name, meters, rows)
        else:
            echoed = dataset.flat_map(
                lambda *x: tf.data.Dataset.from_tensors(
                    _counted(as_element(x, dataset.element_spec), meters, int(factor), rows)
                ).repeat(int(factor)),
                name=_child(name, "flat_map"),
            )
        return _keep_cardinality(echoed, dataset, factor)

    # One int64 per element from a seeded stream decides its extra echo. Both paths draw the same
    # stream, so the output for a seed does not depend on which path runs. The stream is drawn
    # anew on every pass (each iteration of the dataset, each epoch of a .repeat()), as shuffle's
    # reshuffle_each_iteration does: fixed draws would double the same elements every epoch. A
    # seed still fixes the whole multi-pass stream of a dataset built from it.
    draws = tf.data.Dataset.random(
        seed=seed, rerandomize_each_iteration=True, name=_child(name, "random")
    )
    if vectorized is not None:
        echoed = _repeat_vectorized(dataset, draws, factor, vectorized, name, meters, rows)
    else:
        if per_batch:
            # One read per batch: a few scalar ops next to a batch's worth of upstream work. The
            # read and its range check are stateful, so tf.data runs this map in order, and zip
            # and flat_map pull a count only when the batch before has been put out: nothing in
            # the stage computes a count ahead (see _no_injected_prefetch for what did).
            counts = draws.map(lambda draw: _counts(draw, factor), name=_child(name, "counts"))
        else:
            counts = _count_groups(draws, factor, _PER_ELEMENT_COUNT_GROUP, name).unbatch(
                name=_child(name, "counts_unbatch")
            )
        echoed = tf.data.Dataset.zip((dataset, counts), name=_child(name, "zip")).flat_map(
            lambda x, count: tf.data.Dataset.from_tensors(_counted(x, meters, count, rows)).repeat(
                count
            ),
            name=_child(name, "flat_map"),
        )
        if per_batch:
            echoed = _no_injected_prefetch(echoed)
    return _keep_cardinality(echoed, dataset, factor)


def _samples_by_priority(dataset: tf.data.Dataset) -> bool:
    """Whether ``priority_sample`` draws ``dataset``'s batches. It picks each batch from the
    table as the batch is drawn; the vectorised path reads a group of elements ahead (292
    sampler batches before echo(2)'s first, so every batch came from priorities hundreds of
    steps old), the per-element one reads one at a time (as many ahead as with no echo)."""
    return any(name == "priority_sample" for name, _ in dataset_graph.per_pass_marks(dataset))


def _meter_rows(dataset: tf.data.Dataset) -> bool:
    """Whether echo's meters count the rows of each element (batch echoing: the elements come
    out of ``batch()``) rather than one per element. Elements that look like batches but come
    from a stage the check cannot see through (``interleave``, ``flat_map``) count one each,
    with a warning: sequences with per-step labels look alike and are examples."""
    batched = dataset_graph.comes_out_of_batch(dataset)
    if batched is None and dataset_graph.elements_are_batches(dataset):
        warnings.warn(
            "echoing.echo(meters=...): these elements look like batches (a leading dimension "
            "of unknown size), and no batch() is in sight before echo (a source, or a stage the "
            "check cannot see through, e.g. interleave or flat_map), so the meters count one "
            "example per element: right for examples of variable length (a line's tokens). If "
            "they are batches, count their rows with meters.fresh.count(rows=True) before echo "
            "and meters.emitted.count(rows=True) after it instead.",
            UserWarning,
            stacklevel=5,  # _echo, echo's apply, Dataset.apply, then the user's line
        )
    return batched is True


def _no_injected_prefetch(echoed: tf.data.Dataset) -> tf.data.Dataset:
    """``echoed`` with tf.data's ``inject_prefetch`` rewrite turned off for its pipeline.

    With autotuning on (the default), tf.data appends ``prefetch(AUTOTUNE)`` to a pipeline whose
    last stage is not a prefetch, e.g. when the per-batch echo stage is last. Its thread pulls
    outputs, and so reads the live factor for later batches, before they are asked for, and its
    autotuner grows the buffer while the consumer waits: 1-5 batches passed at the old factor
    after an update on a loaded 2-core machine, 2-8 in every run when the consumer paused 50 ms
    (a training step) before the update; none in any run with the rewrite off. Appending a
    small prefetch of our own would not bound it: ``autotune_buffer_sizes`` rewrites
    ``prefetch(k)`` to ``prefetch(AUTOTUNE)`` with k as its minimum. Options reach the whole
    pipeline (a later ``with_options`` setting ``inject_prefetch`` wins); a prefetch written
    after echo, as ``fit`` and the trainer use, still runs ahead by its buffer. Only the
    per-batch path turns the rewrite off: examples keep tf.data's defaults (and their groups).
    """
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return echoed.with_options(options)


def _keep_cardinality(echoed, dataset, factor: float):
    """Restores the cardinality that flat_map/unbatch forget, where it is known for sure."""
    # Static only: inside a tf.function cardinality() is a runtime tensor, and guessing is worse.
    cardinality = tf.get_static_value(dataset.cardinality())
    if cardinality is None:
        return echoed
    cardinality = int(cardinality)
    if cardinality == tf.data.INFINITE_CARDINALITY and not isinstance(factor, tf.Variable):
        # Every element is echoed floor(e) >= 0 times plus a Bernoulli draw with mean e > 0, so an
        # infinite input gives an infinite output (almost surely, for e < 1).
        return echoed.apply(tf.data.experimental.assert_cardinality(cardinality))
    if cardinality >= 0 and not isinstance(factor, tf.Variable) and float(factor).is_integer():
        return echoed.apply(tf.data.experimental.assert_cardinality(cardinality * int(factor)))
    return echoed  # unknown input, or a random number of echoes per element


def _validate_factor(factor) -> float | tf.Variable:
    if isinstance(factor, tf.Variable):
        if not factor.dtype.is_floating or factor.shape.rank != 0:
            raise TypeError(
                f"a live echo factor must be a scalar float tf.Variable, got dtype "
                f"{factor.dtype.name} shape {factor.shape}; e.g. tf.Variable(1.0)."
            )
        # Its value now, where it can be read: else the stage's own check, in the graph, says
        # it at the first element as an op error.
        value = float(factor.numpy()) if tf.executing_eagerly() else 1.0
        if not 0 < value <= MAX_FACTOR:  # NaN fails too
            raise ValueError(
                f"the live echo factor (a tf.Variable) holds {value!r}; it must be in (0, "
                f"{MAX_FACTOR:g}] when the echo stage is applied and whenever it is read, e.g. "
                "tf.Variable(1.0), then factor.assign(2.0)."
            )
        return factor
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real):
        raise TypeError(
            f"echo factor must be a real number such as 2 or 1.5, got {factor!r} "
            f"({type(factor).__name__})."
        )
    factor = float(factor)
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError(
            f"echo factor must be finite and > 0, got {factor!r}; use e >= 1 to repeat elements "
            "(e.g. echo(2)), or 1 to leave the dataset unchanged."
        )
    if factor > MAX_FACTOR:
        raise ValueError(
            f"echo factor must be at most MAX_FACTOR={MAX_FACTOR:g}, got {factor!r}; echo pays "
            "off up to e≈4-16 (e <= R = t_upstream / t_downstream), so use e.g. echo(4), or "
            "echoing.AutoEcho(max_factor=16) to have it measured."
        )
    return factor


def _validate_positive_int(argument: str, value, example: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{argument} must be an int, got {value!r} ({type(value).__name__}); {example}."
        )
    if value <= 0:
        raise ValueError(f"{argument} must be > 0, got {value!r}; {example}, or None for none.")
    return int(value)


def _validate_meters(meters) -> None:
    if meters is not None and not isinstance(meters, EchoMeters):
        raise TypeError(
            f"meters must be an echoing.meters.EchoMeters or None, got {type(meters).__name__}; "
            "e.g. meters=echoing.meters.EchoMeters()."
        )


def _validate_seed(seed) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"seed must be an int or None, got {seed!r} ({type(seed).__name__}); e.g. seed=0."
        )
    return int(seed)
