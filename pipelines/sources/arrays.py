"""In-memory arrays as a source.

Example::

    import numpy as np
    from pipelines.sources import arrays

    source = arrays.load(
        train={"inputs": np.random.rand(100, 8).astype("float32"), "label": np.arange(100) % 3},
        eval={"inputs": np.random.rand(20, 8).astype("float32"), "label": np.arange(20) % 3},
    )
    assert source.num_classes == 3 and source.input_shape == (8,)

The arrays are embedded in the graph as constants (``from_tensor_slices``), so keep them small
(up to a few hundred MB); larger data belongs in TFRecord files or a TFDS dataset.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import ml_collections
import numpy as np
import tensorflow as tf

from pipelines.sources.source import Source, SourceSplit, check_not_empty


def load(train: Mapping, eval: Mapping, num_classes: int | None = None) -> Source:
    """Returns a source over ``{"inputs": [N, ...], "label": [N]}`` arrays.

    Args:
      train: training arrays; "inputs" any numeric dtype (cast to float32 on decode), "label"
        integers in ``[0, num_classes)``.
      eval: evaluation arrays with the same per-example shape.
      num_classes: defaults to ``max(label) + 1`` over both splits.

    Raises:
      TypeError: a split is not a mapping with "inputs" and "label".
      ValueError: a split is empty, lengths or shapes disagree, labels are out of range.
    """
    train_inputs, train_labels = _check_split("train_arrays", train)
    eval_inputs, eval_labels = _check_split("eval_arrays", eval)
    if train_inputs.shape[1:] != eval_inputs.shape[1:]:
        raise ValueError(
            f"train_arrays and eval_arrays inputs must have the same per-example shape, got "
            f"{train_inputs.shape[1:]} and {eval_inputs.shape[1:]}."
        )
    largest = int(max(train_labels.max(), eval_labels.max()))
    smallest = int(min(train_labels.min(), eval_labels.min()))
    if num_classes is None:
        num_classes = largest + 1
    if smallest < 0 or largest >= num_classes:
        raise ValueError(
            f"array labels must be in [0, num_classes={num_classes}), got labels in "
            f"[{smallest}, {largest}]; fix the labels or set num_classes."
        )
    unseen = np.setdiff1d(eval_labels, train_labels)
    if unseen.size:  # an image folder refuses this; arrays may hold a deliberate held-out class
        warnings.warn(
            f"eval_arrays hold labels train_arrays never do: {unseen[:10].tolist()}"
            f"{' ...' if unseen.size > 10 else ''}; the model cannot learn them, so their eval "
            "examples count as errors. Check that both splits label the same classes.",
            UserWarning,
            stacklevel=3,
        )
    return Source(
        train=_split(train_inputs, train_labels),
        eval=_split(eval_inputs, eval_labels),
        num_classes=int(num_classes),
        input_shape=tuple(int(size) for size in train_inputs.shape[1:]),
    )


def _check_split(key: str, arrays) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(arrays, ml_collections.ConfigDict):  # a dict set on a ConfigDict becomes one
        arrays = arrays.to_dict()
    if not isinstance(arrays, Mapping) or not {"inputs", "label"} <= set(arrays):
        raise TypeError(
            f"data config {key} must be a dict with 'inputs' [N, ...] and 'label' [N] arrays for "
            f"source='arrays', got {type(arrays).__name__}."
        )
    inputs, labels = np.asarray(arrays["inputs"]), np.asarray(arrays["label"])
    check_not_empty(len(inputs), f"data config {key}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.shape != (len(inputs),):
        raise ValueError(
            f"data config {key}['label'] must be integers of shape [{len(inputs)}] (one per "
            f"input), got dtype {labels.dtype} shape {labels.shape}."
        )
    if not (np.issubdtype(inputs.dtype, np.number) or inputs.dtype == np.bool_):
        raise TypeError(f"data config {key}['inputs'] must be numeric, got dtype {inputs.dtype}.")
    return inputs, labels


def _split(inputs: np.ndarray, labels: np.ndarray) -> SourceSplit:
    ids = np.arange(len(inputs), dtype=np.int64)
    rows = {"inputs": inputs, "label": labels.astype(np.int64), "id": ids}
    dataset = tf.data.Dataset.from_tensor_slices(rows)
    return SourceSplit(dataset=dataset, decode=_decode, num_examples=len(inputs), rows=lambda: rows)


def _decode(example: dict) -> dict:
    return {
        "inputs": tf.cast(example["inputs"], tf.float32),
        "label": example["label"],
        "id": example["id"],
    }
