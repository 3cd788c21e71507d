"""Is my training input-bound? ``echoing.diagnose`` on your own pipeline and model, in one call.

Example::

    import keras
    import tensorflow as tf
    import echoing

    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.random.normal([2048, 32]), tf.zeros([2048], tf.int64))
    ).batch(64).repeat()
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    report = echoing.diagnose(dataset, model, num_steps=20)
    print(echoing.format_diagnosis(report))  # t_up, t_down, R and the echo factor to try

R = t_up / t_down, where t_up is the time per batch of the pipeline alone (a fresh iterator of
``dataset``: your own iterators and the model are not touched) and t_down the time per train
step on one batch cached in memory, so no input work is included. R > 1: the accelerator waits
for input about ``1 - 1/R`` of the time (with prefetching), and echoing by about R
(``echoing.echo``, or ``echoing.AutoEcho`` to follow it) fills that wait with repeated data. A
Keras model is timed on a copy (``train_on_batch`` of a clone with a fresh optimizer), so its
weights and optimizer state are unchanged; or pass your own ``step(batch)`` callable. What the
pipeline's stages count while diagnose reads it (meters, pruning's epochs, a sampler's steps)
is put back as it was afterwards.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping

import keras
import tensorflow as tf

from echoing._src.core import checks, dataset_graph

# Factors above this rarely help (the paper found echo useful up to e≈4-16; AutoEcho's default
# bound), and below this R the pipeline keeps up: no echo.
MAX_RECOMMENDED_FACTOR = 8.0
NO_ECHO_BELOW_RATIO = 1.05


def seconds_per_batch(
    dataset: tf.data.Dataset, *, num_batches: int, warmup: int = 3, max_seconds: float = 600.0
) -> float:
    """Mean wall seconds per element of a fresh iterator of ``dataset``, after ``warmup``.

    Raises:
      ValueError: the dataset is empty, or ends before ``warmup + num_batches`` elements.
      TimeoutError: ``max_seconds`` passed before the measurement was done.
    """
    if num_batches < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches}.")
    iterator = iter(dataset)
    deadline = time.perf_counter() + max_seconds
    start = None
    for index in range(warmup + num_batches):
        if index == warmup:
            start = time.perf_counter()
        try:
            element = next(iterator)
        except StopIteration:
            raise ValueError(
                f"the dataset ended after {index} elements; timing needs {warmup + num_batches} "
                f"({warmup} warm-up). {'It is empty. ' if index == 0 else ''}Use more data, "
                "repeat() it, or lower num_steps."
            ) from None
        # Block on the values, so lazily produced elements are really computed.
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, element)
        if time.perf_counter() > deadline:
            raise TimeoutError(
                f"the dataset produced {index + 1} of {warmup + num_batches} elements in "
                f"{max_seconds} s; raise max_seconds or lower num_steps to time a slower pipeline."
            )
    return (time.perf_counter() - start) / num_batches


def cached_batch(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """One batch of ``dataset``, cached and repeated forever: a train input with no input cost."""
    return dataset.take(1).cache().repeat()


def recommended_factor(ratio: float) -> float:
    """1 below R = 1.05 (the pipeline keeps up), else R capped at 8."""
    return 1.0 if ratio < NO_ECHO_BELOW_RATIO else min(ratio, MAX_RECOMMENDED_FACTOR)


def diagnose(
    dataset: tf.data.Dataset,
    model_or_step: keras.Model | Callable[[object], object],
    *,
    num_steps: int = 30,
    warmup: int = 3,
    max_seconds: float = 300.0,
) -> dict[str, float]:
    """Times ``dataset`` alone and a train step on a cached batch; returns R and a factor.

    A dataset that caches (``Dataset.cache``) and repeats a pass of known size, up to 1,000
    batches, is timed after its first pass, which fills the cache: the later passes, most of a
    run, read it. Any other that caches is timed from the start, with a warning.

    Args:
      dataset: the batched pipeline that feeds training (elements as ``fit`` takes them).
      model_or_step: a compiled ``keras.Model`` (timed on a clone; the model is unchanged), or
        a callable ``step(batch)`` that trains on one batch (it is run ``warmup + num_steps``
        times, so pass a copy if its state matters).
      num_steps: batches and steps timed on each side, after ``warmup`` untimed ones.
      max_seconds: per side; a pipeline slower than that raises TimeoutError saying so.

    Returns:
      ``{"upstream_seconds", "downstream_seconds", "ratio", "input_wait_fraction",
      "echo_factor", "already_echoes"}``: t_up, t_down, R = t_up / t_down, the expected share
      of step time spent waiting for input with prefetching (``max(0, 1 - 1/R)``), the echo
      factor to try, and 1.0 when ``dataset`` already echoes (an ``echoing.echo`` before it),
      else 0.0. Then t_up is of the echoed stream, copies included, and the factor is one more
      echo on top of it (factors multiply: ``echo(2)`` then ``echo(1.5)`` echo 3x).
    """
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"diagnose(dataset=...): expected a batched tf.data.Dataset, got {_kind(dataset)}; "
            "time the pipeline that feeds training, e.g. for arrays x, y: diagnose("
            "tf.data.Dataset.from_tensor_slices((x, y)).batch(64), model)."
        )
    _check_counts(num_steps, warmup, max_seconds)
    step = _step_function(model_or_step)
    _require_batched(dataset, model_or_step)
    _require_labels(dataset, model_or_step)
    # Its reads are not training's: the stages' counts (meters, pruning's epochs) go back.
    with dataset_graph.state_restored(dataset):
        upstream = seconds_per_batch(
            dataset,
            num_batches=num_steps,
            warmup=warmup + _cache_filling_batches(dataset),
            max_seconds=max_seconds,
        )
        # One batch, read plainly: a cache left part-read (of an endless generator) makes
        # TensorFlow warn of a cache the user never wrote.
        batch = next(iter(dataset.take(1)))
    downstream = _seconds_per_step(step, batch, num_steps, warmup, max_seconds)
    ratio = upstream / downstream
    return {
        "upstream_seconds": upstream,
        "downstream_seconds": downstream,
        "ratio": ratio,
        "input_wait_fraction": max(0.0, 1.0 - 1.0 / ratio),
        "echo_factor": recommended_factor(ratio),
        "already_echoes": float(dataset_graph.echo_upstream(dataset)),
    }


# The most batches diagnose reads untimed to fill a cache before it times the pipeline.
_CACHE_FILL_LIMIT = 1_000


def _cache_filling_batches(dataset: tf.data.Dataset) -> int:
    """The batches of the first pass when ``dataset`` caches and repeats a pass of known size
    (up to ``_CACHE_FILL_LIMIT``): read untimed, so that the timing is of the passes that read
    the cache, which are most of a run's. Otherwise 0, with a warning when it caches: the
    timing may be of the cache filling, slower than the passes after it."""
    if not dataset_graph.caches(dataset):
        return 0
    size = dataset_graph.pass_size(dataset)
    if size is not None and size <= _CACHE_FILL_LIMIT:
        return size
    why = "a pass's size is unknown" if size is None else f"a pass is {size} batches"
    warnings.warn(
        f"diagnose: the dataset caches (Dataset.cache), and {why}, so the timed batches are "
        "of the first pass, which fills the cache and reads slower than the passes after it; "
        "R may be too high. Diagnose the pipeline after a pass, e.g. on dataset.skip(pass "
        "size), or without the cache.",
        UserWarning,
        stacklevel=3,
    )
    return 0


def format_diagnosis(report: dict[str, float]) -> str:
    """The report as two lines a person reads."""
    keys = ("upstream_seconds", "downstream_seconds", "ratio", "input_wait_fraction", "echo_factor")
    if not isinstance(report, Mapping):
        raise TypeError(
            f"format_diagnosis: expected the dict echoing.diagnose(dataset, model) returns, got "
            f"{_kind(report)}."
        )
    missing = [key for key in keys if key not in report]
    if missing:
        raise ValueError(
            f"format_diagnosis: the report lacks {missing}; give it what echoing.diagnose("
            "dataset, model) returns."
        )
    if not report.get("already_echoes"):
        verdict = (
            f"input-bound: try echoing.echo({report['echo_factor']:.1f}) or echoing.AutoEcho"
            if report["echo_factor"] > 1
            else "not input-bound: the pipeline keeps up, no echo needed"
        )
    elif report["echo_factor"] > 1:
        verdict = (
            "input-bound even with the echo already in the pipeline (t_up counts its copies): "
            f"raise its factor about {report['echo_factor']:.1f}x (the factors multiply), or "
            "AutoEcho's max_factor if it is an echoing.AutoEcho stage"
        )
    else:
        verdict = (
            "not input-bound with the echo already in the pipeline: its factor is enough "
            "(diagnose the pipeline without it to see whether it needs echo at all)"
        )
    return (
        f"t_up {1e3 * report['upstream_seconds']:.2f} ms/batch, t_down "
        f"{1e3 * report['downstream_seconds']:.2f} ms/step: R = {report['ratio']:.2f}, "
        f"~{100 * report['input_wait_fraction']:.0f}% of step time waiting for input\n{verdict}"
    )


def _check_counts(num_steps, warmup, max_seconds) -> None:
    """``diagnose``'s numeric arguments, refused by their own names before any timing."""
    checks.require(
        checks.is_positive_int(num_steps, numpy=True),
        f"diagnose(num_steps={num_steps!r}): expected an int >= 1, the batches and train steps "
        "timed on each side (the default 30 gives a stable mean).",
        TypeError if not checks.is_int(num_steps, numpy=True) else ValueError,
    )
    checks.require(
        checks.is_int(warmup, numpy=True) and warmup >= 0,
        f"diagnose(warmup={warmup!r}): expected an int >= 0, the untimed batches and steps "
        "before timing (the default 3 skips tracing and the pipeline's start-up).",
        TypeError if not checks.is_int(warmup, numpy=True) else ValueError,
    )
    checks.require(
        checks.is_real(max_seconds, finite=False)
        and checks.in_interval(max_seconds, 0, float("inf"), low_open=True),
        f"diagnose(max_seconds={max_seconds!r}): expected a number of seconds > 0, the time "
        "allowed to each side (the default 300; float('inf') for no limit).",
        TypeError if not checks.is_real(max_seconds, finite=False) else ValueError,
    )


