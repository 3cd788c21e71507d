"""Loss-table pruning on a stream of examples (``dataset.apply(stage)``): the part of
:class:`~echoing._src.prune.loss_pruning.LossPruning` for sources read in order (TFRecord
shards), where the stage sees each example's ``"id"`` as it arrives.

Elements are grouped ``group_size`` at a time and one sequential map decides a group from the
table's live losses; every ``examples_per_epoch`` inputs is an epoch, and a group that straddles
an epoch's end is decided part by part. The state (table, counters, the epoch's threshold and
draws) and the keep rule are the stage's own (``loss_pruning.py``), shared with reading by id.

Example::

    import tensorflow as tf
    import echoing

    table = echoing.LossTable(8)
    stage = echoing.loss_prune(table, num_epochs=2, seed=0)
    ids = tf.data.Dataset.from_tensor_slices({"id": tf.range(8, dtype=tf.int64)})
    print(len(list(ids.apply(stage))))  # 8: unseen examples are always kept
"""

from __future__ import annotations

import warnings

import tensorflow as tf

from echoing._src.core import dataset_graph, grouping, meters


class StreamPruning:
    """``LossPruning``'s stream path (a mixin: the state and rule are ``LossPruning``'s)."""

    def __call__(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        spec = dataset.element_spec
        grouping.require_key(spec, self.id_key, "loss_prune", "id_key")
        if not spec[self.id_key].dtype.is_integer:
            raise TypeError(
                f"loss_prune: element[{self.id_key!r}] must be a scalar integer id, got dtype "
                f"{spec[self.id_key].dtype.name} ({spec[self.id_key]}); a cast would read 1.7 as "
                "id 1, another example's. Give the examples int ids: echoing.with_ids(dataset), "
                f"or map {self.id_key!r} to the example's integer row."
            )
        if spec[self.id_key].shape.rank != 0:
            raise TypeError(
                f"loss_prune: element[{self.id_key!r}] must be a scalar integer id, got "
                f"{spec[self.id_key]}; insert the stage before batch()."
            )
        if not self.epoch_size_given and dataset_graph.echo_upstream(dataset):
            raise ValueError(
                "loss_prune reads the output of an echo stage, so each pass brings every example "
                "e times; with examples_per_epoch at its default (the loss table's "
                f"{self.examples_per_epoch} examples) each pass would count as e pruning epochs: "
                "thresholds would refresh mid-pass and the anneal start early. Prune before "
                "echo: ds.apply(loss_prune(...)).apply(echo(e)) (echo then repeats the kept "
                "examples), or give examples_per_epoch = e × the examples per pass."
            )
        self._check_epoch_size(int(dataset.cardinality()), dataset_graph.pass_size(dataset))
        self._check_id_ranges(dataset)
        # A group straddles at most one epoch's end (it is decided in two parts at most).
        group = min(self.group_size, self.examples_per_epoch)
        kept = (
            dataset.batch(grouping.group_size(spec, group))
            # Sequential: each group's epoch and threshold follow from the groups before it.
            .map(self._keep_group, name=f"{self.name}_keep")
            .unbatch(name=f"{self.name}_unbatch")
        )
        # The stage's variables hold its state: the iterator checkpoint may ignore them.
        return dataset_graph.mark_per_pass(meters.checkpointable(kept), "loss_prune", self)

    def _check_epoch_size(self, size: int, pass_size: int | None) -> None:
        """An epoch longer than the input stretches pruning's epochs (threshold, anneal).
        ``size`` is the input's cardinality; ``pass_size`` one pass's, when it repeats."""
        fix = (
            "build the table with LossTable(number of examples), or pass examples_per_epoch ="
            " the inputs per epoch"
        )
        one_pass = pass_size if pass_size is not None else size
        if not self.epoch_size_given and one_pass > self.table.num_examples:
            raise ValueError(
                f"loss_prune: a pass of the input holds {one_pass} examples and the LossTable "
                f"{self.table.num_examples} rows, one per example id, so ids would run past "
                f"the table; build it with LossTable({one_pass}) (ids 0..{one_pass - 1})."
            )
        held = None
        if 0 <= size < self.examples_per_epoch:
            held = f"the input holds {size} examples"
        elif pass_size is not None and pass_size < self.examples_per_epoch:
            held = f"each pass of the input (before its repeat) holds {pass_size} examples"
        if held:
            raise ValueError(
                f"loss_prune: {held}, but an epoch counts examples_per_epoch="
                f"{self.examples_per_epoch} inputs (the loss table's size by default), so "
                f"thresholds would refresh late and the anneal start late; {fix}."
            )
        if pass_size is not None:
            return  # each pass is at least an epoch long
        if size < 0 and not self.epoch_size_given:  # unknown, or repeated: cannot tell
            warnings.warn(
                f"loss_prune counts an epoch as the loss table's {self.examples_per_epoch} "
                f"inputs and cannot check it against this input (its size is unknown); if an "
                f"epoch holds fewer, {fix}.",
                stacklevel=4,  # this check, __call__, Dataset.apply, then the user's line
            )

    def _check_id_ranges(self, dataset: tf.data.Dataset) -> None:
        """Ids that ``with_ids`` gives past the table's rows, refused at ``apply``: the stage's
        own check is in the graph, at the first group (an InvalidArgumentError's trace)."""
        rows = self.table.num_examples
        for start, count in dataset_graph.id_ranges(dataset, self.id_key):
            last = start + count - 1 if count > 0 else start
            if last >= rows:
                held = f"ids {start}..{last}" if count > 0 else f"ids from {start}"
                raise ValueError(
                    f"loss_prune: with_ids(start={start}) gives the examples {held}, but the "
                    f"LossTable has {rows} rows (ids 0..{rows - 1}); build the table with "
                    f"LossTable({last + 1}) to hold them, or number them from a lower start."
                )

    def _keep_group(self, batch):
        # A group may straddle an epoch's end: each part is decided by its own epoch (the
        # annealing epoch keeps everything, a new epoch takes its own threshold and draws).
        size = tf.size(batch[self.id_key], out_type=tf.int64)
        seen = self.seen_inputs.variable.read_value()
        cut = tf.minimum(size, self.examples_per_epoch - seen % self.examples_per_epoch)
        # Values may be nested (a multi-input model's dict of inputs): rows are cut leaf-wise.
        first = self._keep_part(_sliced(batch, slice(None, cut)))

        def nothing():  # no element of the next epoch: it starts with the next group
            return {**_sliced(batch, slice(0, 0)), "sample_weight": tf.zeros([0], tf.float32)}

        with tf.control_dependencies(tf.nest.flatten(first)):
            second = tf.cond(
                cut < size, lambda: self._keep_part(_sliced(batch, slice(cut, None))), nothing
            )
        return tf.nest.map_structure(lambda a, b: tf.concat([a, b], axis=0), first, second)

    def _keep_part(self, batch):
        ids = tf.cast(batch[self.id_key], tf.int64)
        size = tf.size(ids, out_type=tf.int64)
        epoch = self.seen_inputs.variable.read_value() // self.examples_per_epoch
        # A new epoch takes the table's mean (and its draws) once, at its first group.
        new_epoch = tf.not_equal(epoch, self.threshold_epoch.read_value())
        threshold = tf.cond(new_epoch, lambda: self._start_epoch(epoch), self.threshold.read_value)
        with tf.control_dependencies([threshold]):
            losses, seen = self.table.lookup(ids)  # checks the ids' range first
        with tf.control_dependencies([losses]):
            draws = tf.gather(self.draws, ids)
        keep, easy = self._keep_rule(epoch, losses, seen, threshold, draws)
        seen_after = self.seen_inputs.variable.assign_add(size)
        kept_count = tf.reduce_sum(tf.cast(keep, tf.int64))
        with tf.control_dependencies([seen_after]):
            # Planned after the inputs are counted: a reader in another thread that reads the
            # plan first (examples_to_train_at_least) never finds kept examples not yet read.
            planned = self.trained.plan(epoch, kept_count)
        updates = [
            self.kept_inputs.variable.assign_add(kept_count),
            planned,
            self._epochs_read.assign(
                tf.cast(seen_after, tf.float64) / float(self.examples_per_epoch)
            ),
        ]
        with tf.control_dependencies(updates):
            kept = tf.nest.map_structure(lambda value: tf.boolean_mask(value, keep), batch)
        weight = self._weights(tf.boolean_mask(easy, keep))
        if "sample_weight" in kept:  # an upstream weight (e.g. another filter's) multiplies
            weight *= tf.cast(kept["sample_weight"], tf.float32)
        kept["sample_weight"] = weight
        return kept


def _sliced(batch: dict, rows: slice) -> dict:
    """``batch`` (a dict, its values possibly nested) cut to ``rows`` on every leaf."""
    return tf.nest.map_structure(lambda value: value[rows], batch)
