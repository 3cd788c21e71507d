"""What the library reads of a dataset's own structure: which stages come before it.

Example::

    import tensorflow as tf
    import echoing
    from echoing._src.core import dataset_graph

    batches = tf.data.Dataset.range(8).batch(4).prefetch(1)
    print(dataset_graph.comes_out_of_batch(batches))  # True
    examples = tf.data.Dataset.range(8).apply(echoing.echo(2)).batch(4)
    print(dataset_graph.echo_feeds_batch(examples))  # True: an example's copies share a batch
    print(dataset_graph.echo_feeds_batch(examples.unbatch().shuffle(8).batch(4)))  # False

tf.data has no public API for a dataset's graph. ``Dataset._inputs()``, which tf.data itself
uses to merge options and for ``__debug_string__``, links each dataset to the datasets it reads;
the kinds of stage are recognised by the types that the public methods (``batch``, ``shuffle``,
...) return, not by private class names, and the serialized graph (``_as_serialized_graph``) is
not used: it copies every constant, a whole in-memory data set for ``from_tensor_slices``. Every
function here answers "unknown" (``None``, or no warning) when the walk fails or meets a stage it
does not know, so that an inspection never breaks or slows a user's pipeline.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import tensorflow as tf

# The attribute echo sets on the dataset it returns: (its input dataset, whether echo shuffles).
_ECHO_ATTRIBUTE = "_echoing_echo_stage"
# Stages walked at most (a pipeline has tens; this bounds a pathological graph).
_MAX_STAGES = 10_000


def mark_echo(echoed: tf.data.Dataset, input_dataset: tf.data.Dataset, *, shuffled: bool) -> None:
    """Records on ``echoed`` that it is an echo stage's output, reading ``input_dataset``."""
    # A dataset that refuses attributes is just not inspected.
    with contextlib.suppress(Exception):
        setattr(echoed, _ECHO_ATTRIBUTE, (input_dataset, bool(shuffled)))


# The attribute the stages that decide anew each pass (loss_prune, assistant_filter,
# priority_sample) set on the dataset they return: (their name, the stage object or None).
_PER_PASS_ATTRIBUTE = "_echoing_per_pass_stage"
# Stages that replay the elements of their first pass in every later one.
_REPLAYS = {"CacheDataset": "cache()", "SnapshotDataset": "snapshot()"}


def mark_per_pass(dataset: tf.data.Dataset, name: str, stage=None) -> tf.data.Dataset:
    """Records on ``dataset`` (and returns it) that it is the output of the stage ``name``
    (the object ``stage``), which decides anew each pass (which examples to keep, which batches
    to draw)."""
    with contextlib.suppress(Exception):
        setattr(dataset, _PER_PASS_ATTRIBUTE, (name, stage))
    return dataset


# The attribute ``with_ids`` sets on the dataset it returns: (its first id, the id's key).
_IDS_ATTRIBUTE = "_echoing_with_ids"


def mark_ids(dataset: tf.data.Dataset, start: int, id_key: str) -> tf.data.Dataset:
    """Records on ``dataset`` (and returns it) that ``with_ids`` numbered its elements
    ``start, start + 1, ...`` under ``id_key``."""
    with contextlib.suppress(Exception):
        setattr(dataset, _IDS_ATTRIBUTE, (start, id_key))
    return dataset


def id_ranges(dataset: tf.data.Dataset, id_key: str) -> list[tuple[int, int]]:
    """``(first id, number of ids or -1 when unknown)`` of every ``with_ids`` before
    ``dataset`` (itself included) that numbers ``id_key``."""
    ranges = []
    for node in upstream_stages(dataset):
        mark = getattr(node, _IDS_ATTRIBUTE, None)
        if mark and mark[1] == id_key:
            ranges.append((mark[0], int(node.cardinality())))
    return ranges


def per_pass_marks(dataset: tf.data.Dataset) -> list[tuple]:
    """The ``(name, stage object or None)`` of every stage ``mark_per_pass`` marked before
    ``dataset`` (``dataset`` included)."""
    marks = (getattr(node, _PER_PASS_ATTRIBUTE, None) for node in upstream_stages(dataset))
    return [mark for mark in marks if mark]


def per_pass_stages(dataset: tf.data.Dataset, name: str) -> list:
    """The objects of the stages ``name`` marked by ``mark_per_pass`` before ``dataset``."""
    marks = per_pass_marks(dataset)
    return [stage for mark, stage in marks if mark == name and stage is not None]


def per_pass_stage_replayed(dataset: tf.data.Dataset) -> tuple[str, str] | None:
    """``(stage, replay)`` when a stage marked by ``mark_per_pass`` comes before a ``cache()``
    or ``snapshot()`` before ``dataset``: every pass after the first replays the stage's first
    decisions, and the stage itself never runs again. None otherwise (or when the walk fails)."""
    for node in upstream_stages(dataset):
        replay = _REPLAYS.get(type(node).__name__.lstrip("_"))
        if replay is None:
            continue
        for before in upstream_stages(node):
            mark = getattr(before, _PER_PASS_ATTRIBUTE, None)
            if mark:
                return mark[0], replay
    return None


