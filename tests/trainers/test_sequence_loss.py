"""Sequence labels: padding (label_mask 0) changes neither a sequence's loss nor eval figures."""

import numpy as np
import tensorflow as tf

from trainers import loop, models

VOCAB = 20


def _batch(pad: int) -> dict:
    tokens = np.array([[2, 5, 6, 7, 8, 9], [2, 10, 11, 12, 0, 0]], np.int32)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], np.float32)
    labels = np.roll(tokens, -1, axis=1).astype(np.int64) * mask.astype(np.int64)
    padding = ((0, 0), (0, pad))
    return {
        "inputs": np.pad(tokens, padding),
        "label": np.pad(labels, padding),
        "label_mask": np.pad(mask, padding),
        "id": np.arange(2, dtype=np.int64),
    }


def _trainer(batch: dict) -> loop.Trainer:
    tf.keras.utils.set_random_seed(0)
    model = models.build_model("transformer_lm_small", (None,), VOCAB)
    data = tf.data.Dataset.from_tensors(batch)
    return loop.Trainer(
        model=model,
        optimizer=tf.keras.optimizers.Adam(1e-3),
        train_dataset_fn=loop.per_replica_batches(lambda: data.repeat(), global_batch_size=2),
        eval_dataset_fn=loop.per_replica_batches(lambda: data, global_batch_size=2),
    )


def test_padding_does_not_change_losses_or_eval():
    plain, padded = _trainer(_batch(0)), _trainer(_batch(5))
    for name in ("eval_accuracy", "eval_loss", "eval_examples"):
        np.testing.assert_allclose(
            plain.evaluate()[name], padded.evaluate()[name], rtol=1e-5, err_msg=name
        )
    assert plain.evaluate()["eval_examples"] == 10  # real tokens, not rows x length
    per_sequence = _example_losses(plain, _batch(0))
    assert per_sequence.shape == (2,)
    np.testing.assert_allclose(per_sequence, _example_losses(padded, _batch(5)), rtol=1e-5)


def _example_losses(trainer: loop.Trainer, batch: dict) -> np.ndarray:
    tensors = {key: tf.constant(value) for key, value in batch.items()}
    return trainer._example_losses(tensors, trainer.model(tensors["inputs"])).numpy()