def _require_batched(dataset: tf.data.Dataset, model) -> None:
    """Refuses one example per element for a Keras model that takes batches, and batches whose
    features do not fit the model's inputs: the first step would fail in the model's call (e.g.
    "Exception encountered when calling Sequential.call()") with no word of either. A model of
    several inputs (a dict of them) is matched by name."""
    if not isinstance(model, keras.Model):
        return
    spec = dataset.element_spec
    features = spec[0] if isinstance(spec, tuple) and spec else spec
    pairs = _features_and_inputs(features, model)
    if not pairs:
        return
    if all(
        feature.shape.rank == len(expected) - 1 and feature.shape.is_compatible_with(expected[1:])
        for feature, expected in pairs
    ):
        shapes, batched = _shapes_of(pairs)
        raise ValueError(
            f"diagnose: the dataset's elements look like single examples (features of shape "
            f"{shapes}), but the model takes batches of shape {batched}; pass the batched "
            "pipeline that feeds training, e.g. dataset.batch(32)."
        )
    misfits = [
        (feature, expected)
        for feature, expected in pairs
        if feature.shape.rank == len(expected) and not feature.shape.is_compatible_with(expected)
    ]
    if misfits:
        shapes, inputs = _shapes_of(misfits)
        raise ValueError(
            f"diagnose: the dataset's batches hold features of shape {shapes}, but the model "
            f"takes inputs of shape {inputs}; pass the pipeline and the model that train "
            "together (the timing of one with the other would not say anything of training)."
        )


