"""Per-example ids for a user's own ``(x, y)`` dataset, so that ``model.fit`` can prune by id.

Example::

    import keras
    import numpy as np
    import tensorflow as tf
    import echoing

    n = 256
    x = np.random.default_rng(0).normal(size=(n, 8)).astype("float32")
    y = np.arange(n) % 2
    table = echoing.LossTable(n)
    source = echoing.with_ids(tf.data.Dataset.from_tensor_slices((x, y)))
    print(source.element_spec["id"])  # TensorSpec(shape=(), dtype=tf.int64, name=None)
    pruned = source.shuffle(n, seed=0).apply(echoing.loss_prune(table, num_epochs=3, seed=0))
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model = echoing.keras.LossFeedback(
        net,
        per_example_loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None),
        observers=[table.update],
    )
    model.compile("sgd")
    model.fit(pruned.batch(32).map(echoing.keras.fit_inputs), epochs=3, verbose=0)
    model.evaluate(x, y, verbose=0)  # evaluation and prediction take plain arrays

Loss tables, pruning and priority sampling name each example by an int64 id, its row in a table
of ``n`` rows. ``with_ids`` gives the elements of an unbatched dataset their position as that id
(``Dataset.enumerate``, in the graph): apply it to the source, before ``shuffle``, ``repeat`` or
any stage that drops or reorders elements, so that an example keeps its id in every epoch. The
stages before it must put out elements in the same order every pass: no ``deterministic=False``
there (refused where it can be seen), nor in ``tf.data.Options`` set later, which reach the
whole pipeline.
"""

from __future__ import annotations

import warnings

import tensorflow as tf

from echoing._src.core.checks import is_int
from echoing._src.core.dataset_graph import (
    comes_out_of_batch,
    is_echo_output,
    mark_ids,
    upstream_stages,
)

# Element-preserving transformations seen through when looking for a batch, by class name.
_SAME_ELEMENTS = frozenset(
    {
        "CacheDataset",
        "OptionsDataset",
        "PrefetchDataset",
        "RepeatDataset",
        "ShardDataset",
        "ShuffleDataset",
        "SkipDataset",
        "TakeDataset",
    }
)
_BATCHES = frozenset({"BatchDataset", "PaddedBatchDataset", "ParallelBatchDataset"})


def with_ids(
    dataset: tf.data.Dataset,
    *,
    inputs_key: str = "inputs",
    label_key: str = "label",
    id_key: str = "id",
    start: int = 0,
) -> tf.data.Dataset:
    """An unbatched ``(x, y[, sample_weight])`` dataset as dicts carrying each element's id.

    Example::

        import tensorflow as tf
        import echoing

        ds = tf.data.Dataset.from_tensor_slices(([[1.0], [2.0], [3.0]], [0, 1, 0]))
        for element in echoing.with_ids(ds).take(2):
            print(int(element["id"]), int(element["label"]))  # 0 0, then 1 1

    Element ``i`` (counted from 0) becomes ``{inputs_key: x, label_key: y, id_key: start + i}``,
    with ``"sample_weight": w`` too when elements are ``(x, y, w)``; ``x`` may be any nested
    structure (a dict of features, a tuple of inputs). Ids are int64 scalars: positions in the
    dataset, so apply ``with_ids`` before shuffling, and give a table ``start + n`` rows.

    A dataset batched before (even behind ``prefetch``, ``shuffle``, ``map``, ``filter`` …) is
    refused; one batched behind a stage the check cannot see through (``flat_map``,
    ``interleave``) is not, and would get one id per batch. Add ids first, batch after.

    Args:
      dataset: unbatched, with ``(x, y)`` or ``(x, y, sample_weight)`` tuple elements, e.g.
        ``tf.data.Dataset.from_tensor_slices((x, y))``.
      inputs_key, label_key, id_key: the keys of ``x``, ``y`` and the id in the new elements
        (``echoing.keras.fit_inputs`` reads the defaults).
      start: the first id, for a dataset whose examples are rows ``start, start + 1, …`` of a
        larger table (a shard, a second file).

    Returns:
      The dataset of dict elements, in the same order.

    Raises:
      TypeError: ``dataset`` is not a ``tf.data.Dataset``, its elements are not 2- or 3-tuples,
        a key is not a string or ``start`` not an int.
      ValueError: keys collide, ``start`` is negative, the elements already hold ``id_key`` or
        the dataset is batched.
    """
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"with_ids(dataset=<a {type(dataset).__name__}>): expected a tf.data.Dataset; "
            "build one with tf.data.Dataset.from_tensor_slices((x, y))."
        )
    _check_keys_and_start(inputs_key, label_key, id_key, start)
    _check_elements(dataset, inputs_key, label_key, id_key)

    def to_dict(position, element):
        out = {inputs_key: element[0], label_key: element[1], id_key: position}
        if len(element) == 3:
            out["sample_weight"] = element[2]
        return out

    # Marked, so that a loss_prune after it can check the ids against its table's rows.
    return mark_ids(dataset.enumerate(start=start).map(to_dict), start, id_key)


