"""trainers: one custom training loop, the models it trains, checkpoints, metrics, binaries.

Example::

    import tensorflow as tf
    import trainers

    with tf.distribute.get_strategy().scope():
        model = trainers.models.build_model("mnist1d_cnn", (40, 1), 10)

Run an experiment from a config with the binary::

    python -m trainers.train --config=configs/mnist1d.py --workdir=/tmp/mnist1d

Data parallel: ``--strategy=mirrored|multi_worker|tpu`` (``trainers.strategies``), or
``--strategy=parameter_server --config=configs/passm.py`` for the asynchronous trainer.

``model.fit`` users get ``trainers.EchoStatsCallback`` to log fresh examples and echo stats.
"""

import importlib

# Loaded on first use (PEP 562), so that `python -m trainers.train` can quiet TensorFlow's
# C++ logs before anything imports TensorFlow (see trainers.console).
_SUBMODULES = ("callbacks", "loop", "models", "strategies")
_NAMES = {"EchoStatsCallback": "callbacks", "Trainer": "loop"}

__all__ = ["EchoStatsCallback", "Trainer", "callbacks", "loop", "models", "strategies"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"trainers.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(f"trainers.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'trainers' has no attribute {name!r}")
