"""Priority sampling: each step, the top-k estimated priorities plus round-robin renewals.

Example::

    import numpy as np
    import echoing

    source = {"x": np.random.rand(1000, 40).astype("float32"), "y": np.arange(1000) % 10}
    table = echoing.PriorityTable(1000)
    ds = echoing.priority_sample(table, source, batch_size=20, top_ratio=0.5, renew_ratio=0.5)
    batch = next(iter(ds))  # {"x": [20, 40], "y": [20], "id": [20], "sample_weight": [20]}
    # ... train on the batch, then: table.update(batch["id"], priorities, step)

Each batch of ``batch_size`` examples has three parts (Algorithm 1 of Li et al., "prioritized
gradient descent", with every computed gradient used, the paper's "aggressive" update):

* ``renew = round(renew_ratio * batch_size)`` ids round-robin: step ``t`` takes ids
  ``t*renew .. t*renew + renew - 1`` (mod N), so every id is measured again every
  ``ceil(N / renew)`` steps and the log-linear estimates never extrapolate far;
* ``top = round(top_ratio * batch_size)`` ids: in ``mode="top_k"`` the largest estimated
  priorities at step ``t`` among the ids not renewed in this step (no duplicates in a batch);
  in ``mode="proportional"`` drawn with replacement with probability
  ``q_i = 0.9 · p̂_i^alpha / Σ p̂^alpha + 0.1 / N`` over all N ids (Reverb/prioritized-replay
  style, with a uniform tenth so that an example whose priority is ``<= 0`` is drawn too), an
  unbiased alternative;
* the rest, if ``top_ratio + renew_ratio < 1``, drawn uniformly at random (seeded).

``sample_weight`` is 1 except for proportional draws, which get ``(N·q_i)^-importance_exponent``:
with exponent 1 the weighted batch mean gradient is an unbiased estimate of the full mean gradient
(these weights are not normalised; a weight is large only for an example that is rarely drawn).
Unmeasured examples count as having the largest measured priority in proportional mode, and as
``+inf`` in top-k mode (so the first epoch visits them in id order).

Selection runs in the TensorFlow graph: it costs O(N) elementwise work plus a top-k
(benchmarks/pgd.py measures it at N = 10^6). The batch for step ``t`` reads the table as it is
when the batch is produced, so the trainer must have written step ``t-1``'s priorities by then;
``priority_sample`` therefore turns off tf.data's automatic prefetch injection, and a user
``prefetch(n)`` makes the selection up to ``n`` steps stale (harmless for renewal, less precise
for top-k). So does a ``tf.distribute`` iterator's prefetch to device: pass
``tf.distribute.InputOptions(experimental_fetch_to_device=False)``.

Sources: in-memory arrays (gathered with ``tf.gather`` in the graph) or, for data that does not
fit in memory, a TFDS data source (``tfds.data_source(...)``, ``builder.as_data_source()``;
ArrayRecord files read by record index, one ``tf.numpy_function`` per batch; see
``echoing._src.core.sources`` for its host cost). Both give identical batches for the same table
and seed.

Workers / replicas: selection depends only on the table and the step, so each input pipeline
(``strategy.distribute_datasets_from_function``) can own a table over its own shard of the
examples and select its top-k locally, which is the paper's worker design:
``echoing.priority_sample(..., input_context=...)`` with an ``echoing.ShardedPriorityTable``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from echoing._src.core import dataset_graph
from echoing._src.core.checks import in_interval, is_int, is_real
from echoing._src.core.sources import RandomAccessSource, random_access_source
from echoing._src.priority.checks import (
    check_ratio,
    check_source_size,
    ids_per_batch,
    warn_if_table_is_ahead,
)
from echoing._src.priority.shards import ShardedPriorityTable, pipeline_share
from echoing._src.priority.table import PriorityTable, warned_if_unmeasured

if TYPE_CHECKING:
    from tensorflow_datasets.core.data_sources.base import BaseDataSource

MODES = ("top_k", "proportional")
# The uniform share of proportional draws: q_i = (1 - mix) p̂_i^alpha / Σ + mix / N, so every
# example can be drawn and every weight is at most (1 / mix)^importance_exponent.
_PROPORTIONAL_UNIFORM_MIX = 0.1


class PrioritySampler(tf.Module):
    """Selects the ids (and importance weights) of each step's batch from a ``PriorityTable``.

    ``select`` is a pure function of the table state and the step, so it can run inside tf.data
    (``priority_sample``), inside a ``tf.function`` train step, or per replica.
    """

    def __init__(
        self,
        table: PriorityTable,
        *,
        batch_size: int,
        top_ratio: float,
        renew_ratio: float,
        seed: int | None = None,
        mode: str = "top_k",
        alpha: float = 1.0,
        importance_exponent: float = 1.0,
    ):
        """Validates the arguments and fixes the batch composition.

        Args:
          table: the ``PriorityTable`` the trainer updates.
          batch_size: examples per step, ``1 <= batch_size <= N``.
          top_ratio: fraction of the batch picked by priority (``k`` of the paper, relative to the
            batch here).
          renew_ratio: fraction of the batch renewed round-robin (``r``); the paper finds
            ``top_ratio <= renew_ratio`` works best. ``top_ratio + renew_ratio`` must be in
            ``(0, 1]``; the remainder is drawn uniformly at random.
          seed: seeds the uniform remainder and proportional draws (stateless, per step). ``None``
            draws one seed now.
          mode: ``"top_k"`` (the paper) or ``"proportional"`` (sample ∝ p̂^alpha, weighted).
          alpha: priority exponent for ``mode="proportional"``, ``>= 0`` (0 is uniform).
          importance_exponent: ``β`` in ``[0, 1]`` for the proportional importance weights.

        Raises:
          TypeError: a non-numeric ratio, non-int batch size, non-table ``table``.
          ValueError: ratios outside ``[0, 1]``, their sum outside ``(0, 1]``, batch larger than N,
            unknown mode, negative alpha, importance exponent outside ``[0, 1]``.
        """
        super().__init__(name="priority_sampler")
        if not isinstance(table, PriorityTable):
            raise TypeError(
                f"table must be an echoing.PriorityTable, got {type(table).__name__}; build one "
                "with echoing.PriorityTable(num_examples)."
            )
        if not is_int(batch_size, numpy=True):
            raise TypeError(f"batch_size must be an int, got {batch_size!r}.")
        n = table.num_examples
        if not in_interval(batch_size, 1, n):
            raise ValueError(
                f"batch_size must be in [1, N={n}] (the table's num_examples), got {batch_size}; "
                "a batch cannot hold more distinct examples than the source has."
            )
        top_ratio = check_ratio("top_ratio", top_ratio)
        renew_ratio = check_ratio("renew_ratio", renew_ratio)
        if not in_interval(top_ratio + renew_ratio, 0.0, 1.0, low_open=True):
            raise ValueError(
                f"top_ratio + renew_ratio must be in (0, 1], got {top_ratio} + {renew_ratio} = "
                f"{top_ratio + renew_ratio}; they are fractions of one batch (e.g. 0.5 and 0.5)."
            )
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
        if not is_real(alpha, finite=False) or alpha < 0:
            raise ValueError(f"alpha must be a real number >= 0, got {alpha!r}.")
        if not (
            is_real(importance_exponent, finite=False)
            and in_interval(importance_exponent, 0.0, 1.0)
        ):
            raise ValueError(
                f"importance_exponent must be in [0, 1] (1 is unbiased), got "
                f"{importance_exponent!r}."
            )
        if seed is None:
            seed = int(np.random.default_rng().integers(2**31 - 1))
        elif not is_int(seed, numpy=True):
            raise TypeError(f"seed must be an int or None, got {seed!r}.")

        self.table = table
        self.batch_size = int(batch_size)
        self.num_top = ids_per_batch(top_ratio, batch_size, names=("top_ratio", "batch_size"))
        renew = ids_per_batch(renew_ratio, batch_size, names=("renew_ratio", "batch_size"))
        self.num_renew = min(renew, self.batch_size - self.num_top)
        self.num_uniform = self.batch_size - self.num_top - self.num_renew
        self.seed = int(seed)
        self.mode = mode
        self.alpha = float(alpha)
        self.importance_exponent = float(importance_exponent)

    def renewal_ids(self, step: tf.Tensor | int) -> tf.Tensor:
        """The round-robin ids renewed at ``step``, int64 ``[num_renew]``."""
        step = tf.cast(step, tf.int64)
        n = self.table.num_examples
        start = (step * self.num_renew) % n
        return (start + tf.range(self.num_renew, dtype=tf.int64)) % n

    def select(self, step: tf.Tensor | int) -> dict[str, tf.Tensor]:
        """Ids and weights of the batch for ``step``.

        Returns:
          ``{"id": int64 [B], "sample_weight": float32 [B], "renewed": bool [B]}``, ordered
          top/proportional part, then renewal, then uniform remainder.
        """
        step = tf.cast(step, tf.int64)
        if hasattr(self.table, "measured_step"):  # a PriorityTable (a sharded one: per shard)
            step = warned_if_unmeasured(self.table, step)
        n = self.table.num_examples
        renew = self.renewal_ids(step)
        log_estimate = self.table.log_estimate(step)
        if self.mode == "top_k":
            top, top_weight = self._top_k(log_estimate, renew), tf.ones([self.num_top])
        else:
            top, top_weight = self._proportional(log_estimate, step)
        uniform = tf.random.stateless_uniform(
            [self.num_uniform],
            seed=tf.stack([tf.constant(self.seed, tf.int64), step]),
            minval=0,
            maxval=n,
            dtype=tf.int64,
        )
        return {
            "id": tf.concat([top, renew, uniform], axis=0),
            "sample_weight": tf.concat(
                [top_weight, tf.ones([self.num_renew + self.num_uniform])], axis=0
            ),
            "renewed": tf.concat(
                [
                    tf.zeros([self.num_top], tf.bool),
                    tf.ones([self.num_renew], tf.bool),
                    tf.zeros([self.num_uniform], tf.bool),
                ],
                axis=0,
            ),
        }

    def _top_k(self, log_estimate: tf.Tensor, renew: tf.Tensor) -> tf.Tensor:
        # p <= 0 examples (-inf) must still outrank the renewal ids excluded below, so they move
        # to the lowest finite float and the excluded ids take -inf.
        ranked = tf.where(
            log_estimate == -np.inf, tf.constant(tf.float32.min, tf.float32), log_estimate
        )
        ranked = tf.tensor_scatter_nd_update(
            ranked, renew[:, None], tf.fill([self.num_renew], tf.constant(-np.inf, tf.float32))
        )
        _, top = tf.math.top_k(ranked, k=self.num_top, sorted=False)
        return tf.cast(top, tf.int64)

    def _proportional(
        self, log_estimate: tf.Tensor, step: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        n = self.table.num_examples
        finite = tf.math.is_finite(log_estimate)
        largest_measured = tf.reduce_max(tf.where(finite, log_estimate, -np.inf))
        largest_measured = tf.where(tf.math.is_finite(largest_measured), largest_measured, 0.0)
        # Unmeasured (+inf) examples count as the largest measured priority.
        log_priority = tf.where(log_estimate == np.inf, largest_measured, log_estimate)
        logits = self.alpha * log_priority
        # alpha * -inf is NaN for alpha = 0; and with no positive priority at all, sample uniformly.
        logits = tf.where(log_priority == -np.inf, -np.inf, logits)
        logits = tf.cond(
            tf.reduce_any(tf.math.is_finite(logits)), lambda: logits, lambda: tf.zeros([n])
        )
        # A uniform share keeps every example drawable: ḡ·g_i <= 0 has no p̂^alpha, and an
        # example never drawn would bias the weighted mean (q must be > 0 wherever g_i is).
        mix = _PROPORTIONAL_UNIFORM_MIX
        probability = (1.0 - mix) * tf.nn.softmax(logits) + mix / n
        log_probability = tf.math.log(probability)
        top = tf.random.stateless_categorical(
            log_probability[None, :],
            self.num_top,
            seed=tf.stack([tf.constant(self.seed, tf.int64) + 1, step]),
            dtype=tf.int64,
        )[0]
        log_nq = np.log(n) + tf.gather(log_probability, top)
        return top, tf.exp(-self.importance_exponent * log_nq)


def priority_sample(
    table: PriorityTable | ShardedPriorityTable,
    source: Mapping[str, np.ndarray | tf.Tensor] | BaseDataSource,
    *,
    batch_size: int,
    top_ratio: float,
    renew_ratio: float,
    seed: int | None = None,
    mode: str = "top_k",
    alpha: float = 1.0,
    importance_exponent: float = 1.0,
    start_step: int = 0,
    keys: Sequence[str] | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """An endless dataset of priority-sampled batches gathered from a random-access source.

    Under ``strategy.distribute_datasets_from_function``, pass the ``input_context`` your
    ``dataset_fn`` receives and an ``echoing.ShardedPriorityTable`` with one shard per input
    pipeline: each pipeline then selects from its own shard (``echoing._src.priority.distributed``
    explains the design) and yields per-replica batches.

    Args:
      table: the ``PriorityTable`` over the source's examples (``N`` = its ``num_examples``);
        with ``input_context``, a ``ShardedPriorityTable`` with ``num_shards`` = the input
        pipelines (or a ``PriorityTable`` when there is one pipeline), built once, outside the
        strategy scope, before the datasets.
      source: random-access examples, either in memory, a mapping of name to array/tensor whose
        leading dimension is ``N`` (example ``i`` is row ``i`` of every entry and has id ``i``),
        or a TFDS data source (``tfds.data_source(name, split=...)``,
        ``builder.as_data_source()[split]``) of ``N`` records, for data that does not fit in
        memory: example ``i`` is record ``i`` (``source[i]``) and has id ``i``. The data source
        is read by one ``tf.numpy_function`` per batch on the host (see
        ``echoing._src.core.sources`` for its cost and limits).
      batch_size, top_ratio, renew_ratio, seed, mode, alpha, importance_exponent: see
        ``PrioritySampler``.
      start_step: the step of the first batch (to resume). The iterator is checkpointable too
        (``tf.train.Checkpoint(iterator=...)``): it saves the step; save the table alongside.
      keys: the entries/features of ``source`` to read (default: all). A TFDS dataset that
        stores its own ``"id"`` feature needs ``keys`` without it (the batch's ``"id"`` is the
        record index the table is keyed by).
      input_context: the ``tf.distribute.InputContext`` handed to the ``dataset_fn``; then
        ``batch_size`` is the global batch (a multiple of ``num_replicas_in_sync``), each
        pipeline selects ``batch_size / P`` examples a step and yields them as
        ``num_replicas_in_sync / P`` per-replica batches with GLOBAL ids, and ``seed`` is
        combined with the pipeline id so pipelines draw different examples.

    Returns:
      A ``tf.data.Dataset`` whose element for step ``t`` is the source's entries gathered at the
      selected ids, plus ``"id"`` (int64 ``[B]``) and ``"sample_weight"`` (float32 ``[B]``);
      every entry has the static shape ``[B, ...]``.

    Raises:
      TypeError: ``source`` is neither a mapping nor a TFDS data source, or an argument of
        ``PrioritySampler`` has the wrong type.
      ValueError: ``source`` is empty, its number of examples is not the table's ``N``, it uses
        the reserved keys ``"id"``/``"sample_weight"``, or a ``PrioritySampler`` argument is
        invalid.
    """
    share = pipeline_share(table, input_context, batch_size, seed)
    sampler = PrioritySampler(
        share.table,
        batch_size=share.batch_size,
        top_ratio=top_ratio,
        renew_ratio=renew_ratio,
        seed=share.seed,
        mode=mode,
        alpha=alpha,
        importance_exponent=importance_exponent,
    )
    examples = random_access_source(source, keys=keys)
    check_source_size(examples, table.num_examples)
    if is_int(start_step, numpy=True):  # else refused by sampled_batches
        warn_if_table_is_ahead(share.table, int(start_step))
    return sampled_batches(
        sampler,
        examples,
        start_step=start_step,
        shard_index=share.shard_index,
        num_shards=share.num_shards,
        num_splits=share.num_splits,
    )


def sampled_batches(
    sampler: PrioritySampler,
    examples: RandomAccessSource,
    *,
    start_step: int,
    shard_index: int = 0,
    num_shards: int = 1,
    num_splits: int = 1,
) -> tf.data.Dataset:
    """Step ``t``'s selection from ``sampler``, gathered from ``examples`` (all factories' core).

    Args:
      sampler: selects LOCAL ids of its table each step.
      examples: the random-access source of all ``N`` examples, indexed by GLOBAL id.
      start_step: step of the first element.
      shard_index: the sampler's table is shard ``shard_index`` of ``num_shards`` strided
        shards: local id ``j`` is global id ``j * num_shards + shard_index``.
      num_shards: see ``shard_index``.
      num_splits: each step's batch is split into this many consecutive elements of
        ``batch_size / num_splits`` rows (one per replica fed by this input pipeline), all
        from the same selection, so they never repeat an example among themselves.
    """
    if not is_int(start_step, numpy=True):
        raise TypeError(f"start_step must be an int, got {start_step!r}.")

    def gather(step: tf.Tensor) -> dict[str, tf.Tensor]:
        selection = sampler.select(step)
        ids = selection["id"] * num_shards + shard_index
        batch = examples.gather(ids)
        batch["id"] = ids
        batch["sample_weight"] = selection["sample_weight"]
        if num_splits > 1:
            batch = {
                key: tf.reshape(value, [num_splits, -1, *value.shape[1:]])
                for key, value in batch.items()
            }
        return batch

    dataset = tf.data.Dataset.counter(start=int(start_step), dtype=tf.int64).map(gather)
    if num_splits > 1:
        dataset = dataset.unbatch()
    options = tf.data.Options()
    # Each batch must see the priorities written after the previous step; do not run ahead.
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    # The map reads the table's variables. They are checkpointed with the table, so the
    # iterator checkpoint (the step counter) must not try to serialize them.
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    # Marked with its table and first step: each fit makes a new iterator, which starts here.
    start = SamplerStart(sampler.table, int(start_step))
    return dataset_graph.mark_per_pass(dataset.with_options(options), "priority_sample", start)


@dataclasses.dataclass(frozen=True)
class SamplerStart:
    """The step a ``priority_sample`` dataset's every new iterator starts at, and its table
    (``PriorityModel.fit`` compares them: ``fit_checks.SamplerWatch``)."""

    table: PriorityTable
    start_step: int
