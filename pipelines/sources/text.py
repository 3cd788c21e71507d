"""Text files as a language-modelling source: one example per line, WordPiece tokens, buckets.

Example::

    from pipelines.sources import corpus, text

    train_file, eval_file = corpus.make_files("/tmp/echoing", num_train=500, num_eval=100)
    source = text.load(train_file, eval_file, data_dir="/tmp/echoing", max_length=64)
    # source.train.dataset: {"ids": int32 [m], "id": int64}, a window's m <= 65 token ids
    # source.train.decode: -> {"inputs": int32 [n], "label": int64 [n],
    #                          "label_mask": float32 [n], "id": int64}, n = m - 1 <= 64

Each non-empty line of the files (sorted glob order) is a document. It is tokenized once, at
load, in the graph, by tensorflow-text's ``BertTokenizer`` (lower-casing, punctuation splitting,
WordPiece) with a vocabulary learned from the train files by tensorflow-text's
``bert_vocab_from_dataset`` and stored under ``data_dir/text/vocab`` (a file per corpus and size,
reused after; ``Source.vocab_file`` names it). Framed as ``[BOS] tokens [EOS]``, the model reads
``inputs`` and predicts ``label`` = ``inputs`` shifted by one. A line with more than
``max_length`` predictions is not cut: it becomes several examples, windows of ``max_length``
(each its own id), so nothing is dropped. Each raw element holds only its window's ids (at most
``max_length + 1``, int32), so memory grows with the tokens (about 8 bytes each, the cached ids
and the windows), not with a line's length times its windows, and ``decode`` only slices them.
Where lines come from (local or gs:// files, or a TFDS text dataset by name) is
``pipelines.sources.text_lines``; they are read into memory at load.

Batches: ``batch_stage`` groups examples of similar length (``bucket_by_sequence_length``) and
pads each batch to its longest example with token 0 (``[PAD]``, ``label_mask`` 0), so that
little of a batch is padding; every batch has ``batch_size`` rows, as the trainer's counts
expect.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import warnings

import numpy as np
import tensorflow as tf

from pipelines.sources import gcs, text_lines
from pipelines.sources.source import Source, SourceSplit

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
# Token ids of every line (flat int32 ids, int64 line offsets), by (lines' digest, vocabulary):
# a trainer builds its datasets several times per run, and tokenizing is the expensive part.
_TOKENS: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
# Lines are tokenized at load in chunks of about this many bytes, so the tokenizer's
# intermediates (several times the text) stay bounded; a longer line is a chunk of its own.
_TOKENIZE_CHUNK_BYTES = 4 << 20
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(4)


@dataclasses.dataclass(frozen=True)
class TextSource(Source):
    """A ``Source`` with the vocabulary it tokenizes with.

    Attributes:
      vocab_file: the WordPiece vocabulary, one token per line (id = line index).
      vocab_size: tokens in it (the model's output classes).
    """

    vocab_file: str = ""
    vocab_size: int = 0


def load(
    train_files: str,
    eval_files: str,
    *,
    data_dir: str,
    max_length: int = 128,
    vocab_size: int = 4_000,
    request_attempts: int = gcs.DEFAULT_REQUEST_ATTEMPTS,
) -> TextSource:
    """Returns the text source over the globs ``train_files`` and ``eval_files`` (local or gs://).

    Raises:
      ValueError: a glob matches no file, the files hold no text, or ``max_length`` /
        ``vocab_size`` are too small.
    """
    _check_sizes(max_length, vocab_size)
    return load_lines(
        text_lines.from_files(train_files, "train_files", request_attempts=request_attempts),
        text_lines.from_files(eval_files, "eval_files", request_attempts=request_attempts),
        data_dir=data_dir,
        max_length=max_length,
        vocab_size=vocab_size,
        names=(f"text files {train_files!r}", f"text files {eval_files!r}"),
    )


def load_lines(
    train_lines: list[str],
    eval_lines: list[str],
    *,
    data_dir: str,
    max_length: int = 128,
    vocab_size: int = 4_000,
    names: tuple[str, str] = ("train lines", "eval lines"),
) -> TextSource:
    """Returns the text source over these lines (each a document); ``names`` says where each
    split's lines came from, for errors.

    Raises:
      ValueError: a split holds no text, or ``max_length`` / ``vocab_size`` are too small.
    """
    _check_sizes(max_length, vocab_size)
    for lines, name in zip((train_lines, eval_lines), names, strict=True):
        if not lines:
            raise ValueError(
                f"the {name} hold no text (every line is empty); a language model needs at "
                "least one non-empty line."
            )
    vocab_file = _vocabulary(_digest(train_lines), train_lines, data_dir, vocab_size)
    tokenizer = make_tokenizer(vocab_file)
    with open(vocab_file, encoding="utf-8") as file:
        size = sum(1 for _ in file)
    if size < vocab_size / 2:  # a vocab_size this text cannot give: raising it changes nothing
        warnings.warn(
            f"the {names[0]} yield a {size}-token WordPiece vocabulary, under half of data "
            f"config vocab_size={vocab_size}: too few words recur often enough for more, so "
            f"the model predicts over {size} tokens and a larger vocab_size changes nothing; "
            f"set vocab_size={size} or less to say so, or train on more text.",
            UserWarning,
            stacklevel=2,
        )
    return TextSource(
        train=_split(train_lines, tokenizer, vocab_file, max_length),
        eval=_split(eval_lines, tokenizer, vocab_file, max_length),
        num_classes=size,
        input_shape=(None,),
        vocab_file=vocab_file,
        vocab_size=size,
    )


def _check_sizes(max_length: int, vocab_size: int) -> None:
    if max_length < 2:
        raise ValueError(f"text max_length must be >= 2 tokens, got {max_length!r}; e.g. 128.")
    if vocab_size < len(RESERVED_TOKENS) + 26:
        raise ValueError(f"text vocab_size must be >= 30, got {vocab_size!r}; e.g. 4000.")


def make_tokenizer(vocab_file: str):
    """tensorflow-text's ``BertTokenizer`` over ``vocab_file`` (lower-casing, unknown -> [UNK])."""
    import tensorflow_text

    return tensorflow_text.BertTokenizer(
        vocab_file, lower_case=True, token_out_type=tf.int64, unknown_token="[UNK]"
    )


def tokenize(tokenizer, lines: tf.Tensor) -> tf.RaggedTensor:
    """``[BOS] wordpieces [EOS]`` ids of each line of a 1-D string tensor, ragged [lines, n]."""
    ids = tokenizer.tokenize(lines).merge_dims(-2, -1)
    rows = tf.cast(ids.nrows(), tf.int32)
    bos = tf.fill([rows, 1], tf.constant(BOS_ID, tf.int64))
    eos = tf.fill([rows, 1], tf.constant(EOS_ID, tf.int64))
    return tf.concat([bos, ids, eos], axis=1)


def batch_stage(batch_size: int, max_length: int, *, drop_remainder: bool):
    """``Dataset -> Dataset``: padded batches of ``batch_size`` examples of similar length.

    Bucket edges grow by 1/8 from 8 tokens up to ``max_length`` (8, 9, ..., 16, 18, 20, 22, 24,
    27, 30, ...), so a batch pads at most about 1/8 of its tokens; a batch is padded to its longest
    example (not to the bucket's edge), with 0 in every key. More buckets take longer to fill,
    which a shuffle buffer of a few thousand examples absorbs.
    """
    boundaries, edge = [], 8
    while edge < max_length:
        boundaries.append(edge)
        edge = max(edge + 1, edge * 9 // 8)

    def apply(dataset: tf.data.Dataset) -> tf.data.Dataset:
        return dataset.bucket_by_sequence_length(
            lambda element: tf.shape(element["inputs"])[0],
            bucket_boundaries=[b + 1 for b in boundaries],
            bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
            drop_remainder=drop_remainder,
        )

    return apply


def padding_fraction(batches) -> float:
    """The share of ``label_mask`` entries that are padding, over an iterable of batches."""
    padded = real = 0.0
    for batch in batches:
        mask = np.asarray(batch["label_mask"])
        padded, real = padded + mask.size, real + mask.sum()
    return float(1.0 - real / padded) if padded else 0.0


def _split(lines: list[str], tokenizer, vocab_file: str, max_length: int) -> SourceSplit:
    """One element per window: ``{"ids": int32 [<= max_length + 1], "id"}``; decode shifts it."""
    key = (_digest(lines), vocab_file)
    if key not in _TOKENS:
        _TOKENS[key] = _tokenize_lines(tokenizer, lines)
    values, line_splits = _TOKENS[key]
    starts, ends = _window_bounds(line_splits, max_length)
    # Each window's ids, back to back: a window shares one id with the next (its last label is
    # the next window's first input), so this is (max_length + 1) / max_length of the tokens.
    sizes = ends - starts
    window_splits = np.concatenate([[0], np.cumsum(sizes)])
    positions = np.arange(window_splits[-1]) + np.repeat(starts - window_splits[:-1], sizes)
    windows = tf.RaggedTensor.from_row_splits(
        tf.constant(values[positions]), tf.constant(window_splits), validate=False
    )
    dataset = tf.data.Dataset.from_tensor_slices(
        {"ids": windows, "id": tf.range(len(starts), dtype=tf.int64)}
    ).map(_dense_ids)

    def decode(element: dict) -> dict:
        ids = element["ids"]
        label = tf.cast(ids[1:], tf.int64)
        return {
            "inputs": ids[:-1],
            "label": label,
            "label_mask": tf.ones(tf.shape(label), tf.float32),
            "id": element["id"],
        }

    def batch(dataset: tf.data.Dataset, batch_size: int, drop_remainder: bool):
        return batch_stage(batch_size, max_length, drop_remainder=drop_remainder)(dataset)

    return SourceSplit(dataset=dataset, decode=decode, num_examples=len(starts), batch=batch)


def _dense_ids(element: dict) -> dict:
    # A slice of a RaggedTensor arrives as a dense tensor but keeps a RaggedTensorSpec; give
    # the stages after it (echo, filters, shuffles) a plain [None] TensorSpec.
    return {"ids": tf.ensure_shape(element["ids"], [None]), "id": element["id"]}


def _tokenize_lines(tokenizer, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``[BOS] wordpieces [EOS]`` ids of every line: flat int32 ids and int64 line offsets
    (line ``i`` is ``ids[splits[i]:splits[i + 1]]``), tokenized in chunks of bounded size."""
    values, lengths, chunk, chunk_bytes = [], [], [], 0

    def flush():
        if chunk:
            ids = tokenize(tokenizer, tf.constant(chunk))
            values.append(ids.flat_values.numpy().astype(np.int32))
            lengths.append(ids.row_lengths().numpy())
            chunk.clear()

    for line in lines:
        size = len(line)
        if chunk and chunk_bytes + size > _TOKENIZE_CHUNK_BYTES:
            flush()
            chunk_bytes = 0
        chunk.append(line)
        chunk_bytes += size
    flush()
    splits = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int64)
    return np.concatenate(values), splits


def _window_bounds(line_splits: np.ndarray, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Flat-id ``[start, end)`` of every window, in line order.

    A line of n ids (with BOS and EOS) has n - 1 predictions: ceil((n - 1) / max_length)
    windows. Window k reads ids ``[k * max_length, k * max_length + max_length + 1)`` of its line
    (inputs, and labels one further), cut at the line's end.
    """
    lengths = np.diff(line_splits)
    counts = np.maximum(1, -(-(lengths - 1) // max_length))
    line_index = np.repeat(np.arange(len(lengths)), counts)
    window = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    starts = line_splits[line_index] + window * max_length
    ends = np.minimum(starts + max_length + 1, line_splits[line_index + 1])
    return starts, ends


def _digest(lines: list[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode() + b"\n")
    return digest.hexdigest()[:16]


def _vocabulary(digest: str, lines: list[str], data_dir: str, vocab_size: int):
    """The vocabulary file of these train lines and size, learned once and stored."""
    directory = os.path.join(data_dir, "text", "vocab")
    path = os.path.join(directory, f"wordpiece-{vocab_size}-{digest}.txt")
    if os.path.exists(path):
        return path
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

    print(
        f"Learning a {vocab_size}-token WordPiece vocabulary from {len(lines)} lines into "
        f"{path} ...",
        flush=True,
    )
    vocab = bert_vocab_from_dataset.bert_vocab_from_dataset(
        tf.data.Dataset.from_tensor_slices(lines).batch(1_000),
        vocab_size=vocab_size,
        reserved_tokens=list(RESERVED_TOKENS),
        bert_tokenizer_params={"lower_case": True},
    )
    os.makedirs(directory, exist_ok=True)
    staging = f"{path}.{os.getpid()}.staging"
    with open(staging, "w", encoding="utf-8") as file:
        file.write("".join(f"{token}\n" for token in vocab))
    os.replace(staging, path)
    return path