def integer_ids(ids, caller: str) -> tf.Tensor:
    """``ids`` as a flat int64 tensor; a TypeError names ``caller`` when they are not integers
    (a cast would truncate 1.7 to 1, another example's id).

    Example::

        integer_ids([3, 1], "LossTable.update")  # int64 [2]
    """
    if isinstance(ids, (list, tuple)) and not ids:
        ids = tf.zeros([0], tf.int64)  # Python's empty list converts to float32: no ids, not floats
    ids = tf.convert_to_tensor(ids)
    if not ids.dtype.is_integer:
        raise TypeError(
            f"{caller}: ids must be integers, got dtype {ids.dtype.name}; pass the examples' "
            "int ids (the pipelines' 'id' field, echoing.with_ids), not floats."
        )
    return tf.reshape(tf.cast(ids, tf.int64), [-1])


def _check_keys_and_start(inputs_key, label_key, id_key, start) -> None:
    keys = {"inputs_key": inputs_key, "label_key": label_key, "id_key": id_key}
    for name, key in keys.items():
        if not isinstance(key, str):
            raise TypeError(f"with_ids({name}={key!r}): expected a string key.")
    if not is_int(start):
        raise TypeError(f"with_ids(start={start!r}): expected a Python int, the first id.")
    if start < 0:
        raise ValueError(
            f"with_ids(start={start}): ids are rows of a table, so the first must be >= 0."
        )


def _check_elements(dataset, inputs_key, label_key, id_key):
    """Refuses elements that are not unbatched (x, y[, w]) tuples free of ``id_key``."""
    spec = dataset.element_spec
    if isinstance(spec, dict) and id_key in spec:
        raise ValueError(
            f"with_ids: the elements already hold ids under {id_key!r} (keys {sorted(spec)}); "
            "use the dataset as it is (e.g. .batch(n).map(echoing.keras.fit_inputs)), or pass "
            "another id_key."
        )
    if not isinstance(spec, tuple):
        shown = f"dicts with keys {sorted(spec)}" if isinstance(spec, dict) else repr(spec)
        raise TypeError(
            f"with_ids takes a dataset of (x, y) or (x, y, sample_weight) tuples, got elements "
            f"{shown}; map them to tuples first, e.g. dataset.map(lambda e: (e['image'], "
            "e['label']))."
        )
    if len(spec) not in (2, 3):
        raise ValueError(
            f"with_ids takes (x, y) or (x, y, sample_weight) tuples, got {len(spec)}-tuples "
            f"{spec!r}; group the model's inputs into one x first, e.g. dataset.map(lambda a, b, "
            "y: ((a, b), y))."
        )
    names = [inputs_key, label_key, id_key] + (["sample_weight"] if len(spec) == 3 else [])
    if len(set(names)) != len(names):
        raise ValueError(
            f"with_ids needs distinct keys, got {names} (inputs_key, label_key, id_key"
            f"{' and the fixed sample_weight' if len(spec) == 3 else ''}); rename one."
        )
    batch = _batched_by(dataset)
    if batch is not None:
        raise ValueError(
            f"with_ids needs an unbatched dataset, got one made by {batch}, which would give "
            "one id per batch; add ids first and batch after: with_ids(dataset).batch(n)."
        )
    reordered = _reordered_by(dataset)
    if reordered is not None:
        raise ValueError(
            f"with_ids numbers elements in the order they arrive, and this dataset's {reordered} "
            "changes that order or count from one epoch to the next, so an example would get "
            "another id each epoch (or copies their own ids) and its losses would be recorded "
            "as another example's; add ids to the source first: with_ids(dataset) before "
            "shuffle(), repeat() or echo, and keep the stages before it deterministic."
        )


