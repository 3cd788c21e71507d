"""``make_datasets``: the train and eval pipelines a data config describes.

Example::

    import echoing
    import pipelines
    from echoing import meters

    config = pipelines.default_data_config()
    config.num_train, config.num_eval, config.batch_size = 1_000, 200, 32
    counts = meters.EchoMeters()
    datasets = pipelines.make_datasets(
        config, seed=0, meters=counts, insertions=[("after_augment", "echo", echoing.echo(2.0))]
    )
    batch = next(iter(datasets.train))  # {"inputs": [32, 40, 1], "label": [32], "id": [32]}

Train stages: ``read`` (source, shuffle, repeat) -> ``decode`` -> ``augment`` -> ``batch`` ->
``prefetch``. The pipeline itself does not echo, filter or prune: those are stages inserted at a
named point (``after_read``, ``before_``/``after_`` any later stage), e.g. echo
``before_augment`` (raw examples, then augmented differently), ``after_augment`` (augmented
examples repeated) or ``after_batch`` (whole batches). The trainer inserts its techniques'
stages this way (``echoing.techniques``).
Eval stages: ``read`` -> ``decode`` -> ``batch`` -> ``prefetch``, one pass, nothing inserted.

Under ``tf.distribute``, pass the ``InputContext`` so every input pipeline (host/worker) reads its
own shard and batches per replica::

    def train_dataset_fn(input_context):
        return pipelines.make_datasets(config, seed=0, input_context=input_context).train

    train = strategy.distribute_datasets_from_function(train_dataset_fn)

With ``service_address`` set, the train stages before the first inserted stage (read, decode,
augment when nothing is inserted earlier) run on tf.data service workers
(``pipelines.service``); the inserted stages (whose state, a loss table or a learner, lives in
this process), the stages after them and the meters run here, after ``distribute()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import ml_collections
import numpy as np
import tensorflow as tf

import echoing
from echoing import meters as echo_meters
from echoing._src.core.meters import checkpointable
from echoing._src.core.technique import Insertion, check_insertions
from echoing._src.core.types import DatasetTransformation
from pipelines import augment, service, source_fields, sources
from pipelines.config import moved_echo_fields, resolve_data_config, warn_if_eval_is_train
from pipelines.pipeline import Pipeline, Stage

# The insertion point of a stage that chooses the ids to read (loss pruning): on ids, before
# reading, where the split reads by id; on the raw records, before decoding, where it streams.
BEFORE_READ = "before_read"
# Ids gathered per read op on the by-id path.
_READ_CHUNK = 256
# The train pipeline's stages, in order, and the points a stage can be inserted at.
TRAIN_STAGES = ("read", "decode", "augment", "batch", "prefetch")
TRAIN_INSERTION_POINTS = Pipeline([Stage(name, None) for name in TRAIN_STAGES]).insertion_points
# Where a tf.data service ends when no stage is inserted earlier: the per-example work (read,
# decode, augmentation) runs on its workers.
_SERVICE_DEFAULT_BOUNDARY = "after_augment"
# Offsets so that the shuffle, augmentation and echo draws are independent streams of one seed.
_SEED_OFFSETS = {"shuffle": 0, "augment": 1, "echo": 2, "decode": 3}


def stage_seed(seed: int, stage: str) -> int:
    """The seed ``make_datasets(..., seed=seed)`` gives its stage ``stage``.

    A stage inserted by a technique draws its own stream of the run's seed this way (echo and
    AutoEcho draw ``"echo"``'s).

    Example::

        stage_seed(0, "echo")  # 2
    """
    if stage not in _SEED_OFFSETS:
        raise ValueError(f"stage must be one of {sorted(_SEED_OFFSETS)}, got {stage!r}.")
    return seed + _SEED_OFFSETS[stage]


@dataclasses.dataclass(frozen=True)
class Datasets:
    """What ``make_datasets`` returns.

    Attributes:
      train: infinite; batches of ``batch_size`` (drop_remainder=True) of
        {"inputs": float32 [B, *input_shape], "label": int64 [B], "id": int64 [B]}.
      eval: one pass over the eval split, batches of ``eval_batch_size`` (the last may be
        smaller), same keys, no augmentation or echo.
      num_train_examples: fresh examples in one pass over the train split.
      num_classes: labels are in ``[0, num_classes)``.
      input_shape: per-example shape of "inputs", e.g. (40, 1) or (32, 32, 3).
      train_pipeline: the stages and insertions that built ``train`` (for inspection).
      batch_size: rows per train batch: ``batch_size`` of the config, or its per-replica share
        under an ``input_context``.
      eval_batch_size: rows per full eval batch, per replica likewise.
      num_shard_train_examples: fresh train examples in one pass over this input pipeline's
        shard (``num_train_examples`` without an ``input_context``).
      num_shard_eval_examples: eval examples in this input pipeline's shard.
      train_read_stats: for TFRecord splits read in Python (gs://, or ``skip_corrupt``), a
        ``pipelines.sources.record_reader.ReadStats``: records skipped as corrupt
        (``.skipped``, ``.skipped_records``) and files reopened after network faults
        (``.reopened``); None when the split is read in the graph.
      eval_read_stats: the same for the eval split.
      vocab_file: text sources: the tokenizer's vocabulary (one token per line); else None.
    """

    train: tf.data.Dataset
    eval: tf.data.Dataset
    num_train_examples: int
    num_classes: int
    input_shape: tuple[int, ...]
    train_pipeline: Pipeline
    batch_size: int = 0
    eval_batch_size: int = 0
    num_shard_train_examples: int = 0
    num_shard_eval_examples: int = 0
    train_read_stats: sources.ReadStats | None = None
    eval_read_stats: sources.ReadStats | None = None
    vocab_file: str | None = None


def make_datasets(
    data_config: ml_collections.ConfigDict,
    *,
    seed: int,
    meters: echo_meters.EchoMeters | None = None,
    insertions: Sequence[tuple[str, str, DatasetTransformation]] = (),
    input_context: tf.distribute.InputContext | None = None,
) -> Datasets:
    """Builds the train and eval datasets for ``data_config``.

    Args:
      data_config: fields as in ``pipelines.default_data_config()``; missing fields take
        their defaults.
      seed: seeds shuffling and augmentation; same seed, same stream.
      meters: if given, ``meters.fresh`` counts examples right after ``read`` and
        ``meters.emitted`` counts the rows handed to the trainer, at the very end.
      insertions: more train-pipeline transformations as ``(point, name, transformation)``,
        e.g. ``("after_augment", "echo", echoing.echo(2.0))``; several at one point apply in
        the order given, and before ``meters.emitted`` counts.
      input_context: from ``strategy.distribute_datasets_from_function``. The train split is
        sharded at the source, ``num_input_pipelines`` ways, before decode, augment and the
        insertions, so each input pipeline reads only its shard (TFRecord files by file when
        there are at least as many files as pipelines, else by record) and the inserted stages
        (echo, filters) and meters run per pipeline. Batches are per replica
        (``input_context.get_per_replica_batch_size``; drop_remainder=True for train). Eval:
        each input pipeline evaluates its own shard of the eval split, so the pipelines
        together cover it once; sum metrics across them (e.g. ``strategy.reduce(SUM)`` of
        per-example sums), not per-pipeline means.

    Raises:
      ValueError / TypeError: an unknown key, a bad value, an unknown insertion point, an empty
        or too small split (or shard), a TFDS dataset that is not prepared offline, an
        unreadable path, a batch size that does not divide across the replicas, or a split
        with fewer examples than input pipelines.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"make_datasets seed must be an int, got {seed!r}; e.g. seed=0.")
    if meters is not None and not isinstance(meters, echo_meters.EchoMeters):
        raise TypeError(
            f"meters must be an echoing.meters.EchoMeters or None, got {type(meters).__name__}."
        )
    if input_context is not None and not isinstance(input_context, tf.distribute.InputContext):
        raise TypeError(
            "input_context must be a tf.distribute.InputContext (the argument "
            "strategy.distribute_datasets_from_function passes to your function) or None, got "
            f"{type(input_context).__name__}."
        )
    insertions = check_insertions(insertions)
    config = resolve_data_config(data_config)
    source_fields.warn_set_for_other_sources(config)
    warn_if_eval_is_train(config)
    insertions = (*_moved_echo(config, seed), *insertions)
    batch_size = _per_replica(config.batch_size, "batch_size", input_context)
    eval_batch_size = _per_replica(config.eval_batch_size, "eval_batch_size", input_context)
    # Build the pipeline before reading anything, so an unknown insertion point fails at once.
    _train_pipeline(config, seed, meters, insertions, split=None, batch_size=batch_size)
    source = sources.load(config)
    augment.check_fits(config.augment, source.input_shape)
    sources.check_not_empty(source.train.num_examples, "the train split")
    sources.check_not_empty(source.eval.num_examples, "the eval split")
    train_split, eval_split = source.train, source.eval
    if input_context is not None:
        num_pipelines, index = input_context.num_input_pipelines, input_context.input_pipeline_id
        train_split = _shard(train_split, num_pipelines, index, "train")
        eval_split = _shard(eval_split, num_pipelines, index, "eval")
    if train_split.num_examples < batch_size:
        where = "" if input_context is None else " shard of this input pipeline"
        raise ValueError(
            f"the train split{where} has {train_split.num_examples} examples, fewer than "
            f"batch_size={batch_size}; with drop_remainder=True it would yield no batch (and hang "
            "when repeated). Lower batch_size or use more training data."
        )
    train_pipeline = _train_pipeline(
        config, seed, meters, insertions, split=train_split, batch_size=batch_size
    )
    eval_pipeline = _eval_pipeline(config, eval_split, eval_batch_size)
    return Datasets(
        train=checkpointable(with_autotune(train_pipeline.build(), config.autotune)),
        eval=checkpointable(with_autotune(eval_pipeline.build(), config.autotune)),
        num_train_examples=source.train.num_examples,
        num_classes=source.num_classes,
        input_shape=tuple(source.input_shape),
        train_pipeline=train_pipeline,
        batch_size=batch_size,
        eval_batch_size=eval_batch_size,
        num_shard_train_examples=train_split.num_examples,
        num_shard_eval_examples=eval_split.num_examples,
        train_read_stats=train_split.read_stats,
        eval_read_stats=eval_split.read_stats,
        vocab_file=getattr(source, "vocab_file", None),
    )


