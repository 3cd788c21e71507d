"""Element counters on the host, incremented inside the tf.data graph (``echoing.meters``)."""

from __future__ import annotations

import warnings

import tensorflow as tf

from echoing._src.core import dataset_graph
from echoing._src.core.types import DatasetTransformation, as_element


class ElementCounter(tf.Module):
    """An int64 host variable counting the elements (or batch rows) that pass a point.

    Example::

        counter = ElementCounter("read")
        ds = tf.data.Dataset.range(5).batch(2).apply(counter.count(rows=True))
        _ = list(ds)
        assert counter.value() == 5
    """

    def __init__(self, name: str):
        super().__init__(name=name)
        # Host CPU: tf.data runs there, and the counter must not be mirrored onto accelerators.
        with tf.device("/cpu:0"):
            self.variable = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name=name,
                synchronization=tf.VariableSynchronization.NONE,
                aggregation=tf.VariableAggregation.NONE,
            )

    def count(self, *, rows: bool = False) -> DatasetTransformation:
        """Returns a transformation that counts each element, or each row of its batch axis.

        Args:
          rows: count the leading dimension of the element's first component (for batches)
            instead of 1 per element. Elements with a scalar component are not batches (each
            component of a batch has a batch axis) and are refused when the transformation is
            applied.
        """
        variable = self.variable

        def increment(element):
            amount = _rows(tf.nest.flatten(element)[0]) if rows else tf.constant(1, tf.int64)
            with tf.control_dependencies([variable.assign_add(amount)]):
                return tf.nest.map_structure(tf.identity, element)

        def transformation(dataset: tf.data.Dataset) -> tf.data.Dataset:
            spec = dataset.element_spec
            if rows:
                _check_batched(dataset.element_spec, self.name)
            elif dataset_graph.comes_out_of_batch(dataset):
                warnings.warn(
                    f"echoing meter {self.name!r}: count() counts elements, and these come out "
                    "of batch(), so each batch counts as 1 example. Count its examples with "
                    "count(rows=True).",
                    UserWarning,
                    stacklevel=2,
                )
            # Checkpointed with its iterator as a user would: the counter is saved on its own.
            counted = dataset.map(
                lambda *args: increment(as_element(args, spec)), name=f"count_{self.name}"
            )
            return checkpointable(counted)

        return transformation

    def value(self) -> int:
        return int(self.variable.numpy())

    def reset(self) -> None:
        self.variable.assign(0)


class EchoMeters(tf.Module):
    """The two counters every echo experiment needs: fresh (before echo) and emitted (after).

    Example::

        counts = EchoMeters()
        ds = ds.apply(counts.fresh.count()).apply(echo(2)).apply(counts.emitted.count())
    """

    def __init__(self, name: str = "echo_meters"):
        super().__init__(name=name)
        self.fresh = ElementCounter("fresh_examples")
        self.emitted = ElementCounter("emitted_examples")

    def result(self) -> dict[str, float]:
        """Counts so far and their ratio (the realised echo factor, 0 before any input)."""
        fresh, emitted = self.fresh.value(), self.emitted.value()
        return {
            "fresh_examples": fresh,
            "emitted_examples": emitted,
            "echo_ratio": emitted / fresh if fresh else 0.0,
        }


def _check_batched(element_spec, name: str) -> None:
    """Refuses ``count(rows=True)`` on elements with a scalar component: they are not batches."""
    shapes = [getattr(spec, "shape", None) for spec in tf.nest.flatten(element_spec)]
    if any(shape is not None and shape.rank == 0 for shape in shapes):
        described = tf.nest.map_structure(_shape_text, element_spec)
        raise ValueError(
            f"ElementCounter({name!r}).count(rows=True) counts the rows of batches, but these "
            f"elements are not batched (shapes {described}: a scalar has no batch axis). Apply "
            "it after batch(), or use count() to count one per element."
        )


def _shape_text(spec) -> tuple | None:
    """A component's shape as a tuple for a message (``None``: unknown)."""
    shape = getattr(spec, "shape", None)
    return None if shape is None or shape.rank is None else tuple(shape)


def _rows(tensor) -> tf.Tensor:
    if isinstance(tensor, tf.SparseTensor):
        return tensor.dense_shape[0]
    if isinstance(tensor, tf.RaggedTensor):
        return tensor.nrows(out_type=tf.int64)
    return tf.shape(tensor, out_type=tf.int64)[0]


def checkpointable(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``dataset`` with options that let ``tf.train.Checkpoint(iterator=...)`` save its position.

    The meters' counting maps (and other stages' host variables: pruning's) are external state
    to tf.data, which by default refuses to serialise it ("ReadVariableOp is stateful"). Those
    variables are checkpointed on their own (``EchoMeters`` and the stages are ``tf.Module``s),
    so the iterator checkpoint may ignore them.

    Example::

        seen = tf.Variable(0, dtype=tf.int64)  # a stage's own state, saved with the run
        dataset = checkpointable(tf.data.Dataset.range(4).map(lambda x: x + seen))
        iterator = iter(dataset)
        tf.train.Checkpoint(seen=seen, iterator=iterator).save("/tmp/checkpointable/ckpt")

    (``ElementCounter.count`` and pruning's stages return such datasets already.)
    """
    options = tf.data.Options()
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return dataset.with_options(options)


__all__ = ["EchoMeters", "ElementCounter", "checkpointable"]