def _upstream(dataset: tf.data.Dataset):
    """``dataset`` and the stages before it while they keep its elements (prefetch, shuffle,
    repeat, …, by tf.data's class names); a ``map`` or an ``unbatch`` ends the walk: best
    effort, not a proof."""
    for _ in range(16):
        yield dataset
        if type(dataset).__name__.lstrip("_") not in _SAME_ELEMENTS:
            return
        dataset = getattr(dataset, "_input_dataset", None)
        if not isinstance(dataset, tf.data.Dataset):
            return


def _samples_anew_each_pass(dataset: tf.data.Dataset) -> bool:
    """Whether a stage before ``dataset`` picks among datasets (``sample_from_datasets``) by a
    ``Dataset.random`` that draws anew each pass: the order of the examples then differs from
    pass to pass. Through every stage; best effort (``choose_from_datasets`` wraps its selector
    in a dataset whose stages cannot be read)."""
    for node in upstream_stages(dataset, limit=1_000):
        if type(node).__name__.lstrip("_") != "DirectedInterleaveDataset" or not node._inputs():
            continue
        selector = node._inputs()[0]  # which dataset gives the next element
        if any(getattr(stage, "_rerandomize", None) for stage in upstream_stages(selector, 100)):
            return True
    return False


def _batched_by(dataset: tf.data.Dataset) -> str | None:
    """The batching transformation that made ``dataset``'s elements, if it is in plain sight."""
    for stage in _upstream(dataset):
        name = type(stage).__name__.lstrip("_")
        if name in _BATCHES:
            return name
    # Further back, through map and filter (batch().map(...) gives one id per batch too).
    return "a batch() further up the pipeline" if comes_out_of_batch(dataset) else None


def _reordered_by(dataset: tf.data.Dataset) -> str | None:
    """The stage before ``dataset`` that makes each pass differ (a shuffle that reshuffles, a
    repeat, an echo stage, a parallel stage that may put out elements as they finish), looking
    through every stage and each of its inputs (``map``, ``filter``, ``zip``'s, …); None when
    none is in sight: best effort, not a proof (an ``interleave``'s ``deterministic``, stages
    built inside a function, and ``choose_from_datasets``' selector, which TensorFlow wraps,
    cannot be read)."""
    if dataset.options().deterministic is False:
        return "tf.data.Options with deterministic=False"
    if _samples_anew_each_pass(dataset):
        return "sample_from_datasets(..., rerandomize_each_iteration=True)"
    for node in upstream_stages(dataset, limit=1_000):
        name = type(node).__name__.lstrip("_")
        if is_echo_output(node):
            return "echo stage"
        reshuffles = getattr(node, "_reshuffle_each_iteration", True) is not False
        if name == "ShuffleDataset" and reshuffles:
            return "shuffle() (reshuffle_each_iteration=True)"
        if name == "RepeatDataset":
            return "repeat()"
        if name in _KEEPS_BY_PREDICATE and (drawn := _keeps_by_draw(node)):
            return f"{_KEEPS_BY_PREDICATE[name]} {drawn}"
        if getattr(node, "_deterministic", None) == "false":  # parallel map() or batch()
            method = {"ParallelMapDataset": "map", "ParallelBatchDataset": "batch"}.get(name, name)
            return f"{method}(..., deterministic=False)"
    return _unordered_in_graph(dataset)


# Stages whose functions may draw, by the method's name.
_METHODS = {"MapDataset": "map()", "ParallelMapDataset": "map()"}
# Stages that keep elements by a predicate, by the method's name.
_KEEPS_BY_PREDICATE = {"FilterDataset": "filter()", "TakeWhileDataset": "take_while()"}