def _per_replica(global_batch_size: int, key: str, input_context) -> int:
    if input_context is None:
        return global_batch_size
    replicas = input_context.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(
            f"data config {key}={global_batch_size} is the global batch and must divide evenly "
            f"across the {replicas} replicas in sync; use a multiple of {replicas}, e.g. "
            f"{key}={max(replicas, global_batch_size // replicas * replicas)}."
        )
    return input_context.get_per_replica_batch_size(global_batch_size)


def _shard(split: sources.SourceSplit, num_pipelines: int, index: int, what: str):
    if split.num_examples < num_pipelines:
        raise ValueError(
            f"the {what} split has {split.num_examples} examples, fewer than the "
            f"{num_pipelines} input pipelines it is sharded over; each pipeline needs at least "
            "one. Use more data or fewer workers."
        )
    return split.shard(num_pipelines, index)


def _train_pipeline(config, seed, meters, insertions, split, batch_size) -> Pipeline:
    parallel = _parallelism(config.num_parallel_calls)
    boundary = _service_boundary(insertions) if config.service_address else None
    insertions, sampler = _by_id(config, insertions, split, boundary)

    def read(_):
        if sampler is not None:
            return _read_by_id(split, sampler)
        dataset = split.dataset
        if config.shuffle_buffer > 0:
            dataset = dataset.shuffle(
                config.shuffle_buffer,
                seed=stage_seed(seed, "shuffle"),
                reshuffle_each_iteration=True,
            )
        return dataset.repeat()

    pipeline = Pipeline(
        [
            Stage("read", read),
            Stage("decode", _decode_stage(config, split, seed, parallel)),
            Stage(
                "augment",
                augment.for_config(
                    config.augment, seed=stage_seed(seed, "augment"), num_parallel_calls=parallel
                ),
            ),
            Stage("batch", lambda ds: _batch(ds, split, batch_size, drop_remainder=True)),
            Stage("prefetch", lambda ds: _prefetch(ds, config.prefetch)),
        ]
    )
    if boundary is not None:
        distribute = service.distribute(
            config.service_address, processing_mode=config.service_processing_mode
        )
        pipeline = pipeline.insert(boundary, distribute, name="service")
    if meters is not None:
        if boundary is not None:
            # Host variables cannot travel to a service worker: count what arrives from it,
            # which is the fresh examples (every inserted stage is still to come).
            points = pipeline.insertion_points
            batched = points.index(boundary) >= points.index("after_batch")
            count = meters.fresh.count(rows=batched)
            pipeline = pipeline.insert(boundary, count, name="count_fresh")
        else:
            pipeline = pipeline.insert("after_read", meters.fresh.count(), name="count_fresh")
    for point, name, transformation in insertions:
        pipeline = pipeline.insert(point, transformation, name=name)
    if meters is not None:
        # Last, so it sees what the trainer sees even when a stage is inserted after prefetch.
        pipeline = pipeline.insert(
            "after_prefetch", meters.emitted.count(rows=True), name="count_emitted"
        )
    return pipeline


