"""Bag-of-words features of token sequences: what an Assistant scores on text.

Example::

    import tensorflow as tf
    import echoing

    features = echoing.BagOfWords(vocab_size=20)
    one = features({"inputs": tf.constant([2, 17, 17, 3])})  # [20], unit length
    many = features({"inputs": tf.constant([[2, 17, 17, 3], [2, 5, 0, 0]])})  # [2, 20]
    assistant = echoing.Assistant(num_classes=1, input_shape=(20,))

A sequence's features are its token counts, one per vocabulary entry, scaled to unit length;
the padding token (id 0 by default) is not counted, so a padded row of a batch and the unpadded
example score the same. The AutoAssist paper scores raw pixels; text has no fixed-size raw form,
and a linear scorer on word counts is the classic fixed-size one: it learns which words make a
line hard for the language model (rare words, code, names). Scaling away the length keeps long
lines from dominating the linear score.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from echoing._src.core.checks import is_positive_int


class BagOfWords:
    """``element -> float32 [vocab_size]`` (or ``[B, vocab_size]`` for a batch of rows).

    Args:
      vocab_size: token ids are in ``[0, vocab_size)``; an id outside is an error naming it:
        a ``ValueError`` when the ids' values are known at once (eager tensors, constants),
        else an ``InvalidArgumentError`` when the graph (a ``Dataset.map``) reads them.
      key: the element key holding the int token ids, ``[n]`` or padded ``[B, n]``.
      pad_id: the padding token, not counted.
    """

    def __init__(self, vocab_size: int, *, key: str = "inputs", pad_id: int = 0):
        if not is_positive_int(vocab_size):
            raise ValueError(
                f"BagOfWords(vocab_size={vocab_size!r}): expected an int >= 1, the number of "
                "token ids (e.g. the tokenizer's vocabulary size)."
            )
        if not isinstance(key, str):
            raise TypeError(f"BagOfWords(key={key!r}): expected the element key of the token ids.")
        self.vocab_size, self.key, self.pad_id = vocab_size, key, int(pad_id)

    def __call__(self, element: Mapping[str, Any]) -> tf.Tensor:
        ids = tf.convert_to_tensor(element[self.key])
        if not ids.dtype.is_integer or ids.shape.rank not in (1, 2):
            raise TypeError(
                f"BagOfWords reads int token ids [n] or [B, n] from element[{self.key!r}], got "
                f"{ids.dtype.name} of shape {ids.shape}."
            )
        checks = self._range_checks(ids)
        ids = tf.cast(ids, tf.int32)
        with tf.control_dependencies(checks):
            rows = ids if ids.shape.rank == 2 else ids[tf.newaxis]
            counts = tf.math.bincount(
                rows,
                minlength=self.vocab_size,
                maxlength=self.vocab_size,
                dtype=tf.float32,
                axis=-1,
            )
        counts *= 1.0 - tf.one_hot(self.pad_id, self.vocab_size)
        features = tf.math.l2_normalize(counts, axis=-1)
        return features if ids.shape.rank == 2 else features[0]

    def _range_checks(self, ids: tf.Tensor) -> list:
        """Refuses a token id outside ``[0, vocab_size)`` (bincount would fail on a negative
        one with "Input 'in' must be non-negative", naming neither it nor the fix): at once
        when the values are known, else by a graph assert naming the first such id."""
        vocab = self.vocab_size
        fix = (
            f"token ids must be in [0, vocab_size={vocab}): build BagOfWords with the "
            "vocabulary size of the tokenizer, and map ids outside it (e.g. a -1 for unknown "
            "words) to an id of the vocabulary (its unknown-word or padding id) before scoring"
        )
        values = tf.get_static_value(ids)
        if values is not None:
            outside = np.asarray(values)[(values < 0) | (values >= vocab)]
            if outside.size:
                raise ValueError(
                    f"BagOfWords got token id {outside[0]} in element[{self.key}]; {fix}."
                )
            return []
        wide = tf.reshape(tf.cast(ids, tf.int64), [-1])
        outside = tf.boolean_mask(wide, (wide < 0) | (wide >= vocab))
        message = tf.strings.join(
            [
                "BagOfWords got token id ",
                tf.strings.as_string(tf.concat([outside, [0]], axis=0)[0]),
                # No quotes: TensorFlow's assert message would show them escaped.
                f" in element[{self.key}]; {fix}",
            ]
        )
        return [tf.debugging.Assert(tf.size(outside) == 0, [message])]
