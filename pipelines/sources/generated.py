"""Small data sets generated in memory, for ``source="arrays"``: no files and no download.

Example::

    import pipelines
    from pipelines.sources import generated

    config = pipelines.default_data_config()
    config.source, config.augment = "arrays", "none"
    config.train_arrays, config.eval_arrays = generated.arrays(
        "generated_images", num_train=200, num_eval=100, seed=0
    )
    datasets = pipelines.make_datasets(config, seed=0)

The arrays travel inside the dataset graph (``from_tensor_slices`` constants), so a
parameter-server worker on another machine needs no filesystem to read them; this is what the
asynchronous trainer (``trainers.passm.experiment``) trains on.

- ``"mnist1d"``: MNIST-1D examples (the ``mnist1d`` package) in a seeded random order.
- ``"generated_images"``: the no-download stand-in for CIFAR-10 that the small ResNet trains on:
  class k is a fixed random 32×32×3 template k plus Gaussian noise.
"""

from __future__ import annotations

import numpy as np

from pipelines.sources import mnist1d

NUM_CLASSES = 10
NAMES = ("mnist1d", "generated_images")


def arrays(name: str, *, num_train: int, num_eval: int, seed: int = 0) -> tuple[dict, dict]:
    """Generates ``name``; returns ``(train, eval)`` ``{"inputs", "label"}`` arrays drawn
    disjointly from one seeded sample.

    Raises:
      ValueError: an unknown name, or a split smaller than the 10 classes.
    """
    if name not in NAMES:
        raise ValueError(f"dataset must be one of {NAMES}, got {name!r}.")
    for key, value in (("num_train", num_train), ("num_eval", num_eval)):
        if isinstance(value, bool) or not isinstance(value, int) or value < NUM_CLASSES:
            raise ValueError(f"{key} must be an int >= {NUM_CLASSES}, got {value!r}.")
    generate = _mnist1d if name == "mnist1d" else _template_images
    inputs, labels = generate(num_train + num_eval, seed)
    return (
        {"inputs": inputs[:num_train], "label": labels[:num_train]},
        {"inputs": inputs[num_train:], "label": labels[num_train:]},
    )


def _mnist1d(num_examples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    inputs, labels = mnist1d.generate(num_examples, seed)
    # A seeded order, so the train and eval splits are a random split of one sample.
    order = np.random.default_rng(seed).permutation(len(labels))
    return inputs[order].astype(np.float32), labels[order].astype(np.int32)


def _template_images(num_examples: int, seed: int, noise: float = 1.5):
    templates = np.random.default_rng(12345).normal(size=(NUM_CLASSES, 32, 32, 3))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, size=num_examples)
    images = templates[labels] + noise * rng.normal(size=(num_examples, 32, 32, 3))
    return images.astype(np.float32), labels.astype(np.int32)
