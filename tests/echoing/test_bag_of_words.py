"""echoing.BagOfWords, and the Assistant's filter and learner on token sequences with no label."""

import numpy as np
import pytest
import tensorflow as tf

from echoing import Assistant, AssistantLearner, BagOfWords, assistant_filter

VOCAB = 12


def test_counts_scaled_to_unit_length_without_padding():
    features = BagOfWords(VOCAB)
    one = features({"inputs": tf.constant([2, 7, 7, 3])}).numpy()
    expected = np.zeros(VOCAB, np.float32)
    expected[[2, 7, 3]] = [1, 2, 1]
    np.testing.assert_allclose(one, expected / np.sqrt(6), rtol=1e-6)
    # A padded row of a batch (pad id 0) gets the features of the unpadded example.
    rows = features({"inputs": tf.constant([[2, 7, 7, 3, 0, 0], [2, 5, 3, 0, 0, 0]])}).numpy()
    np.testing.assert_allclose(rows[0], one, rtol=1e-6)
    assert rows.shape == (2, VOCAB) and rows[1, 5] > 0 and rows[1, 7] == 0


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        (tf.constant([1.0, 2.0]), TypeError, r"int token ids \[n\] or \[B, n\].*float32"),
        (tf.zeros([2, 2, 2], tf.int32), TypeError, r"int token ids .*\(2, 2, 2\)"),
        # Known values (eager, constants) are refused at once, naming the id and the fix.
        (
            tf.constant([3, VOCAB]),
            ValueError,
            r"token id 12 in element\[inputs\]; token ids must be in \[0, vocab_size=12\): "
            r"build BagOfWords with the vocabulary size of the tokenizer",
        ),
        (
            tf.constant([[3, 4], [-1, 2]]),
            ValueError,
            r"token id -1 in element\[inputs\]; token ids must be in \[0, vocab_size=12\).*"
            r"map ids outside it",
        ),
    ],
)
def test_bad_token_ids_are_clear_errors(ids, error, match):
    with pytest.raises(error, match=match):
        BagOfWords(VOCAB)({"inputs": ids})


@pytest.mark.parametrize("bad", [-3, VOCAB + 5])
def test_token_ids_outside_the_vocabulary_in_a_dataset_name_the_id(bad):
    # In a Dataset.map the values are known only as it runs: a graph assert names the id (a
    # negative one used to fail in TF's bincount, "Input 'in' must be non-negative").
    lines = tf.data.Dataset.from_tensor_slices({"inputs": tf.constant([[2, 3], [4, bad]])})
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=rf"BagOfWords got token id {bad} in element\[inputs\]; token ids must be in "
        r"\[0, vocab_size=12\)",
    ):
        list(lines.map(BagOfWords(VOCAB)))


@pytest.mark.parametrize(
    ("kwargs", "error"), [({"vocab_size": 0}, ValueError), ({"key": 3}, TypeError)]
)
def test_bad_arguments_are_clear_errors(kwargs, error):
    with pytest.raises(error, match="BagOfWords"):
        BagOfWords(**{"vocab_size": VOCAB, **kwargs})


def _lines(num):
    """Token lines of 2-6 ids; the ones holding token 9 are the hard ones."""
    rng = np.random.default_rng(0)
    lines = [rng.integers(1, 9, rng.integers(2, 7)) for _ in range(num)]
    for line in lines[::2]:
        line[0] = 9
    return lines


def test_the_filter_scores_variable_length_lines_with_no_label():
    lines = _lines(2000)
    source = tf.data.Dataset.from_generator(
        lambda: ({"inputs": line, "id": i} for i, line in enumerate(lines)),
        output_signature={
            "inputs": tf.TensorSpec([None], tf.int64),
            "id": tf.TensorSpec([], tf.int64),
        },
    )
    assistant = Assistant(1, input_shape=(VOCAB,))
    # Token 9's feature is >= 1/sqrt(6) in a line of at most 6: logit >= 14 with it, -10 without.
    assistant.kernel.assign(np.where(np.arange(VOCAB) == 9, 60.0, 0.0).astype(np.float32))
    assistant.bias.assign(-10.0)
    stage = assistant_filter(
        assistant, base_prob=0.2, features=BagOfWords(VOCAB), label_key=None, seed=0
    )
    kept = [int(e["id"]) for e in source.apply(stage)]
    hard = [i for i in kept if i % 2 == 0]
    assert len(hard) == 1000  # every line with token 9 is kept
    assert 0.12 < (len(kept) - 1000) / 1000 < 0.28  # the others at base_prob (5 std: 0.063)


def test_the_learner_learns_hard_lines_from_padded_examples_by_id():
    lines = _lines(500)
    padded = np.zeros([len(lines), 6], np.int32)
    for i, line in enumerate(lines):
        padded[i, : len(line)] = line
    losses_by_id = np.where(np.arange(len(lines)) % 2 == 0, 3.0, 0.5).astype(np.float32)
    assistant = Assistant(1, input_shape=(VOCAB,))
    learner = AssistantLearner(
        assistant,
        examples={"inputs": padded},
        features=BagOfWords(VOCAB),
        label_key=None,
        asynchronous=False,
    )
    rng = np.random.default_rng(1)
    for step in range(300):
        ids = rng.integers(0, len(lines), 32)
        learner.feedback_ids(tf.constant(ids), tf.constant(losses_by_id[ids]), step)
    learner.close()
    features = BagOfWords(VOCAB)({"inputs": tf.constant(padded)})
    scores = assistant((features, tf.zeros([len(lines)], tf.int32))).numpy()
    assert np.mean((scores > 0.5) == (losses_by_id > 1)) > 0.9  # chance: 0.5