def _shapes_of(pairs) -> tuple[str, str]:
    """The features' shapes and the model inputs' shapes of ``pairs``, as text."""
    return (
        ", ".join(str(tuple(feature.shape)) for feature, _ in pairs),
        ", ".join(str(expected) for _, expected in pairs),
    )


def _features_and_inputs(features, model) -> list[tuple[tf.TensorSpec, tuple]]:
    """``(feature spec, the model input's shape)`` pairs: one tensor for a one-input model,
    a dict's entries by the inputs' names; empty when they cannot be matched (not built)."""
    try:
        inputs = list(model.inputs or ())
    except (AttributeError, ValueError):  # a subclassed model: no symbolic inputs
        inputs = []
    if not inputs:
        return []
    if isinstance(features, tf.TensorSpec) and len(inputs) == 1:
        return [(features, tuple(inputs[0].shape))]
    if not isinstance(features, dict):
        return []
    named = {getattr(tensor, "name", "").split(":")[0]: tensor for tensor in inputs}
    if set(named) != set(features) or not all(
        isinstance(value, tf.TensorSpec) for value in features.values()
    ):
        return []
    return [(features[name], tuple(named[name].shape)) for name in sorted(named)]


def _require_labels(dataset: tf.data.Dataset, model) -> None:
    """Refuses features alone for a model compiled with a loss: its train step would fail with
    Keras's "None values not supported", which never names the missing labels."""
    if not isinstance(model, keras.Model) or getattr(model, "loss", None) is None:
        return  # a step of the caller's own, or a model whose losses are its own (add_loss)
    spec = dataset.element_spec
    if isinstance(spec, tuple) and len(spec) >= 2:
        return
    raise ValueError(
        f"diagnose: the dataset's elements are features alone ({_spec_kind(spec)}), but the "
        "model is compiled with a loss, so a train step needs (features, labels); pass the "
        "dataset fit trains on, e.g. tf.data.Dataset.from_tensor_slices((x, y)).batch(64)."
    )


