"""Text: a very long line is tokenized once and windowed, with memory bounded per window.

A 1 MB line took 4.2 GB and seconds per batch, and a 10 MB line crashed the loader (issue 33):
every window's raw element held the whole line, and decode re-tokenized it per window.
"""

import numpy as np
import pytest
import tensorflow as tf

from pipelines.sources import corpus, text

MAX_LENGTH = 64
LONG_LINE_BYTES = 300_000


@pytest.fixture(scope="module")
def long_source(data_dir):
    train_file, eval_file = corpus.make_files(data_dir, num_train=400, num_eval=100)
    with open(train_file, encoding="utf-8") as file:
        lines = file.read().splitlines()
    with open(eval_file, encoding="utf-8") as file:
        eval_lines = file.read().splitlines()
    words = " ".join(lines).split()
    picks = np.random.default_rng(0).integers(len(words), size=LONG_LINE_BYTES // 4)
    long_line = " ".join(words[i] for i in picks)[:LONG_LINE_BYTES]
    train = [lines[0], long_line, lines[1]]
    source = text.load_lines(
        train, eval_lines, data_dir=data_dir, max_length=MAX_LENGTH, vocab_size=500
    )
    tokenizer = text.make_tokenizer(source.vocab_file)
    whole = [text.tokenize(tokenizer, [line])[0].numpy() for line in train]
    return source, whole


def _windows(ids: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(inputs, label) of each window of a line's ids, as the loader has always cut them."""
    count = max(1, -(-(len(ids) - 1) // MAX_LENGTH))
    return [
        (ids[k * MAX_LENGTH : k * MAX_LENGTH + MAX_LENGTH][: len(label)], label)
        for k in range(count)
        for label in [ids[k * MAX_LENGTH + 1 : k * MAX_LENGTH + MAX_LENGTH + 1]]
    ]


def test_raw_elements_hold_only_their_windows_ids(long_source):
    source, _ = long_source
    spec = source.train.dataset.element_spec
    # No raw element carries a whole line (a string) or more than one window's ids.
    assert all(s.dtype != tf.string for s in tf.nest.flatten(spec))
    sizes = [
        sum(int(tf.size(t)) for t in tf.nest.flatten(element))
        for element in source.train.dataset.take(50)
    ]
    assert max(sizes) <= MAX_LENGTH + 1 + 1  # the window's ids and the example id


def test_decode_does_not_tokenize(long_source):
    source, _ = long_source
    graph = (
        tf.function(source.train.decode)
        .get_concrete_function(source.train.dataset.element_spec)
        .graph
    )
    op_types = {op.type for op in graph.get_operations()}
    assert not {t for t in op_types if "Wordpiece" in t or "Split" in t or "Normalize" in t}


@pytest.mark.parametrize("where", ["eager", "tf.data"])
def test_windows_of_a_long_line_are_cut_as_before(long_source, where):
    source, whole = long_source
    expected = [window for ids in whole for window in _windows(ids)]
    assert len(whole[1]) > 40_000 and source.train.num_examples == len(expected)
    if where == "eager":
        decoded = [source.train.decode(element) for element in source.train.dataset]
    else:
        decoded = list(source.train.dataset.map(source.train.decode))
    assert [int(e["id"]) for e in decoded] == list(range(len(expected)))
    for element, (inputs, label) in zip(decoded, expected, strict=True):
        assert element["inputs"].dtype == tf.int32 and element["label"].dtype == tf.int64
        np.testing.assert_array_equal(element["inputs"], inputs)
        np.testing.assert_array_equal(element["label"], label)
        np.testing.assert_array_equal(element["label_mask"], np.ones(len(label), np.float32))
    # Nothing is lost: the long line's windows' labels are its ids after BOS.
    first = len(_windows(whole[0]))
    labels = [e["label"].numpy() for e in decoded[first : first + len(_windows(whole[1]))]]
    np.testing.assert_array_equal(np.concatenate(labels), whole[1][1:])
