"""Random-access sources for priority sampling: in-memory arrays or a TFDS data source.

Example::

    import numpy as np
    import tensorflow as tf
    from echoing._src.core.sources import random_access_source

    source = random_access_source({"x": np.zeros((10, 3), "float32"), "y": np.arange(10)})
    batch = source.gather(tf.constant([3, 1], tf.int64))  # {"x": [2, 3], "y": [2]}

    # Datasets that do not fit in memory: a TFDS data source (ArrayRecord files, read by index).
    # data = tfds.data_source("mnist", split="train")          # or builder.as_data_source()
    # source = random_access_source(data, keys=("image", "label"))

Priority sampling picks each step's examples by id, so it needs a source it can index: example
``i`` (its id) is row ``i`` of every in-memory array, or record ``i`` of a TFDS data source
(``data_source[i]``, the position in the split as stored, which is NOT a feature the dataset
may also store under ``"id"``; TFDS shuffles examples by key when it writes them). Both kinds
return a batch with the same structure, dtypes and static shapes, so the sampler does not care
which one it reads.

Cost of the data source path: one ``tf.numpy_function`` per BATCH (never per element: the
Python call and its GIL acquisition cost ~10-20 µs each) reads all of the batch's records at
once through ArrayRecord's ``__getitems__`` (C++ readers, one per file). For ArrayRecord files
of fixed-shape features it returns the serialized records and ``tf.io.parse_example`` decodes
them in the graph, outside the GIL; otherwise TFDS decodes each record in Python
(``DataSourceSource(..., parse_in_graph=False)`` forces that path), several times slower and
all of it under the GIL. ``python benchmarks/pgd.py --gather`` measures ms per step of both
against the in-memory gather. The Python call also means the dataset cannot be serialized
(tf.data service) or placed on a device; it runs where the input pipeline runs, on the host,
which is where a random-access file reader must run anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

if TYPE_CHECKING:
    from tensorflow_datasets.core.data_sources.base import BaseDataSource

# Keys the sampler adds to every batch itself; a source may not use them.
RESERVED_KEYS = ("id", "sample_weight")


class ArraySource:
    """Examples held in memory: example ``i`` is row ``i`` of every array (gathered in-graph)."""

    def __init__(self, arrays: Mapping[str, np.ndarray | tf.Tensor], keys: Sequence[str] | None):
        if not arrays:
            raise ValueError("source is empty; pass at least one array, e.g. {'x': x, 'y': y}.")
        self._tensors: dict[str, tf.Tensor] = {}
        num_examples = None
        with tf.device("/CPU:0"):
            for key in _selected_keys(list(arrays), keys):
                if isinstance(arrays[key], Mapping):
                    raise TypeError(
                        f"source[{key!r}] is a mapping of {sorted(arrays[key])}; a source holds "
                        "one array per key. Give each its own key (e.g. {'a': xa, 'b': xb, "
                        "'label': y}) and regroup them after gathering, keeping the keys the "
                        "stage adds, e.g. .map(lambda e: {'inputs': {'a': e['a'], 'b': "
                        "e['b']}, 'label': e['label'], 'id': e['id'], 'sample_weight': "
                        "e['sample_weight']})."
                    )
                tensor = tf.convert_to_tensor(arrays[key])
                if tensor.shape.rank == 0:
                    raise ValueError(
                        f"source[{key!r}] has shape {tensor.shape}, expected a leading dimension "
                        "of N (the number of examples) so that row i is example i."
                    )
                if num_examples is None:
                    num_examples = tensor.shape[0]
                elif tensor.shape[0] != num_examples:
                    raise ValueError(
                        f"source[{key!r}] has shape {tensor.shape}, expected a leading dimension "
                        f"of N={num_examples} like the other entries, so that row i is example i."
                    )
                self._tensors[key] = tensor
        self.num_examples = int(num_examples)

    @property
    def element_spec(self) -> dict[str, tf.TensorSpec]:
        """The spec of ONE example (no batch dimension)."""
        return {
            key: tf.TensorSpec(tensor.shape[1:], tensor.dtype)
            for key, tensor in self._tensors.items()
        }

    def gather(self, ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """The examples ``ids`` (int64 ``[B]``), each entry ``[B, ...]``."""
        return {key: tf.gather(tensor, ids) for key, tensor in self._tensors.items()}


class DataSourceSource:
    """A TFDS data source (``tfds.data_source`` / ``builder.as_data_source()``), read by record.

    One ``tf.numpy_function`` per batch reads every record of the batch (see the module docstring
    for the host/GIL cost and why there is no per-element call). For ArrayRecord files of
    fixed-shape features the call returns the serialized records and they are parsed in the
    graph (``tf.io.parse_example`` + the features' own batch decoding); otherwise (custom
    ``decoders``, other file formats, features without a fixed serialized shape) TFDS decodes each
    record in Python.
    """

    def __init__(
        self,
        data_source: BaseDataSource,
        keys: Sequence[str] | None,
        *,
        parse_in_graph: bool = True,
    ):
        """Reads the data source's features and decides how records are decoded.

        Args:
          data_source: a TFDS data source.
          keys: top-level features to read (default: all).
          parse_in_graph: parse serialized records in the graph when the source allows it
            (faster; ``False`` forces TFDS's per-record Python decoding).
        """
        features = data_source.dataset_info.features
        if features is None:
            raise ValueError(
                f"the TFDS data source {data_source!r} has no features to decode records with; "
                "build it from a prepared dataset (tfds.data_source(name) or "
                "builder.as_data_source())."
            )
        tensor_info = features.get_tensor_info()
        if not isinstance(tensor_info, Mapping):
            raise ValueError(
                f"the TFDS data source {data_source!r} has a single unnamed feature; priority "
                "sampling needs named features (a tfds.features.FeaturesDict)."
            )
        self._keys = _selected_keys(list(tensor_info), keys)
        self._specs: dict[str, tf.TensorSpec] = {}
        for key in self._keys:
            info = tensor_info[key]
            if isinstance(info, Mapping) or None in tuple(info.shape):
                raise ValueError(
                    f"feature {key!r} of the TFDS data source has shape "
                    f"{info if isinstance(info, Mapping) else info.shape}; only fixed-shape "
                    "tensor features can be stacked into a batch. Leave it out with keys=(...)."
                )
            self._specs[key] = tf.TensorSpec(tuple(info.shape), info.tf_dtype)
        self._data_source = data_source
        self._features = features
        self._parse_spec = self._graph_parse_spec() if parse_in_graph else None
        self.num_examples = len(data_source)

    @property
    def parses_in_graph(self) -> bool:
        """Whether records are parsed in the graph (True) or decoded by TFDS in Python."""
        return self._parse_spec is not None

    @property
    def element_spec(self) -> dict[str, tf.TensorSpec]:
        """The spec of ONE example (no batch dimension)."""
        return dict(self._specs)

    def _graph_parse_spec(self) -> dict[str, tuple[tf.io.FixedLenFeature, tf.DType]] | None:
        """``tf.io.parse_example`` features for the selected keys, or None if not parseable."""
        from tensorflow_datasets.core import file_adapters

        if (
            self._data_source.decoders is not None
            or self._data_source.dataset_info.file_format != file_adapters.FileFormat.ARRAY_RECORD
            or not hasattr(self._data_source, "data_source")
        ):
            return None
        serialized_info = self._features.get_serialized_info()
        spec = {}
        for key in self._keys:
            info = serialized_info.get(key)
            if (
                isinstance(info, Mapping)
                or info is None
                or info.sequence_rank
                or None in tuple(info.shape)
            ):
                return None
            # tf.train.Example stores only int64, float32 and bytes (as TFDS writes them).
            if info.tf_dtype.is_integer or info.tf_dtype.is_bool:
                stored = tf.int64
            elif info.tf_dtype.is_floating:
                stored = tf.float32
            elif info.tf_dtype == tf.string:
                stored = tf.string
            else:
                return None
            spec[key] = (tf.io.FixedLenFeature(tuple(info.shape), stored), info.tf_dtype)
        return spec

    def _read_serialized(self, ids: np.ndarray) -> np.ndarray:
        records = self._data_source.data_source.__getitems__(ids.tolist())
        return np.array(records, dtype=object)

    def _read_decoded(self, ids: np.ndarray) -> list[np.ndarray]:
        records = self._data_source.__getitems__(ids.tolist())
        return [
            np.asarray(
                [record[key] for record in records], dtype=self._specs[key].dtype.as_numpy_dtype
            ).reshape((len(records), *self._specs[key].shape))
            for key in self._keys
        ]

    def gather(self, ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """The records ``ids`` (int64 ``[B]``), each feature ``[B, ...]``, read on the host."""
        with tf.device("/CPU:0"):
            if self._parse_spec is None:
                values = tf.numpy_function(
                    self._read_decoded,
                    [ids],
                    [self._specs[key].dtype for key in self._keys],
                    # Reading fixed files is a pure function of the ids.
                    stateful=False,
                    name="data_source_getitems",
                )
            else:
                serialized = tf.numpy_function(
                    self._read_serialized,
                    [ids],
                    tf.string,
                    stateful=False,
                    name="data_source_getitems_serialized",
                )
                serialized.set_shape(ids.shape)
                parsed = tf.io.parse_example(
                    serialized, {key: feature for key, (feature, _) in self._parse_spec.items()}
                )
                values = [
                    tf.cast(
                        self._features[key].decode_batch_example(
                            tf.cast(parsed[key], self._parse_spec[key][1])
                        ),
                        self._specs[key].dtype,
                    )
                    for key in self._keys
                ]
        batch = {}
        for key, value in zip(self._keys, values, strict=True):
            value.set_shape(ids.shape.concatenate(self._specs[key].shape))
            batch[key] = value
        return batch


RandomAccessSource = ArraySource | DataSourceSource


def random_access_source(
    source: Mapping[str, np.ndarray | tf.Tensor] | BaseDataSource,
    *,
    keys: Sequence[str] | None = None,
) -> RandomAccessSource:
    """Wraps ``source`` so that ``gather(ids)`` returns a batch of examples by id.

    Args:
      source: a mapping of name to array/tensor with ``N`` rows (example ``i`` is row ``i``), or
        a TFDS data source (``tfds.data_source(...)``, ``builder.as_data_source()[split]``;
        example ``i`` is record ``i``).
      keys: the entries/features to read (default: all). A data source that stores its own
        ``"id"`` feature needs ``keys`` without it, because the sampler's ``"id"`` is the
        record index.

    Returns:
      An ``ArraySource`` or ``DataSourceSource`` with ``num_examples``, ``element_spec`` and
      ``gather(ids)``.

    Raises:
      TypeError: ``source`` is neither a mapping nor a TFDS data source; ``keys`` is a string.
      ValueError: ``source`` is empty, entries disagree on ``N``, a key is unknown or reserved
        (``"id"``, ``"sample_weight"``), or a data source feature has no fixed shape.
    """
    if isinstance(source, Mapping):
        return ArraySource(source, keys)
    # Imported here: TFDS costs ~0.5 s to import and in-memory users never need it.
    from tensorflow_datasets.core.data_sources.base import BaseDataSource

    if isinstance(source, BaseDataSource):
        return DataSourceSource(source, keys)
    raise TypeError(
        f"source must be a mapping of name -> array with N rows (e.g. {{'x': x, 'y': y}}) or a "
        f"TFDS data source (tfds.data_source(name, split=...) or "
        f"builder.as_data_source()[split]), got {type(source).__name__}. For a tf.data.Dataset, "
        "load it into arrays first or prepare it with file_format='array_record'."
    )


def _selected_keys(available: list[str], keys: Sequence[str] | None) -> list[str]:
    """``keys`` (or every available key), checked against what exists and what is reserved."""
    if keys is None:
        selected = list(available)
    else:
        if isinstance(keys, str) or not isinstance(keys, Sequence):
            raise TypeError(f"keys must be a sequence of names like ('x', 'y'), got {keys!r}.")
        selected = list(keys)
        unknown = [key for key in selected if key not in available]
        if unknown:
            raise ValueError(
                f"keys {unknown} are not in the source, whose entries are {sorted(available)}."
            )
        if not selected:
            raise ValueError("keys is empty; name at least one entry of the source to read.")
    for key in selected:
        if key in RESERVED_KEYS:
            raise ValueError(
                f"source key {key!r} is reserved: reading by id (priority_sample, "
                f"loss_prune(...).read) adds {RESERVED_KEYS} itself (the id of an example is "
                "its row / record index). Leave it out with keys=(...) or rename that entry."
            )
    return selected
