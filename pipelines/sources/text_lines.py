"""Where a language model's lines come from: text files (local or gs://) or a TFDS text dataset.

Example::

    from pipelines.sources import text_lines

    lines = text_lines.from_files("/data/train-*.txt", "train_files")
    # A prepared copy (`tfds build lm1b --data_dir=/data/tfds` on a machine with internet), any
    # TFDS split expression:
    lines = text_lines.from_tfds("lm1b", "train[:1%]", data_dir="/data/tfds")

Each non-empty line (stripped) is one document. Bytes that are not UTF-8 are replaced by U+FFFD,
counted, with a warning naming the file. Everything is read into memory: the vocabulary is
learned from the train lines and every line's length is counted at load, so this source is for
corpora that fit in memory (a TFDS split expression such as ``train[:10%]`` takes a part).
"""

from __future__ import annotations

from absl import logging

from pipelines.sources import files, gcs


def from_files(
    pattern: str, key: str, *, request_attempts: int = gcs.DEFAULT_REQUEST_ATTEMPTS
) -> list[str]:
    """The lines of the files ``pattern`` (the data config's ``key``) matches, in sorted order.

    Raises:
      ValueError: nothing matches, or gcsfs cannot list the bucket.
    """
    lines = []
    for path in files.glob(pattern, key, request_attempts=request_attempts):
        data = files.read_bytes(path, request_attempts=request_attempts)
        check_is_text(data, path, key)
        lines += split_lines(data, path)
    return lines


# The first bytes of compressed files, which read as text would train on their bytes.
_COMPRESSED = {
    b"\x1f\x8b": ("gzip", "gunzip"),
    b"BZh": ("bzip2", "bunzip2"),
    b"\xfd7zXZ\x00": ("xz", "unxz"),
    b"(\xb5/\xfd": ("zstd", "unzstd"),
    b"PK\x03\x04": ("zip", "unzip"),
}
# More of a file's bytes than this not UTF-8: not text. A text in another encoding (Latin-1's
# accents) stays far below, and is read with U+FFFD and a warning.
MOST_NOT_TEXT = 0.2


def check_is_text(data: bytes, path: str, key: str) -> None:
    """Refuses a compressed file, or one whose bytes are mostly not UTF-8 (an image, a binary):
    a language model would learn a vocabulary of their bytes, and evaluate at chance."""
    for magic, (kind, tool) in _COMPRESSED.items():
        if data.startswith(magic):
            raise ValueError(
                f"{path} (matched by data config {key}) is {kind}-compressed, not text; "
                f"decompress it ({tool} {path}) and point {key} at the text files."
            )
    try:
        data.decode("utf-8")
        return
    except UnicodeDecodeError:
        pass
    # Each invalid sequence becomes one U+FFFD; ones already in the text are not counted.
    replaced = data.decode("utf-8", errors="replace").count("\ufffd")
    replaced -= data.decode("utf-8", errors="ignore").count("\ufffd")
    if replaced > MOST_NOT_TEXT * len(data):
        raise ValueError(
            f"{path} (matched by data config {key}) is not text: {replaced} byte sequences in "
            f"its {len(data)} bytes are not UTF-8 (a binary or image file?); point "
            f"{key} at UTF-8 text files, one document per line."
        )


def from_tfds(name: str, split: str, *, data_dir: str) -> list[str]:
    """The lines of the text feature of TFDS dataset ``name``'s ``split``, in file order.

    The text feature is ``text`` if the dataset has one, else its only ``Text`` feature.

    Raises:
      ValueError: the dataset is not prepared under ``data_dir``, has no such split, or has no
        single text feature.
    """
    import tensorflow_datasets as tfds

    from pipelines.sources import tfds as tfds_source

    builder = tfds_source.prepared_builder(name, data_dir)
    try:
        builder.info.splits[split]
    except (KeyError, ValueError) as error:
        raise ValueError(
            f"TFDS dataset {name!r} has no split {split!r} ({error}); its splits are "
            f"{sorted(builder.info.splits.keys())}, e.g. 'train' or 'train[:10%]'."
        ) from None
    features = builder.info.features
    texts = sorted(k for k, f in features.items() if isinstance(f, tfds.features.Text))
    key = "text" if "text" in texts else texts[0] if len(texts) == 1 else None
    if key is None:
        raise ValueError(
            f"TFDS dataset {name!r} has text features {texts}, none named 'text', so which one a "
            "language model reads is unclear; write the one you want to text files and set "
            "train_files/eval_files."
        )
    dataset = builder.as_dataset(split=split, shuffle_files=False).map(lambda e: e[key])
    lines = []
    for batch in dataset.batch(4_096).as_numpy_iterator():
        for document in batch:
            lines += split_lines(document, f"TFDS dataset {name!r} split {split!r}")
    return lines


def split_lines(data: bytes, where: str) -> list[str]:
    """The non-empty stripped lines of ``data``; bytes that are not UTF-8 become U+FFFD."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        replaced = text.count("\ufffd") - data.decode("utf-8", errors="ignore").count("\ufffd")
        logging.warning(
            "text in %s: %d byte sequences are not UTF-8; read as U+FFFD", where, replaced
        )
    return [line.strip() for line in text.split("\n") if line.strip()]
