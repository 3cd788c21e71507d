"""The train and eval ``InputContext -> Dataset`` functions of a run, one per input pipeline.

Example::

    from echoing import meters
    from trainers import inputs, run_config

    config = run_config.resolve_config(run_config.default_config())
    train_fn, eval_fn = inputs.dataset_fns(config, techniques=[], counts=meters.EchoMeters())
    # strategy.distribute_datasets_from_function(train_fn), likewise eval_fn

Each input pipeline (one per worker/host) reads its own shard of the source and batches per
replica (``pipelines.make_datasets(input_context=...)``), so the techniques' stages (echo, the
Assistant filter, ...) and the meters run on every worker over its shard. The pipeline itself
never echoes: echo is a technique's stage like the others. A technique may select the train
batches itself instead (priority sampling: ``Technique.train_dataset``). Train batches have
static shapes (drop_remainder=True; filters come before the fixed-size batching), as XLA/TPUs
need. A train pipeline whose echo stage feeds the batch with no shuffle between
(``echo_buffer_size = 0`` before ``after_batch``) warns once: each batch would hold an example's
copies.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import ml_collections
import tensorflow as tf

import pipelines
from echoing import meters as echo_meters
from echoing._src.core import dataset_graph
from echoing.techniques import Technique
from trainers import loop

# Said once per run when an echo stage feeds batch() directly (dataset_graph.echo_feeds_batch).
_ECHO_FEEDS_BATCH = (
    "Warning: the echo stage feeds batch() with no shuffle in between, so each example's copies "
    "land in the same batch, which is worth little more than the fresh examples alone: shuffle "
    "them apart with buffer=1000 in the config argument (--config.echo_buffer_size=1000), or "
    "echo whole batches with insert=after_batch."
)


def technique_stages(techniques: Sequence[Technique]) -> list[tuple]:
    """Every technique's pipeline stages as ``make_datasets`` insertions, in technique order."""
    return [tuple(insertion) for technique in techniques for insertion in technique.stages()]


def make_datasets(config, techniques=(), *, counts=None, input_context=None):
    """``pipelines.make_datasets`` for ``config.data`` with the techniques' stages."""
    return pipelines.make_datasets(
        config.data,
        seed=config.seed,
        meters=counts,
        insertions=technique_stages(techniques),
        input_context=input_context,
    )


def dataset_fns(
    config: ml_collections.ConfigDict,
    techniques: Sequence[Technique],
    counts: echo_meters.EchoMeters,
    *,
    read_stats: list | None = None,
) -> tuple[loop.DatasetFn, loop.DatasetFn]:
    """``InputContext -> Dataset`` functions for the train and eval sets (see module doc).

    ``read_stats``, if given, collects ``(split, ReadStats)`` of every pipeline built that reads
    in Python (``skip_corrupt``, gs://), for the run's summary.
    """
    eval_sets = {}
    warned: list[bool] = []

    def record(split: str, stats) -> None:
        if read_stats is not None and stats is not None:
            read_stats.append((split, stats))

    def train_dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        selected = [(t.name, t.train_dataset(context)) for t in techniques]
        selected = [(name, dataset) for name, dataset in selected if dataset is not None]
        if len(selected) > 1:
            raise ValueError(
                f"techniques {[name for name, _ in selected]} each select the train batches "
                "themselves; a run can use one of them."
            )
        if selected:
            ((_, dataset),) = selected
            dataset = pipelines.checkpointable(
                dataset.apply(counts.fresh.count(rows=True)).apply(counts.emitted.count(rows=True))
            )
            dataset = pipelines.with_autotune(dataset, config.data.autotune)
        else:
            datasets = make_datasets(config, techniques, counts=counts, input_context=context)
            record("train", datasets.train_read_stats)
            dataset = datasets.train
            if dataset_graph.echo_feeds_batch(dataset) and not warned:
                warned.append(True)  # once, not per input pipeline
                print(_ECHO_FEEDS_BATCH, file=sys.stderr)
        # The stream never ends (read repeats), but filters hide that from tf.data; said
        # explicitly, MultiWorkerMirrored keeps the static batch shape and skips its per-step
        # "does every worker still have data" all-reduce.
        return dataset.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))

    def eval_dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Each input pipeline evaluates its shard; the loop sums across them. Built once per
        # context: every evaluate() asks again.
        key = (context.num_input_pipelines, context.input_pipeline_id, context.num_replicas_in_sync)
        if key not in eval_sets:
            datasets = pipelines.make_datasets(config.data, seed=config.seed, input_context=context)
            record("eval", datasets.eval_read_stats)
            eval_sets[key] = datasets.eval
            if config.jit_compile:
                eval_sets[key] = padded_to_full_batches(
                    datasets.eval, datasets.num_shard_eval_examples, datasets.eval_batch_size
                )
        return eval_sets[key]

    return train_dataset_fn, eval_dataset_fn


def padded_to_full_batches(
    dataset: tf.data.Dataset, num_examples: int, batch_size: int
) -> tf.data.Dataset:
    """``dataset``'s batches, the last one filled up with masked-out rows: one static shape.

    Every row gets ``"mask"`` (1.0; 0.0 for the padding rows, which are zeros), which the loop's
    eval step uses to leave padding out of accuracy, loss and count. XLA would compile the eval
    step again for a smaller last batch, and a TPU needs static shapes.

    Args:
      dataset: batches of dicts, all full but the last, holding ``num_examples`` rows.
      num_examples: rows in ``dataset``.
      batch_size: rows per full batch.
    """
    rows = dataset.unbatch().map(lambda row: {**row, "mask": tf.constant(1.0)})
    missing = -num_examples % batch_size
    if missing:
        padding = rows.take(1).map(lambda row: {k: tf.zeros_like(v) for k, v in row.items()})
        rows = rows.concatenate(padding.repeat(missing))
    return rows.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