def _moved_echo(config, seed: int) -> tuple[Insertion, ...]:
    """The echo stage a data config still asks for with its moved keys (for one more release,
    with a FutureWarning: ``pipelines.config.moved_echo_fields``), else nothing."""
    moved = moved_echo_fields(config)
    factor, buffer_size = moved.get("echo", 1.0), moved.get("echo_buffer_size", 0)
    if factor == 1 and not buffer_size:
        return ()
    transformation = echoing.echo(
        float(factor), buffer_size=buffer_size or None, seed=stage_seed(seed, "echo")
    )
    return (Insertion(moved.get("echo_insert", "before_augment"), "echo", transformation),)


def _service_boundary(insertions) -> str:
    """Where a tf.data service's work ends: right before the first inserted stage, whose state
    (a loss table, a learner, a factor) lives in this process and cannot travel to a service
    worker; after augmentation when nothing is inserted earlier. The ids a pruning stage chooses
    (``BEFORE_READ``) are dropped here, at the boundary, instead."""
    points = TRAIN_INSERTION_POINTS
    inserted = [
        insertion.point
        for insertion in insertions
        if insertion.point != BEFORE_READ and insertion.point in points
    ]
    if not inserted:
        return _SERVICE_DEFAULT_BOUNDARY
    return min(inserted, key=points.index)