def upstream_stages(dataset: tf.data.Dataset, limit: int = _MAX_STAGES):
    """``dataset`` and every stage before it, through all inputs (``Dataset._inputs()``), at
    most ``limit`` of them; a walk that fails just ends."""
    pending, walked = [dataset], 0
    with contextlib.suppress(Exception):
        while pending and walked < limit:
            node, walked = pending.pop(), walked + 1
            yield node
            pending.extend(node._inputs())


@contextlib.contextmanager
def state_restored(dataset: tf.data.Dataset):
    """Puts the variables that ``dataset``'s stages hold (meters' counts, pruning's epochs, a
    sampler's step: resource variables their functions capture) back as they were when the
    block began: for a block that reads the pipeline on the side (``echoing.diagnose``), which
    would count as training reads. Iterators the block made must be gone when it ends."""
    saved = []
    for node in upstream_stages(dataset):
        for function in node._functions():
            for handle in function.function.captured_inputs:
                data = getattr(handle, "_handle_data", None)
                if handle.dtype != tf.resource or data is None or not data.shape_and_type:
                    continue
                dtype = tf.dtypes.as_dtype(data.shape_and_type[0].dtype)
                with contextlib.suppress(Exception):  # a resource that is not a variable
                    saved.append((handle, tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)))
    try:
        yield
    finally:
        for handle, value in saved:
            tf.raw_ops.AssignVariableOp(resource=handle, value=value)


def is_echo_output(dataset: tf.data.Dataset) -> bool:
    """Whether ``dataset`` is what an ``echoing.echo`` stage returned."""
    return getattr(dataset, _ECHO_ATTRIBUTE, None) is not None


def comes_out_of_batch(dataset: tf.data.Dataset) -> bool | None:
    """Whether ``dataset``'s elements come out of a batching stage (``batch``, ``padded_batch``,
    ``ragged_batch``, ``bucket_by_sequence_length``, ...) with no ``unbatch`` after it; ``None``
    when the walk meets a source or a stage it cannot see through (``flat_map``, ``interleave``)."""
    try:
        return _batched(dataset, _kinds(), 0)
    except Exception:
        return None


def elements_are_batches(dataset: tf.data.Dataset) -> bool:
    """Whether ``dataset``'s elements are batches: by its stages where they say so, else by its
    element spec (every component has the same leading dimension, unknown as ``batch()`` leaves
    it or shared by several components; an example's scalar label or id says "example")."""
    batched = comes_out_of_batch(dataset)
    if batched is not None:
        return batched
    specs = tf.nest.flatten(dataset.element_spec)
    shapes = [getattr(spec, "shape", None) for spec in specs]
    if not shapes or any(shape is None or shape.rank is None or shape.rank < 1 for shape in shapes):
        return False
    leading = {shape[0] for shape in shapes}
    return len(leading) == 1 and (None in leading or len(shapes) > 1)


def echo_feeds_batch(dataset: tf.data.Dataset) -> bool:
    """Whether an ``echoing.echo`` stage without ``buffer_size`` reaches a batching stage in
    ``dataset`` with no ``shuffle`` (or ``unbatch``) in between, so that an element's copies land
    in the same batch. Stages it does not know end the search along their branch."""
    try:
        kinds = _kinds()
        # (dataset, whether a batch follows with no shuffle between, unbatches that follow with
        # no batch of theirs yet), walked towards the source. A batch that a later unbatch
        # undoes groups nothing: the batch that counts is the last one.
        pending, walked = [(dataset, False, 0)], 0
        while pending and walked < _MAX_STAGES:
            node, batch_follows, unbatches = pending.pop()
            walked += 1
            echo = getattr(node, _ECHO_ATTRIBUTE, None)
            if echo is not None:
                input_dataset, shuffled = echo
                if batch_follows and not shuffled:
                    return True
                pending.append((input_dataset, False, 0))  # an earlier echo may feed a batch
                continue
            kind = type(node)
            if kind in kinds.batch:
                if unbatches:
                    unbatches -= 1
                else:
                    batch_follows = True
            elif kind in kinds.unbatch:
                unbatches += 1
            elif kind in kinds.shuffle:
                batch_follows = batch_follows and bool(unbatches)  # shuffled batches stay whole
            elif kind not in kinds.transparent:
                batch_follows = False  # copies may be spread out by a stage we cannot read
            pending.extend((upstream, batch_follows, unbatches) for upstream in node._inputs())
        return False
    except Exception:
        return False


def echo_upstream(dataset: tf.data.Dataset) -> bool:
    """Whether an ``echoing.echo`` stage (factor above 1, or live) comes before ``dataset``
    through stages that pass its copies on (``map``, ``shuffle``, ``batch``, ``unbatch``, ...),
    so that each pass over the data brings an example more than once. Stages it does not know
    end the search along their branch."""
    try:
        kinds = _kinds()
        known = kinds.transparent | kinds.shuffle | kinds.batch | kinds.unbatch
        pending, walked = [dataset], 0
        while pending and walked < _MAX_STAGES:
            node = pending.pop()
            walked += 1
            if getattr(node, _ECHO_ATTRIBUTE, None) is not None:
                return True
            if type(node) in known:
                pending.extend(node._inputs())
        return False
    except Exception:
        return False