def _keeps_by_draw(node: tf.data.Dataset) -> str | None:
    """How a ``filter``/``take_while`` stage keeps elements by a draw made anew each pass: its
    predicate draws at random, or reads a ``Dataset.random(..., rerandomize_each_iteration=
    True)`` zipped in before it. None when neither is in sight. A ``map`` before it that draws
    at random (augmentation) is only warned about: the predicate may not read what it drew."""
    if _draws_at_random(node._predicate.function.graph):
        return "whose predicate draws at random"
    before = list(upstream_stages(node._input_dataset, 1_000))
    if any(getattr(stage, "_rerandomize", None) for stage in before):
        return "after a Dataset.random(..., rerandomize_each_iteration=True) that draws anew"
    drawing = next((stage for stage in before if _function_draws(stage)), None)
    if drawing is not None:
        warnings.warn(
            f"with_ids: a {_KEEPS_BY_PREDICATE[type(node).__name__.lstrip('_')]} comes after a "
            f"{_METHODS.get(type(drawing).__name__.lstrip('_'), type(drawing).__name__)} whose "
            "function draws at random; if its "
            "predicate reads what was drawn, other examples pass each epoch and their ids move "
            "between examples. Keep elements before the random stage, or with a seeded "
            "stateless draw (tf.random.stateless_uniform).",
            UserWarning,
            stacklevel=5,
        )
    return None


def _function_draws(stage: tf.data.Dataset) -> bool:
    """Whether one of the functions ``stage`` runs draws at random (``_draws_at_random``)."""
    try:
        functions = stage._functions()
    except Exception:  # best effort: a stage whose functions cannot be read
        return False
    return any(_draws_at_random(function.function.graph) for function in functions)


# tf.data ops whose deterministic=False the Python objects do not keep, by the method's name.
_UNORDERED_OPS = {
    "ParallelInterleaveDatasetV4": "interleave",
    "ParallelMapDatasetV2": "map",
    "ParallelBatchDataset": "batch",
}


def _unordered_in_graph(dataset: tf.data.Dataset) -> str | None:
    """A stage with ``deterministic=False`` in ``dataset``'s serialized graph, also inside the
    functions its stages run (an ``interleave``'s, whose Python object keeps no such flag: the
    usual fast read of TFRecord shards); None when there is none, or the graph cannot be read."""
    try:
        serialized = dataset._as_serialized_graph(
            external_state_policy=tf.data.experimental.ExternalStatePolicy.IGNORE
        )
        graph = tf.compat.v1.GraphDef.FromString(serialized.numpy())
    except Exception:  # best effort: an unreadable graph is not a reason to refuse
        return None
    nodes = [*graph.node, *(node for f in graph.library.function for node in f.node_def)]
    for node in nodes:
        if "deterministic" in node.attr and node.attr["deterministic"].s == b"false":
            return f"{_UNORDERED_OPS.get(node.op, node.op)}(..., deterministic=False)"
    return None


# Ops that draw from a random state kept between calls: each pass draws anew.
_STATEFUL_RANDOM = frozenset(
    {
        "Multinomial",
        "RandomGamma",
        "RandomPoisson",
        "RandomPoissonV2",
        "RandomShuffle",
        "RandomStandardNormal",
        "RandomUniform",
        "RandomUniformInt",
        "RngReadAndSkip",
        "RngSkip",
        "StatefulRandomBinomial",
        "StatefulStandardNormalV2",
        "StatefulTruncatedNormal",
        "StatefulUniform",
        "StatefulUniformFullInt",
        "StatefulUniformInt",
        "TruncatedNormal",
    }
)


def _draws_at_random(graph) -> bool:
    """Whether a stage's function graph (or one it calls, e.g. a ``tf.cond`` branch) holds a
    stateful random op: ``tf.random.uniform``, a ``tf.random.Generator``'s draws. Stateless ops
    with a fixed seed draw the same each pass and are not counted."""
    graphs = [
        graph,
        *(getattr(f, "graph", None) for f in getattr(graph, "_functions", {}).values()),
    ]
    return any(
        op.type in _STATEFUL_RANDOM for g in graphs if g is not None for op in g.get_operations()
    )