def _by_id(config, insertions, split, boundary):
    """``(insertions, sampler)``: the insertion at ``before_read`` becomes the ids to read where
    the split reads by id, else a stage on the raw records (``after_read``, before decoding;
    with tf.data service, at the ``boundary`` where its elements arrive, as host state cannot
    travel)."""
    early = [insertion for insertion in insertions if insertion.point == BEFORE_READ]
    rest = [insertion for insertion in insertions if insertion.point != BEFORE_READ]
    if not early:
        return rest, None
    if len(early) > 1:
        raise ValueError(
            f"insertions {[insertion.name for insertion in early]} all choose the ids to read "
            f"({BEFORE_READ!r}); a pipeline reads one sequence of ids, so use one of them."
        )
    (insertion,) = early
    if not callable(getattr(insertion.transformation, "epoch_ids", None)):
        raise TypeError(
            f"the insertion {insertion.name!r} at {BEFORE_READ!r} must choose ids: an object "
            "with epoch_ids(ids) -> Dataset of {'id', 'sample_weight'} (echoing.loss_prune's "
            f"stage) that is also a Dataset -> Dataset stage; got {insertion.transformation!r}."
        )
    if split is not None and split.rows is not None and not config.service_address:
        return rest, insertion.transformation
    point = boundary if boundary is not None else "after_read"
    return [Insertion(point, insertion.name, insertion.transformation), *rest], None


