"""In-batch selection with static shapes: train on the k rows of a batch that score highest
(``select_rows``), or on k rows drawn by score and weighted by 1/p (``sample_rows``).

Example::

    import tensorflow as tf
    import echoing

    batch = {"inputs": tf.reshape(tf.range(12.0), [6, 2]), "id": tf.range(6, dtype=tf.int64)}
    losses = tf.constant([0.1, 2.0, 0.3, float("nan"), 1.5, 0.2])
    selected = echoing.select_rows(batch, losses, k=2)
    print(selected["id"].numpy())  # [1 4]: the two highest losses; the NaN is never preferred

Selective-Backprop and RHO-LOSS style selection: score every row of a batch of B with a cheap
forward pass (the loss in inference mode, an Assistant's score, or a loss table's entry), then
run the forward and backward pass on the k highest only. ``k`` is a Python int, so the result
has shape ``[k, ...]`` whatever the scores are: it compiles under XLA and on TPUs, unlike
``boolean_mask`` or ``Dataset.filter`` (tensorflow/tensorflow#67330). Non-finite scores rank
below every finite one (a NaN loss would poison the step), and ``count_nonfinite`` says how many
there were so a caller can log them.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from echoing._src.core.checks import in_interval, is_positive_int, is_real


def select_rows(batch: dict, scores: tf.Tensor, k: int) -> dict:
    """The ``k`` rows of every tensor in ``batch`` whose ``scores`` are highest (order kept).

    Args:
      batch: a dict of tensors sharing their first axis, of size B.
      scores: float ``[B]``; higher is more worth training on (e.g. per-example losses).
      k: rows to keep, a Python int in ``[1, B]``.

    Returns:
      A dict with the same keys, each of first dimension ``k`` (static).

    Raises:
      ValueError: ``k`` not an int in ``[1, B]`` (B static), scores not of shape ``[B]``, or an
        entry of ``batch`` without ``B`` rows, when the shapes are known at trace time; else an
        InvalidArgumentError naming the argument when the step runs (XLA, ``jit_compile=True``,
        drops run-time assertions: give it static shapes, e.g. ``batch(..., drop_remainder=True)``).
    """
    if not is_positive_int(k, numpy=True):
        raise ValueError(f"select_rows(k={k!r}): expected an int >= 1, the rows to train on.")
    if not isinstance(batch, dict) or not batch:
        raise TypeError(
            f"select_rows(batch=...): expected a non-empty dict of tensors sharing their first "
            f"axis, got {_describe(batch)}."
        )
    scores = _numeric_scores("select_rows", scores)
    size = _static_rows("select_rows", batch, scores)
    if size is not None and k > size:
        raise ValueError(
            f"select_rows(k={k}) asks for more rows than the batch has ({size}); pick k <= the "
            "per-replica batch size."
        )
    checks = _run_time_checks("select_rows", batch, scores)
    checks.append(
        tf.debugging.assert_less_equal(
            tf.constant(k), tf.shape(scores)[0], message=f"select_rows: k={k} > rows in batch"
        )
    )
    with tf.control_dependencies(checks):
        scores = tf.cast(scores, tf.float32)  # integer scores too (is_finite takes floats)
        ranked = tf.where(tf.math.is_finite(scores), scores, -float("inf"))
        _, index = tf.math.top_k(ranked, k=k, sorted=False)
        index = tf.sort(index)  # the batch's own order, so a selection of all rows is the batch
    return {key: tf.gather(value, index) for key, value in batch.items()}


def sample_rows(
    batch: dict, scores: tf.Tensor, k: int, seed: tf.Tensor, *, uniform_mix: float = 0.1
) -> dict:
    """``k`` rows drawn with probability rising with ``scores``, weighted by 1/p (unbiased).

    The importance-sampling alternative to :func:`select_rows` (Katharopoulos & Fleuret, 2018):
    row ``i`` is drawn, with replacement, with probability
    ``q_i = (1 - uniform_mix) · s_i / Σ s + uniform_mix / B`` and carries
    ``sample_weight = 1 / (B · q_i)``, so the weighted mean loss over the ``k`` rows is an
    unbiased estimate of the whole batch's mean loss (and its gradient of the mean gradient),
    unlike top-k, which trains on a biased gradient. ``uniform_mix`` bounds every weight by
    ``1 / uniform_mix``. Shapes are static (``[k, ...]``), so it compiles under XLA and on TPUs.

    Example::

        batch = {"x": tf.reshape(tf.range(8.0), [4, 2]), "id": tf.range(4, dtype=tf.int64)}
        drawn = echoing.sample_rows(batch, tf.constant([0.1, 3.0, 0.2, 1.0]), k=2, seed=[0, 7])
        drawn["id"], drawn["sample_weight"]  # mostly row 1, weighted below 1

    Args:
      batch: a dict of tensors sharing their first axis, of size B (no ``"sample_weight"``
        key: the result's weights would replace it).
      scores: float ``[B]``, >= 0 (e.g. per-example losses); NaN/inf and negative scores count
        as 0, so such a row is drawn only through the uniform part.
      k: rows to draw, a Python int >= 1 (may exceed B: rows repeat).
      seed: int32/int64 ``[2]``, the stateless seed of this draw (e.g. ``[run_seed, step]``).
      uniform_mix: the share of the uniform distribution in ``q``, in (0, 1].

    Returns:
      The drawn rows (each of first dimension ``k``) and ``"sample_weight"`` (float32 ``[k]``).

    Raises:
      ValueError: bad ``k``, ``uniform_mix`` or ``seed`` shape; scores not of shape ``[B]`` or
        an entry of ``batch`` without ``B`` rows, when the shapes are known at trace time (else
        an InvalidArgumentError naming the argument when the step runs, as in ``select_rows``).
      TypeError: ``batch`` not a dict, or with a ``"sample_weight"`` key; a non-integer seed.
    """
    if not is_positive_int(k, numpy=True):
        raise ValueError(f"sample_rows(k={k!r}): expected an int >= 1, the rows to train on.")
    if not isinstance(batch, dict) or not batch:
        raise TypeError(
            f"sample_rows(batch=...): expected a non-empty dict of tensors sharing their first "
            f"axis, got {_describe(batch)}."
        )
    if "sample_weight" in batch:
        raise TypeError(
            f"sample_rows(batch=...): got {_describe(batch)}, but the drawn rows get a "
            "'sample_weight' of their own (1/(B·q)); drop the batch's 'sample_weight' first, or "
            "use select_rows, which keeps every key."
        )
    if not (
        is_real(uniform_mix, finite=False) and in_interval(uniform_mix, 0.0, 1.0, low_open=True)
    ):
        raise ValueError(
            f"sample_rows(uniform_mix={uniform_mix!r}): expected a number in (0, 1]; it bounds "
            "each weight 1/(B·q) by 1/uniform_mix."
        )
    seed = _checked_seed(seed)
    scores = _numeric_scores("sample_rows", scores)
    _static_rows("sample_rows", batch, scores)
    with tf.control_dependencies(_run_time_checks("sample_rows", batch, scores)):
        scores = tf.cast(scores, tf.float32)
    usable = tf.where(tf.math.is_finite(scores), tf.maximum(scores, 0.0), 0.0)
    # Scaled by the largest first: a sum of scores near float32's limit would overflow to inf,
    # every share would become 0, and every weight 1/uniform_mix (q is scale-free anyway).
    usable = tf.math.divide_no_nan(usable, tf.reduce_max(usable))
    size = tf.cast(tf.shape(usable)[0], tf.float32)
    total = tf.reduce_sum(usable)
    # All scores 0: the uniform distribution (and weight 1 for every row).
    share = tf.where(total > 0, usable / tf.maximum(total, 1e-30), 1.0 / size)
    probability = (1.0 - uniform_mix) * share + uniform_mix / size
    # int32 seeds and indices: the kernel XLA has (TPUs, jit_compile=True).
    index = tf.random.stateless_categorical(
        tf.math.log(probability)[tf.newaxis], k, seed=seed, dtype=tf.int32
    )[0]
    drawn = {key: tf.gather(value, index) for key, value in batch.items()}
    drawn["sample_weight"] = tf.math.reciprocal(size * tf.gather(probability, index))
    return drawn


def _numeric_scores(caller: str, scores) -> tf.Tensor:
    """``scores`` as a tensor, refused unless real numbers (a string or complex one would reach
    the user as TensorFlow's "Cast string to float is not supported")."""
    scores = tf.convert_to_tensor(scores)
    if not (scores.dtype.is_floating or scores.dtype.is_integer):
        raise TypeError(
            f"{caller}: scores must be real numbers, one per row (e.g. per-example losses), got "
            f"dtype {scores.dtype.name}; convert them first, e.g. tf.strings.to_number(scores)."
        )
    return scores


def _static_rows(caller: str, batch: dict, scores: tf.Tensor) -> int | None:
    """The batch's row count where shapes say it (else ``None``), after checking statically that
    ``scores`` is ``[B]`` and that every entry of ``batch`` has ``B`` rows."""
    rows = {key: _leading_size(caller, key, value) for key, value in batch.items()}
    known = {key: size for key, size in rows.items() if size is not None}
    if scores.shape.rank is not None and scores.shape.rank != 1:
        size = next(iter(known.values()), None)
        raise ValueError(
            f"{caller}: scores must be one per row, shape [{size}], got {scores.shape}."
        )
    num_scores = tf.compat.dimension_value(scores.shape[0]) if scores.shape.rank else None
    sizes = set(known.values())
    if num_scores is not None and len(sizes) == 1 and num_scores not in sizes:
        # The entries agree among themselves: the scores are the odd one out.
        (size,) = sizes
        raise ValueError(
            f"{caller}: scores must be one per row, shape [{size}], got {scores.shape}."
        )
    if num_scores is not None:
        reference, what = num_scores, f"there are {num_scores} scores (one per row)"
    elif known:
        first = next(iter(known))
        reference, what = known[first], f"batch[{first!r}] has {known[first]} rows"
    else:
        return None
    for key, size in known.items():
        if size != reference:
            raise ValueError(
                f"{caller}: batch[{key!r}] has {size} rows, but {what}; every entry of batch "
                "must share its first axis with the scores (one row per example)."
            )
    return reference


def _run_time_checks(caller: str, batch: dict, scores: tf.Tensor) -> list:
    """Assertions, for the shapes known only when the step runs, that ``scores`` is ``[B]`` and
    that every entry of ``batch`` has its ``B`` rows; each names the argument at fault."""
    checks = []
    if scores.shape.rank is None:
        checks.append(
            tf.debugging.assert_rank(
                scores, 1, message=f"{caller}: scores must be one per row of batch, rank 1"
            )
        )
    num_scores = tf.compat.dimension_value(scores.shape[0]) if scores.shape.rank else None
    for key, value in batch.items():
        size = _leading_size(caller, key, value)
        if size is not None and num_scores is not None:
            continue  # checked statically
        rows = value.nrows() if isinstance(value, tf.RaggedTensor) else tf.shape(value)[0]
        checks.append(
            tf.debugging.Assert(
                tf.equal(tf.cast(rows, tf.int64), tf.shape(scores, out_type=tf.int64)[0]),
                [
                    # No quotes around the key: the error would show them escaped.
                    f"{caller}: the batch entry {key} must have one row per score (every entry "
                    "of batch shares its first axis with the scores); its rows, then the scores:",
                    rows,
                    tf.shape(scores)[0],
                ],
            )
        )
    return checks


def _checked_seed(seed) -> tf.Tensor:
    """``sample_rows``'s stateless seed as int32 ``[2]`` (the kernel XLA has), checked."""
    if seed is None:
        raise TypeError(
            "sample_rows(seed=None): expected int32/int64 of shape [2], e.g. [run_seed, step]; "
            "the draw is stateless, so it needs a seed of its own at each step (the same seed "
            "draws the same rows)."
        )
    tensor = tf.convert_to_tensor(seed)
    if not tensor.dtype.is_integer:
        raise TypeError(
            f"sample_rows(seed={seed!r}): expected int32/int64 of shape [2], e.g. "
            f"[run_seed, step], got dtype {tensor.dtype.name}."
        )
    if tensor.shape.rank is not None and tensor.shape != [2]:
        raise ValueError(
            f"sample_rows(seed={seed!r}): expected int32/int64 of shape [2], e.g. "
            f"[run_seed, step], got shape {tensor.shape}."
        )
    return tf.cast(tensor, tf.int32)


def _describe(batch) -> str:
    """``batch`` in a few words for an error message: keys and shapes, never its values."""
    if isinstance(batch, dict):
        if not batch:
            return "an empty dict"
        specs = ", ".join(
            f"{key!r}: {tuple(tf.TensorShape(getattr(value, 'shape', np.shape(value))))}"
            for key, value in batch.items()
        )
        return f"a dict of shapes {{{specs}}}"
    name = type(batch).__name__
    name = f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"
    if hasattr(batch, "shape") and hasattr(batch, "dtype"):
        dtype = getattr(batch.dtype, "name", batch.dtype)
        return f"{name} of shape {tuple(batch.shape)} and dtype {dtype}"
    if isinstance(batch, tuple | list):
        return f"{name} of {len(batch)} values"
    return name


def _leading_size(caller: str, key, value) -> int | None:
    """The static size of ``value``'s first axis, ``None`` if unknown; refuses a scalar."""
    shape = tf.TensorShape(value.shape if hasattr(value, "shape") else np.shape(value))
    if shape.rank == 0:
        raise ValueError(
            f"{caller}: batch[{key!r}] is a scalar, but every entry of batch needs a first axis "
            "of one row per example; keep per-batch values out of the batch dict."
        )
    return tf.compat.dimension_value(shape[0]) if shape.rank else None


def count_nonfinite(scores: tf.Tensor) -> tf.Tensor:
    """The number of NaN/inf entries of ``scores`` (int64)."""
    finite = tf.math.is_finite(tf.convert_to_tensor(scores))
    return tf.reduce_sum(tf.cast(tf.logical_not(finite), tf.int64))