def _spec_kind(spec) -> str:
    if isinstance(spec, tf.TensorSpec):
        return f"a tensor of shape {tuple(spec.shape)}"
    if isinstance(spec, dict):
        return f"a dict of {sorted(spec)}"
    return f"a {type(spec).__name__}"


def _clone(model: keras.Model) -> keras.Model:
    """``keras.models.clone_model(model)``; a model it cannot copy (a subclassed model without
    ``get_config``, such as the ``echoing.keras`` wrappers) is a ValueError naming the ways on."""
    try:
        return keras.models.clone_model(model)
    except (NotImplementedError, TypeError, ValueError) as error:
        raise ValueError(
            f"diagnose times a Keras model on a copy (keras.models.clone_model, so that yours "
            f"is left unchanged), and Keras cannot copy this {type(model).__name__} "
            f"({type(error).__name__}: a subclassed model needs a get_config() to be copied). "
            "Pass a callable that runs one train step instead, e.g. diagnose(dataset, lambda "
            "batch: model.train_on_batch(*batch)), which trains your model on the timed batches; "
            "or, for an echoing.keras wrapper (LossFeedback, ...), time the network it wraps: "
            "compile model.model as you train it and pass that."
        ) from None


def _step_function(model_or_step) -> Callable[[object], object]:
    if isinstance(model_or_step, keras.Model):
        if getattr(model_or_step, "optimizer", None) is None:
            raise ValueError(
                "diagnose got a Keras model that is not compiled; compile it as you train it "
                "(its optimizer and loss are what a train step runs)."
            )
        copy = _clone(model_or_step)
        copy.set_weights(model_or_step.get_weights())
        optimizer = model_or_step.optimizer.__class__.from_config(
            model_or_step.optimizer.get_config()
        )
        copy.compile(optimizer=optimizer, loss=model_or_step.loss)

        def train_on_batch(batch):
            # fit's element forms: (x, y[, sample_weight]) tuples, or x alone.
            return (
                copy.train_on_batch(*batch)
                if isinstance(batch, tuple)
                else copy.train_on_batch(batch)
            )

        return train_on_batch
    if callable(model_or_step):
        return model_or_step
    raise TypeError(
        f"diagnose(model_or_step={model_or_step!r}): expected a compiled keras.Model or a "
        "callable step(batch)."
    )


def _seconds_per_step(step, batch, num_steps, warmup, max_seconds) -> float:
    def run_blocking():
        result = step(batch)
        # Block on the step's outputs, so asynchronously dispatched work is really done.
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)

    for _ in range(warmup):
        run_blocking()
    start = time.perf_counter()
    for index in range(num_steps):
        run_blocking()
        if time.perf_counter() - start > max_seconds:
            raise TimeoutError(
                f"{index + 1} of {num_steps} train steps took over {max_seconds} s; raise "
                "max_seconds or lower num_steps."
            )
    return (time.perf_counter() - start) / num_steps


def _kind(value) -> str:
    """``value`` in a few words, not its contents (arrays can be large)."""
    if isinstance(value, (tuple, list)):
        parts = ", ".join(_kind(item) for item in value[:3]) + (", ..." if len(value) > 3 else "")
        return f"a {type(value).__name__} of {len(value)} ({parts})"
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    return f"a {type(value).__name__}"
