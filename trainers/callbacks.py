"""Keras callbacks for ``model.fit`` users of echoing: log fresh examples and echo statistics.

Example::

    import keras
    import tensorflow as tf
    import echoing
    from echoing import meters
    from trainers import callbacks

    counts = meters.EchoMeters()
    features = tf.random.stateless_normal([256, 8], seed=[0, 0])
    labels = tf.cast(features[:, 0] > 0, tf.int64)
    ds = (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .apply(counts.fresh.count())  # examples read from upstream
        .apply(echoing.echo(2))  # each one twice
        .apply(counts.emitted.count())  # examples the model sees
        .batch(32)
    )
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=2, callbacks=[callbacks.EchoStatsCallback(counts)])
    print(history.history["fresh_examples"])  # [256.0, 512.0]; echo_ratio [2.0, 2.0]

``model.fit`` is for single-host strategies; the custom loop in ``trainers.loop`` covers the rest.
"""

from __future__ import annotations

import warnings

import keras

from echoing import meters as echo_meters


class EchoStatsCallback(keras.callbacks.Callback):
    """Adds ``fresh_examples``, ``emitted_examples`` and ``echo_ratio`` to each epoch's logs.

    The numbers are cumulative since the meters were created (or reset), read from the
    ``EchoMeters`` counters the input pipeline increments. Because they are written into the
    epoch ``logs``, Keras' ``History``, ``CSVLogger`` and ``TensorBoard`` callbacks record them
    too (put this callback before those in the list). ``self.epochs`` keeps one dict per epoch.
    The counts include what the pipeline read ahead: ``echo_ratio`` is the echo factor at the
    end of a pass over the data, and below it inside one (``.repeat()`` with
    ``steps_per_epoch``), where the fresh meter also counts what the echo stage holds
    (docs/data_echoing.md).
    """

    def __init__(self, meters: echo_meters.EchoMeters, *, verbose: bool = False):
        """Reads ``meters`` at each epoch end; ``verbose`` also prints one line per epoch."""
        super().__init__()
        if not isinstance(meters, echo_meters.EchoMeters):
            raise TypeError(
                f"EchoStatsCallback needs an echoing.meters.EchoMeters, got "
                f"{type(meters).__name__}; create one and count the dataset with it "
                "(ds.apply(meters.fresh.count()) ... ds.apply(meters.emitted.count()))."
            )
        self.meters = meters
        self.verbose = verbose
        self.epochs: list[dict[str, float]] = []
        self._warned = False

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        result = {name: float(value) for name, value in self.meters.result().items()}
        idle = [name for name in ("fresh", "emitted") if not result[f"{name}_examples"]]
        if idle:
            # A meter the pipeline never applied: a ratio of 0 would read as no echo at all.
            result["echo_ratio"] = float("nan")
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"EchoStatsCallback: the {' and '.join(idle)} meter counted no examples this "
                    "far, so echo_ratio is NaN. Apply both to the pipeline: "
                    "ds.apply(meters.fresh.count()) before echo and "
                    "ds.apply(meters.emitted.count()) after it.",
                    UserWarning,
                    stacklevel=2,
                )
        self.epochs.append(result)
        if logs is not None:
            logs.update(result)
        if self.verbose:
            print(
                f"epoch {epoch + 1}: fresh examples {result['fresh_examples']:.0f}, emitted "
                f"{result['emitted_examples']:.0f}, echo ratio {result['echo_ratio']:.2f}"
            )