def _read_by_id(split, sampler) -> tf.data.Dataset:
    """The rows of the ids ``sampler`` keeps, epoch after epoch, with their ``sample_weight``."""
    rows = {key: tf.convert_to_tensor(column) for key, column in split.rows().items()}
    ids = rows["id"].numpy()
    # Row of each id (a shard holds some ids; the stored order need not be the id order).
    position = np.full(int(ids.max()) + 1, -1, np.int64)
    position[ids] = np.arange(len(ids))
    position = tf.constant(position)

    def read(chosen):
        raw = {
            key: tf.gather(column, tf.gather(position, chosen["id"]))
            for key, column in rows.items()
        }
        return {**raw, "sample_weight": chosen["sample_weight"]}

    # Gathered a chunk at a time (one op per key), then handed on one example at a time. A
    # chunk holds at most one epoch: more would decide epochs ahead of pruning's losses.
    chunk = min(_READ_CHUNK, len(ids))
    return sampler.epoch_ids(ids).repeat().batch(chunk).map(read).unbatch()


def _keeping_sample_weight(decode):
    """``decode`` that carries an element's ``"sample_weight"`` (set before reading) through."""

    def apply(element, *args):
        decoded = decode(element, *args)
        if "sample_weight" in element and "sample_weight" not in decoded:
            decoded = {**decoded, "sample_weight": element["sample_weight"]}
        return decoded

    return apply


def _decode_stage(config, split, seed, parallel):
    """The train split's decode; ``augment="inception"`` crops at random while decoding."""
    if config.augment != "inception":
        return lambda ds: ds.map(_keeping_sample_weight(split.decode), num_parallel_calls=parallel)
    if split is not None and split.crop_decode is None:
        raise ValueError(
            f"data config augment='inception' crops while decoding encoded images, and source="
            f"{config.source!r} does not hold encoded images; use source='image_folder' (or "
            "TFRecords of png/jpeg), or augment='image' to crop decoded pixels."
        )

    def crop_decode(ds):
        draws = tf.data.Dataset.random(seed=stage_seed(seed, "decode")).batch(2)
        return tf.data.Dataset.zip((ds, draws)).map(
            _keeping_sample_weight(split.crop_decode),
            num_parallel_calls=parallel,
            deterministic=None if parallel is None else True,
        )

    return crop_decode


def _batch(dataset, split, batch_size: int, *, drop_remainder: bool) -> tf.data.Dataset:
    if split is not None and split.batch is not None:
        return split.batch(dataset, batch_size, drop_remainder)
    return dataset.batch(batch_size, drop_remainder=drop_remainder)


def _eval_pipeline(config, split, batch_size) -> Pipeline:
    return Pipeline(
        [
            Stage("read", lambda _: split.dataset),
            Stage(
                "decode",
                lambda ds: ds.map(
                    split.decode, num_parallel_calls=_parallelism(config.num_parallel_calls)
                ),
            ),
            Stage("batch", lambda ds: _batch(ds, split, batch_size, drop_remainder=False)),
            Stage("prefetch", lambda ds: _prefetch(ds, config.prefetch)),
        ]
    )


def with_autotune(dataset: tf.data.Dataset, enabled: bool) -> tf.data.Dataset:
    """``dataset`` with tf.data's autotuner off, or as it was (on by default) when ``enabled``.

    Example::

        dataset = with_autotune(tf.data.Dataset.range(8).prefetch(tf.data.AUTOTUNE), False)
    """
    if enabled:
        return dataset  # Setting it would override a later stage's own choice of options.
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def _parallelism(num_parallel_calls: int) -> int | None:
    """1 means a sequential map (None): a parallel map of 1 still computes one element ahead."""
    return None if num_parallel_calls == 1 else num_parallel_calls


def _prefetch(dataset: tf.data.Dataset, buffer_size: int) -> tf.data.Dataset:
    return dataset.prefetch(buffer_size) if buffer_size != 0 else dataset