def pass_size(dataset: tf.data.Dataset) -> int | None:
    """The elements of one pass when ``dataset`` repeats its input: the known cardinality of the
    input of a ``repeat`` reached through stages that keep each pass whole (``map``,
    ``shuffle``, ``prefetch``, options); None when there is no such ``repeat`` or its input's
    size is unknown. ``ds.repeat(4)`` of 500 elements has cardinality 2000 and passes of 500.
    """
    try:
        kinds = _kinds()
        node = dataset
        for _ in range(_MAX_STAGES):
            upstream = node._inputs()
            if type(node) in kinds.repeat and len(upstream) == 1:
                size = tf.get_static_value(upstream[0].cardinality())
                return int(size) if size is not None and size >= 0 else None
            if type(node) not in kinds.keeps_passes or len(upstream) != 1:
                return None
            node = upstream[0]
        return None
    except Exception:
        return None


def caches(dataset: tf.data.Dataset) -> bool:
    """Whether a ``Dataset.cache`` stage (in memory or to a file) comes before ``dataset``:
    its first pass fills the cache and the later ones read it, at other speeds."""
    return any(
        type(node).__name__.lstrip("_") == "CacheDataset" for node in upstream_stages(dataset)
    )


def warn_if_echo_feeds_batch(dataset: tf.data.Dataset, *, fix: str, stacklevel: int = 2) -> None:
    """One ``UserWarning`` when ``echo_feeds_batch(dataset)``, naming ``fix`` as the remedy."""
    if echo_feeds_batch(dataset):
        warnings.warn(
            "echoing: an echo stage without buffer_size feeds batch() with no shuffle in "
            "between, so each example's copies land in the same batch (a batch of e copies of "
            "B/e examples), which is worth little more than the fresh examples alone. "
            f"{fix}",
            UserWarning,
            stacklevel=stacklevel + 1,
        )


class _Kinds:
    """Dataset types by what their stage does, taken from the public methods that build them."""

    def __init__(self):
        ds = tf.data.Dataset.range(2)
        batch = ds.batch(1)
        self.batch = {
            type(batch),
            type(ds.batch(1, num_parallel_calls=2)),
            type(ds.padded_batch(1)),
            type(ds.ragged_batch(1)),
            type(ds.sparse_batch(1, [1])),
            type(batch.rebatch(1)),
            type(ds.group_by_window(_key, _batch_window, window_size=1)),  # bucketing
        }
        unbatch = batch.unbatch()
        self.unbatch = {type(unbatch)}
        self.shuffle = {type(ds.shuffle(1))}
        self.repeat = {type(ds.repeat())}
        # Stages between a repeat and what reads it that leave each pass's elements as they are.
        self.keeps_passes = {
            type(ds.map(_identity)),
            type(ds.map(_identity, num_parallel_calls=2)),
            type(ds.prefetch(1)),
            type(ds.with_options(tf.data.Options())),
            *self.shuffle,
        }
        # Stages that keep an element's copies where they are (in order, or only dropping some).
        self.transparent = (
            {
                type(ds.map(_identity)),
                type(ds.map(_identity, num_parallel_calls=2)),
                type(ds.prefetch(1)),
                type(ds.filter(_always)),
                type(ds.take(1)),
                type(ds.skip(1)),
                type(ds.repeat()),
                type(ds.cache()),
                type(ds.with_options(tf.data.Options())),
                type(ds.apply(tf.data.experimental.assert_cardinality(2))),
                type(ds.shard(1, 0)),
                type(ds.ignore_errors()),
                type(ds.take_while(_always)),
                type(tf.data.Dataset.zip((ds, ds))),
                *(type(upstream) for upstream in unbatch._inputs()),
            }
            - self.batch
            - self.unbatch
            - self.shuffle
        )


@functools.cache
def _kinds() -> _Kinds:
    return _Kinds()


def _batched(dataset, kinds: _Kinds, depth: int) -> bool | None:
    if depth > _MAX_STAGES:
        return None
    echo = getattr(dataset, _ECHO_ATTRIBUTE, None)
    if echo is not None:
        return _batched(echo[0], kinds, depth + 1)  # echo keeps the element kind
    kind = type(dataset)
    if kind in kinds.batch:
        return True
    if kind in kinds.unbatch:
        return False
    if kind not in kinds.transparent and kind not in kinds.shuffle:
        return None
    answers = {_batched(upstream, kinds, depth + 1) for upstream in dataset._inputs()}
    if len(answers) == 1:
        return answers.pop()
    return None  # no inputs, or inputs that disagree


def _identity(x):
    return x


def _always(_):
    return True


def _key(_):
    return tf.constant(0, tf.int64)


def _batch_window(_, window):
    return window.batch(1)
